// Head-range shards on two nodes: each shard of a layer is its own backing with its own policy, so a
// tensor-parallel shard can live on the socket of its consumers; verified page by page per shard.
#include <cstring>
#include <random>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "numa_test_util.hpp"

using namespace engram;
using namespace engram::host;
using namespace engram::numa_test;

class ShardKinds : public ::testing::TestWithParam<const char*> {};

TEST_P(ShardKinds, EachHeadShardLivesOnItsOwnNode) {
  ENGRAM_NEED_TWO_NODES();
  auto layout = make_preset_layout("v41-flash-mini", 12 << 20);  // 2 layers x 6 MiB: TCG faults are slow
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  TableOptions o;
  o.backing = *parse_backing(GetParam());
  o.head_shards = *parse_head_shards("2", layout->heads());
  o.shard_placements = *parse_placement_list("bind:0;bind:1");
  o.group = "tp2";
  auto t = HostTable::create(*layout, o);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const uint64_t seed = std::random_device{}();
  (*t)->fill_synthetic(seed, 2);
  for (int li = 0; li < layout->n_layers(); ++li)
    for (int sh = 0; sh < 2; ++sh) {
      const PlacedBacking* pb = (*t)->shard_backing(li, sh);
      ASSERT_NE(pb, nullptr);
      EXPECT_EQ(pb->report.obtained, sh == 0 ? "bind:0" : "bind:1") << pb->report.to_string();
    }
  auto cs = (*t)->census(CensusPoint::kAfterLoad);
  ASSERT_EQ(cs.size(), static_cast<size_t>(2 * layout->n_layers()));
  for (const PageCensus& c : cs) {
    std::printf("---- census: head shard %d-%d (%s)\n%s", c.table.head_begin, c.table.head_end, GetParam(),
                c.to_text().c_str());
    ASSERT_TRUE(c.known) << c.reason;
    const int node = c.table.head_begin == 0 ? 0 : 1;
    EXPECT_EQ(pages_on(c, node), c.pages_sampled) << "every page of heads " << c.table.head_begin << "-"
                                                  << c.table.head_end << " on node " << node;
    EXPECT_EQ(c.not_resident, 0u);
  }
  // The layer is still one table: rows on both sides of the shard edge read back what was written.
  std::vector<uint8_t> payload(static_cast<size_t>(layout->d)), scales(static_cast<size_t>(layout->d / 32));
  for (int li = 0; li < layout->n_layers(); ++li) {
    const TableView v = (*t)->view(li);
    const int64_t edge = layout->head_offsets[li][12];
    for (int64_t r : {int64_t{0}, edge - 1, edge, edge + 1, v.rows - 1}) {
      synth_row(seed, li, r, layout->d, payload.data(), scales.data());
      EXPECT_EQ(0, std::memcmp(v.payload_of(r), payload.data(), payload.size())) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backings, ShardKinds, ::testing::Values("memfd", "shm", "anon-thp"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });
