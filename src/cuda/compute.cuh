// CudaLayerCompute: synthetic decoder-layer compute on the consumer's main stream.
//
// Each layer is `gemms_per_layer` bf16 GEMMs (cuBLAS, fp32 accumulation) of one square size n, chosen at creation
// so that a layer takes about `layer_us` on an otherwise idle GPU: the largest n in {256, ..., 8192} whose single
// GEMM takes at most a quarter of the target (so the repetition count rounds finely), then the count, then a
// measured check of the whole layer (layer_ns()). A GEMM rather than a spin loop because the lookups' effect on
// the consumer is contention for SMs, L2 and memory bandwidth, which a tensor-core GEMM feels the way a real
// layer does. run_layer() only enqueues (asynchronous); synchronize() waits for the main stream. The operands are
// random bf16 (never zeros, METHOD.md). Graph-capturable: cuBLAS gets a fixed workspace at creation.
// No CUDA types in this header (the stream is a void* cudaStream_t).
#pragma once

#include <memory>

#include "sched/layer_compute.hpp"

namespace engram::cuda {

class CudaLayerCompute final : public LayerCompute {
 public:
  // Calibrates on `main_stream` (synchronises it; a few hundred ms). layer_us > 0.
  // Errors: kInvalidArgument (layer_us <= 0), kOutOfMemory / kCuda (buffers, cuBLAS).
  static Result<std::unique_ptr<CudaLayerCompute>> create(void* main_stream, double layer_us);
  ~CudaLayerCompute() override;

  Status run_layer(int layer) override;   // enqueues gemms_per_layer() GEMMs on the main stream
  double layer_ns() const override { return layer_ns_; }
  Status synchronize() override;          // waits for the main stream

  int gemm_n() const { return n_; }
  int gemms_per_layer() const { return reps_; }
  double gemm_ns() const { return gemm_ns_; }  // calibrated time of one GEMM
  double target_ns() const { return target_ns_; }

 private:
  CudaLayerCompute() = default;
  void* stream_ = nullptr;
  void* handle_ = nullptr;     // cublasHandle_t
  void* workspace_ = nullptr;
  void* a_ = nullptr;          // bf16 [8192][8192] at most
  void* b_ = nullptr;
  void* c_ = nullptr;
  int n_ = 0;
  int reps_ = 1;
  double gemm_ns_ = 0;
  double layer_ns_ = 0;
  double target_ns_ = 0;
};

}  // namespace engram::cuda
