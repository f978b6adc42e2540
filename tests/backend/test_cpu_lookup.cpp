// CPU lookup backend vs the scalar reference decoder, bit for bit, on fresh random ids (dead ids included),
// both row layouts, several d, poisoned outputs; checked mode and invalid-id accounting.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cpu/lookup.hpp"
#include "engram/format.hpp"

namespace engram {
namespace {

struct OwnedTable {
  std::vector<uint8_t> data, scales;
  TableView view;
};

// Random table with every byte value possible (NaN codes, 0x00/0xFF scales included).
OwnedTable random_table(int64_t rows, int d, RowFormat f, std::mt19937_64& rng) {
  OwnedTable t;
  const int64_t stride = f == RowFormat::kFused ? EngramLayout::fused_record_bytes(d) : d;
  t.data.resize(static_cast<size_t>(rows * stride));
  for (auto& b : t.data) b = static_cast<uint8_t>(rng());
  if (f == RowFormat::kSplit) {
    t.scales.resize(static_cast<size_t>(rows * (d / 32)));
    for (auto& b : t.scales) b = static_cast<uint8_t>(rng());
  }
  t.view = {t.data.data(), f == RowFormat::kSplit ? t.scales.data() : nullptr, rows, d, f, stride, {}};
  return t;
}

class CpuLookupVsReference : public ::testing::TestWithParam<std::tuple<int, RowFormat, int>> {};

TEST_P(CpuLookupVsReference, BitIdentical) {
  const auto [d, fmt, threads] = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 997;
  auto t = random_table(rows, d, fmt, rng);
  const int64_t tokens = 37;
  const int heads = 5;
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
  for (auto& id : ids) id = (rng() % 10 == 0) ? kDeadId : static_cast<int64_t>(rng() % rows);
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(d), 0xDEAD);  // poison
  ThreadPool pool(threads);
  LookupRequest req{ids.data(), tokens, heads, out.data(), false};
  auto st = cpu::lookup(t.view, req, &pool);
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  int64_t dead = 0;
  std::vector<uint16_t> ref(static_cast<size_t>(d));
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint16_t* o = out.data() + i * static_cast<size_t>(d);
    if (ids[i] < 0) {
      ++dead;
      for (int k = 0; k < d; ++k) ASSERT_EQ(o[k], 0) << "dead row not zero at " << i;
      continue;
    }
    decode_row_reference(t.view.payload_of(ids[i]), t.view.scales_of(ids[i]), d, ref.data());
    ASSERT_EQ(std::memcmp(o, ref.data(), ref.size() * 2), 0) << "position " << i << " id " << ids[i];
  }
  EXPECT_EQ(st->rows, tokens * heads);
  EXPECT_EQ(st->dead_rows, dead);
  EXPECT_EQ(st->invalid_ids, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuLookupVsReference,
                         ::testing::Combine(::testing::Values(32, 64, 256, 512),
                                            ::testing::Values(RowFormat::kFused, RowFormat::kSplit),
                                            ::testing::Values(1, 3)));

TEST(CpuLookup, InvalidIdsZeroRowAndCountedUnlessChecked) {
  std::mt19937_64 rng(7);
  auto t = random_table(100, 64, RowFormat::kFused, rng);
  std::vector<int64_t> ids = {5, 100, 1000000, -1, 99};
  std::vector<uint16_t> out(ids.size() * 64, 0xBEEF);
  LookupRequest req{ids.data(), 5, 1, out.data(), false};
  auto st = cpu::lookup(t.view, req, nullptr);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->invalid_ids, 2);
  EXPECT_EQ(st->dead_rows, 1);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(out[64 + k], 0);

  std::fill(out.begin(), out.end(), 0xBEEF);
  req.checked = true;
  auto bad = cpu::lookup(t.view, req, nullptr);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("100"), std::string::npos);
  for (auto v : out) ASSERT_EQ(v, 0xBEEF) << "checked mode wrote before failing";
}

TEST(CpuLookup, RejectsBadArguments) {
  std::mt19937_64 rng(1);
  auto t = random_table(10, 64, RowFormat::kFused, rng);
  LookupRequest req{nullptr, 3, 2, nullptr, false};
  EXPECT_EQ(cpu::lookup(t.view, req, nullptr).status().code(), Code::kInvalidArgument);
  req.tokens = -1;
  EXPECT_EQ(cpu::lookup(t.view, req, nullptr).status().code(), Code::kInvalidArgument);
  req.tokens = 0;
  EXPECT_TRUE(cpu::lookup(t.view, req, nullptr).is_ok());  // empty batch is fine
}

}  // namespace
}  // namespace engram
