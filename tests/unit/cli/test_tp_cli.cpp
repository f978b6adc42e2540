// --tp-size / --tp-rank as a user gives them: `engram run` and `engram census` build one rank's slice (the report
// names its heads, rows and bytes) and bad values exit 2 naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/cli.hpp"

namespace {

using engram::testing::CliStderr;
using engram::testing::run_engram;

TEST(TpCli, BadValuesExitTwo) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string run = "run --backend cpu --table-size 16MiB --batch 4 --steps 1 --warmup 0 --timeline none ";
  for (const char* bad : {"--tp-size 2 --tp-rank 2", "--tp-size 0", "--tp-size 2 --tp-rank=-1", "--tp-size x",
                          "--tp-size 4 --tp-rank 9"}) {
    const auto o = run_engram(run + bad, CliStderr::kMerge);
    EXPECT_EQ(o.code, 2) << bad << ": " << o.out;
    EXPECT_NE(o.out.find("tp"), std::string::npos) << bad << ": " << o.out;
    EXPECT_EQ(run_engram(std::string("census --table-size 4MiB ") + bad).code, 2) << bad;
  }
  EXPECT_EQ(run_engram(run + "--tp-size 2 --ranks 2").code, 2);
}

TEST(TpCli, RunReportsTheSlice) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  // v41-flash-mini: 24 heads; TP=5 -> 5 heads per rank, rank 4 holds heads 20-24 and one padded head.
  const auto o = run_engram("run --backend cpu --table-size 16MiB --batch 4 --steps 2 --warmup 1 --layer-us 5 "
                            "--ids uniform --timeline none --json --tp-size 5 --tp-rank 4");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  const auto& tp = j["table"]["tp"];
  ASSERT_TRUE(tp.is_object()) << j["table"].dump();
  EXPECT_EQ(tp["size"], 5);
  EXPECT_EQ(tp["rank"], 4);
  EXPECT_EQ(tp["local_heads"], 5);
  EXPECT_EQ(tp["head_begin"], 20);
  EXPECT_EQ(tp["held_heads"], 4);
  EXPECT_LT(tp["bytes"].get<int64_t>(), j["table"]["bytes"].get<int64_t>() / 4);
  const auto text = run_engram("run --backend cpu --table-size 16MiB --batch 4 --steps 1 --warmup 0 --layer-us 5 "
                               "--ids uniform --timeline none --tp-size 5 --tp-rank 4");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("TP        rank 4 of 5: heads 20-24 of 24 (5 per rank, 1 padded with zeros)"), std::string::npos)
      << text.out;
}

TEST(TpCli, CensusCountsTheShardOnly) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const auto whole = run_engram("census --table-size 8MiB --json");
  const auto shard = run_engram("census --table-size 8MiB --json --tp-size 4 --tp-rank 1");
  ASSERT_EQ(whole.code, 0) << whole.out;
  ASSERT_EQ(shard.code, 0) << shard.out;
  const auto jw = nlohmann::json::parse(whole.out), js = nlohmann::json::parse(shard.out);
  ASSERT_FALSE(js["census"].empty());
  uint64_t bw = 0, bs = 0;
  for (const auto& c : jw["census"]) bw += c["table"]["bytes"].get<uint64_t>();
  for (const auto& c : js["census"]) {
    bs += c["table"]["bytes"].get<uint64_t>();
    EXPECT_EQ(c["table"]["head_begin"], 6) << c.dump();  // 24 heads / 4 ranks
    EXPECT_EQ(c["table"]["head_end"], 12) << c.dump();
  }
  EXPECT_GT(bs, 0u);
  EXPECT_LT(bs, bw / 3) << "a quarter of the heads' rows, not the whole table";
}

}  // namespace
