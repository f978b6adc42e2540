// Device de-duplication and the fast-path gather/scatter kernels (see dedup.cuh).
//
// The fast gather repeats the UVA lookup kernel's loop (lookup_kernel.cu) rather than sharing it, because it adds
// an indirect destination, a skip code and a device-side row count; the decode itself is the same exact code
// (decode_fast.cuh, else format.hpp's decode_element), so its output is bit-identical to the reference.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/decode_fast.cuh"
#include "cuda/dedup.cuh"
#include "cuda/dedup_decode.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

namespace {

constexpr unsigned long long kEmpty = ~0ull;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
static_assert(kThreads == 256, "the fast gather's block: 8 whole warps, as the UVA lookup kernel's");


// Warp-aggregated counter add (one atomic per warp).
__device__ __forceinline__ void warp_count(unsigned long long* c, unsigned v) {
  v = __reduce_add_sync(__activemask(), v);
  if ((threadIdx.x & 31) == __ffs(__activemask()) - 1 && v) atomicAdd(c, static_cast<unsigned long long>(v));
}

__global__ void hash_insert_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t rows,
                                   unsigned long long* __restrict__ keys, unsigned long long mask,
                                   int32_t* __restrict__ pos_slot, unsigned long long* __restrict__ counters) {
  unsigned dead = 0, invalid = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    if (id < 0 || id >= rows) {
      dead += id < 0;
      invalid += id >= rows;
      pos_slot[i] = -1;
      continue;
    }
    const unsigned long long key = static_cast<unsigned long long>(id);
    unsigned long long h = hash_slot(key, mask);
    while (true) {
      const unsigned long long old = atomicCAS(&keys[h], kEmpty, key);
      if (old == kEmpty || old == key) break;
      h = (h + 1) & mask;
    }
    pos_slot[i] = static_cast<int32_t>(h);
  }
  if (counters) {
    warp_count(&counters[0], dead);
    warp_count(&counters[1], invalid);
  }
}

__global__ void hash_compact_kernel(const unsigned long long* __restrict__ keys, int64_t cap,
                                    int32_t* __restrict__ vals, int64_t* __restrict__ unique,
                                    unsigned long long* __restrict__ count) {
  for (int64_t h = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; h < cap;
       h += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned long long key = keys[h];
    const bool used = key != kEmpty;
    // Warp-aggregated allocation of unique indices.
    const unsigned active = __activemask();
    const unsigned ballot = __ballot_sync(active, used);
    const int leader = __ffs(active) - 1;
    unsigned long long base = 0;
    if ((threadIdx.x & 31) == leader && ballot) base = atomicAdd(count, static_cast<unsigned long long>(__popc(ballot)));
    base = __shfl_sync(active, base, leader);
    if (used) {
      const int k = static_cast<int>(base) + __popc(ballot & ((1u << (threadIdx.x & 31)) - 1));
      vals[h] = k;
      unique[k] = static_cast<int64_t>(key);
    }
  }
}

__global__ void hash_inverse_kernel(const int32_t* __restrict__ pos_slot, const int32_t* __restrict__ vals,
                                    int64_t n, int32_t* __restrict__ inverse) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t s = pos_slot[i];
    inverse[i] = s < 0 ? -1 : vals[s];
  }
}

__global__ void sort_prepare_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t rows,
                                    unsigned long long* __restrict__ keys, int32_t* __restrict__ vals,
                                    unsigned long long* __restrict__ counters) {
  unsigned dead = 0, invalid = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    dead += id < 0;
    invalid += id >= rows;
    keys[i] = (id < 0 || id >= rows) ? static_cast<unsigned long long>(rows) : static_cast<unsigned long long>(id);
    vals[i] = static_cast<int32_t>(i);
  }
  if (counters) {
    warp_count(&counters[0], dead);
    warp_count(&counters[1], invalid);
  }
}

__global__ void sort_flag_kernel(const unsigned long long* __restrict__ keys, int64_t n, unsigned long long sentinel,
                                 int32_t* __restrict__ flags) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned long long k = keys[j];
    flags[j] = (k != sentinel && (j == 0 || keys[j - 1] != k)) ? 1 : 0;
  }
}

__global__ void sort_write_kernel(const unsigned long long* __restrict__ keys, const int32_t* __restrict__ pos,
                                  const int32_t* __restrict__ flags, const int32_t* __restrict__ scan, int64_t n,
                                  unsigned long long sentinel, int64_t* __restrict__ unique,
                                  int32_t* __restrict__ inverse, unsigned long long* __restrict__ count) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned long long key = keys[j];
    const int32_t k = scan[j] - 1;
    inverse[pos[j]] = key == sentinel ? -1 : k;
    if (flags[j]) unique[k] = static_cast<int64_t>(key);
    if (j == n - 1) *count = static_cast<unsigned long long>(scan[j]);
  }
}

__global__ void sanitize_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t rows, int64_t* __restrict__ out,
                                unsigned long long* __restrict__ counters) {
  unsigned dead = 0, invalid = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    dead += id < 0;
    invalid += id >= rows;
    out[i] = (id < 0 || id >= rows) ? -1 : id;
  }
  if (counters) {
    warp_count(&counters[0], dead);
    warp_count(&counters[1], invalid);
  }
}

__global__ void scatter_kernel(const uint4* __restrict__ compact, const int32_t* __restrict__ inverse, int64_t n,
                               int vecs_per_row, uint4* __restrict__ out) {
  const int64_t total = n * vecs_per_row;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t / vecs_per_row;
    const int c = static_cast<int>(t - i * vecs_per_row);
    const int32_t k = inverse[i];
    out[t] = k < 0 ? make_uint4(0, 0, 0, 0) : compact[static_cast<int64_t>(k) * vecs_per_row + c];
  }
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 4096));
}

// ---- fast gather ----------------------------------------------------------------------------------

// U = 8 keeps twice U = 4's rows in registers: allowed a whole SM's register file per block (the grid is at most one
// block per SM) it does not spill; the other shapes keep the compiler's default budget.
template <int G, int U, bool kFused, bool kProbe>
__global__ void __launch_bounds__(kThreads, U > 4 ? 1 : 0)
    fast_gather_kernel(const FastGatherArgs a, int64_t n_host) {
  static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a warp holds whole lane groups");
  constexpr int kGroups = 32 / G;
  constexpr int kRowsPerWarp = kGroups * U;
  constexpr int kTileRows = kWarps * kRowsPerWarp;
  const int64_t n = a.n_device ? static_cast<int64_t>(*a.n_device) : n_host;
  const int64_t n_tiles = (n + kTileRows - 1) / kTileRows;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gl = lane % G;
  const int n_chunks = a.d / 16;
  unsigned dead = 0, invalid = 0, hits = 0;  // counted by each group's first lane
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t k0 = tile * kTileRows + warp * kRowsPerWarp + lane / G;
    const uint8_t* pay[U];
    const uint8_t* sca[U];
    int state[U];  // 0: nothing, 1: decode a record, 2: zero row, 3: copy a BF16 row (cache)
    int64_t dst[U];
    int64_t row[U];  // the valid id of a state-1 row
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k = k0 + u * kGroups;
      state[u] = 0;
      pay[u] = sca[u] = nullptr;
      dst[u] = 0;
      row[u] = -1;
      int64_t id = kSkipId;
      if (k < n) {
        id = a.ids ? __ldg(a.ids + k) : k;
        dst[u] = a.dst ? static_cast<int64_t>(__ldg(a.dst + k)) : k;
        if (a.id_limit > 0) {
          if (gl == 0) {
            dead += id < 0;
            invalid += id >= a.id_limit;
          }
          if (id < 0 || id >= a.id_limit) id = -1;
        }
        if (id >= 0) {
          state[u] = 1;
          row[u] = id;
          pay[u] = a.rows_base + id * a.stride;
          sca[u] = kFused ? pay[u] + a.d : a.scales_base + id * (a.d / kScaleBlock);
        } else if (id != kSkipId) {
          state[u] = 2;
        }
      }
    }
    if constexpr (kProbe) {
      // The group's first lane looks its U rows up in the map: every row's first map read is issued before any
      // is used, so the U lookups overlap (one HBM round trip for all, not U); a chain longer than one entry is
      // followed after. The slot goes to the group's other lanes.
      unsigned long long h[U];
      int64_t key[U];
      int32_t slot[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        h[u] = hash_slot(static_cast<unsigned long long>(row[u]), a.cache.mask);
        key[u] = gl == 0 && state[u] == 1 ? a.cache.keys[h[u]] : kCacheEmptyKey;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        slot[u] = -1;
        if (gl == 0 && state[u] == 1) {
          if (key[u] == row[u]) {
            slot[u] = a.cache.slots[h[u]];
          } else if (key[u] != kCacheEmptyKey) {
            slot[u] = cache_slot_from(a.cache.keys, a.cache.slots, a.cache.mask, row[u], (h[u] + 1) & a.cache.mask);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int32_t sl = __shfl_sync(0xFFFFFFFFu, slot[u], 0, G);
        if (sl >= 0) {
          hits += gl == 0;
          pay[u] = a.cache.rows + static_cast<int64_t>(sl) * a.cache.row_bytes;
          sca[u] = pay[u] + a.d;  // FP8 records: the scales follow the payload
          if (!a.cache.fp8) state[u] = 3;
        }
      }
    }
    for (int c = gl; c < n_chunks; c += G) {
      uint4 v[U];
      uint8_t s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (state[u] == 1) {
          v[u] = __ldg(reinterpret_cast<const uint4*>(pay[u]) + c);
          s[u] = __ldg(sca[u] + (c >> 1));
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (state[u] != 0) {
          uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
          if (state[u] == 1) {
            decode16(v[u], s[u], lo, hi);
          } else if (kProbe && state[u] == 3) {
            lo = __ldg(reinterpret_cast<const uint4*>(pay[u]) + 2 * c);
            hi = __ldg(reinterpret_cast<const uint4*>(pay[u]) + 2 * c + 1);
          }
          uint4* o = reinterpret_cast<uint4*>(a.out + dst[u] * a.d + c * 16);
          o[0] = lo;
          o[1] = hi;
        }
      }
    }
  }
  if (a.counters) {
    warp_count(&a.counters[0], dead);
    warp_count(&a.counters[1], invalid);
  }
  if (kProbe && a.cache.hits) warp_count(a.cache.hits, hits);
}

