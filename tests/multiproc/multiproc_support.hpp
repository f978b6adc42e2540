// Helpers of the multi-process tests: run a function in a forked child that reports a JSON object
// back through a pipe, collect it with a bounded wait, make private temporary directories, read a
// mapping's Rss/Pss from /proc/self/smaps.
//
// Children never return into GoogleTest: they write their JSON and _exit. A child that dies (kill -9)
// reports nothing; the parent then sees {"killed": signal}. Fork children before the parent starts
// threads (the table's prefault threads are joined before create() returns, so a group made in the
// parent is fine).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "engram/status.hpp"

namespace engram::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

struct Child {
  int pid = -1;
  int read_fd = -1;
};

// Forks a child that runs fn() and writes its JSON to the parent.
inline Child fork_child(const std::function<nlohmann::json()>& fn) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  std::fflush(nullptr);
  const int pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string out;
    {
      nlohmann::json j = fn();
      out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    size_t off = 0;
    while (off < out.size()) {
      const ssize_t n = write(p[1], out.data() + off, out.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(p[1]);
    _exit(0);
  }
  close(p[1]);
  return {pid, p[0]};
}

// Reads the child's JSON (waiting at most `limit`) and reaps it. A child still running at the limit is
// killed and reported as {"hung": true}.
inline nlohmann::json collect(Child& c, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool hung = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{c.read_fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = read(c.read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(c.read_fd);
  c.read_fd = -1;
  if (hung) kill(c.pid, SIGKILL);
  int st = 0;
  waitpid(c.pid, &st, 0);
  c.pid = -1;
  if (hung) return {{"hung", true}};
  if (WIFSIGNALED(st) && text.empty()) return {{"killed", WTERMSIG(st)}};
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return {{"garbage", text}};
  return j;
}

inline nlohmann::json status_json(const Status& s) {
  return {{"code", static_cast<int>(s.code())}, {"code_name", code_name(s.code())}, {"message", s.message()},
          {"ok", s.is_ok()}};
}

// A fresh directory (mode 0700) under `parent`; removed (recursively) by the destructor.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& parent = "/tmp", const std::string& tag = "engram-mp") {
    path = parent + "/" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(rng()() % 1000000000);
    std::filesystem::create_directories(path);
    chmod(path.c_str(), 0700);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Entries in the directory (named tables that survived, sockets).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(path, ec)) out.push_back(e.path().filename().string());
    return out;
  }
  // Waits (bounded) until no entry whose name starts with `prefix` is left; returns those left.
  std::vector<std::string> wait_until_no(const std::string& prefix, std::chrono::seconds limit = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::vector<std::string> left;
      for (auto& n : entries())
        if (n.rfind(prefix, 0) == 0) left.push_back(n);
      if (left.empty() || std::chrono::steady_clock::now() > deadline) return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

// Rss and Pss (bytes) of the mapping that starts at `addr`, from /proc/self/smaps; -1 when not found.
inline std::pair<int64_t, int64_t> smaps_rss_pss(const void* addr) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  int64_t rss = -1, pss = -1;
  char want[32];
  std::snprintf(want, sizeof want, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(addr)));
  while (std::getline(f, line)) {
    const bool header = !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
                        line.find('-') != std::string::npos && line.find(':') > line.find(' ');
    if (header) {
      if (in) break;
      in = line.rfind(want, 0) == 0;
      continue;
    }
    if (!in) continue;
    long long kb = 0;
    if (std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) rss = kb * 1024;
    if (std::sscanf(line.c_str(), "Pss: %lld kB", &kb) == 1) pss = kb * 1024;
  }
  return {rss, pss};
}

// FNV-1a 64 over a byte range (volatile reads: the point is to touch every page).
inline uint64_t fnv64(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const volatile uint8_t*>(p)[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace engram::test
