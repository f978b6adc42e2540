// Kill matrix of the CLI (the library-level matrix is test_kill_matrix.cpp): `engram serve-table --backing
// shm` killed while it builds its table (alone: its guardian cleans; with its process group: the next
// serve-table's start sweep cleans and names what it removed) and `engram run --ranks 2 --backing shm` killed
// with its group (the next start: `engram cleanup` or another `engram run --ranks`). Instants are drawn
// (fixed seed) inside a calibration run's duration; the assertions are on what is left, never on timing.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <thread>

#include "multiproc_support.hpp"
#include "support/cli.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kSeed = 20;  // the kill instants are drawn from kSeed + 1

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct CliProc {
  int pid = -1;
  int out_fd = -1;  // stdout (serve-table --json events) or -1
};

// fork + exec of the CLI in a new process group, XDG_RUNTIME_DIR set, stdout to a pipe (or to
// /dev/null: a report nobody reads must not end the process with SIGPIPE), stderr to `err_log`.
CliProc spawn_cli(const std::vector<std::string>& args, const std::string& xdg, const std::string& err_log,
                  bool stdout_pipe = true) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  std::fflush(nullptr);
  const int pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    if (stdout_pipe) {
      dup2(p[1], 1);
    } else {
      const int null_fd = open("/dev/null", O_WRONLY);
      dup2(null_fd, 1);
    }
    close(p[0]);
    close(p[1]);
    const int fd = open(err_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) dup2(fd, 2);
    setenv("XDG_RUNTIME_DIR", xdg.c_str(), 1);
    std::vector<std::string> copy = args;
    static std::string exe = ENGRAM_CLI_PATH;
    std::vector<char*> argv{exe.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(p[1]);
  return {pid, p[0]};
}

// Reads stdout until a line that parses as JSON with "event" == `event` (or EOF / the bound).
json read_event(int fd, const std::string& event, double bound_ms) {
  std::string buf;
  const auto t0 = Clock::now();
  while (ms_since(t0) < bound_ms) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 50) <= 0) continue;
    char b[65536];
    const ssize_t n = read(fd, b, sizeof b);
    if (n <= 0) break;
    buf.append(b, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      auto j = json::parse(buf.substr(0, nl), nullptr, false);
      buf.erase(0, nl + 1);
      if (j.is_object() && j.value("event", "") == event) return j;
    }
  }
  return nullptr;
}

// Waits for the whole process group `pgid` to be gone (reaping what comes back to us).
bool wait_group_gone(int pgid, double bound_ms) {
  const auto t0 = Clock::now();
  while (ms_since(t0) < bound_ms) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  (void)kill(-pgid, SIGKILL);
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct CliDirs {
  TempDir xdg{"/tmp", "engram-km-xdg"};
  TempDir shm{"/dev/shm", "engram-km-cli-shm"};
  std::string sock_dir() const { return xdg.path + "/engram"; }
  std::vector<std::string> left() const {
    std::vector<std::string> out;
    for (auto& n : shm.entries()) out.push_back(shm.path + "/" + n);
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(sock_dir(), ec)) out.push_back(e.path().string());
    return out;
  }
};

}  // namespace

