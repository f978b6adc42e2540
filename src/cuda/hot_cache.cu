// Hot-row cache (see hot_cache.cuh). The fast path probes the map inside its gather (dedup.cu, map_view()); the
// standalone probe (launch_probe) gives each row to one warp: lane 0 walks the map (cache_slot_of: a few 8-byte
// loads from HBM), the slot is broadcast, and the warp copies (BF16) or decodes (FP8, 16 values per lane and
// round) the row; misses write their id to miss_ids.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "core/units.hpp"
#include "cpu/decode_fast.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/dedup.cuh"
#include "cuda/dedup_decode.cuh"
#include "cuda/hot_cache.cuh"
#include "cuda/lookup_kernel.cuh"
#include "plan/hot_cache_sizing.hpp"

namespace engram::cuda {

namespace {

constexpr int64_t kEmptyKey = kCacheEmptyKey;
constexpr int64_t kTombstone = -2;

struct ProbeArgs {
  const int64_t* ids;
  int64_t n;
  const unsigned long long* n_device;
  int64_t* miss_ids;
  uint16_t* out;
  unsigned long long* hits;
  const int64_t* keys;
  const int32_t* slots;
  unsigned long long mask;
  const uint8_t* rows;
  int64_t row_bytes;
  int d;
  bool fp8;
};

__global__ void probe_kernel(const ProbeArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int64_t n_warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int64_t n = a.n_device ? static_cast<int64_t>(*a.n_device) : a.n;
  unsigned hits = 0;
  for (int64_t k = warp; k < n; k += n_warps) {
    const int64_t id = a.ids[k];
    int32_t slot = -1;
    if (lane == 0 && id >= 0) slot = cache_slot_of(a.keys, a.slots, a.mask, id);
    slot = __shfl_sync(0xFFFFFFFFu, slot, 0);
    if (slot < 0) {
      if (lane == 0) a.miss_ids[k] = id < 0 ? -1 : id;
      continue;
    }
    hits += lane == 0;
    if (lane == 0) a.miss_ids[k] = kSkipId;
    const uint8_t* row = a.rows + static_cast<int64_t>(slot) * a.row_bytes;
    uint4* o = reinterpret_cast<uint4*>(a.out + k * a.d);
    if (a.fp8) {
      for (int c = lane; c < a.d / 16; c += 32) {
        const uint4 v = reinterpret_cast<const uint4*>(row)[c];
        const uint8_t s = row[a.d + (c >> 1)];
        uint4 lo, hi;
        decode16(v, s, lo, hi);
        o[2 * c] = lo;
        o[2 * c + 1] = hi;
      }
    } else {
      for (int c = lane; c < a.d * 2 / 16; c += 32) o[c] = reinterpret_cast<const uint4*>(row)[c];
    }
  }
  if (a.hits) {
    hits = __reduce_add_sync(0xFFFFFFFFu, hits);
    if (lane == 0 && hits) atomicAdd(a.hits, static_cast<unsigned long long>(hits));
  }
}

// edits[3*i] = map index, [3*i+1] = key, [3*i+2] = slot (or -1: key only).
__global__ void map_edit_kernel(const int64_t* __restrict__ edits, int64_t n, int64_t* keys, int32_t* slots) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = edits[3 * i];
    keys[at] = edits[3 * i + 1];
    if (edits[3 * i + 2] >= 0) slots[at] = static_cast<int32_t>(edits[3 * i + 2]);
  }
}

__global__ void row_copy_kernel(const uint8_t* __restrict__ src, const int64_t* __restrict__ edits, int64_t n,
                                int64_t row_bytes, uint8_t* rows) {
  // One block per admitted row: edits[3*i+2] is its slot.
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t slot = edits[3 * i + 2];
    for (int64_t b = threadIdx.x; b < row_bytes / 16; b += blockDim.x)
      reinterpret_cast<uint4*>(rows + slot * row_bytes)[b] = reinterpret_cast<const uint4*>(src + i * row_bytes)[b];
  }
}

}  // namespace

Result<std::unique_ptr<HotRowCache>> HotRowCache::create(const TableView& v, const std::vector<int64_t>& hot_first,
                                                         const HotCacheOptions& o) {
  if (!v.data || v.rows <= 0 || v.d <= 0 || v.d % 32 != 0)
    return Status(Code::kInvalidArgument, "hot cache: malformed table view");
  std::unique_ptr<HotRowCache> c(new HotRowCache());
  c->view_ = v;
  c->format_ = o.format;
  c->row_bytes_ = plan::hot_cache_row_bytes(v.d, o.format);
  const plan::HotCacheSizing size = plan::hot_cache_sizing(o.budget_bytes, c->row_bytes_, v.rows, o.staging_rows);
  if (size.slots <= 0)
    return Status(Code::kInvalidArgument,
                  "hot cache: budget " + std::to_string(o.budget_bytes) + " B holds no row (" +
                      std::to_string(c->row_bytes_) + " B per row, map and staging included: " +
                      std::to_string(plan::hot_cache_bytes(1, c->row_bytes_, size.staging_rows)) + " B for one)");
  c->slots_ = size.slots;
  c->map_cap_ = size.map_entries;
  c->staging_rows_ = size.staging_rows;
  c->h_keys_.assign(static_cast<size_t>(c->map_cap_), kEmptyKey);
  c->h_slots_.assign(static_cast<size_t>(c->map_cap_), -1);
  // GPU fill: the table as the GPU reads it, the whole layer, and (FP8) records laid out as the cache's.
  const UvaTable* src = o.device_source;
  const bool on_device =
      src && src->host_view().data == v.data && src->host_view().rows == v.rows && !v.slice.sliced() &&
      (o.format == CacheFormat::kBf16 || plain_gather_out_stride(v, GatherBytes::kRowBytes) == c->row_bytes_);
  std::vector<uint8_t> rows;
  if (!on_device)
    rows.reserve(static_cast<size_t>(std::min<int64_t>(c->slots_, static_cast<int64_t>(hot_first.size())) *
                                     c->row_bytes_));
  const uint64_t mask = static_cast<uint64_t>(c->map_cap_ - 1);
  for (int64_t id : hot_first) {
    if (c->filled_ >= c->slots_) break;
    if (id < 0 || id >= v.rows) continue;
    uint64_t h = hash_slot(static_cast<uint64_t>(id), mask);
    while (c->h_keys_[h] != kEmptyKey && c->h_keys_[h] != id) h = (h + 1) & mask;
    if (c->h_keys_[h] == id) continue;
    c->h_keys_[h] = id;
    c->h_slots_[h] = static_cast<int32_t>(c->filled_);
    c->slot_ids_.push_back(id);
    if (!on_device) {
      rows.resize(rows.size() + static_cast<size_t>(c->row_bytes_));
      c->fill_row(id, rows.data() + rows.size() - c->row_bytes_);
    }
    ++c->filled_;
  }
  c->slot_ids_.resize(static_cast<size_t>(c->slots_), -1);
  c->used_entries_ = c->filled_;
  auto alloc = [&](auto** p, int64_t bytes) -> Status {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(p), static_cast<size_t>(bytes)),
                                "hot cache: cudaMalloc " + format_bytes(bytes));
    c->hbm_bytes_ += bytes;
    return Status::ok();
  };
  ENGRAM_RETURN_IF_ERROR(alloc(&c->d_keys_, 8 * c->map_cap_));
  ENGRAM_RETURN_IF_ERROR(alloc(&c->d_slots_, 4 * c->map_cap_));
  ENGRAM_RETURN_IF_ERROR(alloc(&c->d_rows_, c->row_bytes_ * c->slots_));
  // Update staging, allocated once here (pinned allocations cost milliseconds) and counted in the budget.
  ENGRAM_RETURN_IF_ERROR(alloc(&c->d_stage_rows_, c->staging_rows_ * c->row_bytes_));
  ENGRAM_RETURN_IF_ERROR(alloc(&c->d_edits_, c->staging_rows_ * plan::kHotCacheEditBytesPerRow));
  if (c->hbm_bytes_ != size.hbm_bytes)
    return Status(Code::kInternal, "hot cache: allocated " + std::to_string(c->hbm_bytes_) + " B, sized " +
                                       std::to_string(size.hbm_bytes) + " B");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&c->pin_rows_, static_cast<size_t>(c->staging_rows_ * c->row_bytes_)),
                              "hot cache: staging");
  ENGRAM_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(&c->pin_edits_, static_cast<size_t>(c->staging_rows_ * plan::kHotCacheEditBytesPerRow)),
      "hot cache: edits");
  if (on_device && c->filled_ > 0) {
    ENGRAM_RETURN_IF_ERROR(c->gather_on_device(*src, c->slot_ids_.data(), c->filled_));  // slots [0, filled_)
    c->filled_on_device_ = true;
  }
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(c->d_keys_, c->h_keys_.data(), 8 * c->map_cap_, cudaMemcpyHostToDevice),
                              "hot cache: map keys");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(c->d_slots_, c->h_slots_.data(), 4 * c->map_cap_, cudaMemcpyHostToDevice),
                              "hot cache: map slots");
  if (!rows.empty())
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(c->d_rows_, rows.data(), rows.size(), cudaMemcpyHostToDevice),
                                "hot cache: rows");
  return std::move(c);
}

