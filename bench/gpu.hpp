// Host-side interface of the benches' CUDA parts (bench/*.cu, compiled only when ENGRAM_HAVE_CUDA): no CUDA
// types here, so the entries (bench/*.cpp) compile in every build. Without CUDA, bench/gpu_stubs.cpp answers
// gpu_waiver() with "built without CUDA" and every call with kUnsupported, so the GPU benches are waived with
// the reason instead of disappearing.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure.hpp"
#include "bench/registry.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {
class ThreadPool;
}

namespace engram::bench {

// nullopt when device 0 is usable; otherwise why not (no driver, no device, built without CUDA).
std::optional<std::string> gpu_waiver();

// A registered host table read by the GPU over UVA, with `sets` device-resident id sets of up to `max_rows`
// ids each (id set k = repetition k: fresh ids per repetition, the same ids for every variant). Every timed
// launch is preceded by a translation scrub (plain gather of `tlb_scrub_rows` other random rows) and a
// 256 MiB device memset (L2 flush), and timed alone with CUDA events (the method of the former
// engram_bench_lookup_gpu, docs/results/2026-11-29-h200-cuda.md).
class GpuLookupSession {
 public:
  virtual ~GpuLookupSession() = default;
  virtual nlohmann::json info() const = 0;  // device, registration (prefault/register s, s/GiB), ceilings
  virtual double h2d_pinned_gbps() const = 0;  // link ceiling: 1 GiB pinned cudaMemcpyAsync (same run)
  virtual Status set_ids(int set, const std::vector<int64_t>& ids) = 0;
  // The lookup kernel (FP8+scales -> BF16 staging in device memory), grid cap = fraction of the SMs.
  virtual Result<Sample> lookup(int set, int64_t tokens, int heads, double grid_fraction) = 0;
  // Plain 16-B gather of the same bytes (payload_only: the d payload bytes only): the ceiling.
  virtual Result<Sample> gather(int set, int64_t rows, bool payload_only) = 0;
  // host-gather + DMA: CPU threads decode into pinned BF16 staging, then one H2D copy (host clock).
  virtual Result<Sample> host_gather_dma(const std::vector<int64_t>& ids, int64_t tokens, int heads,
                                         ThreadPool* pool) = 0;
};
Result<std::unique_ptr<GpuLookupSession>> open_gpu_lookup(const TableView& view, int64_t table_bytes,
                                                          int64_t max_rows, int sets, int64_t tlb_scrub_rows,
                                                          uint64_t seed);

Result<Report> run_copy_bench(Context& ctx);
Result<Report> run_register_bench(Context& ctx);

}  // namespace engram::bench
