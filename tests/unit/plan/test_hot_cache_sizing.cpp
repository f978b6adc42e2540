// Description: a hot-row cache sized by plan::hot_cache_sizing never takes more HBM than its budget (rows + map +
// update staging, every device buffer HotRowCache allocates), for FP8 and BF16 rows, budgets from a few rows to
// gigabytes and map sizes just past a power of two; and it holds as many rows as fit (one more would not).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "plan/hot_cache_sizing.hpp"

namespace engram::plan {
namespace {

TEST(HotCacheSizing, RowBytesOfBothFormats) {
  EXPECT_EQ(hot_cache_row_bytes(256, CacheFormat::kFp8), 272);   // 256 + 8, padded to 16
  EXPECT_EQ(hot_cache_row_bytes(1024, CacheFormat::kFp8), 1056);
  EXPECT_EQ(hot_cache_row_bytes(256, CacheFormat::kBf16), 512);
  EXPECT_EQ(hot_cache_map_entries(0), kHotCacheMinMapEntries);
  EXPECT_EQ(hot_cache_map_entries(8), 16);
  EXPECT_EQ(hot_cache_map_entries(9), 32);
}

TEST(HotCacheSizing, HbmWithinBudgetForEveryBudgetAndFormat) {
  std::vector<int64_t> budgets = {3000, 10'000, 59'200, 1'000'000, int64_t{100} << 20, int64_t{1638} << 20,
                                  int64_t{16} << 30};
  // Budgets whose plain rows-per-slot count lands just past a power of two of the map (where 2x-rounding costs most).
  for (int64_t p : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22})
    for (int64_t extra : {int64_t{1}, int64_t{100}, int64_t{5000}}) budgets.push_back((p / 2 + extra) * (1056 + 24));
  for (const CacheFormat f : {CacheFormat::kFp8, CacheFormat::kBf16})
    for (const int64_t d : {int64_t{256}, int64_t{1024}})
      for (const int64_t staging : {int64_t{1}, int64_t{64}, int64_t{1024}})
        for (const int64_t budget : budgets) {
          const int64_t row = hot_cache_row_bytes(d, f);
          const HotCacheSizing s = hot_cache_sizing(budget, row, int64_t{1} << 40, staging);
          SCOPED_TRACE("budget " + std::to_string(budget) + " d " + std::to_string(d) + " staging " +
                       std::to_string(staging) + " " + cache_format_name(f));
          EXPECT_LE(s.hbm_bytes, budget);
          EXPECT_EQ(s.hbm_bytes, s.slots ? hot_cache_bytes(s.slots, row, s.staging_rows) : 0);
          EXPECT_GE(s.staging_rows, 1);
          EXPECT_LE(s.staging_rows, staging);
          if (s.slots == 0) continue;
          EXPECT_GE(s.map_entries, 2 * s.slots);
          EXPECT_EQ(s.map_entries, hot_cache_map_entries(s.slots));
          EXPECT_GT(hot_cache_bytes(s.slots + 1, row, s.staging_rows), budget) << "one more row would still fit";
        }
}

TEST(HotCacheSizing, StagingTakesAtMostAQuarterAndTinyBudgetsHoldNoRow) {
  const int64_t row = 272;
  const HotCacheSizing s = hot_cache_sizing(hot_cache_bytes(8, row, 1), row, 5000, 1);
  EXPECT_EQ(s.slots, 8);  // a budget computed for 8 rows holds exactly 8
  EXPECT_EQ(s.staging_rows, 1);
  const HotCacheSizing q = hot_cache_sizing(100'000, row, 5000, 4096);
  EXPECT_LE(q.staging_rows * (row + kHotCacheEditBytesPerRow), 100'000 / 4);
  EXPECT_EQ(hot_cache_sizing(100, row, 5000, 1).slots, 0);
  EXPECT_EQ(hot_cache_sizing(0, row, 5000, 1).hbm_bytes, 0);
  const HotCacheSizing small_table = hot_cache_sizing(int64_t{1} << 30, row, 100, 64);
  EXPECT_EQ(small_table.slots, 100);  // never more slots than the table has rows
  EXPECT_LE(small_table.hbm_bytes, int64_t{1} << 30);
}

}  // namespace
}  // namespace engram::plan
