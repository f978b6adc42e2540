// Registry entries of the GPU-only benches (copy, register). Their bodies live in bench/copy.cu and
// bench/register.cu (CUDA builds); filter() waives them with the reason when device 0 is not usable or the
// build has no CUDA (bench/gpu_stubs.cpp).
#include "bench/gpu.hpp"

namespace engram::bench {
namespace {
std::optional<std::string> waiver(const Context&) { return gpu_waiver(); }
}  // namespace

ENGRAM_BENCH(copy, {.key = "copy",
                    .description = "H2D/D2H: pinned, pageable, registered shm per node; CE vs SM; overlap with a "
                                   "kernel (pinned vs pageable); single vs double-buffered pinned staging",
                    .add_options = nullptr,
                    .filter = waiver,
                    .run = run_copy_bench,
                    .order = 20});

ENGRAM_BENCH(register, {.key = "register",
                        .description = "Prefault + cudaHostRegister s/GiB by backing, page size and chunk size; "
                                       "a neighbour thread's cudaMemGetInfo stall",
                        .add_options = nullptr,
                        .filter = waiver,
                        .run = run_register_bench,
                        .order = 40});

}  // namespace engram::bench
