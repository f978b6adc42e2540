// The public option parsers in engram/options.hpp: every accepted spelling, every refusal, and the round trip
// through to_string() that reports and JSON rely on.
#include <gtest/gtest.h>

#include <cmath>

#include "engram/options.hpp"

namespace engram {
namespace {

TEST(CacheSizeOption, BytesSharesAndOff) {
  auto share = parse_cache_size("5%");
  ASSERT_TRUE(share.is_ok());
  EXPECT_EQ(share->kind, CacheSize::Kind::kShare);
  EXPECT_EQ(share->bytes_for(1000000), 50000);
  EXPECT_EQ(share->to_string(), "5%");

  auto bytes = parse_cache_size("1MiB");
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ(bytes->kind, CacheSize::Kind::kBytes);
  EXPECT_EQ(bytes->bytes_for(0), 1 << 20);
  EXPECT_EQ(bytes->bytes_for(123), 1 << 20);

  for (const char* off : {"off", "0", "0%"}) {
    auto o = parse_cache_size(off);
    ASSERT_TRUE(o.is_ok()) << off;
    EXPECT_TRUE(o->off()) << off;
    EXPECT_EQ(o->bytes_for(100), 0) << off;
    EXPECT_EQ(o->to_string(), "off") << off;
  }
}

TEST(CacheSizeOption, RefusesNonsense) {
  for (const char* bad : {"150%", "-5%", "-1MiB", "lots", "", "5%%", "1XB"})
    EXPECT_FALSE(parse_cache_size(bad).is_ok()) << bad;
}

TEST(CacheUpdateOption, KeysKeepTheBaseAndOffDisables) {
  auto u = parse_cache_update("every=8,rows=64");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->every, 8);
  EXPECT_EQ(u->rows, 64);
  EXPECT_EQ(u->to_string(), "every=8,rows=64");
  EXPECT_EQ(u->slice, CacheUpdate::kDefaultSlice);
  auto sliced = parse_cache_update("slice=16", *u);
  ASSERT_TRUE(sliced.is_ok());
  EXPECT_EQ(sliced->slice, 16);
  EXPECT_EQ(sliced->rows, 64);
  EXPECT_EQ(sliced->to_string(), "every=8,rows=64,slice=16");
  EXPECT_EQ(sliced->burst, CacheUpdate::kDefaultBurst);
  auto bursting = parse_cache_update("burst=16", *sliced);
  ASSERT_TRUE(bursting.is_ok());
  EXPECT_EQ(bursting->burst, 16);
  EXPECT_EQ(bursting->slice, 16);
  EXPECT_EQ(bursting->to_string(), "every=8,rows=64,slice=16,burst=16");
  auto fixed = parse_cache_update("burst=1", *bursting);
  ASSERT_TRUE(fixed.is_ok());
  EXPECT_EQ(fixed->burst, 1);
  EXPECT_EQ(fixed->to_string(), "every=8,rows=64,slice=16,burst=1");
  auto defaulted = parse_cache_update("burst=4", *fixed);
  ASSERT_TRUE(defaulted.is_ok());
  EXPECT_EQ(defaulted->to_string(), "every=8,rows=64,slice=16");  // burst=4 is the default: not printed

  CacheUpdate base;
  base.every = 3;
  base.rows = 17;
  auto partial = parse_cache_update("rows=5", base);
  ASSERT_TRUE(partial.is_ok());
  EXPECT_EQ(partial->every, 3);
  EXPECT_EQ(partial->rows, 5);

  auto off = parse_cache_update("off");
  ASSERT_TRUE(off.is_ok());
  EXPECT_EQ(off->every, 0);
  EXPECT_EQ(off->to_string(), "off");

