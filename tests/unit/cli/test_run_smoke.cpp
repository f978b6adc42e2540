// `engram run` as a user runs it: the JSON report has the documented fields with sane values, the timeline file is
// a Chrome trace, and bad arguments exit with code 2 and write nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/cli.hpp"
#include "sys/affinity.hpp"

namespace {

using engram::testing::run_engram;

TEST(EngramRun, JsonReportHasFields) {
  const auto dir = std::filesystem::temp_directory_path() / ("engram_run_smoke_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto trace = (dir / "t.json").string();
  auto o = run_engram("run --table-size 32MiB --batch 16 --steps 3 --warmup 1 --layer-us 20 --json --timeline " + trace);
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["command"], "run");
  EXPECT_EQ(j["table"]["layout"], "v41-flash-mini");
  EXPECT_EQ(j["table"]["d"], 256);
  EXPECT_EQ(j["table"]["heads"], 24);
  EXPECT_EQ(j["workload"]["prefetch"], "early");
  EXPECT_EQ(j["lookup"]["rows"], 3 * 16 * 24 * 2);  // steps * batch * heads * Engram layers
  EXPECT_GT(j["lookup"]["rows_per_s"].get<double>(), 0);
  EXPECT_GT(j["lookup"]["source_gbps"].get<double>(), 0);
  EXPECT_EQ(j["bytes"]["b_source_per_step"], 16 * 24 * 264 * 2);
  EXPECT_EQ(j["bytes"]["b_staging_per_step"], 2 * 16 * 24 * 256 * 2);
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0]["layer_id"], 1);
  EXPECT_EQ(j["layers"][1]["layer_id"], 14);
  EXPECT_EQ(j["layers"][0]["exposed_wait_ns"]["n"], 3);
  EXPECT_GE(j["layers"][0]["exposed_wait_ns"]["median"].get<double>(), 0);
  EXPECT_TRUE(j["conditions"].contains("git_revision"));
  EXPECT_EQ(j["timeline"], trace);
  std::ifstream f(trace);
  auto tj = nlohmann::json::parse(f);
  EXPECT_GT(tj["traceEvents"].size(), 6u);
  // trace analyze leaves the warm-up step out and then agrees with run's own report.
  auto an = run_engram("trace analyze " + trace + " --json");
  ASSERT_EQ(an.code, 0) << an.out;
  auto aj = nlohmann::json::parse(an.out);
  EXPECT_EQ(aj["lookups"], 3 * 2);                  // measured steps * Engram layers
  EXPECT_EQ(aj["warmup_lookups_excluded"], 1 * 2);  // the --warmup step
  ASSERT_EQ(aj["layers"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(aj["layers"][i]["exposed_wait_ns"]["n"], j["layers"][i]["exposed_wait_ns"]["n"]);
    EXPECT_DOUBLE_EQ(aj["layers"][i]["exposed_wait_ns"]["median"].get<double>(),
                     j["layers"][i]["exposed_wait_ns"]["median"].get<double>());
  }
  auto all = nlohmann::json::parse(run_engram("trace analyze " + trace + " --json --include-warmup").out);
  EXPECT_EQ(all["lookups"], 4 * 2);
  // Step and compute slices, one process per rank under its OS pid.
  int steps = 0, compute = 0;
  for (const auto& e : tj["traceEvents"]) {
    if (e["ph"] != "X") continue;
    steps += e["cat"] == "step";
    compute += e["cat"] == "compute";
    EXPECT_GT(e["pid"].get<int>(), 0);
  }
  EXPECT_EQ(steps, 4);
  EXPECT_GT(compute, 0);
  std::filesystem::remove_all(dir);
}

TEST(EngramRun, OnDemandModeAndSplitLayoutRun) {
  auto o = run_engram("run --table-size 16MiB --batch 4 --steps 2 --warmup 0 --layer-us 5 --prefetch on_demand "
               "--row-layout split --ids uniform --json --timeline none");
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["workload"]["prefetch"], "on_demand");
  EXPECT_EQ(j["table"]["row_layout"], "split");
  EXPECT_TRUE(j["timeline"].is_null());
}

