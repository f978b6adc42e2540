// The Engram N-gram hash kernels (see hash_kernel.cuh); each thread's work is core/hash_step.hpp.
//
// hash: grid (ceil(max_tokens * heads / 256), n_layers), one thread per output id (x = token * heads + head), so
// consecutive threads write consecutive ids and every store is coalesced. The tokens of one request share the
// binary-search path over the CSR offsets (it stays in L1), and recomputing the few-term mix per head costs less
// than sharing it across threads: the token loads hit L1 and the modulo dominates. The token count comes from
// query_start_loc[n_requests] on the device, the grid from max_tokens on the host, so a captured graph replays
// steps of any size up to max_tokens. At least one block runs even for max_tokens = 0, so offsets claiming tokens
// beyond max_tokens are always counted.
// update: one thread per request (it reads its whole old row before writing, so in-place updates are safe: slots
// are distinct). reset: one thread per listed slot. Errors go to the optional counter with one atomicAdd per
// thread that has any.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/hash_kernel.cuh"

namespace engram::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void add_errors(unsigned long long* errors, unsigned long long n) {
  if (n && errors) atomicAdd(errors, n);
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    hash_kernel(HashBatch b, HashStepConsts c, OutT* out, int64_t stride, unsigned long long* errors) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  add_errors(errors, hash_step_thread<OutT>(b, c, out, stride, static_cast<int>(blockIdx.y), x));
}

__global__ void update_lookback_kernel(HashBatch b, int w, const int32_t* accepted, int64_t* out,
                                       unsigned long long* errors) {
  const int32_t r = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r < b.n_requests && !lookback_step_request(b, w, accepted, out, r)) add_errors(errors, 1);
}

__global__ void reset_lookback_kernel(int64_t* lookback, int64_t rows, int w, const int32_t* slots, int32_t n,
                                      unsigned long long* errors) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n && !lookback_reset_slot(lookback, rows, w, slots, i)) add_errors(errors, 1);
}

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

}  // namespace

const char* hash_id_type_name(HashIdType t) { return t == HashIdType::kInt32 ? "int32" : "int64"; }

Result<std::unique_ptr<DeviceHasher>> DeviceHasher::create(const NgramHashParams& params, HashIdType id_type) {
  ENGRAM_ASSIGN_OR_RETURN(HashStepTables t, make_hash_step_tables(params, id_type == HashIdType::kInt32));
  std::unique_ptr<DeviceHasher> d(new DeviceHasher());
  d->n_layers_ = t.n_layers;
  d->max_ngram_ = t.max_ngram;
  d->heads_ = t.heads;
  d->id_type_ = id_type;
  const size_t word_bytes = t.words.size() * sizeof(uint64_t);
  const size_t table_bytes = t.canonical.size() * sizeof(uint32_t);
  d->bytes_ = static_cast<int64_t>(word_bytes + table_bytes);
  const std::string what = "device hasher";
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&d->mem_, word_bytes + table_bytes),
                              what + ": cudaMalloc " + std::to_string(d->bytes_) + " B");
  auto* words = static_cast<uint64_t*>(d->mem_);
  auto* canonical = reinterpret_cast<uint32_t*>(words + t.words.size());
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(words, t.words.data(), word_bytes, cudaMemcpyHostToDevice),
                              what + ": upload constants");
  if (table_bytes > 0)
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(canonical, t.canonical.data(), table_bytes, cudaMemcpyHostToDevice),
                                what + ": upload compression table");
  d->consts_ = t.consts(words, canonical);
  return std::move(d);
}

DeviceHasher::~DeviceHasher() {
  if (mem_) cudaFree(mem_);
}

Status DeviceHasher::launch_hash(const HashBatch& b, void* out, int64_t out_layer_stride, unsigned long long* errors,
                                 void* stream) const {
  ENGRAM_RETURN_IF_ERROR(check_hash_batch_shape(b, heads_, n_layers_, "launch_hash"));
  const int64_t per_layer = b.max_tokens * heads_;
  const int64_t stride = out_layer_stride == 0 ? per_layer : out_layer_stride;
  if (stride < per_layer)
    return bad("launch_hash: out_layer_stride " + std::to_string(stride) + " < max_tokens * heads = " +
               std::to_string(per_layer));
  if (stride > INT64_MAX / n_layers_) return bad("launch_hash: out_layer_stride " + std::to_string(stride) + " overflows");
  if (b.max_tokens > 0 && !out) return bad("launch_hash: out is null with max_tokens " + std::to_string(b.max_tokens));
  if (b.n_requests == 0) return Status::ok();  // no request, no token (query_start_loc = {0})
  const dim3 grid(blocks_for(per_layer), static_cast<unsigned>(n_layers_));
  auto* s = static_cast<cudaStream_t>(stream);
  if (id_type_ == HashIdType::kInt32)
    hash_kernel<int32_t><<<grid, kThreads, 0, s>>>(b, consts_, static_cast<int32_t*>(out), stride, errors);
  else
    hash_kernel<int64_t><<<grid, kThreads, 0, s>>>(b, consts_, static_cast<int64_t*>(out), stride, errors);
  return cuda_status(cudaGetLastError(), "launch_hash(" + std::to_string(b.n_requests) + " requests, max_tokens " +
                                             std::to_string(b.max_tokens) + ", " + hash_id_type_name(id_type_) + ")");
}

Status DeviceHasher::launch_update_lookback(const HashBatch& b, const int32_t* accepted, int64_t* lookback_out,
                                            unsigned long long* errors, void* stream) const {
  ENGRAM_RETURN_IF_ERROR(check_hash_batch_shape(b, heads_, n_layers_, "launch_update_lookback"));
  if (b.n_requests == 0) return Status::ok();
  if (!lookback_out) return bad("launch_update_lookback: lookback_out is null");
  update_lookback_kernel<<<blocks_for(b.n_requests), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      b, window(), accepted, lookback_out, errors);
  return cuda_status(cudaGetLastError(), "launch_update_lookback(" + std::to_string(b.n_requests) + " requests)");
}

Status DeviceHasher::launch_reset_lookback(int64_t* lookback, int64_t lookback_rows, const int32_t* slots,
                                           int32_t n_slots, unsigned long long* errors, void* stream) const {
  if (n_slots < 0) return bad("launch_reset_lookback: n_slots " + std::to_string(n_slots) + " < 0");
  if (n_slots == 0) return Status::ok();
  if (!lookback || lookback_rows < 1)
    return bad("launch_reset_lookback: lookback " + std::string(lookback ? "set" : "null") + " with " +
               std::to_string(lookback_rows) + " rows");
  reset_lookback_kernel<<<blocks_for(n_slots), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      lookback, lookback_rows, window(), slots, n_slots, errors);
  return cuda_status(cudaGetLastError(), "launch_reset_lookback(" + std::to_string(n_slots) + " slots)");
}

}  // namespace engram::cuda
