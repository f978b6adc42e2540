// Bad input that used to slip through: `table create --table-size ''` wrote a 512 MiB table (run
// and census refuse the empty size), `run --seed -1` became 2^64 - 1, and `table load DIR` on a
// directory that is not a model directory was a runtime failure (exit 1). Each is now exit 2 with nothing written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "support/cli.hpp"

namespace {

struct Dir {
  std::filesystem::path path;
  Dir() {
    std::random_device rd;
    path = std::filesystem::path("/tmp") / ("engram-input-gaps-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  size_t entries() const {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator(path)) n += e.path().filename() != "stderr.txt";
    return n;
  }
};

using engram::testing::run_engram_split;

}  // namespace

TEST(InputGaps, TableCreateRefusesAnEmptyTableSize) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Dir d;
  const auto out = (d.path / "t.safetensors").string();
  auto r = run_engram_split("table create --layout v41-flash-mini --table-size '' --out " + out, d.path);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--table-size"), std::string::npos) << r.err;
  EXPECT_EQ(d.entries(), 0u) << "bad input left something behind";
  // run and census agree.
  EXPECT_EQ(run_engram_split("census --table-size ''", d.path).code, 2);
}

TEST(InputGaps, NegativeSeedIsRefused) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Dir d;
  for (const char* cmd : {"run --seed -1", "census --seed -1", "serve-table --seed -1", "replay --seed -5",
                          "run --seed 1x"}) {
    auto r = run_engram_split(cmd, d.path);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("--seed"), std::string::npos) << cmd << ": " << r.err;
  }
  EXPECT_EQ(d.entries(), 0u);
}

TEST(InputGaps, KeepPageCacheNeedsFilesToRead) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Dir d;
  // Synthetic rows read no file: the switch cannot apply; and the table options beside it still parse.
  auto r = run_engram_split("run --layout tiny --backend cpu --keep-page-cache --backing memfd", d.path);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--keep-page-cache: needs --checkpoint or --model"), std::string::npos) << r.err;
  EXPECT_EQ(d.entries(), 0u);
}

TEST(InputGaps, TableLoadOrInfoOfADirectoryIsBadInput) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Dir d;
  for (const char* sub : {"load", "info"}) {
    auto r = run_engram_split(std::string("table ") + sub + " " + d.path.string(), d.path);
    EXPECT_EQ(r.code, 2) << sub << ": " << r.err;
    EXPECT_NE(r.err.find("not a model directory"), std::string::npos) << sub << ": " << r.err;
  }
}