// The slots' ids go to the device in the map's key array (map_cap_ >= 2 * slots entries, uploaded right after),
// so the fill allocates nothing beyond the budget; the gather runs on a stream of its own and is waited for.
Status HotRowCache::gather_on_device(const UvaTable& source, const int64_t* ids, int64_t n) {
  if (n > map_cap_) return Status(Code::kInternal, "hot cache: more rows than map entries");
  cudaStream_t s = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "hot cache: fill stream");
  auto run = [&]() -> Status {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_keys_, ids, static_cast<size_t>(8 * n),
                                                cudaMemcpyHostToDevice, s),
                                "hot cache: fill ids");
    if (format_ == CacheFormat::kBf16) {
      LookupArgs a;
      a.table = &source;
      a.ids = d_keys_;
      a.tokens = n;
      a.heads = 1;
      a.out = reinterpret_cast<uint16_t*>(d_rows_);
      ENGRAM_RETURN_IF_ERROR(launch_lookup(a, s).status().with_context("hot cache: fill"));
    } else {
      GatherArgs a;
      a.table = &source;
      a.ids = d_keys_;
      a.rows = n;
      a.out = d_rows_;
      a.what = GatherBytes::kRowBytes;
      ENGRAM_RETURN_IF_ERROR(launch_plain_gather(a, s).status().with_context("hot cache: fill"));
    }
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "hot cache: fill");
    return Status::ok();
  };
  const Status st = run();
  (void)cudaStreamSynchronize(s);
  (void)cudaStreamDestroy(s);
  // create() checked what the launch needs: a refusal here is this code's fault, not the caller's budget (the
  // engine turns a cache off quietly on kInvalidArgument, which means "budget too small").
  if (!st.is_ok() && st.code() == Code::kInvalidArgument) return Status(Code::kInternal, st.message());
  return st;
}

void HotRowCache::fill_row(int64_t id, uint8_t* dst) const {
  if (format_ == CacheFormat::kFp8) {
    std::memset(dst, 0, static_cast<size_t>(row_bytes_));
    std::memcpy(dst, view_.payload_of(id), static_cast<size_t>(view_.d));
    std::memcpy(dst + view_.d, view_.scales_of(id), static_cast<size_t>(view_.d / 32));
  } else {
    std::vector<uint16_t> tmp(static_cast<size_t>(view_.d));
    cpu::decode_row_fast(view_.payload_of(id), view_.scales_of(id), view_.d, tmp.data());
    std::memcpy(dst, tmp.data(), static_cast<size_t>(2 * view_.d));
  }
}

HotRowCache::~HotRowCache() {
  if (ev_update_) {
    (void)cudaEventSynchronize(static_cast<cudaEvent_t>(ev_update_));
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev_update_));
  }
  if (ev_staged_) {
    (void)cudaEventSynchronize(static_cast<cudaEvent_t>(ev_staged_));
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev_staged_));
  }
  for (void* p : {static_cast<void*>(d_keys_), static_cast<void*>(d_slots_), static_cast<void*>(d_rows_),
                  static_cast<void*>(d_stage_rows_), static_cast<void*>(d_edits_)})
    if (p) (void)cudaFree(p);
  if (pin_rows_) (void)cudaFreeHost(pin_rows_);
  if (pin_edits_) (void)cudaFreeHost(pin_edits_);
  if (pin_map_) (void)cudaFreeHost(pin_map_);
  (void)cudaGetLastError();
}

int64_t HotRowCache::find_slot_index(int64_t id) const {
  const uint64_t mask = static_cast<uint64_t>(map_cap_ - 1);
  uint64_t h = hash_slot(static_cast<uint64_t>(id), mask);
  while (h_keys_[h] != kEmptyKey) {
    if (h_keys_[h] == id) return static_cast<int64_t>(h);
    h = (h + 1) & mask;
  }
  return -1;
}

