// Kernels of `engram bench copy`: an SM copy through mapped host memory, and a spin kernel that holds an SM
// for a set number of clocks (the "compute" the overlap measurement runs beside a copy).
#include <cuda_runtime.h>

#include "bench/copy_kernels.hpp"

namespace engram::bench {
namespace {

__global__ void sm_copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void spin_kernel(long long cycles, int* sink) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}

}  // namespace

cudaError_t launch_sm_copy(const void* src, void* dst, size_t n16, cudaStream_t stream) {
  sm_copy_kernel<<<264, 512, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), n16);
  return cudaGetLastError();
}

cudaError_t launch_spin(long long cycles, int* sink, cudaStream_t stream) {
  spin_kernel<<<1, 32, 0, stream>>>(cycles, sink);
  return cudaGetLastError();
}

}  // namespace engram::bench
