// The library's one options table (set_engine_option, set_table_option, engine_option_keys): every key is listed
// once, table keys are accepted by both setters and engine keys only by set_engine_option, and the grid cap and the
// lookup threads land in their one typed field whatever spelling set them.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engram/engine.hpp"

namespace engram {
namespace {

TEST(EngineOptionTable, EveryKeyIsListedOnceAndTableKeysReachTheTable) {
  std::set<std::string> seen;
  for (const auto& [key, help] : engine_option_keys()) {
    EXPECT_TRUE(seen.insert(key).second) << "listed twice: " << key;
    EXPECT_FALSE(help.empty()) << key;
  }
  for (const char* table_key : {"backing", "placement", "shard_placements", "shm_dir", "group", "prefault",
                                "prefault_threads", "prefault_fallocate", "shmem_huge_pages", "allow_fallback",
                                "home_node", "tp_size", "tp_rank"})
    EXPECT_TRUE(seen.count(table_key)) << table_key;
  // A table key set through either setter lands in the same field.
  TableOptions t;
  ASSERT_TRUE(set_table_option(t, "--placement", "bind:0").is_ok());
  EngineOptions e;
  ASSERT_TRUE(set_engine_option(e, "placement", "bind:0").is_ok());
  EXPECT_EQ(t.placement, e.table.placement);
  ASSERT_TRUE(set_table_option(t, "tp-size", "2").is_ok());
  EXPECT_EQ(t.tp.size, 2);
  // An engine key is not a table option; an unknown key is refused by both.
  EXPECT_EQ(set_table_option(t, "grid_fraction", "0.5").code(), Code::kNotFound);
  EXPECT_EQ(set_table_option(t, "no_such_key", "1").code(), Code::kNotFound);
  const Status unknown = set_engine_option(e, "no_such_key", "1");
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.message().find("grid_fraction"), std::string::npos) << unknown.message();
  // head_shards needs the layout's heads.
  EXPECT_EQ(set_table_option(t, "head_shards", "2").code(), Code::kInvalidArgument);
  ASSERT_TRUE(set_table_option(t, "head_shards", "2", 24).is_ok());
  EXPECT_EQ(t.head_shards.size(), 2u);
}

TEST(EngineOptionTable, PlannerLearningIsOnByDefaultAndTakesABoolean) {
  EngineOptions o;
  EXPECT_TRUE(o.planner_learn);
  ASSERT_TRUE(set_engine_option(o, "--planner-learn", "false").is_ok());
  EXPECT_FALSE(o.planner_learn);
  ASSERT_TRUE(set_engine_option(o, "planner_learn", "true").is_ok());
  EXPECT_TRUE(o.planner_learn);
  const Status s = set_engine_option(o, "planner_learn", "sometimes");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("planner"), std::string::npos) << s.message();
  EXPECT_TRUE(o.planner_learn);  // a refused value leaves the field as it was
}

TEST(EngineOptionTable, GridCapHasOneFieldWhateverSpellingSetsIt) {
  EngineOptions o;
  EXPECT_EQ(o.grid_cap, GridCap::background_default());
  ASSERT_TRUE(set_engine_option(o, "--grid-fraction", "0.25").is_ok());
  EXPECT_EQ(o.grid_cap, *GridCap::of_fraction(0.25));
  ASSERT_TRUE(set_engine_option(o, "grid_blocks", "24").is_ok());
  EXPECT_EQ(o.grid_cap, *GridCap::of_blocks(24));
  ASSERT_TRUE(set_engine_option(o, "grid_fraction", "1").is_ok());  // the last one set is the cap
  EXPECT_EQ(o.grid_cap, GridCap::all_sms());
  for (const char* bad : {"0", "1.5", "nan", ""}) {
    const Status s = set_engine_option(o, "--grid-fraction", bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--grid-fraction"), std::string::npos) << s.message();
  }
  EXPECT_EQ(set_engine_option(o, "grid_blocks", "0").code(), Code::kInvalidArgument);
  EXPECT_EQ(o.grid_cap, GridCap::all_sms());  // a refused value leaves the field as it was
  LookupCall call;
  EXPECT_EQ(call.grid_cap, GridCap::all_sms());  // a direct lookup runs in the foreground
}

TEST(EngineOptionTable, LookupThreadsHasOneFieldAndOneRange) {
  EngineOptions o;
  ASSERT_TRUE(set_engine_option(o, "--threads", "3").is_ok());
  EXPECT_EQ(o.lookup_threads, 3);
  ASSERT_TRUE(set_engine_option(o, "lookup-threads", "0").is_ok());
  EXPECT_EQ(o.lookup_threads, 0);
  for (const char* bad : {"-1", "4097", "two", ""})
    EXPECT_EQ(set_engine_option(o, "lookup_threads", bad).code(), Code::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace engram
