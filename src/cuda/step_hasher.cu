// StepHasher (step_hasher.cuh): buffers, the per-step launch order and read-back. The kernels are hash_kernel.cu's.
#include "cuda/step_hasher.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/device.cuh"

namespace engram::cuda {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// Byte offset of the next field, aligned to 256 B.
size_t carve(size_t& at, size_t bytes) {
  const size_t start = (at + 255) / 256 * 256;
  at = start + bytes;
  return start;
}

}  // namespace

StepHasher::~StepHasher() {
  ScopedDevice scope(device_);
  if (end_) cudaEventSynchronize(as_event(end_));
  if (copied_) cudaEventSynchronize(as_event(copied_));
  for (void* e : {copied_, start_, end_})
    if (e) cudaEventDestroy(as_event(e));
  if (pinned_) cudaFreeHost(pinned_);
  if (dev_) cudaFree(dev_);
}

Result<std::unique_ptr<StepHasher>> StepHasher::create(const NgramHashParams& params, int max_requests, int device,
                                                      int64_t max_tokens) {
  if (max_requests < 1)
    return Status(Code::kInvalidArgument, "step hasher: max_requests " + std::to_string(max_requests) + " must be >= 1");
  if (max_tokens < 0)
    return Status(Code::kInvalidArgument, "step hasher: max_tokens " + std::to_string(max_tokens) + " must be >= 0");
  ScopedDevice scope(device);
  std::unique_ptr<StepHasher> h(new StepHasher());
  h->device_ = device;
  h->max_requests_ = max_requests;
  h->max_tokens_ = max_tokens > 0 ? max_tokens : max_requests;
  h->slot_seen_.assign(static_cast<size_t>(max_requests), 0);
  ENGRAM_ASSIGN_OR_RETURN(h->hasher_, DeviceHasher::create(params, HashIdType::kInt64));
  const size_t n = static_cast<size_t>(max_requests);
  const size_t t = static_cast<size_t>(h->max_tokens_);
  const size_t w = static_cast<size_t>(h->hasher_->window());
  const size_t ids = t * static_cast<size_t>(h->hasher_->heads()) * static_cast<size_t>(h->hasher_->n_layers());
  h->header_bytes_ = ((3 * n + 1) * sizeof(int32_t) + 7) / 8 * 8;
  const size_t staged = h->header_bytes_ + t * sizeof(int64_t);
  size_t at = 0;
  const size_t o_staged = carve(at, staged);
  const size_t o_lb = carve(at, n * w * sizeof(int64_t));
  const size_t o_ids = carve(at, ids * sizeof(int64_t));
  const size_t o_err = carve(at, sizeof(unsigned long long));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&h->dev_, at), "step hasher: cudaMalloc " + std::to_string(at) + " B");
  h->bytes_ = static_cast<int64_t>(at);
  char* base = static_cast<char*>(h->dev_);
  h->qsl_ = reinterpret_cast<int32_t*>(base + o_staged);
  h->slots_ = h->qsl_ + n + 1;
  h->reset_slots_ = h->slots_ + n;
  h->tokens_ = reinterpret_cast<int64_t*>(base + o_staged + h->header_bytes_);
  h->lookback_ = reinterpret_cast<int64_t*>(base + o_lb);
  h->ids_ = reinterpret_cast<int64_t*>(base + o_ids);
  h->errors_ = reinterpret_cast<unsigned long long*>(base + o_err);

  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h->pinned_, staged), "step hasher: cudaMallocHost");
  h->pinned_qsl_ = static_cast<int32_t*>(h->pinned_);
  h->pinned_slots_ = h->pinned_qsl_ + n + 1;
  h->pinned_resets_ = h->pinned_slots_ + n;
  h->pinned_tokens_ = reinterpret_cast<int64_t*>(static_cast<char*>(h->pinned_) + h->header_bytes_);
  for (void** e : {&h->copied_, &h->start_, &h->end_}) {
    cudaEvent_t ev = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev), "step hasher: cudaEventCreate");
    *e = ev;
  }
  // Every look-back row starts DEAD.
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemset(h->errors_, 0, sizeof(unsigned long long)), "step hasher: errors");
  ENGRAM_RETURN_IF_ERROR(h->hasher_->launch_reset_lookback(h->lookback_, max_requests, nullptr, max_requests,
                                                           h->errors_, nullptr));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "step hasher: initial look-back");
  return std::move(h);  // nvcc (C++17) does not apply the implicit move into Result
}

Status StepHasher::hash_decode_step(const int64_t* tokens, const uint8_t* new_sequence, int n_requests, void* stream) {
  if (n_requests < 1 || n_requests > max_requests_)
    return Status(Code::kInvalidArgument, "step hasher: " + std::to_string(n_requests) + " requests outside [1, " +
                                              std::to_string(max_requests_) + "]");
  ones_.assign(static_cast<size_t>(n_requests), 1);
  return hash_step(tokens, ones_.data(), nullptr, new_sequence, n_requests, stream);
}

