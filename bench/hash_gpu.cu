// GPU part of `engram bench hash` (see gpu.hpp GpuHashSession): device hashers of src/cuda/hash_kernel.cuh and every
// step's batch on the device before timing. A timed call records an event, launches (hash, or hash + look-back
// update), records a second event and waits for it: the step's GPU time with its ids already on the device, as an
// engine that hashes on the GPU sees it; the host time of the launch calls is kept apart (what an engine without
// CUDA graphs spends on the CPU per step).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/gpu.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/device.cuh"
#include "cuda/hash_kernel.cuh"

namespace engram::bench {
namespace {

#define HASH_CK(call) ENGRAM_RETURN_IF_ERROR(cuda::cuda_status((call), std::string("bench hash: ") + #call))

struct DeviceStepBufs {
  int32_t* qsl = nullptr;
  int64_t* tokens = nullptr;
  int64_t* lookback = nullptr;
  HashBatch batch;
};

class Session final : public GpuHashSession {
 public:
  ~Session() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& s : steps_)
      for (void* p : {static_cast<void*>(s.qsl), static_cast<void*>(s.tokens), static_cast<void*>(s.lookback)})
        if (p) cudaFree(p);
    for (void* p : {out_, static_cast<void*>(scratch_rows_)})
      if (p) cudaFree(p);
    if (e0_) cudaEventDestroy(e0_);
    if (e1_) cudaEventDestroy(e1_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status open(const NgramHashParams& params, const std::vector<HashBenchStep>& steps) {
    ENGRAM_ASSIGN_OR_RETURN(device_, cuda::device_info(0));
    HASH_CK(cudaSetDevice(0));
    ENGRAM_ASSIGN_OR_RETURN(h64_, cuda::DeviceHasher::create(params, cuda::HashIdType::kInt64));
    auto h32 = cuda::DeviceHasher::create(params, cuda::HashIdType::kInt32);
    if (h32.is_ok()) h32_ = std::move(*h32);
    int64_t max_tokens = 0, max_rows = 0;
    const int w = h64_->window();
    for (const auto& s : steps) {
      steps_.emplace_back();  // owned from here on (freed by the destructor)
      DeviceStepBufs& d = steps_.back();
      const int32_t requests = static_cast<int32_t>(s.query_start_loc.size()) - 1;
      HASH_CK(cudaMalloc(&d.qsl, s.query_start_loc.size() * sizeof(int32_t)));
      HASH_CK(cudaMalloc(&d.tokens, std::max<size_t>(1, s.tokens.size()) * sizeof(int64_t)));
      HASH_CK(cudaMalloc(&d.lookback, std::max<size_t>(1, s.lookback.size()) * sizeof(int64_t)));
      HASH_CK(cudaMemcpy(d.qsl, s.query_start_loc.data(), s.query_start_loc.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      HASH_CK(cudaMemcpy(d.tokens, s.tokens.data(), s.tokens.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
      HASH_CK(cudaMemcpy(d.lookback, s.lookback.data(), s.lookback.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
      HashBatch& b = d.batch;
      b.n_requests = requests;
      b.max_tokens = static_cast<int64_t>(s.tokens.size());
      b.query_start_loc = d.qsl;
      b.tokens = d.tokens;
      b.lookback = d.lookback;
      b.lookback_rows = requests;
      max_tokens = std::max(max_tokens, b.max_tokens);
      max_rows = std::max<int64_t>(max_rows, requests);
      bytes_ += static_cast<int64_t>(s.query_start_loc.size() * sizeof(int32_t) +
                                     (s.tokens.size() + s.lookback.size()) * sizeof(int64_t));
    }
    out_bytes_ = static_cast<size_t>(std::max<int64_t>(1, max_tokens * h64_->heads() * h64_->n_layers())) * sizeof(int64_t);
    HASH_CK(cudaMalloc(&out_, out_bytes_));
    HASH_CK(cudaMalloc(&scratch_rows_, static_cast<size_t>(std::max<int64_t>(1, max_rows * w)) * sizeof(int64_t)));
    HASH_CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    HASH_CK(cudaEventCreate(&e0_));
    HASH_CK(cudaEventCreate(&e1_));
    return Status::ok();
  }

  nlohmann::json info() const override {
    return {{"device", device_.name},
            {"sm_count", device_.sm_count},
            {"hasher_device_bytes", h64_->device_bytes()},
            {"int32_ids", h32_ != nullptr},
            {"step_device_bytes", bytes_}};
  }
  bool has_int32() const override { return h32_ != nullptr; }

  Result<Sample> hash(int step, bool int32, bool with_update, double* host_launch_ns) override {
    const cuda::DeviceHasher& h = int32 ? *h32_ : *h64_;
    const HashBatch& b = steps_.at(static_cast<size_t>(step)).batch;
    HASH_CK(cudaEventRecord(e0_, stream_));
    const double t0 = now_ns();
    ENGRAM_RETURN_IF_ERROR(h.launch_hash(b, out_, 0, nullptr, stream_));
    if (with_update) ENGRAM_RETURN_IF_ERROR(h.launch_update_lookback(b, nullptr, scratch_rows_, nullptr, stream_));
    if (host_launch_ns) *host_launch_ns = now_ns() - t0;
    HASH_CK(cudaEventRecord(e1_, stream_));
    HASH_CK(cudaEventSynchronize(e1_));
    float ms = 0;
    HASH_CK(cudaEventElapsedTime(&ms, e0_, e1_));
    Sample s;
    s.ns = static_cast<double>(ms) * 1e6;
    return s;
  }

  Result<std::vector<int64_t>> ids(int step) override {
    const HashBatch& b = steps_.at(static_cast<size_t>(step)).batch;
    ENGRAM_RETURN_IF_ERROR(h64_->launch_hash(b, out_, 0, nullptr, stream_));
    std::vector<int64_t> v(static_cast<size_t>(b.max_tokens * h64_->heads() * h64_->n_layers()));
    HASH_CK(cudaMemcpyAsync(v.data(), out_, v.size() * sizeof(int64_t), cudaMemcpyDeviceToHost, stream_));
    HASH_CK(cudaStreamSynchronize(stream_));
    return v;
  }

 private:
  cuda::DeviceInfo device_;
  std::unique_ptr<cuda::DeviceHasher> h64_, h32_;
  std::vector<DeviceStepBufs> steps_;
  void* out_ = nullptr;
  size_t out_bytes_ = 0;
  int64_t* scratch_rows_ = nullptr;
  int64_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<GpuHashSession>> open_gpu_hash(const NgramHashParams& params,
                                                      const std::vector<HashBenchStep>& steps) {
  auto s = std::make_unique<Session>();
  ENGRAM_RETURN_IF_ERROR(s->open(params, steps));
  return std::unique_ptr<GpuHashSession>(std::move(s));
}

}  // namespace engram::bench