int lanes_per_row(int d) {
  const int chunks = d / 16;
  int g = 1;
  while (g < 32 && chunks % (g * 2) == 0) g *= 2;
  return g;
}

template <int U, bool kFused, bool kProbe>
cudaError_t launch_g(int g, int grid, const FastGatherArgs& a, cudaStream_t s) {
  switch (g) {
    case 2: fast_gather_kernel<2, U, kFused, kProbe><<<grid, kThreads, 0, s>>>(a, a.n); break;
    case 4: fast_gather_kernel<4, U, kFused, kProbe><<<grid, kThreads, 0, s>>>(a, a.n); break;
    case 8: fast_gather_kernel<8, U, kFused, kProbe><<<grid, kThreads, 0, s>>>(a, a.n); break;
    case 16: fast_gather_kernel<16, U, kFused, kProbe><<<grid, kThreads, 0, s>>>(a, a.n); break;
    case 32: fast_gather_kernel<32, U, kFused, kProbe><<<grid, kThreads, 0, s>>>(a, a.n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// Rows in flight per lane group: 1 when the batch fits in one wave of one-row tiles, else the smallest of 4 and 8
// that fits it in one wave of the capped grid, else 4. Past one wave a block runs its tiles one after another, and a
// tile lasts as long as its slowest row (a UVA miss among HBM hits): one wave of tiles twice as deep finishes in
// one such round instead of two.
constexpr int kShapes[] = {1, 4, 8};
int rows_in_flight(int64_t n, int g, int cap) {
  const int64_t small_tile = kWarps * (32 / g);
  for (const int u : kShapes)
    if ((n + small_tile * u - 1) / (small_tile * u) <= cap) return u;
  return 4;
}

template <bool kFused, bool kProbe>
cudaError_t launch_u(int u, int g, int grid, const FastGatherArgs& a, cudaStream_t s) {
  switch (u) {
    case 1: return launch_g<1, kFused, kProbe>(g, grid, a, s);
    case 4: return launch_g<4, kFused, kProbe>(g, grid, a, s);
    case 8: return launch_g<8, kFused, kProbe>(g, grid, a, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_shape(int u, int g, int grid, const FastGatherArgs& a, cudaStream_t s) {
  const bool probe = a.cache.keys != nullptr;
  if (a.fused) return probe ? launch_u<true, true>(u, g, grid, a, s) : launch_u<true, false>(u, g, grid, a, s);
  return probe ? launch_u<false, true>(u, g, grid, a, s) : launch_u<false, false>(u, g, grid, a, s);
}

Status check_gather_args(const FastGatherArgs& a) {
  if (!a.rows_base || !a.out || a.d <= 0 || a.d % 32 != 0 || (!a.fused && !a.scales_base))
    return Status(Code::kInvalidArgument, "fast gather: bad arguments (rows, out, d, scales)");
  if (a.cap < 1) return Status(Code::kInvalidArgument, "fast gather: grid cap of " + std::to_string(a.cap) + " blocks");
  if (a.cache.keys && (!a.cache.slots || !a.cache.rows || a.cache.row_bytes < (a.cache.fp8 ? a.d + a.d / 32 : 2 * a.d)))
    return Status(Code::kInvalidArgument, "fast gather: bad cache map (slots, rows, row bytes)");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<DeviceDedup>> DeviceDedup::create(int64_t max_rows) {
  if (max_rows <= 0 || max_rows >= INT32_MAX)
    return Status(Code::kInvalidArgument, "device dedup: max_rows " + std::to_string(max_rows) + " outside [1, 2^31)");
  std::unique_ptr<DeviceDedup> d(new DeviceDedup());
  d->max_rows_ = max_rows;
  int64_t cap = 1024;
  while (cap < 2 * max_rows) cap <<= 1;
  d->hash_cap_ = cap;
  auto alloc = [&](auto** p, int64_t n) -> Status {
    const size_t bytes = sizeof(**p) * static_cast<size_t>(n);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(p), bytes),
                                "device dedup: cudaMalloc " + std::to_string(bytes) + " B");
    d->bytes_ += static_cast<int64_t>(bytes);
    return Status::ok();
  };
  ENGRAM_RETURN_IF_ERROR(alloc(&d->keys_, cap));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->vals_, cap));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->pos_slot_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->skeys_in_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->skeys_out_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->svals_in_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->svals_out_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->flags_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->scan_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->unique_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->inverse_, max_rows));
  ENGRAM_RETURN_IF_ERROR(alloc(&d->count_, 1));
  size_t sort_bytes = 0, scan_bytes = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, d->skeys_in_, d->skeys_out_, d->svals_in_, d->svals_out_,
                                      static_cast<int>(max_rows)),
      "device dedup: radix sort temp size");
  ENGRAM_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, d->flags_, d->scan_, static_cast<int>(max_rows)),
      "device dedup: scan temp size");
  d->cub_temp_bytes_ = std::max(sort_bytes, scan_bytes);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&d->cub_temp_, d->cub_temp_bytes_), "device dedup: cub temp");
  d->bytes_ += static_cast<int64_t>(d->cub_temp_bytes_);
  return std::move(d);
}

