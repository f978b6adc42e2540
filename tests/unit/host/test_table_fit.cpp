// The whole-table room check (host/table_fit.hpp, check_backings_fit): a table whose layers fit one
// by one but not together is refused before its first backing exists (no memfd_create, open, mmap
// or fallocate in the trace of hooked calls), naming the whole table; and what a hugepage pool can
// give counts overcommit headroom (an overcommit-only pool is not "0 available").
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/backing.hpp"
#include "host/placement.hpp"
#include "host/table_fit.hpp"
#include "sys/fault.hpp"

using namespace engram;

namespace {

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

}  // namespace

TEST(TableFit, LayersThatFitAloneButNotTogetherAreRefusedBeforeTheFirst) {
  const int64_t avail = mem_available_bytes();
  ASSERT_GT(avail, 0);
  // Two Engram layers of about 0.6 x MemAvailable each: either one alone passes the per-backing check.
  auto layout = make_preset_layout("v41-flash-mini", avail / 5 * 6);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  ASSERT_EQ(layout->n_layers(), 2);
  ASSERT_LT(layout->table_bytes(0), avail);
  for (const char* backing : {"memfd", "anon-thp"}) {
    // Should the check let the table through, these make the first allocation fail at once rather
    // than fill the machine: the test then fails on the code and the trace.
    sys::ScopedFault no_memfd("memfd_create", ENOMEM);
    sys::ScopedFault no_mmap("mmap", ENOMEM);
    TableOptions o;
    o.backing = *parse_backing(backing);
    sys::start_call_trace();
    auto t = HostTable::create(*layout, o);
    const auto calls = sys::stop_call_trace();
    ASSERT_FALSE(t.is_ok()) << backing;
    EXPECT_EQ(t.status().code(), Code::kNoSpace) << backing << ": " << t.status().to_string();
    EXPECT_NE(t.status().message().find("the whole table (2 backings"), std::string::npos) << t.status().to_string();
    for (const auto& c : calls)
      EXPECT_TRUE(c != "fallocate" && c != "mmap" && c != "memfd_create" && c != "open_shm")
          << backing << ": '" << c << "' before the whole-table refusal";
  }
  // The same pair of backings through check_backings_fit directly, and a pair that fits.
  host::BackingOptions b;
  b.size_bytes = static_cast<uint64_t>(avail / 5 * 3);
  host::PlacementPolicy none;
  EXPECT_TRUE(host::check_backings_fit({{b, none}}).is_ok());
  EXPECT_EQ(host::check_backings_fit({{b, none}, {b, none}}).code(), Code::kNoSpace);
  b.size_bytes = 64 << 20;
  EXPECT_TRUE(host::check_backings_fit({{b, none}, {b, none}}).is_ok());
}

// Only "does not fit" is the whole-table check's to say: other errors come from create, which names
// the layer or shard.
TEST(TableFit, OtherErrorsAreLeftToCreate) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  o.placement = *parse_placement("bind:63");
  EXPECT_TRUE(host::check_table_fits(*layout, o).is_ok());
  auto t = HostTable::create(*layout, o);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().to_string();
  EXPECT_NE(t.status().message().find("table of Engram layer"), std::string::npos) << t.status().to_string();
  o.placement = {};
  o.head_shards = {{0, 5}, {7, layout->heads()}};  // a gap: create refuses the shards, the check does not judge them
  EXPECT_TRUE(host::check_table_fits(*layout, o).is_ok());
  EXPECT_EQ(HostTable::create(*layout, o).status().code(), Code::kInvalidArgument);
}

TEST(HugepagePool, OvercommitHeadroomCounts) {
  host::HugepagePool p;
  p.free_pages = 0;
  p.overcommit_pages = 64;
  p.node_room_pages = 1000;
  EXPECT_EQ(host::hugepages_obtainable(p), 64) << "an overcommit-only pool gives surplus pages";
  p.surplus_pages = 60;
  EXPECT_EQ(host::hugepages_obtainable(p), 4) << "surplus pages already out count against the headroom";
  p.node_room_pages = 2;
  EXPECT_EQ(host::hugepages_obtainable(p), 2) << "a surplus page needs free memory on the nodes";
  p = {};
  p.free_pages = 10;
  p.reserved_pages = 4;
  EXPECT_EQ(host::hugepages_obtainable(p), 6) << "reserved free pages belong to other mappings";
  p.per_node = true;
  p.node_free_pages = 3;
  EXPECT_EQ(host::hugepages_obtainable(p), 3) << "only the target nodes' free pages";
  p.overcommit_pages = 5;
  p.node_room_pages = -1;
  EXPECT_EQ(host::hugepages_obtainable(p), 8) << "unknown memory room does not cap the headroom";
}
