// The Engram N-gram hash kernels (see hash_kernel.cuh).
//
// hash: one thread per output id (layer = blockIdx.y; x = token * heads + head), so consecutive threads write
// consecutive ids and every store is coalesced. A thread finds its request by binary search over the CSR offsets
// (the tokens of one request share the search path, which stays in L1), then walks its n-gram from the newest token
// back — new tokens from `tokens`, older ones from the request's look-back row — compressing each raw id through
// the table, applying the DEAD rule (core/hash_batch.hpp: from the first DEAD token of the walk on, the pad), and
// mixing exactly as NgramHasher does (uint64 products, XOR). The head's id is fast_floor_mod(mix, p_h) (Barrett,
// core/fast_mod.hpp: no 64-bit division) + the head offset. Recomputing the few-term mix per head costs less than
// sharing it: the token loads hit L1 and the modulo dominates.
// The token count comes from query_start_loc[n_requests] on the device, the grid from max_tokens on the host: a
// captured graph replays steps of any size up to max_tokens. Every index read is checked against the sizes the
// host gave, so malformed contents give kDeadId ids and a count, never an out-of-bounds access.
// update: one thread per request: it reads its whole old row, then writes the new one, so in-place updates are
// safe (slots are distinct). reset: one thread per listed slot.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/fast_mod.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/hash_kernel.cuh"
#include "engram/lookup.hpp"

namespace engram::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxWindow = 15;  // EngramLayout allows max_ngram <= 16

struct BatchArgs {
  int32_t n_requests;
  int64_t max_tokens;
  const int32_t* qsl;
  const int64_t* tokens;
  const uint8_t* dead_mask;
  const int64_t* lookback;
  int64_t lookback_rows;
  const int32_t* slot;
};

BatchArgs batch_args(const HashBatch& b) {
  return {b.n_requests, b.max_tokens, b.query_start_loc, b.tokens, b.dead_mask, b.lookback, b.lookback_rows,
          b.lookback_slot};
}

struct HashArgs {
  BatchArgs b;
  const uint32_t* canonical;
  int64_t vocab;
  int64_t pad;
  const uint64_t* mult;
  const uint64_t* rows;
  const uint64_t* magic;
  const int64_t* offs;
  int max_ngram;
  int heads;
  int k_heads;
  int n_layers;
  void* out;
  int64_t stride;
  unsigned long long* errors;
};

__device__ __forceinline__ void count_error(unsigned long long* errors, unsigned long long n = 1) {
  if (errors) atomicAdd(errors, n);
}

// Request r of token t (r = first request with query_start_loc[r + 1] > t), or -1 when the offsets do not place
// t inside [query_start_loc[r], query_start_loc[r + 1]) with a non-negative start.
__device__ __forceinline__ int32_t request_of(const BatchArgs& b, int32_t t, int32_t* first) {
  int32_t lo = 0, hi = b.n_requests;
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (b.qsl[mid + 1] <= t) lo = mid + 1;
    else hi = mid;
  }
  if (lo >= b.n_requests) return -1;
  *first = b.qsl[lo];
  if (*first < 0 || *first > t || b.qsl[lo + 1] <= t) return -1;
  return lo;
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads) hash_kernel(HashArgs a) {
  const int layer = static_cast<int>(blockIdx.y);
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;  // token * heads + head
  const int32_t claimed = a.b.qsl[a.b.n_requests];
  if (layer == 0 && x == 0 && claimed > a.b.max_tokens)
    count_error(a.errors, static_cast<unsigned long long>(claimed - a.b.max_tokens) * a.n_layers * a.heads);
  if (x >= a.b.max_tokens * a.heads) return;
  const int32_t xi = static_cast<int32_t>(x);  // < 2^31 (check_hash_batch_shape)
  const int32_t t = xi / a.heads;
  const int h = xi - t * a.heads;
  if (t >= claimed) return;  // beyond the step's tokens: not written
  OutT* o = static_cast<OutT*>(a.out) + layer * a.stride + x;

  int32_t first = 0;
  const int32_t r = request_of(a.b, t, &first);
  const int64_t slot = r < 0 ? -1 : (a.b.slot ? a.b.slot[r] : r);
  if (slot < 0 || slot >= a.b.lookback_rows) {
    *o = static_cast<OutT>(kDeadId);
    count_error(a.errors);
    return;
  }
  const int w = a.max_ngram - 1;
  const int64_t* row = a.b.lookback + slot * w;
  const uint64_t* m = a.mult + layer * a.max_ngram;
  const int n = h / a.k_heads + 2;  // the order of head h
  const int32_t i = t - first;      // position within the request's chunk
  uint64_t mix = 0;
  bool dead = false;
  for (int s = 0; s < n; ++s) {
    int64_t v = a.pad;
    if (!dead) {
      int64_t raw;
      bool masked = false;
      if (i - s >= 0) {  // a new token of this step (t - s >= first >= 0)
        raw = a.b.tokens[t - s];
        masked = a.b.dead_mask && a.b.dead_mask[t - s];
      } else {           // the look-back row: slot w - 1 is the token just before the chunk; i - s >= -w
        raw = row[w + (i - s)];
      }
      if (masked || raw == kDeadToken) {
        dead = true;
      } else if (raw >= a.vocab) {
        *o = static_cast<OutT>(kDeadId);
        count_error(a.errors);
        return;
      } else {
        v = (raw < 0 || !a.canonical) ? raw : static_cast<int64_t>(a.canonical[raw]);
      }
    }
    mix ^= static_cast<uint64_t>(v) * m[s];
  }
  const int64_t hh = static_cast<int64_t>(layer) * a.heads + h;
  const int64_t id = fast_floor_mod(static_cast<int64_t>(mix), a.rows[hh], a.magic[hh]) + a.offs[hh];
  *o = static_cast<OutT>(id);
}

