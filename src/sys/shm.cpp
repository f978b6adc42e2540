// Named /dev/shm files (see shm.hpp). The random suffix comes from getrandom(2); creation never
// follows a symlink and never reuses an existing file. The owner record (owner.hpp) is written under
// the chosen name first and the file created second, so a named table never exists without one.
#include "shm.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fault.hpp"
#include "memfd.hpp"
#include "owner.hpp"

namespace engram::sys {

Result<NamedFile> create_named_file(const std::string& dir, const std::string& prefix) {
  if (prefix.empty() || prefix.find('/') != std::string::npos)
    return Status(Code::kInvalidArgument, "named file prefix '" + prefix + "' is empty or holds '/'");
  for (int attempt = 0; attempt < 8; ++attempt) {
    ENGRAM_ASSIGN_OR_RETURN(std::string suffix, random_hex(16));
    const std::string path = dir + "/" + prefix + "." + suffix;
    int err = fault_errno(kFaultOpenShm);
    if (err == 0) {
      Status rec = write_owner_record(path);
      if (rec.sys_error() == EEXIST) continue;
      if (!rec.is_ok()) return rec.with_context("create_named_file(" + path + ")");
    }
    int fd = -1;
    if (err == 0) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) err = errno;
      if (fd < 0) (void)remove_owner_record(path);
    }
    if (err == EEXIST) continue;
    if (err != 0) return errno_status(err, "open(" + path + ", O_CREAT|O_EXCL|O_NOFOLLOW, 0600)");
    return NamedFile{fd, path};
  }
  return Status(Code::kIo, "create_named_file(" + dir + "/" + prefix + ".*): 8 random names all existed");
}

Result<int> open_named_file(const std::string& path) {
  int err = fault_errno(kFaultOpenShm);
  int fd = -1;
  if (err == 0) {
    fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) err = errno;
  }
  if (err == ELOOP)
    return Status(Code::kPermission, "open(" + path + ", O_NOFOLLOW): ELOOP (the path is a symlink)", err);
  if (err != 0) return errno_status(err, "open(" + path + ", O_RDWR|O_NOFOLLOW)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return errno_status(e, "fstat(" + path + ")");
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return Status(Code::kPermission, "open(" + path + "): not a regular file owned by uid " +
                                         std::to_string(::geteuid()), EPERM);
  }
  return fd;
}

Status unlink_named_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    // The record goes with the file, also when the file was already gone (a guardian took it).
    if (err == ENOENT) (void)remove_owner_record(path);
    return errno_status(err, "unlink(" + path + ")");
  }
  return remove_owner_record(path).with_context("unlink_named_file");
}

}  // namespace engram::sys
