// CLI smoke of `engram replay` and `engram experiment` at tiny sizes on the CPU backend: the JSON carries the
// client and engine metrics, a recorded batches file replays, B1 writes its report with the acceptance chain,
// A1 on a one-node machine and a B2 whose arms would not differ are refused with exit 77, fewer than 5
// repetitions with exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cmath>
#include <thread>

#include "support/cli.hpp"
#include "sys/numa.hpp"

namespace {

// The engine and scheduler options, and the workload (a recorded batches file replaces the workload: given with
// --batches, its options are refused).
const std::string kTinyEngine =
    " --layout tiny --model tiny --backend cpu --ids zipf --threads 1 --unit-us 5 --token-budget 32 --prefill-chunk 16";
const std::string kTiny = kTinyEngine + " --requests 6 --rate 2000 --prompt uniform:4-24 --output 3";

TEST(ReplayCli, LiveRunReportsClientAndEngineMetricsAndRecordsBatches) {
  const std::string rec = testing::TempDir() + "/replay_batches.json";
  auto r = engram::testing::run_engram("replay" + kTiny + " --record " + rec + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["client"]["requests"], 6);
  EXPECT_EQ(j["client"]["completed"], 6);
  // The client block carries vLLM benchmark_serving's names; every output of 3 tokens has a TPOT.
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"})
    for (const char* stat : {"mean", "median", "std", "p95", "p99"}) {
      const std::string k = std::string(stat) + "_" + metric + "_ms";
      ASSERT_TRUE(j["client"][k].is_number()) << k << " = " << j["client"][k];
      EXPECT_GE(j["client"][k].get<double>(), 0) << k;
    }
  const auto& c = j["client"];
  EXPECT_LE(c["median_tpot_ms"].get<double>(), c["p99_tpot_ms"].get<double>());
  EXPECT_LE(c["mean_ttft_ms"].get<double>(), c["mean_e2el_ms"].get<double>());
  EXPECT_EQ(c["total_output_tokens"], 18);
  for (const char* k : {"request_throughput", "output_throughput", "request_goodput"}) {
    ASSERT_TRUE(c[k].is_number()) << k;
    EXPECT_GT(c[k].get<double>(), 0) << k;
  }
  // 3 tokens per request: output throughput is 3x the request throughput.
  EXPECT_NEAR(c["output_throughput"].get<double>(), 3 * c["request_throughput"].get<double>(),
              1e-9 * c["output_throughput"].get<double>());
  EXPECT_TRUE(j["engine"]["step_ns"]["median"].is_number());
  EXPECT_TRUE(j["engine"]["host_ids_ns"]["median"].is_number());
  EXPECT_GT(j["lookup"]["rows"].get<int64_t>(), 0);
  // The cpu backend hashes on the host: auto says so, the GPU figures are null.
  EXPECT_EQ(j["hash"]["place"], "cpu");
  EXPECT_EQ(j["hash"]["requested"], "auto");
  EXPECT_TRUE(j["hash"]["gpu_step_ns"].is_null());
  EXPECT_TRUE(j["hash"]["verified_ids"].is_null());
  ASSERT_TRUE(std::filesystem::exists(rec));
  auto again = engram::testing::run_engram("replay" + kTinyEngine + " --batches " + rec + " --prefetch on_demand --json");
  ASSERT_EQ(again.code, 0) << again.out;
  auto k = nlohmann::json::parse(again.out);
  EXPECT_EQ(k["engine"]["steps"], j["engine"]["steps"]);
  EXPECT_EQ(k["engine"]["scheduled_tokens"], j["engine"]["scheduled_tokens"]);
  std::filesystem::remove(rec);
}

TEST(ReplayCli, ExperimentB1WritesTheReport) {
  const std::string out = testing::TempDir() + "/exp_cli_b1";
  auto r = engram::testing::run_engram("experiment B1" + kTiny + " --reps 5 --out " + out + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["experiment"], "B1");
  ASSERT_EQ(j["arms"].size(), 2u);
  EXPECT_EQ(j["arms"][0]["metrics"]["itl_p50_ms"]["runs"].size(), 5u);
  EXPECT_EQ(j["comparisons"][0]["links"].size(), 4u);
  EXPECT_TRUE(std::filesystem::exists(out + "/report.md"));
  EXPECT_TRUE(std::filesystem::exists(out + "/report.json"));
  std::filesystem::remove_all(out);
}

TEST(ReplayCli, PlacementExperimentsAreWaivedOnOneNode) {
  if (engram::sys::memory_nodes().size() >= 2) GTEST_SKIP() << "this machine has two nodes: A1 would run";
  auto r = engram::testing::run_engram("experiment A1" + kTiny, engram::testing::CliStderr::kMerge);
  EXPECT_EQ(r.code, 77) << r.out;
  EXPECT_NE(r.out.find("two NUMA memory nodes"), std::string::npos) << r.out;
}

TEST(ReplayCli, ExperimentRefusesFewerThanFiveRepetitions) {
  auto r = engram::testing::run_engram("experiment B1" + kTiny + " --reps 4", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--reps"), std::string::npos) << r.out;
}

TEST(ReplayCli, ExperimentWhoseArmsDoNotDifferHereIsRefusedWithTheReason) {
  // On the CPU backend B2 sets lookup threads to cap x (cores - 1): caps 0.5 and 0.6 round to the same count on
  // a machine with few cores, so the experiment would compare an arm with itself.
  const long k = std::max(1L, static_cast<long>(std::thread::hardware_concurrency()) - 1);
  if (std::lround(0.5 * k) != std::lround(0.6 * k)) GTEST_SKIP() << "caps 0.5 and 0.6 give different thread counts here";
  auto r = engram::testing::run_engram("experiment B2" + kTiny + " --caps 0.5 0.6", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(r.code, 77) << r.out;
  EXPECT_NE(r.out.find("would do the same on this machine"), std::string::npos) << r.out;
}

TEST(ReplayCli, BadLengthIsABadArgument) {
  auto r = engram::testing::run_engram("replay" + kTiny + " --prompt gamma:3", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST(ReplayCli, GpuHashingThatCannotApplyIsABadArgument) {
  // Zipf ids are not hashed from tokens: --hash is refused when parsed, naming --ids and why, exit 2.
  auto r = engram::testing::run_engram("replay" + kTiny + " --hash gpu", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--hash: has no effect with --ids zipf (only text ids are hashed)"), std::string::npos) << r.out;
  auto bad = engram::testing::run_engram("replay" + kTiny + " --hash tpu", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(bad.code, 2) << bad.out;
}

}  // namespace
