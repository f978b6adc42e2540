// StepHasher (step_hasher.cuh): buffers, the per-step launch order and read-back. The kernels are hash_kernel.cu's.
#include "cuda/step_hasher.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
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

Result<std::unique_ptr<StepHasher>> StepHasher::create(const NgramHashParams& params, int max_requests, int device) {
  if (max_requests < 1)
    return Status(Code::kInvalidArgument, "step hasher: max_requests " + std::to_string(max_requests) + " must be >= 1");
  ScopedDevice scope(device);
  std::unique_ptr<StepHasher> h(new StepHasher());
  h->device_ = device;
  h->max_requests_ = max_requests;
  ENGRAM_ASSIGN_OR_RETURN(h->hasher_, DeviceHasher::create(params, HashIdType::kInt64));
  const size_t n = static_cast<size_t>(max_requests);
  const size_t w = static_cast<size_t>(h->hasher_->window());
  const size_t ids = n * static_cast<size_t>(h->hasher_->heads()) * static_cast<size_t>(h->hasher_->n_layers());
  size_t at = 0;
  const size_t o_qsl = carve(at, (n + 1) * sizeof(int32_t));
  const size_t o_tok = carve(at, n * sizeof(int64_t));
  const size_t o_lb = carve(at, n * w * sizeof(int64_t));
  const size_t o_slots = carve(at, n * sizeof(int32_t));
  const size_t o_ids = carve(at, ids * sizeof(int64_t));
  const size_t o_err = carve(at, sizeof(unsigned long long));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&h->dev_, at), "step hasher: cudaMalloc " + std::to_string(at) + " B");
  h->bytes_ = static_cast<int64_t>(at);
  char* base = static_cast<char*>(h->dev_);
  h->qsl_ = reinterpret_cast<int32_t*>(base + o_qsl);
  h->tokens_ = reinterpret_cast<int64_t*>(base + o_tok);
  h->lookback_ = reinterpret_cast<int64_t*>(base + o_lb);
  h->reset_slots_ = reinterpret_cast<int32_t*>(base + o_slots);
  h->ids_ = reinterpret_cast<int64_t*>(base + o_ids);
  h->errors_ = reinterpret_cast<unsigned long long*>(base + o_err);

  const size_t pinned = n * sizeof(int64_t) + n * sizeof(int32_t);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h->pinned_, pinned), "step hasher: cudaMallocHost");
  h->pinned_tokens_ = static_cast<int64_t*>(h->pinned_);
  h->pinned_slots_ = reinterpret_cast<int32_t*>(h->pinned_tokens_ + n);
  for (void** e : {&h->copied_, &h->start_, &h->end_}) {
    cudaEvent_t ev = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev), "step hasher: cudaEventCreate");
    *e = ev;
  }
  // Decode: request r owns token r. Every look-back row starts DEAD.
  std::vector<int32_t> qsl(n + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(h->qsl_, qsl.data(), qsl.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                              "step hasher: query_start_loc");
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
  ScopedDevice scope(device_);
  const cudaStream_t s = as_stream(stream);
  if (copy_pending_) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(as_event(copied_)), "step hasher: previous token copy");
    copy_pending_ = false;
  }
  std::copy_n(tokens, n_requests, pinned_tokens_);
  int32_t resets = 0;
  for (int r = 0; r < n_requests; ++r)
    if (new_sequence && new_sequence[r]) pinned_slots_[resets++] = r;

  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(start_), s), "step hasher: record start");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_, pinned_tokens_, static_cast<size_t>(n_requests) * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, s),
                              "step hasher: token copy");
  if (resets > 0)
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(reset_slots_, pinned_slots_, static_cast<size_t>(resets) * sizeof(int32_t),
                                                cudaMemcpyHostToDevice, s),
                                "step hasher: reset slots copy");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(copied_), s), "step hasher: record copied");
  copy_pending_ = true;
  if (resets > 0)
    ENGRAM_RETURN_IF_ERROR(hasher_->launch_reset_lookback(lookback_, max_requests_, reset_slots_, resets, errors_, stream));

  HashBatch b;
  b.n_requests = n_requests;
  b.max_tokens = n_requests;
  b.query_start_loc = qsl_;
  b.tokens = tokens_;
  b.lookback = lookback_;
  b.lookback_rows = max_requests_;
  const int64_t stride = static_cast<int64_t>(max_requests_) * hasher_->heads();
  ENGRAM_RETURN_IF_ERROR(hasher_->launch_hash(b, ids_, stride, errors_, stream));
  ENGRAM_RETURN_IF_ERROR(hasher_->launch_update_lookback(b, nullptr, lookback_, errors_, stream));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(end_), s), "step hasher: record end");
  last_requests_ = n_requests;
  return Status::ok();
}

const int64_t* StepHasher::ids(int layer_index) const {
  return ids_ + static_cast<int64_t>(layer_index) * max_requests_ * hasher_->heads();
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
  const size_t per = static_cast<size_t>(last_requests_) * static_cast<size_t>(hasher_->heads());
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
