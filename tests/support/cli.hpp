// Runs the `engram` CLI built with the tests (ENGRAM_CLI_PATH) through the shell and captures its output, so CLI
// tests check what a user sees: exit code and stdout (stderr discarded or merged).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace engram::testing {

struct CliResult {
  int code = -1;    // exit status; -1 when the process did not exit normally or could not start
  std::string out;  // stdout (and stderr when merged)
};

enum class CliStderr { kDiscard, kMerge };

// Empty when the CLI binary exists; otherwise the reason a test that drives it must skip (GTEST_SKIP() << it).
// The CLI is missing in a build that makes only the test executables, e.g. `scripts/sanitize asan`.
inline std::string cli_missing() {
  if (::access(ENGRAM_CLI_PATH, X_OK) == 0) return "";
  return std::string("the engram CLI is not built (") + ENGRAM_CLI_PATH + ")";
}

// Runs the shell command `cmd` and captures its stdout.
inline CliResult run_shell(const std::string& cmd) {
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline CliResult run_engram(const std::string& args, CliStderr err = CliStderr::kDiscard) {
  return run_shell(std::string(ENGRAM_CLI_PATH) + " " + args + (err == CliStderr::kMerge ? " 2>&1" : " 2>/dev/null"));
}

// Exit code, stdout and stderr apart (stderr goes through `dir`/stderr.txt, which is overwritten).
struct CliSplitResult {
  int code = -1;
  std::string out;
  std::string err;
};

// `engram ARGS` run by the shell after `prefix` (e.g. "env -i PATH=... "): stdout captured, stderr through
// dir/stderr.txt.
inline CliSplitResult run_engram_split(const std::string& args, const std::filesystem::path& dir,
                                       const std::string& prefix = "") {
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd = prefix + ENGRAM_CLI_PATH + " " + args + " 2>" + err.string();
  CliSplitResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream ef(err);
  r.err.assign(std::istreambuf_iterator<char>(ef), std::istreambuf_iterator<char>());
  return r;
}

// fork + exec of `engram ARGS` with stdout and stderr into `log`, returning the child's pid. own_group: the child
// leads a process group of its own, so that a signal can go to the group as a terminal's Ctrl-C does.
inline int spawn_engram(const std::vector<std::string>& args, const std::string& log, bool own_group = false) {
  std::fflush(nullptr);
  const int pid = fork();
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    static std::string exe = ENGRAM_CLI_PATH;
    argv.push_back(exe.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  if (own_group) setpgid(pid, pid);  // also from the parent: a signal sent next must not race the child's own call
  return pid;
}

}  // namespace engram::testing
