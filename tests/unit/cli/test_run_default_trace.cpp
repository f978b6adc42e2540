// `engram run` without --timeline writes its trace where it pollutes no checkout: the build directory of the
// binary (whatever the current directory), else the user's cache directory ($XDG_CACHE_HOME/engram, else
// ~/.cache/engram, created); never the current directory. --help names the default.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.hpp"

namespace {

namespace fs = std::filesystem;
using engram::testing::cli_missing;
using engram::testing::run_engram;
using engram::testing::run_shell;

// Small and fast: no token file needed, no compute-only pass.
const char* const kRunArgs = "run --table-size 16MiB --batch 4 --steps 2 --warmup 0 --layer-us 5 --ids uniform --no-baseline --json";

class RunDefaultTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cli_missing(); !why.empty()) GTEST_SKIP() << why;
    dir_ = fs::temp_directory_path() / ("engram_default_trace_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cwd");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs `engram` (`exe`) from dir_/cwd with the environment prefix `env`; returns the report's "timeline".
  std::string run_from_cwd(const std::string& exe, const std::string& env) {
    auto o = run_shell("cd '" + (dir_ / "cwd").string() + "' && " + env + " '" + exe + "' " + kRunArgs + " 2>/dev/null");
    EXPECT_EQ(o.code, 0) << o.out;
    if (o.code != 0) return "";
    auto j = nlohmann::json::parse(o.out);
    EXPECT_TRUE(j["timeline"].is_string()) << j["timeline"].dump();
    return j["timeline"].is_string() ? j["timeline"].get<std::string>() : "";
  }
  void expect_chrome_trace(const std::string& path) {
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path;
    auto tj = nlohmann::json::parse(f);
    EXPECT_GT(tj["traceEvents"].size(), 6u) << path;
  }
  void expect_cwd_untouched() { EXPECT_TRUE(fs::is_empty(dir_ / "cwd")) << "files written into the current directory"; }
  fs::path dir_;
};

TEST_F(RunDefaultTrace, GoesToTheBuildDirectoryOfTheBinary) {
  const fs::path build = fs::path(ENGRAM_CLI_PATH).parent_path().parent_path();
  ASSERT_TRUE(fs::exists(build / "CMakeCache.txt")) << build;
  const std::string trace = run_from_cwd(ENGRAM_CLI_PATH, "XDG_CACHE_HOME='" + (dir_ / "cache").string() + "'");
  EXPECT_EQ(trace, (build / "engram-run.trace.json").string());
  expect_chrome_trace(trace);
  expect_cwd_untouched();
  EXPECT_FALSE(fs::exists(dir_ / "cache")) << "the cache directory is only for a binary outside a build tree";
}

TEST_F(RunDefaultTrace, OutsideABuildTreeGoesToTheUserCacheDirectory) {
  // A copy of the binary outside any build tree (a symlink would resolve back to the build tree).
  fs::create_directories(dir_ / "bin");
  const fs::path exe = dir_ / "bin" / "engram";
  fs::copy_file(ENGRAM_CLI_PATH, exe);
  fs::permissions(exe, fs::perms::owner_all);

  const fs::path xdg = dir_ / "xdg";
  std::string trace = run_from_cwd(exe.string(), "XDG_CACHE_HOME='" + xdg.string() + "'");
  EXPECT_EQ(trace, (xdg / "engram" / "engram-run.trace.json").string());
  expect_chrome_trace(trace);

  // No (or a relative) XDG_CACHE_HOME: $HOME/.cache/engram.
  const fs::path home = dir_ / "home";
  fs::create_directories(home);
  trace = run_from_cwd(exe.string(), "XDG_CACHE_HOME=relative/ignored HOME='" + home.string() + "'");
  EXPECT_EQ(trace, (home / ".cache" / "engram" / "engram-run.trace.json").string());
  expect_chrome_trace(trace);
  expect_cwd_untouched();
}

TEST_F(RunDefaultTrace, HelpNamesTheDefault) {
  const fs::path build = fs::path(ENGRAM_CLI_PATH).parent_path().parent_path();
  auto o = run_engram("run --help");
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find((build / "engram-run.trace.json").string()), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("build directory"), std::string::npos) << o.out;
}

}  // namespace