__global__ void update_lookback_kernel(BatchArgs b, int w, const int32_t* accepted, int64_t* out,
                                       unsigned long long* errors) {
  const int32_t r = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= b.n_requests) return;
  const int64_t first = b.qsl[r];
  const int64_t n = static_cast<int64_t>(b.qsl[r + 1]) - first;
  const int64_t slot = b.slot ? b.slot[r] : r;
  const int64_t k = accepted ? accepted[r] : n;
  if (slot < 0 || slot >= b.lookback_rows || first < 0 || n < 0 || first + n > b.max_tokens || k < 0 || k > n) {
    count_error(errors);
    return;
  }
  // New row j = element k + j of (old row ++ the k accepted tokens); read all of the old row before writing.
  int64_t old[kMaxWindow];
  const int64_t* in = b.lookback + slot * w;
  for (int j = 0; j < w; ++j) old[j] = in[j];
  int64_t* dst = out + slot * w;
  for (int j = 0; j < w; ++j) {
    const int64_t idx = k + j;
    int64_t v;
    if (idx < w) {
      v = old[idx];
    } else {
      const int64_t pos = first + (idx - w);
      v = (b.dead_mask && b.dead_mask[pos]) ? kDeadToken : b.tokens[pos];
    }
    dst[j] = v;
  }
}

__global__ void reset_lookback_kernel(int64_t* lookback, int64_t rows, int w, const int32_t* slots, int32_t n,
                                      unsigned long long* errors) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const int64_t slot = slots ? slots[i] : i;
  if (slot < 0 || slot >= rows) {
    count_error(errors);
    return;
  }
  for (int j = 0; j < w; ++j) lookback[slot * w + j] = kDeadToken;
}

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

}  // namespace

const char* hash_id_type_name(HashIdType t) { return t == HashIdType::kInt32 ? "int32" : "int64"; }

