// Ctrl-C (SIGINT to the process group) or SIGTERM at a random moment of `engram run --backing shm`, `replay
// --backing shm`, `census --backing shm` or `table create` left the named table in the shm directory (until
// `engram cleanup`) or a temp file in the output directory: every such command now leaves nothing (its table's
// guardian, or the writer's own handler, removes what it made). And a process killed together with its guardian
// (SIGKILL of the group) leaves its table to the next single-process run, which sweeps it and says so. SIGQUIT and
// the user signals, whose default action also ends the process, clean up the same way.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "multiproc_support.hpp"
#include "support/cli.hpp"

using namespace engram::test;

namespace {

int spawn_cli_group(const std::vector<std::string>& args, const std::string& log) {
  return engram::testing::spawn_engram(args, log, /*own_group=*/true);
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Exit code, or 1000 + signal.
int wait_exit(int pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

// The commands, each building a 64 MiB table (or writing a checkpoint) in `shm` / `out`.
std::vector<std::vector<std::string>> commands(const std::string& shm, const std::string& out) {
  return {
      {"run", "--layout", "v41-flash-mini", "--table-size", "64MiB", "--backing", "shm", "--shm-dir", shm, "--backend",
       "cpu", "--ids", "zipf", "--steps", "40", "--batch", "8", "--layer-us", "100", "--timeline", "none",
       "--threads", "1"},
      {"replay", "--table-size", "64MiB", "--backing", "shm", "--shm-dir", shm, "--backend", "cpu", "--ids", "zipf",
       "--requests", "6", "--rate", "50", "--prompt", "64", "--output", "8", "--threads", "1"},
      {"census", "--table-size", "64MiB", "--backing", "shm", "--shm-dir", shm},
      {"table", "create", "--layout", "v41-flash-mini", "--table-size", "64MiB", "--threads", "1", "--out",
       out + "/t.safetensors"},
  };
}

}  // namespace

TEST(CliSignals, IntAndTermAtRandomMomentsLeaveNothing) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 gen(seed);
  std::printf("[signals] seed %llu\n", static_cast<unsigned long long>(seed));
  TempDir logs("/tmp", "engram-sig-logs");
  int trials = 0, interrupted = 0;
  // Two rounds of every command x signal, each at its own random delay.
  for (int trial = 0; trial < 16; ++trial) {
    const size_t c = static_cast<size_t>(trial / 2) % 4;
    const int sig = trial % 2 == 0 ? SIGINT : SIGTERM;
    {
      TempDir shm("/dev/shm", "engram-sig-shm");
      TempDir out("/tmp", "engram-sig-out");
      const auto args = commands(shm.path, out.path)[c];
      const std::string what = args[0] + (sig == SIGINT ? " SIGINT" : " SIGTERM");
      const std::string log = logs.path + "/log.txt";
      const int pid = spawn_cli_group(args, log);
      const int delay_ms = static_cast<int>(gen() % 700);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      // SIGINT as a terminal sends it (the whole process group); SIGTERM as kill(1) does (the process).
      if (sig == SIGINT) (void)kill(-pid, sig);
      else (void)kill(pid, sig);
      const int rc = wait_exit(pid);
      const std::string said = read_all(log);
      ++trials;
      if (rc != 0) ++interrupted;
      EXPECT_TRUE(rc == 0 || rc == 128 + sig || rc == 1000 + sig) << what << " after " << delay_ms << " ms: " << rc << "\n" << said;
      EXPECT_EQ(said.find("terminate called"), std::string::npos) << what << "\n" << said;
      // The guardian unlinks once it sees its parent gone: give it a moment.
      const auto left = shm.wait_until_no("", std::chrono::seconds(10));
      EXPECT_TRUE(left.empty()) << what << " after " << delay_ms << " ms left " << left.size() << " in the shm dir, first "
                                << left.front() << "\n" << said;
      // A command that finished before the signal keeps what it was asked to write, and only that.
      std::vector<std::string> left_out;
      for (auto& n : out.entries())
        if (!(rc == 0 && n == "t.safetensors")) left_out.push_back(n);
      EXPECT_TRUE(left_out.empty()) << what << " after " << delay_ms << " ms left " << left_out.front() << " in the output dir\n"
                                    << said;
    }
  }
  std::printf("[signals] %d trials, %d stopped by the signal\n", trials, interrupted);
}

namespace {

// The pids of the processes whose parent is `parent` and whose command line holds `word`.
std::vector<int> children_with(int parent, const std::string& word) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
    std::string cmd = read_all((e.path() / "cmdline").string());
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(word) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// Whether `pid` has ended (gone, or a zombie its new parent has not reaped yet).
bool ended(int pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return stat.empty() || close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z');
}

}  // namespace

// The leader of `run --ranks 2` and of `soak --ranks 2`, signalled alone once its two workers exist: the workers
// end with it (they would otherwise wait out their join or round and hold its stdout), and nothing stays in the shm
// dir.
TEST(CliSignals, RankWorkersEndWithTheirLeader) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir logs("/tmp", "engram-sig-logs");
  struct Case {
    std::string worker;
    std::vector<std::string> args;
  };
  for (const int sig : {SIGINT, SIGTERM}) {
    TempDir shm("/dev/shm", "engram-sig-ranks");
    const std::vector<Case> cases = {
        {"rank-worker",
         {"run", "--layout", "v41-flash-mini", "--table-size", "64MiB", "--backing", "shm", "--shm-dir", shm.path,
          "--backend", "cpu", "--ranks", "2", "--steps", "16", "--timeline", "none", "--progress", "never",
          "--threads", "1"}},
        {"soak-worker",
         {"soak", "--duration", "60s", "--round", "30s", "--ranks", "2", "--table-size", "16MiB", "--backing",
          "memfd", "--threads", "1"}},
    };
    for (const auto& c : cases) {
      const std::string log = logs.path + "/log.txt";
      const std::string what = (sig == SIGINT ? "SIGINT to " : "SIGTERM to ") + c.args[0];
      const int pid = spawn_cli_group(c.args, log);
      std::vector<int> workers;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (workers.size() < 2 && std::chrono::steady_clock::now() < deadline && !ended(pid)) {
        workers = children_with(pid, c.worker);
        if (workers.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      ASSERT_EQ(workers.size(), 2u) << what << ": the two " << c.worker << "s were not seen\n" << read_all(log);
      (void)kill(pid, sig);  // the leader only, as kill(1) does
      const int rc = wait_exit(pid);
      EXPECT_TRUE(rc == 0 || rc == 1 || rc == 128 + sig || rc == 1000 + sig) << what << ": " << rc << "\n"
                                                                             << read_all(log);
      // The kernel kills a worker when its leader ends; give the scheduler a moment, far below the join timeout.
      for (const int w : workers) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!ended(w) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_TRUE(ended(w)) << what << ": " << c.worker << " " << w << " outlived its leader\n" << read_all(log);
        if (!ended(w)) (void)kill(w, SIGKILL);
      }
    }
    const auto left = shm.wait_until_no("", std::chrono::seconds(10));
    EXPECT_TRUE(left.empty()) << "left " << left.size() << " in the shm dir, first " << left.front();
  }
}

TEST(CliSignals, ARunSweepsTheTableOfAKilledGroup) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir shm("/dev/shm", "engram-sig-sweep");
  TempDir logs("/tmp", "engram-sig-logs");
  const auto args = commands(shm.path, logs.path)[0];
  const int pid = spawn_cli_group(args, logs.path + "/log.txt");
  // Wait for the table file, then kill the group: the guardian dies with it, the file stays.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool made = false;
  while (!made && std::chrono::steady_clock::now() < deadline) {
    for (auto& n : shm.entries())
      if (n.rfind("engram", 0) == 0) made = true;
    if (!made) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(made) << read_all(logs.path + "/log.txt");
  (void)kill(-pid, SIGKILL);
  ASSERT_EQ(wait_exit(pid), 1000 + SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (shm.entries().empty()) GTEST_SKIP() << "the guardian removed the table before it was killed: nothing to sweep";
  auto small = args;
  for (size_t i = 0; i + 1 < small.size(); ++i)
    if (small[i] == "--steps") small[i + 1] = "1";
  const std::string log2 = logs.path + "/log2.txt";
  const int pid2 = spawn_cli_group(small, log2);
  EXPECT_EQ(wait_exit(pid2), 0) << read_all(log2);
  const std::string said = read_all(log2);
  EXPECT_NE(said.find("engram run: removed " + shm.path + "/engram"), std::string::npos) << said;
  EXPECT_NE(said.find("is gone"), std::string::npos) << said;
  EXPECT_TRUE(shm.wait_until_no("", std::chrono::seconds(10)).empty());
}

// Ctrl-\ (SIGQUIT, to the process group as a terminal sends it) and the user signals SIGUSR1 / SIGUSR2 (to the
// process, and to the group) end a command like SIGTERM does: by their default action for `engram run` (SIGQUIT
// dumps core where core files are enabled; they are off here), at the next chunk with exit 128 + signal for
// `table create`, and its table or temp file is removed in both cases, the guardian surviving a group signal.
TEST(CliSignals, QuitAndUserSignalsCleanUpLikeTerm) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  struct rlimit no_core{0, 0};
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &no_core), 0);  // inherited by the spawned commands
  TempDir logs("/tmp", "engram-sig-logs");
  struct Case {
    int sig;
    bool group;
  };
  for (const Case c : {Case{SIGQUIT, true}, Case{SIGUSR1, false}, Case{SIGUSR2, true}}) {
    // engram run, signalled once its table is in the shm directory (long enough to be still running).
    {
      TempDir shm("/dev/shm", "engram-sig-shm");
      auto args = commands(shm.path, logs.path)[0];
      for (size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--steps") args[i + 1] = "1000000";
      const std::string what = "run " + std::string(strsignal(c.sig)) + (c.group ? " (group)" : "");
      const std::string log = logs.path + "/run.txt";
      const int pid = spawn_cli_group(args, log);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      bool made = false;
      while (!made && std::chrono::steady_clock::now() < deadline) {
        for (auto& n : shm.entries())
          if (n.rfind("engram", 0) == 0) made = true;
        if (!made) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      EXPECT_TRUE(made) << what << "\n" << read_all(log);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      (void)kill(c.group ? -pid : pid, c.sig);
      const int rc = wait_exit(pid);
      const std::string said = read_all(log);
      EXPECT_EQ(rc, 1000 + c.sig) << what << "\n" << said;
      EXPECT_EQ(said.find("terminate called"), std::string::npos) << what << "\n" << said;
      const auto left = shm.wait_until_no("", std::chrono::seconds(10));
      EXPECT_TRUE(left.empty()) << what << " left " << left.size() << " in the shm dir, first " << left.front() << "\n"
                                << said;
    }
    // engram table create: its stop handler removes the partial file.
    {
      TempDir out("/tmp", "engram-sig-out");
      const auto args = commands(logs.path, out.path)[3];
      const std::string what = "table create " + std::string(strsignal(c.sig));
      const std::string log = logs.path + "/create.txt";
      const int pid = spawn_cli_group(args, log);
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      (void)kill(c.group ? -pid : pid, c.sig);
      const int rc = wait_exit(pid);
      const std::string said = read_all(log);
      // Done before the signal, stopped by its handler, or (a signal before the handler is installed, under load)
      // ended by the default action before anything was written.
      EXPECT_TRUE(rc == 0 || rc == 128 + c.sig || rc == 1000 + c.sig) << what << ": " << rc << "\n" << said;
      std::vector<std::string> left_out;
      for (auto& n : out.entries())
        if (!(rc == 0 && n == "t.safetensors")) left_out.push_back(n);
      EXPECT_TRUE(left_out.empty()) << what << " left " << left_out.front() << " in the output dir\n" << said;
    }
  }
}
