// EngramLayout: prime walk as the reference does it, cumulative offsets, sizes, presets and bad input.
#include <gtest/gtest.h>

#include <set>

#include "engram/layout.hpp"

namespace engram {
namespace {

bool naive_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

TEST(IsPrime, MatchesTrialDivisionUpTo100k) {
  for (int64_t n = 0; n < 100000; ++n) ASSERT_EQ(is_prime_u64(static_cast<uint64_t>(n)), naive_prime(n)) << n;
  EXPECT_TRUE(is_prime_u64(18446744073709551557ull));   // largest 64-bit prime
  EXPECT_FALSE(is_prime_u64(18446744073709551559ull));  // composite
  EXPECT_FALSE(is_prime_u64(3215031751ull));            // strong pseudoprime to bases 2,3,5,7
}

TEST(Layout, PrimeWalkFollowsReference) {
  // Independent re-statement of the reference walk: per layer, per order, start at vocab-1, next unused prime.
  EngramLayout l;
  l.layer_ids = {1, 15};
  l.max_ngram = 3;
  l.heads_per_order = 4;
  l.vocab_size_per_order = {1000, 1000};
  l.d = 64;
  ASSERT_TRUE(l.finalize().is_ok());
  std::set<int64_t> seen;
  for (size_t li = 0; li < 2; ++li) {
    size_t h = 0;
    for (int n = 2; n <= 3; ++n) {
      int64_t start = 999;
      for (int j = 0; j < 4; ++j, ++h) {
        int64_t c = start + 1;
        while (!naive_prime(c) || seen.count(c)) ++c;
        seen.insert(c);
        EXPECT_EQ(l.head_rows[li][h], c) << "layer " << li << " head " << h;
        start = c;
      }
    }
  }
  // First heads: 1009, 1013, 1019, 1021 (order 2), then order 3 continues above them.
  EXPECT_EQ(l.head_rows[0][0], 1009);
  EXPECT_EQ(l.head_rows[0][3], 1021);
  EXPECT_EQ(l.head_rows[0][4], 1031);
}

TEST(Layout, OffsetsCumulativeAndSizes) {
  auto l = make_preset_layout("v41-flash-mini", 64LL << 20, RowFormat::kFused);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->heads(), 24);
  EXPECT_EQ(l->row_stride_bytes(), 272);  // 256 + 8 padded to 16
  EXPECT_EQ(l->source_bytes_per_row(), 264);
  std::set<int64_t> primes;
  for (int li = 0; li < l->n_layers(); ++li) {
    ASSERT_EQ(l->head_offsets[li].size(), 25u);
    EXPECT_EQ(l->head_offsets[li][0], 0);
    for (int h = 0; h < 24; ++h) {
      EXPECT_EQ(l->head_offsets[li][h + 1] - l->head_offsets[li][h], l->head_rows[li][h]);
      EXPECT_TRUE(is_prime_u64(static_cast<uint64_t>(l->head_rows[li][h])));
      EXPECT_TRUE(primes.insert(l->head_rows[li][h]).second) << "prime reused";
    }
    EXPECT_EQ(l->table_bytes(li), l->rows(li) * 272);
  }
  // The total is close to the requested size: all 48 heads take successive unused primes above the same start,
  // so the mean head sits ~24 prime gaps (~24 ln n rows) above it: +4% at 64 MiB (n ~ 5k), +0.6% at 512 MiB.
  EXPECT_GE(l->total_bytes(), 64LL << 20);
  EXPECT_LE(static_cast<double>(l->total_bytes()), 1.05 * (64 << 20));
}

TEST(Layout, SplitStrideAndV41FlashShape) {
  auto l = make_preset_layout("v41-flash", 0, RowFormat::kSplit);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->row_stride_bytes(), 264);
  EXPECT_EQ(l->layer_ids, (std::vector<int>{1, 14}));
  for (int64_t r : l->head_rows[0]) {
    EXPECT_GE(r, 16'000'000);
    EXPECT_LT(r, 16'010'000);
  }
  // ~101 GB per layer.
  EXPECT_NEAR(static_cast<double>(l->table_bytes(0)) / 1e9, 101.4, 0.5);
}

TEST(Layout, BadInputIsInvalidArgument) {
  EXPECT_EQ(make_preset_layout("nope").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_preset_layout("v41-flash-mini", 1000).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_preset_layout("v41-flash-mini", -5).status().code(), Code::kInvalidArgument);
  EngramLayout l;
  l.layer_ids = {1};
  l.max_ngram = 3;
  l.heads_per_order = 2;
  l.vocab_size_per_order = {100, 100};
  l.d = 48;  // not a multiple of 32
  Status s = l.finalize();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
  l.d = 64;
  l.vocab_size_per_order = {100};  // wrong count
  EXPECT_EQ(l.finalize().code(), Code::kInvalidArgument);
  l.vocab_size_per_order = {100, 100};
  l.layer_ids = {1, 1};
  EXPECT_EQ(l.finalize().code(), Code::kInvalidArgument);
  l.layer_ids = {};
  EXPECT_EQ(l.finalize().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram
