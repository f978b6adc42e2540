// File wrappers for checkpoint I/O (see file.hpp for the contract).
//
// Each wrapper saves errno on entry and restores it on exit (ErrnoGuard), reading the value a failed
// call left behind into the returned Status instead: callers never look at errno. pread/pwrite loop
// over short transfers because a single call may return less than asked (signals, large requests
// are capped at 0x7ffff000 bytes by the kernel).
#include "file.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "sys/fault.hpp"
#include "sys/memory.hpp"

namespace engram::sys {
namespace {

class ErrnoGuard {
 public:
  ErrnoGuard() : saved_(errno) {}
  ~ErrnoGuard() { errno = saved_; }
  ErrnoGuard(const ErrnoGuard&) = delete;
  ErrnoGuard& operator=(const ErrnoGuard&) = delete;

 private:
  int saved_;
};

std::string range_text(size_t len, int64_t offset) {
  return "len=" + std::to_string(len) + ", off=" + std::to_string(offset);
}

}  // namespace

File::~File() { (void)close(); }

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    (void)close();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

Status File::close() {
  if (fd_ < 0) return Status::ok();
  ErrnoGuard guard;
  const int fd = fd_;
  fd_ = -1;
  // The descriptor is gone whatever close returns (Linux), so it is never retried.
  if (::close(fd) != 0) return errno_status(errno, "close(" + path_ + ")");
  return Status::ok();
}

namespace {
std::string errno_name(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : "errno " + std::to_string(err);
}

// The kind of a non-regular file, for messages ("FIFO", "character device").
const char* file_kind_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "symlink";
  return "special file";
}
}  // namespace

Result<File> open_read(const std::string& path) {
  ErrnoGuard guard;
  int fd;
  // O_NONBLOCK: open(2) of a FIFO without a writer would block forever; the kind is checked before any read.
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno_status(errno, "open(" + path + ", O_RDONLY)");
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    (void)::close(fd);
    return errno_status(err, "fstat(" + path + ")");
  }
  // open(2) succeeds on a directory; reading it would fail later with a less helpful EISDIR.
  if (S_ISDIR(st.st_mode)) {
    (void)::close(fd);
    return Status(Code::kInvalidArgument, "open(" + path + "): is a directory, not a file", EISDIR);
  }
  if (!S_ISREG(st.st_mode)) {
    (void)::close(fd);
    return Status(Code::kInvalidArgument, "open(" + path + "): is a " + file_kind_name(st.st_mode) + ", not a regular file");
  }
  // Regular files never block; positional reads then behave as without the flag, which is cleared for clarity.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return File(fd, path);
}

Result<File> create_new(const std::string& path, unsigned mode) {
  ErrnoGuard guard;
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno_status(errno, "open(" + path + ", O_CREAT|O_EXCL|O_TRUNC)");
  return File(fd, path);
}

Result<File> open_directory(const std::string& path) {
  ErrnoGuard guard;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "open(" + path + ", O_DIRECTORY)");
  return File(fd, path);
}

Result<int64_t> file_size_bytes(const File& f) {
  ErrnoGuard guard;
  struct stat st;
  if (::fstat(f.fd(), &st) != 0) return errno_status(errno, "fstat(" + f.path() + ")");
  return static_cast<int64_t>(st.st_size);
}

