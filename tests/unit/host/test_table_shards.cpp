// Head-range shards (tensor parallelism): each head range of a layer is its own backing with its own
// placement and census line, mapped side by side so the layer stays one contiguous table.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <random>
#include <string>

#include "support/table_options.hpp"
#include "cpu/lookup.hpp"
#include "cpu/thread_pool.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"

using namespace engram;
using namespace engram::host;

namespace {

std::string self_maps() {
  std::ifstream f("/proc/self/maps");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

EngramLayout mini(int64_t bytes = 24 << 20, RowFormat format = RowFormat::kFused) {
  auto l = make_preset_layout("v41-flash-mini", bytes, format);
  EXPECT_TRUE(l.is_ok()) << l.status().to_string();
  return *l;
}

}  // namespace

TEST(HeadShards, ParseCountsAndRanges) {
  auto one = parse_head_shards("", 24);
  ASSERT_TRUE(one.is_ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].begin, 0);
  EXPECT_EQ((*one)[0].end, 24);
  auto two = parse_head_shards("2", 24);
  ASSERT_TRUE(two.is_ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].end, 12);
  EXPECT_EQ((*two)[1].begin, 12);
  auto three = parse_head_shards("3", 8);  // sizes differ by at most one and tile [0, 8)
  ASSERT_TRUE(three.is_ok());
  ASSERT_EQ(three->size(), 3u);
  EXPECT_EQ((*three)[0].begin, 0);
  EXPECT_EQ((*three)[2].end, 8);
  for (const HeadRange& r : *three) EXPECT_GE(r.end - r.begin, 2);
  auto explicit_ranges = parse_head_shards("0-8,8-24", 24);
  ASSERT_TRUE(explicit_ranges.is_ok());
  EXPECT_EQ((*explicit_ranges)[1].begin, 8);
  for (const char* bad : {"0-8,9-24", "0-8", "25", "0", "a", "8-0,0-24", "0-8,8-24,24-30", "0-12x"}) {
    auto r = parse_head_shards(bad, 24);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    }
  }
}

TEST(HeadShards, EachShardIsItsOwnBackingInOneContiguousLayer) {
  const EngramLayout layout = mini();
  TableOptions o;
  test::set_opt(o, "head_shards", "2");
  o.group = "tp";
  auto t = HostTable::create(layout, o);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ((*t)->n_shards(), 2);
  const uint64_t seed = std::random_device{}();
  (*t)->fill_synthetic(seed);
  const std::string maps = self_maps();
  EXPECT_NE(maps.find("engram:layer=1:heads=0-12:group=tp"), std::string::npos);
  EXPECT_NE(maps.find("engram:layer=1:heads=12-24:group=tp"), std::string::npos);
  for (int li = 0; li < layout.n_layers(); ++li) {
    const TableView v = (*t)->view(li);
    const uint8_t* lo = v.data;
    const uint8_t* hi = v.data + layout.table_bytes(li);
    uint64_t covered = 0;
    const uint8_t* expect = lo;
    for (int sh = 0; sh < 2; ++sh) {
      const PlacedBacking* pb = (*t)->shard_backing(li, sh);
      ASSERT_NE(pb, nullptr);
      EXPECT_EQ(pb->backing.data(), expect) << "shards are side by side";
      expect = pb->backing.data() + pb->backing.size_bytes();
      covered += pb->backing.size_bytes();
      EXPECT_EQ(pb->backing.size_bytes() % 4096, 0u);
    }
    EXPECT_GE(expect, hi) << "the shards cover the whole layer";
    EXPECT_LT(covered, static_cast<uint64_t>(layout.table_bytes(li)) + 4096);
    // The shard edge is the page at or after the first row of head 12: every row of heads 12.. that
    // starts past that edge lives in shard 1's backing.
    const uint8_t* edge = (*t)->shard_backing(li, 1)->backing.data();
    const int64_t first_row_12 = layout.head_offsets[li][12];
    EXPECT_GE(edge, v.payload_of(first_row_12));
    EXPECT_LT(edge - v.payload_of(first_row_12), 4096);
  }
  // Content through the contiguous view: random rows, the rows around each head edge, the last row.
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> payload(static_cast<size_t>(layout.d)), scales(static_cast<size_t>(layout.d / 32));
  for (int li = 0; li < layout.n_layers(); ++li) {
    const TableView v = (*t)->view(li);
    std::vector<int64_t> rows = {0, v.rows - 1};
    for (int h = 1; h < layout.heads(); ++h) {
      rows.push_back(layout.head_offsets[li][static_cast<size_t>(h)] - 1);
      rows.push_back(layout.head_offsets[li][static_cast<size_t>(h)]);
    }
    for (int k = 0; k < 200; ++k) rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(v.rows)));
    for (int64_t r : rows) {
      synth_row(seed, li, r, layout.d, payload.data(), scales.data());
      ASSERT_EQ(0, std::memcmp(v.payload_of(r), payload.data(), payload.size())) << "layer " << li << " row " << r;
      ASSERT_EQ(0, std::memcmp(v.scales_of(r), scales.data(), scales.size())) << "layer " << li << " row " << r;
    }
  }
  // One census line per layer and shard, naming its head range; every page of each backing resident.
  auto cs = (*t)->census(CensusPoint::kAfterLoad);
  ASSERT_EQ(cs.size(), static_cast<size_t>(2 * layout.n_layers()));
  for (size_t i = 0; i < cs.size(); ++i) {
    const PageCensus& c = cs[i];
    ASSERT_TRUE(c.known) << c.reason;
    EXPECT_EQ(c.table.head_begin, i % 2 == 0 ? 0 : 12);
    EXPECT_EQ(c.table.head_end, i % 2 == 0 ? 12 : 24);
    EXPECT_EQ(c.table.group, "tp");
    EXPECT_EQ(c.not_resident, 0u);
    EXPECT_EQ(c.pages_total, c.table.bytes / 4096);
  }
}

