// CPU in-batch de-duplication: the deduplicated lookup's staging equals the plain lookup's bit for bit
// (itself checked against format.hpp's reference) on fresh random tables and ids with heavy repetition, dead and
// out-of-range ids, both row layouts, hashed and address-sorted unique order, with and without threads; the
// unique-id list and inverse map are checked directly.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "cpu/dedup.hpp"
#include "cpu/lookup.hpp"
#include "engram/format.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"

namespace engram {
namespace {

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

struct Fixture {
  EngramLayout layout;
  std::unique_ptr<HostTable> table;
};

Fixture make_table(RowFormat f, std::mt19937_64& rng) {
  Fixture x;
  x.layout.name = "dedup-test";
  x.layout.layer_ids = {1};
  x.layout.max_ngram = 2;
  x.layout.heads_per_order = 4;
  x.layout.vocab_size_per_order = {997};
  x.layout.d = 64;
  x.layout.format = f;
  EXPECT_TRUE(x.layout.finalize().is_ok());
  auto t = HostTable::allocate(x.layout);
  EXPECT_TRUE(t.is_ok());
  x.table = std::move(*t);
  const TableSpan s = x.table->span(0);
  const int64_t bytes = s.rows * s.stride_bytes;
  for (int64_t i = 0; i < bytes; ++i) s.data[i] = static_cast<uint8_t>(rng());
  if (f == RowFormat::kSplit)
    for (int64_t i = 0; i < s.rows * (s.d / 32); ++i) s.scales[i] = static_cast<uint8_t>(rng());
  return x;
}

// Ids drawn from a small pool (heavy repetition), ~6% dead, ~3% out of range.
std::vector<int64_t> repeated_ids(int64_t n, int64_t rows, std::mt19937_64& rng) {
  std::vector<int64_t> pool(64);
  for (auto& p : pool) p = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) {
    const uint64_t x = rng() % 100;
    if (x < 6) id = (x & 1) ? kDeadId : -static_cast<int64_t>(2 + rng() % 50);
    else if (x < 9) id = rows + static_cast<int64_t>(rng() % 1000);
    else if (x < 30) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    else id = pool[rng() % pool.size()];
  }
  return ids;
}

class CpuDedup : public ::testing::TestWithParam<std::tuple<RowFormat, bool, int>> {};

TEST_P(CpuDedup, MatchesPlainLookupBitForBit) {
  const auto [format, sorted, threads] = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture x = make_table(format, rng);
  const TableView v = x.table->view(0);
  const int heads = 4;
  const int64_t tokens = 300;
  const auto ids = repeated_ids(tokens * heads, v.rows, rng);
  std::vector<uint16_t> want(ids.size() * v.d, 0x5A5A), got(ids.size() * v.d, 0xA5A5);
  ThreadPool pool(threads);
  auto a = cpu::lookup(v, {ids.data(), tokens, heads, want.data(), false}, nullptr);
  ASSERT_TRUE(a.is_ok());
  auto b = cpu::lookup_dedup(v, {ids.data(), tokens, heads, got.data(), false}, threads > 1 ? &pool : nullptr, sorted);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 2), 0);
  EXPECT_EQ(b->lookup.rows, a->rows);
  EXPECT_EQ(b->lookup.dead_rows, a->dead_rows);
  EXPECT_EQ(b->lookup.invalid_ids, a->invalid_ids);
  EXPECT_GT(b->lookup.dead_rows, 0);
  EXPECT_GT(b->lookup.invalid_ids, 0);
  std::set<int64_t> distinct;
  for (int64_t id : ids)
    if (id >= 0 && id < v.rows) distinct.insert(id);
  EXPECT_EQ(b->unique_rows, static_cast<int64_t>(distinct.size()));
  EXPECT_LT(b->unique_rows, static_cast<int64_t>(ids.size()) / 2);
  // Spot-check one row against the scalar reference directly.
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v.rows) continue;
    std::vector<uint16_t> ref(v.d);
    decode_row_reference(v.payload_of(ids[i]), v.scales_of(ids[i]), v.d, ref.data());
    EXPECT_EQ(std::memcmp(ref.data(), got.data() + i * v.d, v.d * 2), 0) << "position " << i;
    break;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuDedup,
                         ::testing::Combine(::testing::Values(RowFormat::kFused, RowFormat::kSplit),
                                            ::testing::Bool(), ::testing::Values(1, 3)));

TEST(CpuDedupIds, UniqueListAndInverse) {
  const std::vector<int64_t> ids = {7, 3, 7, -1, 100, 3, 9, 7, -5, 2};
  auto r = cpu::dedup_ids(ids.data(), static_cast<int64_t>(ids.size()), 50, false);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->unique_ids, (std::vector<int64_t>{7, 3, 9, 2}));
  EXPECT_EQ(r->inverse, (std::vector<int32_t>{0, 1, 0, -1, -1, 1, 2, 0, -1, 3}));
  EXPECT_EQ(r->dead_rows, 2);
  EXPECT_EQ(r->invalid_ids, 1);
  auto s = cpu::dedup_ids(ids.data(), static_cast<int64_t>(ids.size()), 50, true);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->unique_ids, (std::vector<int64_t>{2, 3, 7, 9}));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (r->inverse[i] < 0) {
      EXPECT_EQ(s->inverse[i], -1);
    } else {
      EXPECT_EQ(s->unique_ids[s->inverse[i]], ids[i]);
    }
  }
  EXPECT_NEAR(s->unique_fraction(10), 0.4, 1e-12);
}

TEST(CpuDedupIds, EmptyAndBadInput) {
  auto e = cpu::dedup_ids(nullptr, 0, 10, true);
  ASSERT_TRUE(e.is_ok());
  EXPECT_TRUE(e->unique_ids.empty());
  auto bad = cpu::dedup_ids(nullptr, 5, 10, false);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram
