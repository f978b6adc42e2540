// CUDA runtime errors as engram Status values (internal to src/cuda; includes the CUDA runtime).
//
// Every CUDA call in src/cuda goes through cuda_status() or ENGRAM_CUDA_RETURN_IF_ERROR so that a failure
// names the operation and its arguments, carries the raw cudaError_t number, and leaves no pending
// (non-sticky) error behind for the next, unrelated call to trip over (style.md: "After a recoverable CUDA
// failure, clear the pending error").
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "engram/status.hpp"

namespace engram::cuda {

// Status for a failed CUDA call: kOutOfMemory for allocation failures, kUnsupported when there is no
// device or driver, kCuda otherwise; message "<what>: <cudaErrorName> (<description>)". Clears the
// pending error. Returns OK for cudaSuccess.
inline Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // clear the pending error (a sticky error stays, by CUDA's design)
  Code code = Code::kCuda;
  if (err == cudaErrorMemoryAllocation) code = Code::kOutOfMemory;
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) code = Code::kUnsupported;
  return Status(code, what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
                static_cast<int>(err));
}

}  // namespace engram::cuda

#define ENGRAM_CUDA_RETURN_IF_ERROR(call, what)                              \
  do {                                                                       \
    const cudaError_t engram_cuda_err_ = (call);                             \
    if (engram_cuda_err_ != cudaSuccess) return ::engram::cuda::cuda_status(engram_cuda_err_, (what)); \
  } while (0)
