// Fault injection table (see fault.hpp). The table is a small map behind a mutex; an atomic count
// of installed faults (plus one while a call trace or an n-th-call fault is armed) keeps the common
// no-fault path to one load.
#include "fault.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace engram::sys {
namespace {

struct FaultTable {
  std::mutex mu;
  std::map<std::string, int> faults;
  std::atomic<int> count{0};  // faults.size() + tracing + (nth_call armed)
  bool env_read = false;
  bool tracing = false;
  std::vector<std::string> trace;
  uint64_t nth_call = 0;  // 0: disarmed; else calls left until the one that fails (1 = the next)
  int nth_err = 0;
};

void recount_locked(FaultTable& t) {
  t.count.store(static_cast<int>(t.faults.size()) + (t.tracing ? 1 : 0) + (t.nth_call != 0 ? 1 : 0),
                std::memory_order_relaxed);
}

FaultTable& table() {
  static FaultTable t;
  return t;
}

Result<std::map<std::string, int>> parse_spec(const std::string& spec) {
  std::map<std::string, int> faults;
  if (spec.empty()) return faults;
  size_t pos = 0;
  for (;;) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    if (item.empty()) return Status(Code::kInvalidArgument, "fault spec has an empty item (a comma too many)");
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status(Code::kInvalidArgument, "fault spec item '" + item + "' is not name=ERRNO");
    const std::string name = item.substr(0, eq);
    if (name != "*" && !is_fault_point(name)) {
      std::string known;
      for (const char* n : kFaultPoints) known += (known.empty() ? "" : ", ") + std::string(n);
      return Status(Code::kInvalidArgument, "fault spec: '" + name + "' is no fault point (known: " + known + ", or * for all)");
    }
    const int err = errno_from_name(item.substr(eq + 1));
    if (err <= 0) return Status(Code::kInvalidArgument, "fault spec: unknown errno '" + item.substr(eq + 1) + "'");
    faults[name] = err;
    if (comma == spec.size()) return faults;
    pos = comma + 1;
  }
}

// A malformed ENGRAM_FAULT installs nothing here; check_fault_env() is how a program refuses it up front.
void read_env_locked(FaultTable& t) {
  if (t.env_read) return;
  t.env_read = true;
  const char* spec = std::getenv("ENGRAM_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  auto faults = parse_spec(spec);
  if (!faults.is_ok()) return;
  for (const auto& [name, err] : *faults) t.faults[name] = err;
  recount_locked(t);
}

// The environment is read lazily but must count as "maybe a fault" until read.
std::atomic<bool> g_env_checked{false};

}  // namespace

bool is_fault_point(const std::string& name) {
  for (const char* n : kFaultPoints)
    if (name == n) return true;
  return false;
}

int errno_from_name(const std::string& name) {
  if (name.empty()) return -1;
  bool digits = true;
  for (char c : name) digits = digits && c >= '0' && c <= '9';
  if (digits) {
    int v = 0;
    const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
    return ec == std::errc() && p == name.data() + name.size() && v > 0 && v < 4096 ? v : -1;
  }
  static const std::pair<const char*, int> kNames[] = {
      {"EPERM", EPERM},   {"ENOENT", ENOENT},   {"EINTR", EINTR},     {"EIO", EIO},
      {"EBADF", EBADF},   {"EAGAIN", EAGAIN},   {"ENOMEM", ENOMEM},   {"EACCES", EACCES},
      {"EFAULT", EFAULT}, {"EBUSY", EBUSY},     {"EEXIST", EEXIST},   {"EXDEV", EXDEV},
      {"ENODEV", ENODEV}, {"EINVAL", EINVAL},   {"EMFILE", EMFILE},   {"EFBIG", EFBIG},
      {"ENOSPC", ENOSPC}, {"ESPIPE", ESPIPE},   {"EROFS", EROFS},     {"ENOSYS", ENOSYS},
      {"ELOOP", ELOOP},   {"EOPNOTSUPP", EOPNOTSUPP}, {"ETIMEDOUT", ETIMEDOUT},
      {"ESRCH", ESRCH},   {"E2BIG", E2BIG},
  };
  for (const auto& [n, v] : kNames)
    if (name == n) return v;
  return -1;
}

int fault_errno(const char* wrapper) noexcept {
  FaultTable& t = table();
  if (g_env_checked.load(std::memory_order_acquire) && t.count.load(std::memory_order_relaxed) == 0)
    return 0;
  std::lock_guard<std::mutex> lock(t.mu);
  read_env_locked(t);
  g_env_checked.store(true, std::memory_order_release);
  if (t.tracing) t.trace.emplace_back(wrapper);
  if (t.nth_call != 0 && --t.nth_call == 0) {
    const int err = t.nth_err;
    recount_locked(t);
    return err;
  }
  auto it = t.faults.find(wrapper);
  if (it == t.faults.end()) it = t.faults.find("*");
  return it == t.faults.end() ? 0 : it->second;
}

void set_fault_at_call(uint64_t n, int err) {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  read_env_locked(t);
  g_env_checked.store(true, std::memory_order_release);
  t.nth_call = err == 0 ? 0 : n;
  t.nth_err = err;
  recount_locked(t);
}

bool fault_at_call_pending() {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.nth_call != 0;
}

void start_call_trace() {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  read_env_locked(t);
  g_env_checked.store(true, std::memory_order_release);
  t.tracing = true;
  t.trace.clear();
  recount_locked(t);
}

std::vector<std::string> stop_call_trace() {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.tracing = false;
  recount_locked(t);
  return std::exchange(t.trace, {});
}

void set_fault(const std::string& wrapper, int err) {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  read_env_locked(t);
  g_env_checked.store(true, std::memory_order_release);
  if (err == 0)
    t.faults.erase(wrapper);
  else
    t.faults[wrapper] = err;
  recount_locked(t);
}

void clear_faults() {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.env_read = true;
  g_env_checked.store(true, std::memory_order_release);
  t.faults.clear();
  t.nth_call = 0;
  t.nth_err = 0;
  recount_locked(t);
}

Status set_faults_from_spec(const std::string& spec) {
  ENGRAM_ASSIGN_OR_RETURN(const auto faults, parse_spec(spec));
  for (const auto& [name, err] : faults) set_fault(name, err);
  return Status::ok();
}

Status check_fault_env() {
  const char* spec = std::getenv("ENGRAM_FAULT");
  if (spec == nullptr || *spec == '\0') return Status::ok();
  const auto faults = parse_spec(spec);
  if (!faults.is_ok())
    return Status(Code::kInvalidArgument, std::string("ENGRAM_FAULT='") + spec + "': " + faults.status().message() +
                                              " (expected name=ERRNO[,name=ERRNO...], e.g. mbind=EPERM)");
  return Status::ok();
}

}  // namespace engram::sys
