// CudaLayerCompute (see compute.cuh): calibrated cuBLAS bf16 GEMMs on the main stream.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/compute.cuh"
#include "cuda/cuda_status.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

namespace {

constexpr int kMaxN = 8192;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Status cublas_status(cublasStatus_t st, const std::string& what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
  (void)cudaGetLastError();
  return Status(st == CUBLAS_STATUS_ALLOC_FAILED ? Code::kOutOfMemory : Code::kCuda,
                what + ": " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) + ")", static_cast<int>(st));
}

}  // namespace

// Random bf16 in [-1, 1): a splitmix64 hash of the index, so the operands are never zeros.
__global__ static void fill_random_bf16(uint16_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float f = static_cast<float>(z >> 40) * (1.0f / 8388608.0f) - 1.0f;  // 24 bits -> [-1, 1)
    p[i] = float_to_bf16_rne(f);
  }
}

Result<std::unique_ptr<CudaLayerCompute>> CudaLayerCompute::create(void* main_stream, double layer_us) {
  if (!(layer_us > 0)) return Status(Code::kInvalidArgument, "cuda compute: layer_us must be > 0");
  std::unique_ptr<CudaLayerCompute> c(new CudaLayerCompute());
  c->stream_ = main_stream;
  c->target_ns_ = layer_us * 1e3;
  const cudaStream_t s = static_cast<cudaStream_t>(main_stream);
  const size_t bytes = size_t{kMaxN} * kMaxN * sizeof(uint16_t);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&c->a_, bytes), "cuda compute: GEMM operand A");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&c->b_, bytes), "cuda compute: GEMM operand B");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&c->c_, bytes), "cuda compute: GEMM output C");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&c->workspace_, kWorkspaceBytes), "cuda compute: cuBLAS workspace");
  const int64_t elems = int64_t{kMaxN} * kMaxN;
  fill_random_bf16<<<1024, 256, 0, s>>>(static_cast<uint16_t*>(c->a_), elems, 0x1234);
  fill_random_bf16<<<1024, 256, 0, s>>>(static_cast<uint16_t*>(c->b_), elems, 0x5678);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "cuda compute: fill operands");
  cublasHandle_t h = nullptr;
  ENGRAM_RETURN_IF_ERROR(cublas_status(cublasCreate(&h), "cublasCreate"));
  c->handle_ = h;
  ENGRAM_RETURN_IF_ERROR(cublas_status(cublasSetStream(h, s), "cublasSetStream"));
  ENGRAM_RETURN_IF_ERROR(cublas_status(cublasSetWorkspace(h, c->workspace_, kWorkspaceBytes), "cublasSetWorkspace"));

  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e0), "cuda compute: event");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e1), "cuda compute: event");
  struct Events {
    cudaEvent_t a, b;
    ~Events() {
      (void)cudaEventDestroy(a);
      (void)cudaEventDestroy(b);
    }
  } events{e0, e1};
  // Median time of `count` runs of one layer of `reps` GEMMs of size n, after two warm-up runs.
  auto time_layer = [&](int n, int reps, int count) -> Result<double> {
    c->n_ = n;
    c->reps_ = reps;
    std::vector<double> t;
    for (int i = 0; i < count + 2; ++i) {
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, s), "cuda compute: calibrate");
      ENGRAM_RETURN_IF_ERROR(c->run_layer(0));
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, s), "cuda compute: calibrate");
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1), "cuda compute: calibrate");
      float ms = 0;
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0, e1), "cuda compute: calibrate");
      if (i >= 2) t.push_back(static_cast<double>(ms) * 1e6);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  int best_n = 256;
  double best_t = 0;
  for (int n = 256; n <= kMaxN; n *= 2) {
    ENGRAM_ASSIGN_OR_RETURN(double t, time_layer(n, 1, 5));
    if (n == 256 || t <= c->target_ns_ / 4) {
      best_n = n;
      best_t = t;
    } else {
      break;
    }
  }
  c->gemm_ns_ = best_t;
  const int reps = std::max(1, static_cast<int>(std::lround(c->target_ns_ / best_t)));
  ENGRAM_ASSIGN_OR_RETURN(c->layer_ns_, time_layer(best_n, reps, 5));
  return std::move(c);  // C++17: no implicit move into Result<T>(T)
}

CudaLayerCompute::~CudaLayerCompute() {
  if (stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (handle_) (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
  for (void* p : {a_, b_, c_, workspace_})
    if (p) (void)cudaFree(p);
  (void)cudaGetLastError();
}

Status CudaLayerCompute::run_layer(int /*layer*/) {
  const float alpha = 1.0f, beta = 0.0f;
  auto h = static_cast<cublasHandle_t>(handle_);
  for (int r = 0; r < reps_; ++r) {
    ENGRAM_RETURN_IF_ERROR(cublas_status(
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n_, n_, n_, &alpha, a_, CUDA_R_16BF, n_, b_, CUDA_R_16BF, n_, &beta,
                     c_, CUDA_R_16BF, n_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx(n=" + std::to_string(n_) + ")"));
  }
  return Status::ok();
}

Status CudaLayerCompute::synchronize() {
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cuda compute: synchronize");
  return Status::ok();
}

}  // namespace engram::cuda
