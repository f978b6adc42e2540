// A serving engine's step hashing on the GPU: the step's new raw tokens go to the device, and every Engram layer's
// ids of the step are made there (DeviceHasher), from each request's look-back row kept on the device, so the host
// never hashes and never copies ids. A step is a list of chunks, each a request's next tokens (one for a decode
// step, many for a chunked prefill) with the look-back row (slot) that holds its last N-1 tokens. Per step, all
// enqueued on one stream in this order: one copy from a pinned buffer (offsets, slots, reset slots, tokens), DEAD
// rows for the chunks that start a new sequence, the hash of every layer, the look-back's advance past the chunk.
//
// The step's GPU time (copy through advance) is taken with events and read back on demand; the ids can be copied
// to the host for verification against the CPU hasher. No CUDA types here: streams are cudaStream_t as void*.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engram/hash_batch.hpp"
#include "cuda/hash_kernel.cuh"
#include "engram/status.hpp"

namespace engram::cuda {

class StepHasher {
 public:
  // On device `device`: the hasher's constants, `max_requests` look-back rows (at most that many chunks per step)
  // and room for `max_tokens` tokens per step (0: max_requests, one token per request). kInvalidArgument for
  // max_requests < 1, max_tokens < 0 or inconsistent params; kOutOfMemory; kCuda; kUnsupported without a device.
  static Result<std::unique_ptr<StepHasher>> create(const NgramHashParams& params, int max_requests, int device,
                                                    int64_t max_tokens = 0);
  ~StepHasher();
  StepHasher(const StepHasher&) = delete;
  StepHasher& operator=(const StepHasher&) = delete;

  int n_layers() const { return hasher_->n_layers(); }
  int heads() const { return hasher_->heads(); }
  int max_requests() const { return max_requests_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t device_bytes() const { return bytes_ + hasher_->device_bytes(); }

  // Enqueues one decode step on `stream`: tokens[r] is request r's new raw token id (host memory, n_requests of
  // them), new_sequence[r] != 0 starts request r afresh (its look-back becomes DEAD before the hash). Waits on the
  // host only for the previous step's token copy (the pinned buffer is reused). kInvalidArgument for n_requests
  // outside [1, max_requests]; kCuda.
  Status hash_decode_step(const int64_t* tokens, const uint8_t* new_sequence, int n_requests, void* stream);

  // Enqueues one step of `n_chunks` chunks on `stream` (host arrays, each of n_chunks entries): chunk c's counts[c]
  // new raw tokens are next in `tokens` (chunks back to back), its look-back row is slots[c] (distinct, in
  // [0, max_requests); null: row c), new_sequence[c] != 0 (optional) makes that row DEAD first (the chunk starts
  // its request). Waits on the host only for the previous step's copy. kInvalidArgument for n_chunks outside
  // [1, max_requests], a negative count, more than max_tokens tokens, a slot out of range or repeated; kCuda.
  Status hash_step(const int64_t* tokens, const int32_t* counts, const int32_t* slots, const uint8_t* new_sequence,
                   int n_chunks, void* stream);

  // Device ids of layer `layer_index` of the last step: [tokens][heads] int64, valid in stream order.
  const int64_t* ids(int layer_index) const;
  int last_requests() const { return last_requests_; }
  int64_t last_tokens() const { return last_tokens_; }

  // GPU time of the last step (token copy, resets, hash, look-back advance) in ns; waits for it.
  Result<double> last_step_ns() const;
  // Copies the last step's ids of every layer to the host ([layer][tokens][heads]) and the device error
  // counter (ids the kernel wrote as DEAD because their inputs were invalid, summed over all steps); synchronises.
  Status read_back(std::vector<std::vector<int64_t>>& ids, uint64_t* errors) const;

 private:
  StepHasher() = default;
  std::unique_ptr<DeviceHasher> hasher_;
  int device_ = 0;
  int max_requests_ = 0;
  int64_t max_tokens_ = 0;
  int last_requests_ = 0;
  int64_t last_tokens_ = 0;
  int64_t bytes_ = 0;
  // The staged region, the same layout on both sides, copied as one prefix per step: qsl [max_requests + 1],
  // slots [max_requests], reset slots [max_requests] int32, then (8-byte aligned) tokens [max_tokens] int64.
  void* dev_ = nullptr;      // one allocation: the staged region, look-back, ids, error counter
  int32_t* qsl_ = nullptr;
  int64_t* tokens_ = nullptr;
  int32_t* slots_ = nullptr;
  int32_t* reset_slots_ = nullptr;
  int64_t* lookback_ = nullptr;
  int64_t* ids_ = nullptr;
  unsigned long long* errors_ = nullptr;
  void* pinned_ = nullptr;   // the staged region, host side
  int32_t* pinned_qsl_ = nullptr;
  int64_t* pinned_tokens_ = nullptr;
  int32_t* pinned_slots_ = nullptr;
  int32_t* pinned_resets_ = nullptr;
  size_t header_bytes_ = 0;  // the int32 arrays' bytes before the tokens
  std::vector<uint8_t> slot_seen_;  // host check: each slot once per step
  std::vector<int32_t> ones_;       // decode steps' counts
  void* copied_ = nullptr;   // cudaEvent_t: the pinned buffer may be rewritten
  void* start_ = nullptr;    // cudaEvent_t pair around the last step
  void* end_ = nullptr;
  bool copy_pending_ = false;
};

}  // namespace engram::cuda
