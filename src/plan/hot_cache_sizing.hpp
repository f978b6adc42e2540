// The HBM of one layer's GPU hot-row cache (src/cuda/hot_cache.cuh), and how many slots a byte budget holds with
// every device buffer of the cache counted against it: the rows (one record per slot), the id -> slot map (int64 key
// + int32 slot per entry, a power of two >= 2 x slots entries so the load stays <= 1/2), and the update staging (the
// rows of one stage() and their map edits: an admission and a tombstone of 3 int64 each per row). HotRowCache
// allocates exactly hot_cache_bytes(slots, row_bytes, staging_rows), so hbm_bytes <= budget_bytes holds by
// construction. Pure arithmetic (no CUDA) so that it is tested on any machine; the engine and `engram bench
// cache-follow` size their caches with it too.
#pragma once

#include <cstdint>

#include "engram/options.hpp"

namespace engram::plan {

constexpr int64_t kHotCacheMapEntryBytes = 8 + 4;      // int64 key + int32 slot
constexpr int64_t kHotCacheEditBytesPerRow = 2 * 3 * 8;  // admission + tombstone edits (index, key, slot)
constexpr int64_t kHotCacheMinMapEntries = 16;

// Bytes per slot in HBM: an FP8 record (payload | scales, padded to 16 B) or a BF16 row.
int64_t hot_cache_row_bytes(int64_t d, CacheFormat format);
// Map entries for `slots` slots: the smallest power of two >= max(2 x slots, kHotCacheMinMapEntries).
int64_t hot_cache_map_entries(int64_t slots);
// Device bytes of a cache with these slots and this staging (exactly what HotRowCache allocates).
int64_t hot_cache_bytes(int64_t slots, int64_t row_bytes, int64_t staging_rows);

struct HotCacheSizing {
  int64_t slots = 0;         // 0: the budget holds no row
  int64_t map_entries = 0;
  int64_t staging_rows = 0;  // the requested staging, capped at a quarter of the budget (at least one row)
  int64_t hbm_bytes = 0;     // hot_cache_bytes(slots, row_bytes, staging_rows) <= budget_bytes
};
// The most slots (<= table_rows) whose cache fits budget_bytes with staging for `staging_rows` rows (>= 1). The map
// rounds to a power of two: a budget just past a power keeps the smaller map when that holds more rows.
HotCacheSizing hot_cache_sizing(int64_t budget_bytes, int64_t row_bytes, int64_t table_rows, int64_t staging_rows);

}  // namespace engram::plan