DeviceDedup::~DeviceDedup() {
  for (void* p : {static_cast<void*>(keys_), static_cast<void*>(vals_), static_cast<void*>(pos_slot_),
                  static_cast<void*>(skeys_in_), static_cast<void*>(skeys_out_), static_cast<void*>(svals_in_),
                  static_cast<void*>(svals_out_), static_cast<void*>(flags_), static_cast<void*>(scan_),
                  static_cast<void*>(unique_), static_cast<void*>(inverse_), static_cast<void*>(count_), cub_temp_})
    if (p) (void)cudaFree(p);
}

Status DeviceDedup::run(const int64_t* ids, int64_t n, int64_t table_rows, DedupMethod method,
                        unsigned long long* counters, void* stream) {
  if (n < 0 || n > max_rows_)
    return Status(Code::kInvalidArgument, "device dedup: batch of " + std::to_string(n) + " ids > capacity " +
                                              std::to_string(max_rows_));
  if (table_rows <= 0) return Status(Code::kInvalidArgument, "device dedup: table rows <= 0");
  const auto s = static_cast<cudaStream_t>(stream);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count_, 0, sizeof(unsigned long long), s), "device dedup: clear count");
  if (n == 0) return Status::ok();
  const int grid = grid_for(n, 256);
  if (method == DedupMethod::kHash) {
    int64_t cap = 1024;
    while (cap < 2 * n) cap <<= 1;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(keys_, 0xFF, sizeof(unsigned long long) * cap, s),
                                "device dedup: clear hash table");
    hash_insert_kernel<<<grid, 256, 0, s>>>(ids, n, table_rows, keys_, static_cast<unsigned long long>(cap - 1),
                                             pos_slot_, counters);
    hash_compact_kernel<<<grid_for(cap, 256), 256, 0, s>>>(keys_, cap, vals_, unique_, count_);
    hash_inverse_kernel<<<grid, 256, 0, s>>>(pos_slot_, vals_, n, inverse_);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "device dedup: hash kernels");
    return Status::ok();
  }
  const unsigned long long sentinel = static_cast<unsigned long long>(table_rows);
  int end_bit = 1;
  while (end_bit < 64 && (sentinel >> end_bit) != 0) ++end_bit;
  sort_prepare_kernel<<<grid, 256, 0, s>>>(ids, n, table_rows, skeys_in_, svals_in_, counters);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "device dedup: sort prepare");
  size_t temp = cub_temp_bytes_;
  ENGRAM_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(cub_temp_, temp, skeys_in_, skeys_out_, svals_in_,
                                                              svals_out_, static_cast<int>(n), 0, end_bit, s),
                              "device dedup: radix sort");
  sort_flag_kernel<<<grid, 256, 0, s>>>(skeys_out_, n, sentinel, flags_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "device dedup: flags");
  temp = cub_temp_bytes_;
  ENGRAM_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveSum(cub_temp_, temp, flags_, scan_, static_cast<int>(n), s),
                              "device dedup: scan");
  sort_write_kernel<<<grid, 256, 0, s>>>(skeys_out_, svals_out_, flags_, scan_, n, sentinel, unique_, inverse_, count_);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "device dedup: write");
  return Status::ok();
}