  for (const char* bad : {"every=0,rows=4", "rows=0", "every=x", "often", "every=4,colour=red", "slice=0", "burst=0"})
    EXPECT_FALSE(parse_cache_update(bad).is_ok()) << bad;
}

TEST(GridCapOption, FactoriesCheckAndBlocksForIsTheOneFormula) {
  EXPECT_EQ(GridCap().blocks_for(132), 132);  // default: every SM
  EXPECT_EQ(GridCap::all_sms(), GridCap());
  EXPECT_EQ(GridCap::background_default().fraction(), 0.5);
  EXPECT_EQ(GridCap::background_default().blocks_for(132), 66);
  auto quarter = GridCap::of_fraction(0.25);
  ASSERT_TRUE(quarter.is_ok());
  EXPECT_FALSE(quarter->in_blocks());
  EXPECT_EQ(quarter->blocks_for(132), 33);
  EXPECT_EQ(quarter->blocks_for(3), 1);  // never below one block
  EXPECT_EQ(GridCap::of_fraction(0.001)->blocks_for(132), 1);
  auto blocks = GridCap::of_blocks(24);
  ASSERT_TRUE(blocks.is_ok());
  EXPECT_TRUE(blocks->in_blocks());
  EXPECT_EQ(blocks->blocks(), 24);
  EXPECT_EQ(blocks->blocks_for(132), 24);
  EXPECT_EQ(blocks->blocks_for(16), 16);  // at most every SM
  EXPECT_EQ(blocks->to_string(), "24 blocks");
  EXPECT_EQ(quarter->to_string(), "fraction 0.25");
  for (double bad : {0.0, -0.5, 1.5, std::nan("")})
    EXPECT_EQ(GridCap::of_fraction(bad).status().code(), Code::kInvalidArgument) << bad;
  for (int64_t bad : {int64_t{0}, int64_t{-3}, (int64_t{1} << 20) + 1})
    EXPECT_EQ(GridCap::of_blocks(bad).status().code(), Code::kInvalidArgument) << bad;
}

TEST(GridCapOption, TextFormsAndRefusals) {
  EXPECT_EQ(parse_grid_fraction("0.5")->fraction(), 0.5);
  EXPECT_EQ(parse_grid_fraction("1")->fraction(), 1.0);
  EXPECT_EQ(parse_grid_blocks("24")->blocks(), 24);
  for (const char* bad : {"", "0", "1.01", "nan", "inf", "-0.5", "0.5x", "half"})
    EXPECT_EQ(parse_grid_fraction(bad).status().code(), Code::kInvalidArgument) << bad;
  for (const char* bad : {"", "0", "-1", "1.5", "2000000", "24 blocks"})
    EXPECT_EQ(parse_grid_blocks(bad).status().code(), Code::kInvalidArgument) << bad;
}

TEST(ModeOptions, NamesRoundTrip) {
  for (auto m : {FastPathMode::kPlanner, FastPathMode::kPlain, FastPathMode::kOff}) {
    auto back = parse_fast_path_mode(fast_path_mode_name(m));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, m);
  }
  for (auto m : {PrefetchMode::kEarly, PrefetchMode::kOnDemand}) {
    auto back = parse_prefetch_mode(prefetch_mode_name(m));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, m);
  }
  for (auto f : {CacheFormat::kFp8, CacheFormat::kBf16}) {
    auto back = parse_cache_format(cache_format_name(f));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, f);
  }
  EXPECT_FALSE(parse_fast_path_mode("fastest").is_ok());
  EXPECT_FALSE(parse_prefetch_mode("late").is_ok());
  EXPECT_FALSE(parse_cache_format("fp16").is_ok());
}

TEST(BackendOption, KnownNamesAndRefusal) {
  for (const char* name : {"auto", "cpu", "cuda"}) EXPECT_TRUE(parse_backend_kind(name).is_ok()) << name;
  EXPECT_FALSE(parse_backend_kind("tpu").is_ok());
}

TEST(BackingOption, SpellingsRoundTrip) {
  for (const char* name : {"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}) {
    auto b = parse_backing(name);
    ASSERT_TRUE(b.is_ok()) << name;
    EXPECT_EQ(b->to_string(), name);
  }
  EXPECT_FALSE(parse_backing("tmpfs-please").is_ok());
}

}  // namespace
}  // namespace engram
