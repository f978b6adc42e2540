// Slots of a hot-row cache within its HBM budget (see hot_cache_sizing.hpp). The map's size is a step function of
// the slots, so the search walks the map sizes (powers of two) and takes, for each, the rows the rest of the budget
// holds, capped at the map's half: O(log budget).
#include "plan/hot_cache_sizing.hpp"

#include <algorithm>

namespace engram::plan {

int64_t hot_cache_row_bytes(int64_t d, CacheFormat format) {
  return format == CacheFormat::kFp8 ? (d + d / 32 + 15) / 16 * 16 : 2 * d;
}

int64_t hot_cache_map_entries(int64_t slots) {
  int64_t p = kHotCacheMinMapEntries;
  while (p < 2 * slots) p <<= 1;
  return p;
}

int64_t hot_cache_bytes(int64_t slots, int64_t row_bytes, int64_t staging_rows) {
  return slots * row_bytes + hot_cache_map_entries(slots) * kHotCacheMapEntryBytes +
         staging_rows * (row_bytes + kHotCacheEditBytesPerRow);
}

HotCacheSizing hot_cache_sizing(int64_t budget_bytes, int64_t row_bytes, int64_t table_rows, int64_t staging_rows) {
  HotCacheSizing s;
  if (budget_bytes <= 0 || row_bytes <= 0 || table_rows <= 0) return s;
  const int64_t per_staged = row_bytes + kHotCacheEditBytesPerRow;
  s.staging_rows = std::max<int64_t>(1, std::min(staging_rows, budget_bytes / 4 / per_staged));
  const int64_t avail = budget_bytes - s.staging_rows * per_staged;
  for (int64_t p = kHotCacheMinMapEntries; p * kHotCacheMapEntryBytes <= avail; p <<= 1) {
    const int64_t n = std::min({p / 2, (avail - p * kHotCacheMapEntryBytes) / row_bytes, table_rows});
    if (n > s.slots) s.slots = n;
    if (p / 2 >= table_rows || p > (int64_t{1} << 50)) break;
  }
  if (s.slots <= 0) return HotCacheSizing{0, 0, s.staging_rows, 0};
  s.map_entries = hot_cache_map_entries(s.slots);
  s.hbm_bytes = hot_cache_bytes(s.slots, row_bytes, s.staging_rows);
  return s;
}

}  // namespace engram::plan
