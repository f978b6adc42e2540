// `engram table create` stopped by a signal: SIGINT and SIGTERM remove the partial hidden temp file
// (exit 128 + signal, nothing left in the directory); SIGKILL may leave it, and the next create in
// that directory names it and removes it (its writer is dead), then writes its own file.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "multiproc_support.hpp"
#include "support/cli.hpp"

using namespace engram::test;

namespace {

int spawn_cli(const std::vector<std::string>& args, const std::string& log) { return engram::testing::spawn_engram(args, log); }

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Names in `dir` other than the log.
std::vector<std::string> names(const TempDir& dir) {
  std::vector<std::string> out;
  for (auto& n : dir.entries())
    if (n != "log.txt") out.push_back(n);
  return out;
}

// Waits (bounded) until the writer's temp file exists: the write has begun.
bool wait_for_temp(const TempDir& dir, int pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& n : dir.entries())
      if (n.find(".tmp-") != std::string::npos && n.rfind(".engram-owner.", 0) != 0) return true;
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

int wait_exit(int pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

std::vector<std::string> create_args(const TempDir& dir) {
  return {"table", "create", "--layout", "v41-flash-mini", "--table-size", "256MiB", "--threads", "1",
          "--out", dir.path + "/t.safetensors"};
}

}  // namespace

class TableCreateStop : public ::testing::TestWithParam<int> {};

TEST_P(TableCreateStop, SignalRemovesThePartialFile) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const int sig = GetParam();
  TempDir dir("/tmp", "engram-create-signal");
  const std::string log = dir.path + "/log.txt";
  const int pid = spawn_cli(create_args(dir), log);
  ASSERT_TRUE(wait_for_temp(dir, pid)) << read_all(log);
  ASSERT_EQ(kill(pid, sig), 0);
  const int rc = wait_exit(pid);
  if (rc == 0) GTEST_SKIP() << "the write finished before the signal arrived (machine too fast for 256 MiB)";
  EXPECT_EQ(rc, 128 + sig) << read_all(log);
  EXPECT_TRUE(names(dir).empty()) << names(dir).size() << " entries left, first " << names(dir).front();
  EXPECT_NE(read_all(log).find("no temp file left"), std::string::npos) << read_all(log);
}

INSTANTIATE_TEST_SUITE_P(IntTerm, TableCreateStop, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& p) { return p.param == SIGINT ? "SIGINT" : "SIGTERM"; });

TEST(TableCreateKill, AfterSigkillTheNextCreateRemovesAndNamesTheStaleTempFile) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("/tmp", "engram-create-kill");
  const std::string log = dir.path + "/log.txt";
  const int pid = spawn_cli(create_args(dir), log);
  ASSERT_TRUE(wait_for_temp(dir, pid)) << read_all(log);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_exit(pid), 1000 + SIGKILL);
  std::string stale;
  for (auto& n : names(dir))
    if (n.rfind(".engram-owner.", 0) != 0) stale = n;
  ASSERT_FALSE(stale.empty()) << "SIGKILL left no temp file: nothing to test";
  const std::string log2 = dir.path + "/log2.txt";
  std::vector<std::string> small = {"table", "create", "--layout", "tiny", "--out", dir.path + "/u.safetensors"};
  const int pid2 = spawn_cli(small, log2);
  EXPECT_EQ(wait_exit(pid2), 0) << read_all(log2);
  const std::string said = read_all(log2);
  EXPECT_NE(said.find("removed " + dir.path + "/" + stale), std::string::npos) << said;
  EXPECT_NE(said.find("is gone"), std::string::npos) << said;
  std::vector<std::string> left;
  for (auto& n : names(dir))
    if (n != "log2.txt") left.push_back(n);
  ASSERT_EQ(left.size(), 1u) << "expected only the new checkpoint, first " << left.front();
  EXPECT_EQ(left[0], "u.safetensors");
}

// The same for a synthetic model directory (--format hf-model): the shards are written into a hidden temporary
// directory beside --out; a termination signal stops the writers and removes that directory.
class ModelCreateStop : public ::testing::TestWithParam<int> {};

TEST_P(ModelCreateStop, SignalRemovesTheTemporaryDirectory) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const int sig = GetParam();
  TempDir dir("/tmp", "engram-model-signal");
  const std::string log = dir.path + "/log.txt";
  const int pid = spawn_cli({"table", "create", "--format", "hf-model", "--layout", "v41-flash-mini", "--table-size",
                             "256MiB", "--threads", "1", "--tokenizer-json", "none", "--progress", "never", "--out",
                             dir.path + "/m"},
                            log);
  ASSERT_TRUE(wait_for_temp(dir, pid)) << read_all(log);
  ASSERT_EQ(kill(pid, sig), 0);
  const int rc = wait_exit(pid);
  if (rc == 0) GTEST_SKIP() << "the write finished before the signal arrived (machine too fast for 256 MiB)";
  EXPECT_EQ(rc, 128 + sig) << read_all(log);
  EXPECT_TRUE(names(dir).empty()) << names(dir).size() << " entries left, first " << names(dir).front();
  EXPECT_NE(read_all(log).find("no temporary directory left"), std::string::npos) << read_all(log);
}

INSTANTIATE_TEST_SUITE_P(IntTermHup, ModelCreateStop, ::testing::Values(SIGINT, SIGTERM, SIGHUP), [](const auto& p) {
  return p.param == SIGINT ? "SIGINT" : p.param == SIGTERM ? "SIGTERM" : "SIGHUP";
});

// SIGKILL leaves the temporary model directory and its owner record; `engram cleanup --dir` removes both (the
// owner is dead) and names the directory.
TEST(ModelCreateKill, CleanupRemovesTheDeadWritersTemporaryDirectory) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("/tmp", "engram-model-kill");
  const std::string log = dir.path + "/log.txt";
  const int pid = spawn_cli({"table", "create", "--format", "hf-model", "--layout", "v41-flash-mini", "--table-size",
                             "256MiB", "--threads", "1", "--tokenizer-json", "none", "--progress", "never", "--out",
                             dir.path + "/m"},
                            log);
  ASSERT_TRUE(wait_for_temp(dir, pid)) << read_all(log);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_exit(pid), 1000 + SIGKILL);
  std::string stale;
  for (auto& n : names(dir))
    if (n.rfind(".engram-owner.", 0) != 0) stale = n;
  ASSERT_FALSE(stale.empty()) << "SIGKILL left no temporary directory: nothing to test";
  const std::string log2 = dir.path + "/log2.txt";
  const int pid2 = spawn_cli({"cleanup", "--dir", dir.path}, log2);
  EXPECT_EQ(wait_exit(pid2), 0) << read_all(log2);
  EXPECT_NE(read_all(log2).find(stale), std::string::npos) << read_all(log2);
  for (auto& n : names(dir)) EXPECT_TRUE(n == "log2.txt") << n << " left after cleanup";
}