bool HotRowCache::contains(int64_t id) const { return id >= 0 && find_slot_index(id) >= 0; }

double HotRowCache::coverage_of(const std::vector<std::pair<int64_t, int64_t>>& id_counts, int64_t probe_first) const {
  const size_t probed = probe_first < 0 ? id_counts.size() : std::min(id_counts.size(), static_cast<size_t>(probe_first));
  // A cache filled from these records in order holds exactly the first filled_ of them (slot k = record k): a
  // prefix sum, no map probes.
  bool prefix = filled_ <= static_cast<int64_t>(probed);
  for (int64_t k = 0; prefix && k < filled_; ++k) prefix = slot_ids_[static_cast<size_t>(k)] == id_counts[static_cast<size_t>(k)].first;
  double all = 0, held = 0;
  for (size_t k = 0; k < id_counts.size(); ++k) {
    const auto& [id, count] = id_counts[k];
    all += static_cast<double>(count);
    if (prefix ? static_cast<int64_t>(k) < filled_ : k < probed && contains(id)) held += static_cast<double>(count);
  }
  return all > 0 ? held / all : std::numeric_limits<double>::quiet_NaN();
}

Status HotRowCache::launch_probe(const int64_t* ids, int64_t n, const unsigned long long* n_device, int64_t* miss_ids,
                                 uint16_t* out, unsigned long long* hits_counter, void* stream) const {
  if (n <= 0) return Status::ok();
  ProbeArgs a{ids, n, n_device, miss_ids, out, hits_counter, d_keys_, d_slots_,
              static_cast<unsigned long long>(map_cap_ - 1), d_rows_, row_bytes_, view_.d,
              format_ == CacheFormat::kFp8};
  const int64_t warps_needed = n;
  const int grid = static_cast<int>(std::clamp<int64_t>((warps_needed * 32 + 255) / 256, 1, 2048));
  probe_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "hot cache probe launch");
  return Status::ok();
}

CacheMapView HotRowCache::map_view(unsigned long long* hits_counter) const {
  CacheMapView m;
  m.keys = d_keys_;
  m.slots = d_slots_;
  m.mask = static_cast<unsigned long long>(map_cap_ - 1);
  m.rows = d_rows_;
  m.row_bytes = row_bytes_;
  m.fp8 = format_ == CacheFormat::kFp8;
  m.hits = hits_counter;
  return m;
}

Result<int64_t> HotRowCache::update(const std::vector<int64_t>& candidates,
                                    const std::vector<std::pair<int64_t, double>>& score, int64_t max_rows,
                                    void* stream) {
  if (max_rows <= 0) return int64_t{0};
  // Victims: lowest score first among filled slots (empty slots first of all); the swaps themselves are replace()'s.
  std::unordered_map<int64_t, double> sc(score.begin(), score.end());
  std::vector<int64_t> order(static_cast<size_t>(slots_));
  for (int64_t i = 0; i < slots_; ++i) order[static_cast<size_t>(i)] = i;
  auto slot_score = [&](int64_t slot) {
    const int64_t id = slot_ids_[static_cast<size_t>(slot)];
    if (id < 0) return -1.0;
    auto it = sc.find(id);
    return it == sc.end() ? 0.0 : it->second;
  };
  std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(max_rows, slots_), order.end(),
                    [&](int64_t a, int64_t b) { return slot_score(a) < slot_score(b); });
  std::vector<std::pair<int64_t, int64_t>> swaps;  // (slot, new id)
  std::unordered_map<int64_t, int> taken;          // a candidate listed twice is admitted once
  int64_t victim = 0;
  for (int64_t id : candidates) {
    if (static_cast<int64_t>(swaps.size()) >= max_rows || victim >= slots_) break;
    if (id < 0 || id >= view_.rows || contains(id) || taken[id]++) continue;
    const int64_t slot = order[static_cast<size_t>(victim)];
    const double cand_score = sc.count(id) ? sc[id] : 0.0;
    if (slot_ids_[static_cast<size_t>(slot)] >= 0 && cand_score <= slot_score(slot)) break;  // LFU: no gain
    ++victim;
    swaps.emplace_back(slot, id);
  }
  return replace(swaps, stream);
}

