// `engram census`: builds a placed table and prints its census (text and JSON), reads a running
// process's tables by pid, and refuses bad input with the documented exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "engram/layout.hpp"
#include "support/cli.hpp"
#include "engram/table.hpp"
#include "sys/numa.hpp"

using namespace engram;

namespace {
std::string run_cli(const std::string& args, int* rc) {
  auto r = engram::testing::run_engram(args, engram::testing::CliStderr::kMerge);
  *rc = r.code;
  return r.out;
}
}  // namespace

TEST(CensusCli, BuildsAPlacedTableAndCountsEveryPage) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const int node = sys::memory_nodes().front();
  int rc = -1;
  const std::string out = run_cli("census --table-size 4MiB --placement bind:" + std::to_string(node) + " --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["placement"].size(), 2u);  // two Engram layers in the preset
  EXPECT_EQ(j["placement"][0]["obtained"], "bind:" + std::to_string(node));
  ASSERT_EQ(j["census"].size(), 4u);     // 2 layers x (after placement, after load)
  for (const auto& c : j["census"]) {
    ASSERT_TRUE(c["known"].get<bool>());
    EXPECT_EQ(c["pages_per_node"][std::to_string(node)], c["pages_sampled"]);
    EXPECT_EQ(c["not_resident"], 0);
  }
  EXPECT_EQ(j["census"][2]["point"], "after load");
}

TEST(CensusCli, BadPlacementAndBadPidAreBadInput) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  int rc = -1;
  std::string out = run_cli("census --table-size 4MiB --placement scatter:0", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown policy"), std::string::npos) << out;
  out = run_cli("census --pid 999999999", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = run_cli("census --table-size 4MiB --placement bind:" + std::to_string(sys::kMaxNodes - 1), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}

TEST(CensusCli, ReadsARunningProcessesTables) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  TableOptions opts;
  opts.group = "cli" + std::to_string(std::random_device{}() % 100000);
  auto t = HostTable::create(*layout, opts);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  int rc = -1;
  const std::string out = run_cli("census --pid " + std::to_string(getpid()) + " --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  bool found = false;
  for (const auto& c : j["tables"]) {
    if (c["table"]["group"] != opts.group) continue;
    found = true;
    EXPECT_EQ(c["source"], "numa_maps");
    EXPECT_EQ(c["table"]["layer_id"], layout->layer_ids[0]);
    EXPECT_EQ(c["not_resident"], 0);
  }
  EXPECT_TRUE(found) << out;
  const std::string text = run_cli("census --pid " + std::to_string(getpid()), &rc);
  EXPECT_NE(text.find("group " + opts.group), std::string::npos) << text;
}
