// Host launchers of the copy bench's kernels (bench/copy_kernels.cu; CUDA builds only). Streams are
// cudaStream_t passed as void* so that this header needs no CUDA header.
#pragma once

#include <cstddef>
#include <driver_types.h>

namespace engram::bench {

// dst[i] = src[i] for n 16-byte words, 264 blocks x 512 threads, grid-stride (device or mapped host pointers).
cudaError_t launch_sm_copy(const void* src, void* dst, size_t n16, cudaStream_t stream);
// One warp that spins for `cycles` SM clocks, then writes *sink = 1.
cudaError_t launch_spin(long long cycles, int* sink, cudaStream_t stream);

}  // namespace engram::bench