Status HotRowCache::ensure_staging() {
  if (!ev_update_) {
    cudaEvent_t e = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "hot cache: update event");
    ev_update_ = e;
  } else if (ev_staged_) {
    // The previous stage's copy must have read the pinned staging before it is overwritten (the device staging is
    // guarded on the GPU: stage() makes its stream wait for the previous commit).
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_staged_)), "hot cache: wait stage");
  }
  return Status::ok();
}

Status HotRowCache::maybe_rebuild_map(void* stream) {
  if (4 * used_entries_ <= 3 * map_cap_) return Status::ok();
  // Rebuild from the slots (no tombstones), then copy the whole map after the edits already enqueued.
  const uint64_t mask = static_cast<uint64_t>(map_cap_ - 1);
  std::fill(h_keys_.begin(), h_keys_.end(), kEmptyKey);
  std::fill(h_slots_.begin(), h_slots_.end(), -1);
  used_entries_ = 0;
  for (int64_t slot = 0; slot < slots_; ++slot) {
    const int64_t id = slot_ids_[static_cast<size_t>(slot)];
    if (id < 0) continue;
    uint64_t h = hash_slot(static_cast<uint64_t>(id), mask);
    while (h_keys_[h] != kEmptyKey) h = (h + 1) & mask;
    h_keys_[h] = id;
    h_slots_[h] = static_cast<int32_t>(slot);
    ++used_entries_;
  }
  if (!pin_map_)
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pin_map_, static_cast<size_t>(12 * map_cap_)), "hot cache: map staging");
  else if (ev_update_)  // the previous rebuild's copy (before the previous commit's event) has read pin_map_
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_update_)), "hot cache: wait map copy");
  std::memcpy(pin_map_, h_keys_.data(), static_cast<size_t>(8 * map_cap_));
  std::memcpy(pin_map_ + 8 * map_cap_, h_slots_.data(), static_cast<size_t>(4 * map_cap_));
  const auto s = static_cast<cudaStream_t>(stream);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_keys_, pin_map_, static_cast<size_t>(8 * map_cap_), cudaMemcpyHostToDevice, s),
                              "hot cache: map rebuild keys");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_slots_, pin_map_ + 8 * map_cap_, static_cast<size_t>(4 * map_cap_),
                                              cudaMemcpyHostToDevice, s), "hot cache: map rebuild slots");
  ++map_rebuilds_;
  return Status::ok();
}

Result<int64_t> HotRowCache::replace(const std::vector<std::pair<int64_t, int64_t>>& slot_id, void* stream) {
  ENGRAM_RETURN_IF_ERROR(validate(slot_id));  // all of it before the first chunk: nothing enqueued on error
  int64_t done = 0;
  for (size_t at = 0; at < slot_id.size(); at += static_cast<size_t>(staging_rows_)) {
    const size_t end = std::min(slot_id.size(), at + static_cast<size_t>(staging_rows_));
    const std::vector<std::pair<int64_t, int64_t>> chunk(slot_id.begin() + static_cast<std::ptrdiff_t>(at),
                                                         slot_id.begin() + static_cast<std::ptrdiff_t>(end));
    ENGRAM_ASSIGN_OR_RETURN(const int64_t n, stage(chunk, stream));
    if (n == 0) continue;
    ENGRAM_ASSIGN_OR_RETURN(const int64_t m, commit(stream));
    done += m;
  }
  return done;
}

Status HotRowCache::validate(const std::vector<std::pair<int64_t, int64_t>>& slot_id) const {
  std::unordered_map<int64_t, int> seen_slot, seen_id;
  for (const auto& [slot, id] : slot_id) {
    if (slot < 0 || slot >= slots_ || seen_slot[slot]++)
      return Status(Code::kInvalidArgument, "hot cache replace: slot " + std::to_string(slot) + " outside [0, " +
                                                std::to_string(slots_) + ") or given twice");
    if (id < 0 || id >= view_.rows || seen_id[id]++ || contains(id))
      return Status(Code::kInvalidArgument, "hot cache replace: id " + std::to_string(id) +
                                                " outside the table, given twice or already cached");
  }
  return Status::ok();
}

