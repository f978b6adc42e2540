// Host-side interface of the benches' CUDA parts (bench/*.cu, compiled only when ENGRAM_HAVE_CUDA): no CUDA
// types here, so the entries (bench/*.cpp) compile in every build. Without CUDA, bench/gpu_stubs.cpp answers
// gpu_waiver() with "built without CUDA" and every call with kUnsupported, so the GPU benches are waived with
// the reason instead of disappearing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure.hpp"
#include "bench/registry.hpp"
#include "engram/hash_batch.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {
class ThreadPool;
class IdSource;
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

// ---- Technique sections of `engram bench lookup` (bench/lookup_fast.cu) --------------------------------------
// Each fast-path technique on and off on the same ids: start-up calibration (planner costs, sort threshold);
// prefill (prefill_tokens x heads rows) plain / dedup-hash / dedup-sort / dedup+cache fp8 / bf16 / hybrid /
// planner as rows/s and ratio to plain with each technique's ceiling; decode batches with the cache: link bytes
// per token, time, hit rate; the sort-threshold sweep (hash vs sort dedup on all-unique rows). Variants run
// interleaved per repetition (time_variants), repetition k uses id set k (fresh ids), CUDA-event times.
inline const std::vector<std::string>& fast_techniques() {
  static const std::vector<std::string> t{"plain",  "dedup-hash", "dedup-sort", "cache-fp8",
                                          "cache-bf16", "hybrid", "planner", "planner-unsplit"};
  return t;
}
struct FastSectionOptions {
  std::vector<std::string> sections{"calibration", "prefill", "decode", "sort-sweep"};
  std::vector<std::string> techniques;        // subset of fast_techniques(); plain always runs (the baseline)
  std::vector<std::string> ids{"text", "zipf", "uniform"};
  int64_t prefill_tokens = 8192;
  std::vector<int64_t> decode_tokens{64, 256, 512};
  std::vector<int64_t> sort_sweep_tokens{128, 512, 1536, 4096, 8192};
  int64_t cache_bytes = 0;                    // HBM per cache (rows + map); 0 = no cache variants
  std::string cache_size_text;                // as given ("5%")
  int warm_steps = 8;                         // warm-up window (prefill batches) of an in-sample profile
  int host_threads = 0;                       // host-gather threads (0 = cores - 2, at least 1)
  // Text ids' cache profile from a file (engram profile, layer 0 of this table): (id, count) hottest first and
  // the profile's total lookups; empty = the warm-up window of the measured source (in-sample).
  std::vector<std::pair<int64_t, int64_t>> text_profile;
  int64_t text_profile_lookups = 0;
  std::string text_profile_path;
  // Id source of a distribution over the whole table ("text", "zipf", "uniform").
  std::function<Result<std::unique_ptr<IdSource>>(const std::string& dist)> make_source;
};
// Appends the sections' tables, notes and data["fast"] to `rep`. kUnsupported without a usable GPU.
Status run_fast_sections(const TableView& view, int64_t table_bytes, int heads, const FastSectionOptions& o,
                         Context& ctx, Report& rep);

// ---- `engram bench hash` (bench/hash.cpp; GPU part bench/hash_gpu.cu) -------------------------------------------
// One step's batch in host memory: CSR offsets, new tokens, and each request's look-back row (rows in request order).
struct HashBenchStep {
  std::vector<int32_t> query_start_loc;  // [requests + 1]
  std::vector<int64_t> tokens;           // [query_start_loc.back()]
  std::vector<int64_t> lookback;         // [requests][N-1]
};
// Device hashers (int64 and, when every layer fits, int32 ids) and every step's batch uploaded in advance (step k =
// repetition k), so a timed call only launches: CUDA events around the launches on a non-blocking stream.
class GpuHashSession {
 public:
  virtual ~GpuHashSession() = default;
  virtual nlohmann::json info() const = 0;  // device, device bytes of the hashers and the steps
  virtual bool has_int32() const = 0;
  // Step `step` hashed (int32 or int64 ids); with_update adds the look-back update (into a scratch copy of the
  // rows, so every step stays repeatable). host_launch_ns (optional): host time of the launch calls themselves.
  virtual Result<Sample> hash(int step, bool int32, bool with_update, double* host_launch_ns) = 0;
  // The int64 ids of step `step`: [layers][tokens][heads].
  virtual Result<std::vector<int64_t>> ids(int step) = 0;
};
Result<std::unique_ptr<GpuHashSession>> open_gpu_hash(const NgramHashParams& params,
                                                      const std::vector<HashBenchStep>& steps);

Result<Report> run_copy_bench(Context& ctx);
Result<Report> run_register_bench(Context& ctx);

}  // namespace engram::bench
