// Fault injection table (see fault.hpp). The table is a small map behind a mutex; an atomic count
// of installed faults keeps the common no-fault path to one load.
#include "fault.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace engram::sys {
namespace {

struct FaultTable {
  std::mutex mu;
  std::map<std::string, int> faults;
  std::atomic<int> count{0};
  bool env_read = false;
};

FaultTable& table() {
  static FaultTable t;
  return t;
}

void read_env_locked(FaultTable& t) {
  if (t.env_read) return;
  t.env_read = true;
  const char* spec = std::getenv("ENGRAM_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  std::string s(spec);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const int err = errno_from_name(item.substr(eq + 1));
      if (err > 0) t.faults[item.substr(0, eq)] = err;
    }
    pos = comma + 1;
  }
  t.count.store(static_cast<int>(t.faults.size()), std::memory_order_relaxed);
}

// The environment is read lazily but must count as "maybe a fault" until read.
std::atomic<bool> g_env_checked{false};

}  // namespace

int errno_from_name(const std::string& name) {
  if (name.empty()) return -1;
  bool digits = true;
  for (char c : name) digits = digits && c >= '0' && c <= '9';
  if (digits) return std::atoi(name.c_str());
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
  auto it = t.faults.find(wrapper);
  return it == t.faults.end() ? 0 : it->second;
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
  t.count.store(static_cast<int>(t.faults.size()), std::memory_order_relaxed);
}

void clear_faults() {
  FaultTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.env_read = true;
  g_env_checked.store(true, std::memory_order_release);
  t.faults.clear();
  t.count.store(0, std::memory_order_relaxed);
}

Status set_faults_from_spec(const std::string& spec) {
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status(Code::kInvalidArgument, "fault spec item '" + item + "' is not name=ERRNO");
    const int err = errno_from_name(item.substr(eq + 1));
    if (err <= 0) return Status(Code::kInvalidArgument, "fault spec: unknown errno '" + item.substr(eq + 1) + "'");
    set_fault(item.substr(0, eq), err);
    pos = comma + 1;
  }
  return Status::ok();
}

}  // namespace engram::sys
