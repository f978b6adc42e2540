// A serving engine's decode-step hashing on the GPU: one new raw token per request and step goes to the device, and
// every Engram layer's ids of the step are made there (DeviceHasher), from each request's look-back row kept on the
// device, so the host never hashes and never copies ids. Per step, all enqueued on one stream in this order: the
// tokens' copy from a pinned buffer, DEAD rows for the requests that start a new sequence, the hash of every layer,
// the look-back's advance past the new token. The look-back rows are the engine's state: request r is row r.
//
// The step's GPU time (copy through advance) is taken with events and read back on demand; the ids can be copied
// to the host for verification against the CPU hasher. No CUDA types here: streams are cudaStream_t as void*.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/hash_batch.hpp"
#include "cuda/hash_kernel.cuh"
#include "engram/status.hpp"

namespace engram::cuda {

class StepHasher {
 public:
  // On device `device`: the hasher's constants and buffers for up to `max_requests` requests per step.
  // kInvalidArgument for max_requests < 1 or inconsistent params; kOutOfMemory; kCuda; kUnsupported without a device.
  static Result<std::unique_ptr<StepHasher>> create(const NgramHashParams& params, int max_requests, int device);
  ~StepHasher();
  StepHasher(const StepHasher&) = delete;
  StepHasher& operator=(const StepHasher&) = delete;

  int n_layers() const { return hasher_->n_layers(); }
  int heads() const { return hasher_->heads(); }
  int max_requests() const { return max_requests_; }
  int64_t device_bytes() const { return bytes_ + hasher_->device_bytes(); }

  // Enqueues one decode step on `stream`: tokens[r] is request r's new raw token id (host memory, n_requests of
  // them), new_sequence[r] != 0 starts request r afresh (its look-back becomes DEAD before the hash). Waits on the
  // host only for the previous step's token copy (the pinned buffer is reused). kInvalidArgument for n_requests
  // outside [1, max_requests]; kCuda.
  Status hash_decode_step(const int64_t* tokens, const uint8_t* new_sequence, int n_requests, void* stream);

  // Device ids of layer `layer_index` of the last step: [n_requests][heads] int64, valid in stream order.
  const int64_t* ids(int layer_index) const;
  int last_requests() const { return last_requests_; }

  // GPU time of the last step (token copy, resets, hash, look-back advance) in ns; waits for it.
  Result<double> last_step_ns() const;
  // Copies the last step's ids of every layer to the host ([layer][n_requests][heads]) and the device error
  // counter (ids the kernel wrote as DEAD because their inputs were invalid, summed over all steps); synchronises.
  Status read_back(std::vector<std::vector<int64_t>>& ids, uint64_t* errors) const;

 private:
  StepHasher() = default;
  std::unique_ptr<DeviceHasher> hasher_;
  int device_ = 0;
  int max_requests_ = 0;
  int last_requests_ = 0;
  int64_t bytes_ = 0;
  void* dev_ = nullptr;      // one allocation: qsl, tokens, look-back, reset slots, ids, error counter
  int32_t* qsl_ = nullptr;
  int64_t* tokens_ = nullptr;
  int64_t* lookback_ = nullptr;
  int32_t* reset_slots_ = nullptr;
  int64_t* ids_ = nullptr;
  unsigned long long* errors_ = nullptr;
  void* pinned_ = nullptr;   // tokens then reset slots, host side
  int64_t* pinned_tokens_ = nullptr;
  int32_t* pinned_slots_ = nullptr;
  void* copied_ = nullptr;   // cudaEvent_t: the pinned buffer may be rewritten
  void* start_ = nullptr;    // cudaEvent_t pair around the last step
  void* end_ = nullptr;
  bool copy_pending_ = false;
};

}  // namespace engram::cuda