Status StepHasher::hash_step(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                             const uint8_t* new_sequence, int n_chunks, void* stream) {
  if (n_chunks < 1 || n_chunks > max_requests_)
    return Status(Code::kInvalidArgument, "step hasher: " + std::to_string(n_chunks) + " chunks outside [1, " +
                                              std::to_string(max_requests_) + "]");
  if (!counts) return Status(Code::kInvalidArgument, "step hasher: no chunk counts");
  // Host-side checks first: nothing is enqueued for a step that would fail.
  int64_t total = 0;
  std::fill(slot_seen_.begin(), slot_seen_.end(), 0);
  for (int c = 0; c < n_chunks; ++c) {
    if (counts[c] < 0)
      return Status(Code::kInvalidArgument, "step hasher: chunk " + std::to_string(c) + " has " +
                                                std::to_string(counts[c]) + " tokens");
    total += counts[c];
    const int32_t slot = slots ? slots[c] : c;
    if (slot < 0 || slot >= max_requests_)
      return Status(Code::kInvalidArgument, "step hasher: chunk " + std::to_string(c) + " look-back slot " +
                                                std::to_string(slot) + " outside [0, " + std::to_string(max_requests_) + ")");
    if (slot_seen_[static_cast<size_t>(slot)]++)
      return Status(Code::kInvalidArgument, "step hasher: look-back slot " + std::to_string(slot) +
                                                " used by two chunks of one step");
  }
  if (total > max_tokens_)
    return Status(Code::kInvalidArgument, "step hasher: " + std::to_string(total) + " tokens in the step, room for " +
                                              std::to_string(max_tokens_));
  ScopedDevice scope(device_);
  const cudaStream_t s = as_stream(stream);
  if (copy_pending_) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(as_event(copied_)), "step hasher: previous token copy");
    copy_pending_ = false;
  }
  int32_t resets = 0;
  pinned_qsl_[0] = 0;
  for (int c = 0; c < n_chunks; ++c) {
    pinned_qsl_[c + 1] = pinned_qsl_[c] + counts[c];
    pinned_slots_[c] = slots ? slots[c] : c;
    if (new_sequence && new_sequence[c]) pinned_resets_[resets++] = pinned_slots_[c];
  }
  std::copy_n(tokens, total, pinned_tokens_);
  // One copy: the int32 arrays (their whole capacity: they sit before the tokens) and the step's tokens.
  const size_t bytes = header_bytes_ + static_cast<size_t>(total) * sizeof(int64_t);

  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(start_), s), "step hasher: record start");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(qsl_, pinned_, bytes, cudaMemcpyHostToDevice, s), "step hasher: staging copy");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(copied_), s), "step hasher: record copied");
  copy_pending_ = true;
  if (resets > 0)
    ENGRAM_RETURN_IF_ERROR(hasher_->launch_reset_lookback(lookback_, max_requests_, reset_slots_, resets, errors_, stream));

  HashBatch b;
  b.n_requests = n_chunks;
  b.max_tokens = max_tokens_;
  b.query_start_loc = qsl_;
  b.tokens = tokens_;
  b.lookback = lookback_;
  b.lookback_rows = max_requests_;
  b.lookback_slot = slots_;
  const int64_t stride = max_tokens_ * hasher_->heads();
  ENGRAM_RETURN_IF_ERROR(hasher_->launch_hash(b, ids_, stride, errors_, stream));
  ENGRAM_RETURN_IF_ERROR(hasher_->launch_update_lookback(b, nullptr, lookback_, errors_, stream));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(end_), s), "step hasher: record end");
  last_requests_ = n_chunks;
  last_tokens_ = total;
  return Status::ok();
}

const int64_t* StepHasher::ids(int layer_index) const {
  return ids_ + static_cast<int64_t>(layer_index) * max_tokens_ * hasher_->heads();
}

Result<double> StepHasher::last_step_ns() const {
  if (last_requests_ == 0) return Status(Code::kInvalidArgument, "step hasher: no step hashed yet");
  ScopedDevice scope(device_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(as_event(end_)), "step hasher: wait for the step");
  float ms = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, as_event(start_), as_event(end_)), "step hasher: elapsed time");
  return static_cast<double>(ms) * 1e6;
}

Status StepHasher::read_back(std::vector<std::vector<int64_t>>& ids, uint64_t* errors) const {
  ScopedDevice scope(device_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(as_event(end_)), "step hasher: wait for the step");
  const size_t per = static_cast<size_t>(last_tokens_) * static_cast<size_t>(hasher_->heads());
  ids.resize(static_cast<size_t>(hasher_->n_layers()));
  for (int l = 0; l < hasher_->n_layers(); ++l) {
    auto& v = ids[static_cast<size_t>(l)];
    v.resize(per);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), this->ids(l), per * sizeof(int64_t), cudaMemcpyDeviceToHost),
                                "step hasher: ids read-back");
  }
  if (errors) {
    unsigned long long e = 0;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(&e, errors_, sizeof(e), cudaMemcpyDeviceToHost), "step hasher: errors");
    *errors = e;
  }
  return Status::ok();
}

}  // namespace engram::cuda