Status allocate_file(const File& f, int64_t len) {
  ErrnoGuard guard;
  if (len <= 0) return Status::ok();
  // Fault hook (sys/fault.hpp): an injected errno is reported as if fallocate had returned it.
  if (const int injected = fault_errno(kFaultFallocate); injected != 0)
    return errno_status(injected, "fallocate(" + f.path() + ", len=" + std::to_string(len) + ")");
  int rc;
  do {
    rc = ::fallocate(f.fd(), 0, 0, static_cast<off_t>(len));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno_status(errno, "fallocate(" + f.path() + ", len=" + std::to_string(len) + ")");
  return Status::ok();
}

Status pread_full(const File& f, void* buf, size_t len, int64_t offset) {
  ErrnoGuard guard;
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  // Fault hook (sys/fault.hpp): an injected errno (EIO: a disk error mid-load) as if pread returned it.
  if (const int injected = fault_errno(kFaultPread); injected != 0)
    return errno_status(injected, "pread(" + f.path() + ", " + range_text(len, offset) + ")");
  while (done < len) {
    const ssize_t n = ::pread(f.fd(), p + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "pread(" + f.path() + ", " + range_text(len, offset) + ")");
    }
    if (n == 0)
      return Status(Code::kIo, "pread(" + f.path() + ", " + range_text(len, offset) + "): short read (got " +
                                   std::to_string(done) + " of " + std::to_string(len) + " bytes: end of file)");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status pwrite_full(const File& f, const void* buf, size_t len, int64_t offset) {
  ErrnoGuard guard;
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pwrite(f.fd(), p + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "pwrite(" + f.path() + ", " + range_text(len, offset) + ")");
    }
    if (n == 0)
      return Status(Code::kIo, "pwrite(" + f.path() + ", " + range_text(len, offset) + "): wrote 0 bytes");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status fadvise(const File& f, int64_t offset, int64_t len, Advice advice) {
  ErrnoGuard guard;
  int a = POSIX_FADV_NORMAL;
  const char* name = "NORMAL";
  switch (advice) {
    case Advice::kNormal: break;
    case Advice::kSequential: a = POSIX_FADV_SEQUENTIAL; name = "SEQUENTIAL"; break;
    case Advice::kWillNeed: a = POSIX_FADV_WILLNEED; name = "WILLNEED"; break;
    case Advice::kDontNeed: a = POSIX_FADV_DONTNEED; name = "DONTNEED"; break;
  }
  // posix_fadvise returns the error number instead of setting errno.
  const int err = ::posix_fadvise(f.fd(), static_cast<off_t>(offset), static_cast<off_t>(len), a);
  if (err != 0)
    return errno_status(err, std::string("posix_fadvise(") + f.path() + ", " +
                                 range_text(static_cast<size_t>(len), offset) + ", " + name + ")");
  return Status::ok();
}

Status sync_range(const File& f, int64_t offset, int64_t len, bool wait) {
  ErrnoGuard guard;
  const unsigned flags = wait ? SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
                              : SYNC_FILE_RANGE_WRITE;
  int rc;
  do {
    rc = ::sync_file_range(f.fd(), static_cast<off_t>(offset), static_cast<off_t>(len), flags);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0)
    return errno_status(errno, "sync_file_range(" + f.path() + ", " + range_text(static_cast<size_t>(len), offset) + ")");
  return Status::ok();
}

Status fsync(const File& f) {
  ErrnoGuard guard;
  int rc;
  do {
    rc = ::fsync(f.fd());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno_status(errno, "fsync(" + f.path() + ")");
  return Status::ok();
}

Status rename_path(const std::string& from, const std::string& to, bool replace) {
  ErrnoGuard guard;
  if (replace) {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return errno_status(errno, "rename(" + from + " -> " + to + ")");
    return Status::ok();
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return Status::ok();
  const int err = errno;
  if (err == EEXIST) return Status(Code::kInvalidArgument, to + " already exists (not replaced)", err);
  if (err != EINVAL && err != ENOSYS)
    return errno_status(err, "renameat2(" + from + " -> " + to + ", RENAME_NOREPLACE)");
  // The file system cannot do RENAME_NOREPLACE: check, then rename (a small race, documented).
  struct stat st;
  if (::lstat(to.c_str(), &st) == 0)
    return Status(Code::kInvalidArgument, to + " already exists (not replaced)", EEXIST);
  if (::rename(from.c_str(), to.c_str()) != 0) return errno_status(errno, "rename(" + from + " -> " + to + ")");
  return Status::ok();
}

Status unlink_path(const std::string& path) {
  ErrnoGuard guard;
  if (::unlink(path.c_str()) != 0) return errno_status(errno, "unlink(" + path + ")");
  return Status::ok();
}

Result<bool> path_exists(const std::string& path) {
  ErrnoGuard guard;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return errno_status(errno, "lstat(" + path + ")");
}

Result<std::string> read_text_file(const std::string& path) {
  ErrnoGuard guard;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return errno_status(err, "open(" + path + ")");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      ::close(fd);
      return errno_status(err, "read(" + path + ")");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

Result<std::string> read_small_file(const std::string& path, int64_t max_bytes) {
  ENGRAM_ASSIGN_OR_RETURN(File f, open_read(path));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, file_size_bytes(f));
  if (size > max_bytes)
    return Status(Code::kInvalidArgument, path + " is " + std::to_string(size) + " bytes, more than the " +
                                              std::to_string(max_bytes) + " bytes such a file may have");
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0) ENGRAM_RETURN_IF_ERROR(pread_full(f, data.data(), data.size(), 0));
  return data;
}

Status write_new_file(const std::string& path, std::string_view data) {
  ENGRAM_ASSIGN_OR_RETURN(File f, create_new(path));
  Status s = data.empty() ? Status::ok() : pwrite_full(f, data.data(), data.size(), 0);
  if (s.is_ok()) s = fsync(f);
  if (s.is_ok()) s = f.close();
  if (!s.is_ok()) {
    (void)f.close();
    (void)unlink_path(path);
  }
  return s;
}

Status make_directory(const std::string& path, unsigned mode) {
  ErrnoGuard guard;
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0) return errno_status(errno, "mkdir(" + path + ")");
  return Status::ok();
}

Status remove_tree(const std::string& path) {
  ErrnoGuard guard;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return errno_status(ec.value(), "removing " + path + " and its contents");
  return Status::ok();
}

bool is_directory(const std::string& path) noexcept {
  ErrnoGuard guard;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<PathInfo> lstat_path(const std::string& path) {
  ErrnoGuard guard;
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return errno_status(errno, "lstat(" + path + ")");
  PathInfo i;
  i.kind = S_ISREG(st.st_mode)    ? PathKind::kRegular
           : S_ISSOCK(st.st_mode) ? PathKind::kSocket
           : S_ISDIR(st.st_mode)  ? PathKind::kDirectory
           : S_ISLNK(st.st_mode)  ? PathKind::kSymlink
                                  : PathKind::kOther;
  i.uid = static_cast<uint32_t>(st.st_uid);
  i.allocated_bytes = static_cast<int64_t>(st.st_blocks) * 512;
  return i;
}

namespace {
std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_not_of('/') == std::string::npos ? std::string::npos : path.rfind('/', path.find_last_not_of('/'));
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status writable_directory(const std::string& dir, const std::string& what) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return Status(Code::kInvalidArgument, what + ": directory " + dir + " " +
                                              (err == ENOENT ? "does not exist" : "cannot be read") + " (" + errno_name(err) + ")",
                  err);
  }
  if (!S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, what + ": " + dir + " is not a directory", ENOTDIR);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    return Status(Code::kInvalidArgument, what + ": directory " + dir + " is not writable (" + errno_name(err) + ")", err);
  }
  // access() answers yes to root everywhere, also in /proc and /sys, which take no new file: create one and remove it.
  const std::string probe = (dir == "/" ? std::string() : dir) + "/.engram-probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    return Status(Code::kInvalidArgument, what + ": directory " + dir + " takes no new file (" + errno_name(err) + ")", err);
  }
  ::close(fd);
  (void)::unlink(probe.c_str());
  return Status::ok();
}
}  // namespace

Status check_output_path(const std::string& path, OutputKind kind) {
  ErrnoGuard guard;
  if (path.empty()) return Status(Code::kInvalidArgument, "an empty path");
  const std::string what = kind == OutputKind::kFile ? "output file " + path : "output directory " + path;
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (kind == OutputKind::kDirectory) {
      if (!S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, what + ": exists and is not a directory", ENOTDIR);
      return writable_directory(path, what);
    }
    if (S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, what + ": is a directory", EISDIR);
    if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
      return Status(Code::kInvalidArgument, what + ": is a " + file_kind_name(st.st_mode) + ", not a regular file");
    if (::access(path.c_str(), W_OK) != 0) {
      const int err = errno;
      return Status(Code::kInvalidArgument, what + ": not writable (" + errno_name(err) + ")", err);
    }
  } else if (errno != ENOENT) {
    const int err = errno;
    return Status(Code::kInvalidArgument, what + ": cannot be checked (" + errno_name(err) + ")", err);
  } else if (::lstat(path.c_str(), &st) == 0) {
    return Status(Code::kInvalidArgument, what + ": a dangling symlink", ENOENT);
  }
  return writable_directory(parent_of(path), what);
}

Status check_input_path(const std::string& path, InputKind kind) {
  ErrnoGuard guard;
  if (path.empty()) return Status(Code::kInvalidArgument, "an empty path");
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return Status(Code::kInvalidArgument,
                  path + ": " + (err == ENOENT ? std::string(kind == InputKind::kDirectory ? "no such directory" : "no such file")
                                               : "cannot be read (" + errno_name(err) + ")"),
                  err);
  }
  if (S_ISDIR(st.st_mode)) {
    if (kind == InputKind::kFile) return Status(Code::kInvalidArgument, path + ": is a directory, not a file", EISDIR);
    return Status::ok();
  }
  if (kind == InputKind::kDirectory) return Status(Code::kInvalidArgument, path + ": is not a directory", ENOTDIR);
  if (!S_ISREG(st.st_mode))
    return Status(Code::kInvalidArgument, path + ": is a " + std::string(file_kind_name(st.st_mode)) + ", not a regular file");
  return Status::ok();
}

bool is_terminal(int fd) noexcept {
  ErrnoGuard guard;
  return ::isatty(fd) == 1;
}

Result<int64_t> page_cache_resident_bytes(const File& f, int64_t len) {
  ErrnoGuard guard;
  if (len <= 0) return int64_t{0};
  const size_t page = page_size_bytes();
  // Count in windows so the mincore vector stays small for huge files.
  const int64_t window = int64_t{1} << 30;
  int64_t resident_pages = 0;
  std::vector<unsigned char> vec;
  for (int64_t off = 0; off < len; off += window) {
    const size_t n = static_cast<size_t>(std::min(window, len - off));
    void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, f.fd(), static_cast<off_t>(off));
    if (p == MAP_FAILED) return errno_status(errno, "mmap(" + f.path() + ", " + range_text(n, off) + ")");
    vec.assign((n + page - 1) / page, 0);
    const int rc = ::mincore(p, n, vec.data());
    const int err = errno;
    ::munmap(p, n);
    if (rc != 0) return errno_status(err, "mincore(" + f.path() + ", " + range_text(n, off) + ")");
    for (unsigned char v : vec) resident_pages += v & 1;
  }
  return std::min(len, resident_pages * static_cast<int64_t>(page));
}

Result<int64_t> filesystem_magic(const std::string& path) {
  ErrnoGuard guard;
  struct statfs s;
  if (::statfs(path.c_str(), &s) != 0) return errno_status(errno, "statfs(" + path + ")");
  return static_cast<int64_t>(s.f_type);
}

}  // namespace engram::sys