Result<std::unique_ptr<DeviceHasher>> DeviceHasher::create(const NgramHashParams& p, HashIdType id_type) {
  const std::string what = "device hasher";
  if (p.n_layers < 1 || p.max_ngram < 2 || p.max_ngram - 1 > kMaxWindow || p.heads_per_order < 1 ||
      p.heads != (p.max_ngram - 1) * p.heads_per_order)
    return bad(what + ": inconsistent shape (layers " + std::to_string(p.n_layers) + ", N " + std::to_string(p.max_ngram) +
               ", heads " + std::to_string(p.heads) + " = (N-1) x " + std::to_string(p.heads_per_order) +
               "?); N must be in [2, " + std::to_string(kMaxWindow + 1) + "]");
  const size_t lh = static_cast<size_t>(p.n_layers) * static_cast<size_t>(p.heads);
  if (p.multipliers.size() != static_cast<size_t>(p.n_layers) * static_cast<size_t>(p.max_ngram) ||
      p.head_rows.size() != lh || p.head_offsets.size() != lh || p.layer_rows.size() != static_cast<size_t>(p.n_layers))
    return bad(what + ": parameter arrays do not match the shape");
  if (p.vocab_size < 1 || (!p.canonical.empty() && static_cast<int64_t>(p.canonical.size()) != p.vocab_size))
    return bad(what + ": vocabulary " + std::to_string(p.vocab_size) + " vs compression table of " +
               std::to_string(p.canonical.size()) + " entries");
  for (int64_t rows : p.head_rows)
    if (rows < 1 || static_cast<uint64_t>(rows) > kFastModMaxDivisor)
      return bad(what + ": head size " + std::to_string(rows) + " not in [1, 2^63]");
  if (id_type == HashIdType::kInt32)
    for (int li = 0; li < p.n_layers; ++li)
      if (p.layer_rows[static_cast<size_t>(li)] > (int64_t{1} << 31))
        return bad(what + ": int32 ids requested, but Engram layer index " + std::to_string(li) + " has " +
                   std::to_string(p.layer_rows[static_cast<size_t>(li)]) + " rows (> 2^31: its ids need int64)");

  std::unique_ptr<DeviceHasher> d(new DeviceHasher());
  d->n_layers_ = p.n_layers;
  d->max_ngram_ = p.max_ngram;
  d->heads_ = p.heads;
  d->heads_per_order_ = p.heads_per_order;
  d->id_type_ = id_type;
  d->vocab_size_ = p.vocab_size;
  d->pad_ = p.compressed_pad_id;

  // One allocation: [multipliers | head_rows | head_magic | head_offsets] as 8-byte words, then the table.
  std::vector<uint64_t> words;
  for (int64_t v : p.multipliers) words.push_back(static_cast<uint64_t>(v));
  for (int64_t v : p.head_rows) words.push_back(static_cast<uint64_t>(v));
  for (int64_t v : p.head_rows) words.push_back(make_fast_mod(static_cast<uint64_t>(v)));
  for (int64_t v : p.head_offsets) words.push_back(static_cast<uint64_t>(v));
  const size_t word_bytes = words.size() * sizeof(uint64_t);
  const size_t table_bytes = p.canonical.size() * sizeof(uint32_t);
  d->bytes_ = static_cast<int64_t>(word_bytes + table_bytes);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&d->mem_, word_bytes + table_bytes),
                              what + ": cudaMalloc " + std::to_string(d->bytes_) + " B");
  auto* base = static_cast<uint64_t*>(d->mem_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(base, words.data(), word_bytes, cudaMemcpyHostToDevice),
                              what + ": upload constants");
  if (table_bytes > 0) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(base + words.size(), p.canonical.data(), table_bytes, cudaMemcpyHostToDevice),
                                what + ": upload compression table");
    d->canonical_ = reinterpret_cast<const uint32_t*>(base + words.size());
  }
  d->multipliers_ = base;
  d->head_rows_ = base + p.multipliers.size();
  d->head_magic_ = d->head_rows_ + lh;
  d->head_offsets_ = reinterpret_cast<const int64_t*>(d->head_magic_ + lh);
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
  HashArgs a{batch_args(b), canonical_, vocab_size_, pad_,  multipliers_, head_rows_, head_magic_, head_offsets_,
             max_ngram_,    heads_,     heads_per_order_, n_layers_, out, stride, errors};
  const dim3 grid(blocks_for(per_layer), static_cast<unsigned>(n_layers_));
  auto* s = static_cast<cudaStream_t>(stream);
  if (id_type_ == HashIdType::kInt32)
    hash_kernel<int32_t><<<grid, kThreads, 0, s>>>(a);
  else
    hash_kernel<int64_t><<<grid, kThreads, 0, s>>>(a);
  return cuda_status(cudaGetLastError(), "launch_hash(" + std::to_string(b.n_requests) + " requests, max_tokens " +
                                             std::to_string(b.max_tokens) + ", " + hash_id_type_name(id_type_) + ")");
}

Status DeviceHasher::launch_update_lookback(const HashBatch& b, const int32_t* accepted, int64_t* lookback_out,
                                            unsigned long long* errors, void* stream) const {
  ENGRAM_RETURN_IF_ERROR(check_hash_batch_shape(b, heads_, n_layers_, "launch_update_lookback"));
  if (b.n_requests == 0) return Status::ok();
  if (!lookback_out) return bad("launch_update_lookback: lookback_out is null");
  update_lookback_kernel<<<blocks_for(b.n_requests), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      batch_args(b), window(), accepted, lookback_out, errors);
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
