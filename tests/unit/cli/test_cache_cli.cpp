// Description: the GPU hot-row cache options of `engram run` and `engram replay` on the CPU backend: the
// options are accepted, the CPU backend says once that the cache is CUDA-only (no silent fallback; text: one
// "CUDA-only" line in stdout + stderr, JSON: workload/config.cache_note), `--cache-size off` silences it, and bad
// cache options exit 2 before any table is built.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.hpp"

namespace {

using engram::testing::CliStderr;
using engram::testing::run_engram;

const std::string kRun = "run --backend cpu --table-size 16MiB --batch 4 --steps 2 --warmup 1 --layer-us 5 "
                         "--ids zipf --threads 1 --timeline none --no-baseline";
const std::string kReplay =
    "replay --layout tiny --model tiny --backend cpu --ids zipf --threads 1 --unit-us 5 --requests 3 --rate 2000"
    " --prompt uniform:4-12 --output 2 --token-budget 32 --prefill-chunk 16";

int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(CacheCli, RunOnCpuSaysCudaOnlyOnce) {
  if (auto why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  auto text = run_engram(kRun + " --cache-size 5% --cache-format bf16 --cache-update every=2,rows=64", CliStderr::kMerge);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(count_of(text.out, "CUDA-only"), 1) << text.out;
  auto js = run_engram(kRun + " --cache-size 5% --json");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j["workload"]["cache_note"].is_string());
  EXPECT_NE(j["workload"]["cache_note"].get<std::string>().find("CUDA-only"), std::string::npos);
  EXPECT_EQ(j["workload"]["cache_requested"]["size"], "5%");
  EXPECT_EQ(j["workload"]["cache_requested"]["warmup_steps"], 1);  // default: the run's --warmup
  EXPECT_EQ(j["workload"]["cache_requested"]["update_every"], 4);
  EXPECT_EQ(j["workload"]["cache_requested"]["update_rows"], 256);
  auto off = run_engram(kRun + " --cache-size off --json");
  ASSERT_EQ(off.code, 0) << off.out;
  EXPECT_TRUE(nlohmann::json::parse(off.out)["workload"]["cache_note"].is_null());
  auto off_text = run_engram(kRun + " --cache-size off", CliStderr::kMerge);
  ASSERT_EQ(off_text.code, 0) << off_text.out;
  EXPECT_EQ(count_of(off_text.out, "CUDA-only"), 0);
}

TEST(CacheCli, ReplayOnCpuSaysCudaOnlyOnce) {
  if (auto why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  auto text = run_engram(kReplay + " --cache-size 1MiB --cache-warmup 2", CliStderr::kMerge);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(count_of(text.out, "CUDA-only"), 1) << text.out;
  auto js = run_engram(kReplay + " --json --cache-update off");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_TRUE(j["config"]["cache_note"].is_string());  // default 5% on the cpu backend
  EXPECT_EQ(j["config"]["cache_requested"]["update_every"], 0);
  EXPECT_EQ(j["config"]["cache_requested"]["warmup_steps"], 8);
  EXPECT_EQ(j["config"]["fast_path"], "planner");
}

TEST(CacheCli, BadCacheOptionsExitTwo) {
  if (auto why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(run_engram(kRun + " --cache-size 150%").code, 2);
  EXPECT_EQ(run_engram(kRun + " --cache-size 12XB").code, 2);
  EXPECT_EQ(run_engram(kRun + " --cache-update every=0").code, 2);
  EXPECT_EQ(run_engram(kRun + " --cache-update sometimes").code, 2);
  EXPECT_EQ(run_engram(kRun + " --cache-format fp4").code, 2);
  EXPECT_EQ(run_engram(kRun + " --cache-warmup 0").code, 2);
  EXPECT_EQ(run_engram(kReplay + " --cache-update rows=-3").code, 2);
  EXPECT_NE(run_engram(kRun + " --cache-profile /nonexistent/engram.profile").code, 0);
}

}  // namespace