Status launch_fast_gather(const FastGatherArgs& a, void* stream) {
  if (a.n <= 0) return Status::ok();
  ENGRAM_RETURN_IF_ERROR(check_gather_args(a));
  const int g = lanes_per_row(a.d);
  const int u = rows_in_flight(a.n, g, a.cap);
  const int64_t tile = kWarps * (32 / g) * u;
  const int grid = static_cast<int>(std::min<int64_t>((a.n + tile - 1) / tile, a.cap));
  ENGRAM_CUDA_RETURN_IF_ERROR(launch_shape(u, g, grid, a, static_cast<cudaStream_t>(stream)),
                              "fast gather launch (grid " + std::to_string(grid) + ")");
  return Status::ok();
}

Status warm_fast_gather(const FastGatherArgs& a, void* stream) {
  if (a.n <= 0) return Status::ok();
  ENGRAM_RETURN_IF_ERROR(check_gather_args(a));
  const int g = lanes_per_row(a.d);
  for (const int u : kShapes)
    ENGRAM_CUDA_RETURN_IF_ERROR(launch_shape(u, g, 1, a, static_cast<cudaStream_t>(stream)),
                                "fast gather warm-up launch (" + std::to_string(u) + " rows in flight)");
  return Status::ok();
}

Status launch_scatter_rows(const uint16_t* compact, const int32_t* inverse, int64_t n, int d, uint16_t* out,
                           void* stream) {
  if (n <= 0) return Status::ok();
  const int vecs = d * 2 / 16;
  scatter_kernel<<<grid_for(n * vecs, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const uint4*>(compact), inverse, n, vecs, reinterpret_cast<uint4*>(out));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "scatter rows launch");
  return Status::ok();
}

Status launch_sanitize_ids(const int64_t* ids, int64_t n, int64_t rows, int64_t* ids_out, unsigned long long* counters,
                           void* stream) {
  if (n <= 0) return Status::ok();
  sanitize_kernel<<<grid_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(ids, n, rows, ids_out, counters);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "sanitize ids launch");
  return Status::ok();
}

}  // namespace engram::cuda