Result<int64_t> HotRowCache::stage(const std::vector<std::pair<int64_t, int64_t>>& slot_id, void* stage_stream) {
  const int64_t n = static_cast<int64_t>(slot_id.size());
  if (n == 0) return int64_t{0};
  if (staged_rows_ > 0)
    return Status(Code::kInvalidArgument, "hot cache stage: " + std::to_string(staged_rows_) +
                                              " staged rows are not committed yet");
  if (n > staging_rows_)
    return Status(Code::kInvalidArgument, "hot cache stage: " + std::to_string(n) + " rows, the staging holds " +
                                              std::to_string(staging_rows_));
  ENGRAM_RETURN_IF_ERROR(validate(slot_id));
  const auto s = static_cast<cudaStream_t>(stage_stream);
  ENGRAM_RETURN_IF_ERROR(ensure_staging());
  if (!ev_staged_) {
    cudaEvent_t e = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "hot cache: stage event");
    ev_staged_ = e;
  }
  const uint64_t mask = static_cast<uint64_t>(map_cap_ - 1);
  std::vector<int64_t> admit_edits, tomb_edits;
  admit_edits.reserve(static_cast<size_t>(3 * n));
  // Tombstones of every evicted id first (host mirror), so that admissions may reuse their entries.
  for (const auto& [slot, id] : slot_id) {
    const int64_t old = slot_ids_[static_cast<size_t>(slot)];
    if (old < 0) {
      ++filled_;  // a free slot gets a row (kept incrementally: a count over every slot cost ~1 ms per update)
      continue;
    }
    const int64_t at = find_slot_index(old);
    h_keys_[static_cast<size_t>(at)] = kTombstone;
    tomb_edits.insert(tomb_edits.end(), {at, kTombstone, -1});
  }
  int64_t k = 0;
  for (const auto& [slot, id] : slot_id) {
    uint64_t h = hash_slot(static_cast<uint64_t>(id), mask);
    while (h_keys_[h] != kEmptyKey && h_keys_[h] != kTombstone) h = (h + 1) & mask;
    if (h_keys_[h] == kEmptyKey) ++used_entries_;
    h_keys_[h] = id;
    h_slots_[h] = static_cast<int32_t>(slot);
    slot_ids_[static_cast<size_t>(slot)] = id;
    fill_row(id, pin_rows_ + k * row_bytes_);
    admit_edits.insert(admit_edits.end(), {static_cast<int64_t>(h), id, slot});
    ++k;
  }
  std::memcpy(pin_edits_, admit_edits.data(), admit_edits.size() * 8);
  std::memcpy(pin_edits_ + admit_edits.size(), tomb_edits.data(), tomb_edits.size() * 8);
  const int64_t n_edits = static_cast<int64_t>(admit_edits.size() + tomb_edits.size()) / 3;
  // The previous commit read the device staging on the lookup stream: the side stream waits for it on the GPU.
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ev_update_), 0), "hot cache: stage wait");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_stage_rows_, pin_rows_, static_cast<size_t>(n * row_bytes_),
                                              cudaMemcpyHostToDevice, s), "hot cache: replace rows");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_edits_, pin_edits_, static_cast<size_t>(n_edits * 3 * 8),
                                              cudaMemcpyHostToDevice, s), "hot cache: replace edits");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_staged_), s), "hot cache: stage event");
  staged_rows_ = n;
  staged_tombs_ = static_cast<int64_t>(tomb_edits.size()) / 3;
  return n;
}

bool HotRowCache::stage_ready() const {
  if (staged_rows_ == 0 || !ev_staged_) return false;
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(ev_staged_));
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) (void)cudaGetLastError();  // commit() reports the failure through its own calls
  return true;
}

Result<int64_t> HotRowCache::commit(void* lookup_stream) {
  const int64_t n = staged_rows_;
  if (n == 0) return int64_t{0};
  const auto s = static_cast<cudaStream_t>(lookup_stream);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ev_staged_), 0), "hot cache: commit wait");
  row_copy_kernel<<<static_cast<int>(std::min<int64_t>(n, 1024)), 128, 0, s>>>(d_stage_rows_, d_edits_, n, row_bytes_,
                                                                              d_rows_);
  if (staged_tombs_ > 0) map_edit_kernel<<<1, 256, 0, s>>>(d_edits_ + 3 * n, staged_tombs_, d_keys_, d_slots_);
  map_edit_kernel<<<1, 256, 0, s>>>(d_edits_, n, d_keys_, d_slots_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "hot cache: replace kernels");
  swapped_rows_ += n;
  staged_rows_ = 0;
  staged_tombs_ = 0;
  ENGRAM_RETURN_IF_ERROR(maybe_rebuild_map(lookup_stream));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_update_), s), "hot cache: replace event");
  return n;
}

}  // namespace engram::cuda