TEST(KillMatrixCli, ServeTableAndRunRanksKilledThenTheNextStartSweeps) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::mt19937_64 pick(kSeed + 1);
  auto serve_args = [](const CliDirs& d) {
    return std::vector<std::string>{"serve-table", "--table-size", "64MiB", "--backing", "shm", "--shm-dir",
                                    d.shm.path,   "--json"};
  };
  // Calibration: how long serve-table takes to build its table.
  double build_ms = 0;
  {
    CliDirs d;
    const auto t0 = Clock::now();
    CliProc p = spawn_cli(serve_args(d), d.xdg.path, d.xdg.path + "/err.txt");
    const json ready = read_event(p.out_fd, "ready", 60000);
    build_ms = ms_since(t0);
    ASSERT_FALSE(ready.is_null()) << read_file(d.xdg.path + "/err.txt");
    kill(p.pid, SIGTERM);
    close(p.out_fd);
    ASSERT_TRUE(wait_group_gone(p.pid, 30000));
    ASSERT_TRUE(d.left().empty()) << d.left().front();
  }
  int trials = 0, left_by_kill = 0, swept = 0;
  for (int i = 0; i < 6; ++i) {
    const bool whole_group = i % 2 == 1;
    CliDirs d;
    const double at = build_ms * std::uniform_real_distribution<double>(0.05, 0.95)(pick);
    CliProc p = spawn_cli(serve_args(d), d.xdg.path, d.xdg.path + "/err.txt");
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(at * 1000)));
    (void)kill(whole_group ? -p.pid : p.pid, SIGKILL);
    close(p.out_fd);
    ASSERT_TRUE(wait_group_gone(p.pid, 30000));
    const auto before = d.left();
    left_by_kill += static_cast<int>(before.size());
    const std::string what = std::string("serve-table killed ") + (whole_group ? "with its group" : "alone") +
                             " at " + std::to_string(at) + " ms of a " + std::to_string(build_ms) + " ms build";
    // The guardian outlives a leader killed alone: it removes the files and the socket itself.
    if (!whole_group) {
      EXPECT_TRUE(before.empty()) << what << ": left " << before.front();
    }
    // The next start: another serve-table on the same directories.
    CliProc next = spawn_cli(serve_args(d), d.xdg.path, d.xdg.path + "/err.txt");
    const json ready = read_event(next.out_fd, "ready", 60000);
    ASSERT_FALSE(ready.is_null()) << what << ": " << read_file(d.xdg.path + "/err.txt");
    std::set<std::string> removed;
    for (const auto& r : ready["swept"]["removed"]) removed.insert(r["path"].get<std::string>());
    swept += static_cast<int>(removed.size());
    for (const auto& b : before)
      EXPECT_TRUE(removed.count(b) || b.find(".engram-owner.") != std::string::npos)
          << what << ": the next start did not name " << b << "; it said " << ready["swept"].dump();
    kill(next.pid, SIGTERM);
    close(next.out_fd);
    ASSERT_TRUE(wait_group_gone(next.pid, 30000));
    EXPECT_TRUE(d.left().empty()) << what << ": " << d.left().front();
    ++trials;
  }
  // engram run --ranks 2 --backing shm, killed with its whole group.
  auto run_args = [](const CliDirs& d) {
    return std::vector<std::string>{"run",         "--ranks",  "2",    "--backing", "shm",  "--shm-dir",
                                    d.shm.path,    "--table-size", "64MiB", "--ids", "zipf", "--steps",
                                    "8",           "--warmup", "1",    "--batch",   "8",    "--layer-us",
                                    "20",          "--no-baseline", "--timeline", "none", "--json"};
  };
  double run_ms = 0;
  {
    CliDirs d;
    const auto t0 = Clock::now();
    CliProc p = spawn_cli(run_args(d), d.xdg.path, d.xdg.path + "/err.txt", false);
    close(p.out_fd);
    ASSERT_TRUE(wait_group_gone(p.pid, 120000));
    run_ms = ms_since(t0);
    ASSERT_TRUE(d.left().empty()) << d.left().front();
  }
  for (int i = 0; i < 3; ++i) {
    CliDirs d;
    const double at = run_ms * std::uniform_real_distribution<double>(0.05, 0.8)(pick);
    CliProc p = spawn_cli(run_args(d), d.xdg.path, d.xdg.path + "/err.txt", false);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(at * 1000)));
    (void)kill(-p.pid, SIGKILL);
    close(p.out_fd);
    ASSERT_TRUE(wait_group_gone(p.pid, 30000));
    const auto before = d.left();
    left_by_kill += static_cast<int>(before.size());
    const std::string what = "run --ranks 2 killed with its group at " + std::to_string(at) + " ms of " +
                             std::to_string(run_ms) + " ms";
    if (i == 1) {
      // The next start is another run: its leader sweeps first and says so on stderr.
      const std::string err = d.xdg.path + "/next.txt";
      CliProc next = spawn_cli(run_args(d), d.xdg.path, err, false);
      close(next.out_fd);
      ASSERT_TRUE(wait_group_gone(next.pid, 120000));
      for (const auto& b : before) {
        if (b.find(".engram-owner.") != std::string::npos) continue;
        EXPECT_NE(read_file(err).find("removed " + b), std::string::npos) << what << ": " << read_file(err);
      }
    } else {
      // (A run killed before it made its socket directory has nothing there to sweep.)
      std::string dirs = "--dir " + d.shm.path;
      if (std::filesystem::is_directory(d.sock_dir())) dirs += " --dir " + d.sock_dir();
      auto r = engram::testing::run_engram_split("cleanup --json " + dirs, d.xdg.path);
      EXPECT_EQ(r.code, 0) << r.err;
      const json j = json::parse(r.out, nullptr, false);
      ASSERT_TRUE(j.is_object()) << r.out;
      swept += static_cast<int>(j["removed"].size());
    }
    EXPECT_TRUE(d.left().empty()) << what << ": " << d.left().front();
    ++trials;
  }
  std::printf("CLI trials %d: objects left by the kills %d, named and removed by the next start %d, left 0\n",
              trials, left_by_kill, swept);
}
