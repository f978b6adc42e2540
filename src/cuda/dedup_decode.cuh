// Device helpers shared by the fast-path kernels (dedup.cu, hot_cache.cu): the 16-value exact decode
// (decode_fast.cuh's decode16, the UVA lookup kernel's) and the id hash of the device hash tables (Fibonacci
// hashing; host code that builds a table uses the same function).
#pragma once

#include <cstdint>

#include "cuda/decode_fast.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

ENGRAM_HD unsigned long long hash_slot(unsigned long long id, unsigned long long mask) {
  return (id * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

// The hot-row cache's device map (hot_cache.cuh): open addressing over `keys` (kCacheEmptyKey: free; tombstones are
// other negative keys, which no id matches), linear probing from hash_slot; slots[h] is the cache slot of keys[h].
inline constexpr int64_t kCacheEmptyKey = -1;

// The cache slot holding row `id` (>= 0), or -1, walking the chain from map position h (hash_slot(id, mask) for a
// whole lookup). A probe chain always ends: the map is rebuilt before keys and tombstones fill it.
#ifdef __CUDACC__
__device__ __forceinline__ int32_t cache_slot_from(const int64_t* keys, const int32_t* slots, unsigned long long mask,
                                                   int64_t id, unsigned long long h) {
  while (true) {
    const int64_t key = keys[h];
    if (key == id) return slots[h];
    if (key == kCacheEmptyKey) return -1;
    h = (h + 1) & mask;
  }
}
__device__ __forceinline__ int32_t cache_slot_of(const int64_t* keys, const int32_t* slots, unsigned long long mask,
                                                 int64_t id) {
  return cache_slot_from(keys, slots, mask, id, hash_slot(static_cast<unsigned long long>(id), mask));
}
#endif


}  // namespace engram::cuda