TEST(EngramRun, BadArgumentsExitTwo) {
  EXPECT_EQ(run_engram("run --layout nope").code, 2);
  EXPECT_EQ(run_engram("run --table-size 12XB").code, 2);
  EXPECT_EQ(run_engram("run --table-size 1KiB").code, 2);
  EXPECT_EQ(run_engram("run --batch 0").code, 2);
  EXPECT_EQ(run_engram("run --prefetch sometimes").code, 2);
  EXPECT_EQ(run_engram("frobnicate").code, 2);
}

TEST(EngramRun, TheOptionAtFaultIsNamedAndOptionsThatCannotApplyAreRefused) {
  auto o = run_engram("run --table-size 12", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("--table-size"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("--layout"), std::string::npos) << o.out;
  o = run_engram("run --layout tiny --table-size 1GiB --steps 1", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("--table-size 1GiB cannot apply to --layout tiny"), std::string::npos) << o.out;
}

TEST(EngramCli, UnknownCommandSaysWhichOneItMeant) {
  auto o = run_engram("runn --steps 2", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("unknown command 'runn' (did you mean 'run'?)"), std::string::npos) << o.out;
  o = run_engram("frobnicate", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("unknown command 'frobnicate'"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("did you mean"), std::string::npos) << o.out;
}

// Every message goes to stdout or stderr as the command prints it; there is no log level that would filter some
// of them, so the CLI offers none.
TEST(EngramCli, OffersNoLogLevel) {
  auto o = run_engram("--help", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out.find("--log-level"), std::string::npos) << o.out;
  o = run_engram("--log-level info topo", engram::testing::CliStderr::kMerge);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("--log-level"), std::string::npos) << "the unknown option is named: " << o.out;
  EXPECT_EQ(o.out.find("unknown command"), std::string::npos) << o.out;
}

// --threads 0 means one thing on every command: one thread per CPU this process may run on (its affinity
// mask), resolved by one helper and said the same way in every --help.
TEST(EngramCli, ThreadsZeroMeansTheSameEverywhere) {
  const int cpus = engram::sys::usable_cpu_count();
  EXPECT_GE(cpus, 1);
  EXPECT_EQ(engram::sys::threads_or_auto(0), cpus);
  EXPECT_EQ(engram::sys::threads_or_auto(3), 3);
  EXPECT_EQ(engram::sys::threads_or_auto(0, 1 << 20), 1);  // shared over more ranks than CPUs: still one
  EXPECT_EQ(engram::sys::threads_or_auto(0, 2), std::max(1, cpus / 2));
  auto mask = engram::sys::thread_affinity();
  ASSERT_TRUE(mask.is_ok()) << mask.status().to_string();
  {
    engram::sys::ScopedAffinity one({mask->front()});
    if (one.status().is_ok()) {
      EXPECT_EQ(engram::sys::threads_or_auto(0), 1) << "the mask, not the machine, counts";
    }
  }
  for (const char* cmd : {"run", "replay", "experiment", "bench numa", "bench lookup", "table create",
                          "table load"}) {
    auto o = run_engram(std::string(cmd) + " --help");
    EXPECT_EQ(o.code, 0) << cmd;
    EXPECT_NE(o.out.find("0 = one per CPU this process may run on"), std::string::npos) << cmd << ":\n" << o.out;
  }
}

// The synthetic fill shows its progress line (bytes, GB/s, ETA) when stderr is a terminal (script(1) gives it
// one), and nothing when stderr is piped.
TEST(EngramRun, SyntheticFillShowsProgressOnATerminalOnly) {
  const std::string args =
      " run --table-size 16MiB --batch 4 --steps 1 --warmup 0 --layer-us 5 --ids uniform --no-baseline --timeline none "
      "--backend cpu --threads 1 --json";
  auto piped = engram::testing::run_shell(std::string(ENGRAM_CLI_PATH) + args + " 2>&1 >/dev/null");
  EXPECT_EQ(piped.code, 0) << piped.out;
  EXPECT_EQ(piped.out.find("fill synthetic"), std::string::npos) << piped.out;
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "script(1) is not installed (Debian: bsdutils)";
  auto tty = engram::testing::run_shell("/usr/bin/script -qec '" + std::string(ENGRAM_CLI_PATH) + args +
                                        " >/dev/null' /dev/null");
  EXPECT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("fill synthetic(seed=1): "), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("(100%)"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("GB/s"), std::string::npos) << tty.out;
}

}  // namespace
