// Stand-ins for the CUDA parts of the benches in a build without CUDA (see gpu.hpp): the GPU benches stay
// listed and are waived with this reason.
#include "bench/gpu.hpp"

#if !ENGRAM_HAVE_CUDA
namespace engram::bench {

namespace {
const char* kNoCuda = "built without CUDA (ENGRAM_CUDA=OFF or no nvcc at configure time)";
}

std::optional<std::string> gpu_waiver() { return std::string(kNoCuda); }

Result<std::unique_ptr<GpuLookupSession>> open_gpu_lookup(const TableView&, int64_t, int64_t, int, int64_t,
                                                          uint64_t) {
  return Status(Code::kUnsupported, kNoCuda);
}
Status run_fast_sections(const TableView&, int64_t, int, const FastSectionOptions&, Context&, Report&) {
  return Status(Code::kUnsupported, kNoCuda);
}
Result<std::unique_ptr<GpuHashSession>> open_gpu_hash(const NgramHashParams&, const std::vector<HashBenchStep>&) {
  return Status(Code::kUnsupported, kNoCuda);
}
Result<Report> run_copy_bench(Context&) { return Status(Code::kUnsupported, kNoCuda); }
Result<Report> run_register_bench(Context&) { return Status(Code::kUnsupported, kNoCuda); }

}  // namespace engram::bench
#endif
