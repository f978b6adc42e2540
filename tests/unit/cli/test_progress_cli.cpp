// Progress lines and --threads 0 as a user sees them: `--progress always` prints the progress of long steps on a
// pipe too (plain lines, no carriage returns or escapes; run --ranks too), `never` silences them on a terminal,
// every command with long steps takes the switch, and `engram soak --threads 0` shares the CPUs this process may
// run on among its ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.hpp"
#include "sys/affinity.hpp"

namespace {

namespace fs = std::filesystem;
using engram::testing::cli_missing;
using engram::testing::run_engram;
using engram::testing::run_engram_split;
using engram::testing::run_shell;

class ProgressCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cli_missing(); !why.empty()) GTEST_SKIP() << why;
    dir_ = fs::temp_directory_path() / ("engram_progress_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // A progress line printed for a pipe: whole lines, none rewritten in place.
  static void expect_plain_lines(const std::string& err) {
    EXPECT_EQ(err.find('\r'), std::string::npos) << err;
    EXPECT_EQ(err.find('\x1b'), std::string::npos) << err;
  }
  fs::path dir_;
};

constexpr const char* kRun =
    "run --table-size 16MiB --batch 4 --steps 1 --warmup 0 --layer-us 5 --ids uniform --no-baseline --timeline none "
    "--backend cpu --threads 1 --json";

TEST_F(ProgressCli, AlwaysPrintsTheFillOnAPipeAndAutoDoesNot) {
  auto always = run_engram_split(std::string(kRun) + " --progress always", dir_);
  ASSERT_EQ(always.code, 0) << always.err;
  EXPECT_NE(always.err.find("fill synthetic(seed=1): "), std::string::npos) << always.err;
  EXPECT_NE(always.err.find("(100%)"), std::string::npos) << always.err;
  expect_plain_lines(always.err);
  EXPECT_TRUE(nlohmann::json::accept(always.out)) << "stdout stays one JSON document";

  // run --ranks: the leader's fill of the shared table.
  auto ranks = run_engram_split(std::string(kRun) + " --ranks 2 --progress always", dir_);
  ASSERT_EQ(ranks.code, 0) << ranks.err;
  EXPECT_NE(ranks.err.find("fill synthetic(seed=1): "), std::string::npos) << ranks.err;
  EXPECT_TRUE(nlohmann::json::accept(ranks.out));

  auto piped = run_engram_split(kRun, dir_);  // auto: stderr is a file here
  ASSERT_EQ(piped.code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("fill synthetic"), std::string::npos) << piped.err;
}

TEST_F(ProgressCli, NeverSilencesItOnATerminal) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "script(1) is not installed (Debian: bsdutils)";
  auto tty = run_shell("/usr/bin/script -qec '" + std::string(ENGRAM_CLI_PATH) + " " + kRun +
                       " --progress never >/dev/null' /dev/null");
  EXPECT_EQ(tty.code, 0) << tty.out;
  EXPECT_EQ(tty.out.find("fill synthetic"), std::string::npos) << tty.out;
}

TEST_F(ProgressCli, CensusReplayAndTableCreateAndLoadTakeTheSwitch) {
  auto census = run_engram_split("census --table-size 8MiB --progress always --json", dir_);
  ASSERT_EQ(census.code, 0) << census.err;
  EXPECT_NE(census.err.find("fill synthetic(seed=1): "), std::string::npos) << census.err;
  expect_plain_lines(census.err);
  EXPECT_TRUE(nlohmann::json::accept(census.out));

  const std::string ckpt = (dir_ / "t.safetensors").string();
  auto create = run_engram_split("table create --layout tiny --out " + ckpt + " --progress always", dir_);
  ASSERT_EQ(create.code, 0) << create.err;
  EXPECT_NE(create.err.find("write " + ckpt + ": "), std::string::npos) << create.err;
  EXPECT_NE(create.err.find("(100%)"), std::string::npos) << create.err;
  expect_plain_lines(create.err);

  auto load = run_engram_split("table load " + ckpt + " --progress always --json", dir_);
  ASSERT_EQ(load.code, 0) << load.err;
  EXPECT_NE(load.err.find("load " + ckpt + ": "), std::string::npos) << load.err;
  EXPECT_TRUE(nlohmann::json::accept(load.out));

  auto quiet = run_engram_split("table load " + ckpt + " --progress never", dir_);
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("load " + ckpt + ": "), std::string::npos) << quiet.err;

  auto replay = run_engram_split("replay --layout tiny --model tiny --backend cpu --ids zipf --threads 1 --unit-us 5 "
                                 "--requests 2 --rate 2000 --prompt 8 --output 2 --progress always --json", dir_);
  ASSERT_EQ(replay.code, 0) << replay.err;
  EXPECT_NE(replay.err.find("fill synthetic(seed="), std::string::npos) << replay.err;
  EXPECT_TRUE(nlohmann::json::accept(replay.out));

  for (const char* cmd : {"run", "replay", "census", "table create", "table load", "serve-table"}) {
    auto help = run_engram(std::string(cmd) + " --help");
    EXPECT_EQ(help.code, 0) << cmd;
    EXPECT_NE(help.out.find("--progress"), std::string::npos) << cmd << ":\n" << help.out;
    auto bad = run_engram(std::string(cmd) + " --progress sometimes");
    EXPECT_EQ(bad.code, 2) << cmd << ": " << bad.out;
  }
}

TEST_F(ProgressCli, SoakThreadsZeroSharesTheAffinityCpusAmongRanks) {
  auto o = run_engram_split(
      "soak --duration 2s --round 2s --ranks 2 --table-size 4MiB --threads 0 --placement none --backing memfd --json",
      dir_);
  ASSERT_EQ(o.code, 0) << o.err << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["threads_per_rank"], std::max(1, engram::sys::usable_cpu_count() / 2)) << o.out;
  EXPECT_EQ(run_engram("soak --threads -1 --duration 1s").code, 2);
}

}  // namespace
