// Owner records (see owner.hpp). The record is a few "key value" lines:
//   engram-owner 1
//   pid 4242
//   start 123456
//   boot 0c5c8f0e-...
//   pidns 4026531836
// Start time is /proc/<pid>/stat field 22; the fields are read after the last ')' because the
// command name (field 2) may itself hold spaces and parentheses.
#include "owner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "numa_sysfs.hpp"

namespace engram::sys {
namespace {

constexpr const char* kRecordMagic = "engram-owner 1";
constexpr size_t kMaxRecordBytes = 512;

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Field 3 (state) and field 22 (starttime) of /proc/<pid>/stat.
bool parse_stat(const std::string& text, char* state, uint64_t* start_ticks) {
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char* p = text.c_str() + close + 2;  // field 3
  *state = *p;
  for (int field = 3; field < 22; ++field) {
    while (*p != '\0' && *p != ' ') ++p;
    if (*p == '\0') return false;
    ++p;
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p) return false;
  *start_ticks = v;
  return true;
}

std::string read_boot_id() {
  auto t = read_text_file("/proc/sys/kernel/random/boot_id");
  if (!t.is_ok()) return "";
  std::string s = *t;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

uint64_t pid_ns_of(const std::string& proc_dir) {
  struct stat st{};
  if (::stat((proc_dir + "/ns/pid").c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::string record_text(const ProcessStamp& s) {
  return std::string(kRecordMagic) + "\npid " + std::to_string(s.pid) + "\nstart " + std::to_string(s.start_ticks) +
         "\nboot " + s.boot_id + "\npidns " + std::to_string(s.pid_ns) + "\n";
}

bool parse_record(const std::string& text, ProcessStamp* out) {
  if (text.rfind(std::string(kRecordMagic) + "\n", 0) != 0) return false;
  bool have_pid = false, have_start = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) return false;  // a complete record ends every line
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    char* end = nullptr;
    if (key == "pid") {
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v <= 0 || v > INT32_MAX) return false;
      out->pid = static_cast<int>(v);
      have_pid = true;
    } else if (key == "start") {
      const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0') return false;
      out->start_ticks = v;
      have_start = true;
    } else if (key == "boot") {
      out->boot_id = value;
    } else if (key == "pidns") {
      out->pid_ns = std::strtoull(value.c_str(), &end, 10);
    }
  }
  return have_pid && have_start;
}

Status write_all(int fd, const std::string& text, const std::string& what) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, what + ": write");
    }
    off += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

Result<ProcessStamp> process_stamp(int pid, bool* zombie) {
  const std::string dir = "/proc/" + std::to_string(pid);
  auto t = read_text_file(dir + "/stat");
  if (!t.is_ok()) {
    if (t.status().code() == Code::kNotFound) return Status(Code::kNotFound, "no process " + std::to_string(pid));
    return t.status();
  }
  ProcessStamp s;
  s.pid = pid;
  char state = '?';
  if (!parse_stat(*t, &state, &s.start_ticks))
    return Status(Code::kIo, dir + "/stat: unexpected format");
  if (zombie) *zombie = state == 'Z' || state == 'X';
  s.boot_id = read_boot_id();
  s.pid_ns = pid_ns_of(dir);
  return s;
}

Result<ProcessStamp> self_stamp() {
  // Read afresh each time (three small /proc reads; records are rare): no cache, so no lock that a
  // fork(2) could copy in a held state and no stale pid in a forked child.
  return process_stamp(static_cast<int>(::getpid()));
}

OwnerState owner_state(const ProcessStamp& recorded, std::string* why) {
  std::string local;
  std::string& w = why ? *why : local;
  const std::string pid = "pid " + std::to_string(recorded.pid);
  const std::string boot = read_boot_id();
  if (!recorded.boot_id.empty() && !boot.empty() && recorded.boot_id != boot) {
    w = "owner " + pid + " ran in an earlier boot";
    return OwnerState::kDead;
  }
  const uint64_t ns = pid_ns_of("/proc/self");
  if (recorded.pid_ns != 0 && ns != 0 && recorded.pid_ns != ns) {
    w = "owner " + pid + " is in another pid namespace";
    return OwnerState::kUnknown;
  }
  bool zombie = false;
  auto now = process_stamp(recorded.pid, &zombie);
  if (!now.is_ok()) {
    if (now.status().code() == Code::kNotFound) {
      w = "owner " + pid + " is gone";
      return OwnerState::kDead;
    }
    w = "owner " + pid + ": " + now.status().message();
    return OwnerState::kUnknown;
  }
  if (now->start_ticks != recorded.start_ticks) {
    w = pid + " now belongs to another process (start time differs)";
    return OwnerState::kDead;
  }
  if (zombie) {
    w = "owner " + pid + " has exited (zombie)";
    return OwnerState::kDead;
  }
  w = "owner " + pid + " is alive";
  return OwnerState::kAlive;
}

std::string owner_record_path(const std::string& object_path) {
  return dir_of(object_path) + "/" + kOwnerRecordPrefix + base_of(object_path);
}

bool parse_owner_record_name(const std::string& name, std::string* object_name) {
  const std::string prefix = kOwnerRecordPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  if (object_name) *object_name = name.substr(prefix.size());
  return true;
}

Status write_owner_record(const std::string& object_path) {
  ENGRAM_ASSIGN_OR_RETURN(ProcessStamp me, self_stamp());
  const std::string path = owner_record_path(object_path);
  const std::string what = "owner record " + path;
  const std::string text = record_text(me);
  // Preferred: an unnamed file, written, then linked to its name in one step.
  const int tmp = ::open(dir_of(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (tmp >= 0) {
    Status w = write_all(tmp, text, what);
    int link_err = 0;
    if (w.is_ok()) {
      const std::string self_fd = "/proc/self/fd/" + std::to_string(tmp);
      if (::linkat(AT_FDCWD, self_fd.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0) link_err = errno;
    }
    (void)::close(tmp);
    if (!w.is_ok()) return w;
    if (link_err == 0) return Status::ok();
    if (link_err == EEXIST) return Status(Code::kInvalidArgument, what + ": exists already", link_err);
    // No /proc to link through (ENOENT): the plain way below.
  } else if (errno == ENOENT) {
    return errno_status(errno, what + ": directory");
  }
  // No O_TMPFILE here (EOPNOTSUPP; EISDIR on kernels that do not know the flag), or no /proc: create
  // O_EXCL and write at once.
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) return Status(Code::kInvalidArgument, what + ": exists already", err);
    return errno_status(err, what + ": open");
  }
  Status w = write_all(fd, text, what);
  (void)::close(fd);
  if (!w.is_ok()) (void)::unlink(path.c_str());
  return w;
}

Result<OwnerRecord> read_owner_record(const std::string& record_path) {
  const int fd = ::open(record_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return Status(Code::kInvalidArgument, record_path + ": a symlink, not an owner record", err);
    return errno_status(err, "open(" + record_path + ")");
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > static_cast<off_t>(kMaxRecordBytes)) {
    (void)::close(fd);
    return Status(Code::kInvalidArgument, record_path + ": not a regular file of at most " +
                                              std::to_string(kMaxRecordBytes) + " bytes");
  }
  char buf[kMaxRecordBytes + 1];
  ssize_t n = 0;
  do {
    n = ::read(fd, buf, kMaxRecordBytes);
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  (void)::close(fd);
  if (n < 0) return errno_status(err, "read(" + record_path + ")");
  OwnerRecord r;
  r.file_uid = static_cast<uint32_t>(st.st_uid);
  if (!parse_record(std::string(buf, static_cast<size_t>(n)), &r.owner))
    return Status(Code::kInvalidArgument, record_path + ": malformed owner record (" + std::to_string(n) + " bytes)");
  return r;
}

Status remove_owner_record(const std::string& object_path) {
  const std::string path = owner_record_path(object_path);
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::ok();
    return errno_status(err, "unlink(" + path + ")");
  }
  return Status::ok();
}

}  // namespace engram::sys