TEST(HeadShards, LookupOverShardsIsBitIdenticalToOneBacking) {
  const EngramLayout layout = mini();
  TableOptions sharded;
  test::set_opt(sharded, "head_shards", "0-5,5-16,16-24");
  auto a = HostTable::create(layout, sharded);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  auto b = HostTable::create(layout, TableOptions{});
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  const uint64_t seed = std::random_device{}();
  (*a)->fill_synthetic(seed);
  (*b)->fill_synthetic(seed);
  ThreadPool pool(2);
  std::mt19937_64 rng(seed ^ 0x5eed);
  const int tokens = 97, heads = layout.heads();
  for (int li = 0; li < layout.n_layers(); ++li) {
    std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h) {
        const int64_t lo = layout.head_offsets[li][static_cast<size_t>(h)];
        const int64_t hi = h + 1 < heads ? layout.head_offsets[li][static_cast<size_t>(h + 1)] : layout.rows(li);
        ids[static_cast<size_t>(t * heads + h)] = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo));
      }
    ids[3] = kDeadId;
    std::vector<uint16_t> out_a(ids.size() * static_cast<size_t>(layout.d), 0xDEAD),
        out_b(ids.size() * static_cast<size_t>(layout.d), 0xBEEF);
    LookupRequest ra{ids.data(), tokens, heads, out_a.data(), true};
    LookupRequest rb{ids.data(), tokens, heads, out_b.data(), true};
    ASSERT_TRUE(cpu::lookup((*a)->view(li), ra, &pool).is_ok());
    ASSERT_TRUE(cpu::lookup((*b)->view(li), rb, &pool).is_ok());
    ASSERT_EQ(out_a, out_b) << "layer " << li;
  }
}

TEST(HeadShards, NamedFilesAreRemovedAndTheAddressRangeReleased) {
  const EngramLayout layout = mini();
  TableOptions o;
  test::set_opt(o, "head_shards", "4");
  test::set_opt(o, "backing", "shm");
  uintptr_t base = 0;
  {
    auto t = HostTable::create(layout, o);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    base = reinterpret_cast<uintptr_t>((*t)->view(0).data);
    EXPECT_EQ((*t)->census(CensusPoint::kAfterPlacement).size(), static_cast<size_t>(4 * layout.n_layers()));
  }
  const std::string maps = self_maps();
  EXPECT_EQ(maps.find("engram:layer="), std::string::npos) << maps;
  char hex[32];
  std::snprintf(hex, sizeof hex, "%lx-", static_cast<unsigned long>(base));
  EXPECT_EQ(maps.find(hex), std::string::npos) << "the layer's reservation is unmapped";
}

TEST(HeadShards, RefusalsAreInvalidArgument) {
  TableOptions o;
  test::set_opt(o, "head_shards", "2");
  test::set_opt(o, "placement", "replica-per-node");
  auto r = HostTable::create(mini(), o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  test::set_opt(o, "placement", "none");
  auto split = HostTable::create(mini(24 << 20, RowFormat::kSplit), o);
  ASSERT_FALSE(split.is_ok());
  EXPECT_NE(split.status().message().find("fused"), std::string::npos);
  test::set_opt(o, "shard_placements", "bind:0");
  auto count = HostTable::create(mini(), o);
  ASSERT_FALSE(count.is_ok());
  EXPECT_NE(count.status().message().find("1 given for 2"), std::string::npos);
  test::set_opt(o, "shard_placements", "none;bind:99");
  auto node = HostTable::create(mini(), o);
  ASSERT_FALSE(node.is_ok());
  EXPECT_NE(node.status().message().find("heads 12-24"), std::string::npos) << node.status().to_string();
}
