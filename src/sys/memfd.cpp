// memfd / fd / mapping wrappers (see memfd.hpp for the contract). Each wrapper reads errno right
// after the call into a local and turns it into a Status; injected faults (fault.hpp) take the
// same path as real failures so the callers' error handling is exercised.
#include "memfd.hpp"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "core/units.hpp"
#include "fault.hpp"
#include "memory.hpp"

namespace engram::sys {
namespace {

size_t round_up_page(size_t n) {
  const size_t page = page_size_bytes();
  return (n + page - 1) / page * page;
}

}  // namespace

size_t huge_page_bytes(HugePage h) {
  switch (h) {
    case HugePage::kNone: return 0;
    case HugePage::k2MiB: return size_t{2} << 20;
    case HugePage::k1GiB: return size_t{1} << 30;
  }
  return 0;
}

Result<int> memfd_create(const std::string& name, HugePage huge) {
  unsigned flags = MFD_CLOEXEC;
  if (huge == HugePage::k2MiB) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  if (huge == HugePage::k1GiB) flags |= MFD_HUGETLB | MFD_HUGE_1GB;
  const std::string what = "memfd_create(name=" + name + (huge == HugePage::kNone ? "" : ", MFD_HUGETLB " +
                           format_bytes(huge_page_bytes(huge))) + ")";
  int err = fault_errno(kFaultMemfdCreate);
  int fd = -1;
  if (err == 0) {
    fd = static_cast<int>(::syscall(SYS_memfd_create, name.c_str(), flags));
    if (fd < 0) err = errno;
  }
  if (err != 0) {
    if (huge != HugePage::kNone && err == EINVAL)
      return Status(Code::kUnsupported, what + ": EINVAL (no hugetlb memfd support for this page size)", err);
    return errno_status(err, what);
  }
  return fd;
}

Status close_fd(int fd) {
  if (::close(fd) != 0) {
    const int err = errno;
    return errno_status(err, "close(fd=" + std::to_string(fd) + ")");
  }
  return Status::ok();
}

Result<int> dup_fd(int fd) {
  const int r = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (r < 0) {
    const int err = errno;
    return errno_status(err, "fcntl(fd=" + std::to_string(fd) + ", F_DUPFD_CLOEXEC)");
  }
  return r;
}

Status ftruncate_fd(int fd, uint64_t size_bytes) {
  int err = fault_errno(kFaultFtruncate);
  if (err == 0 && ::ftruncate(fd, static_cast<off_t>(size_bytes)) != 0) err = errno;
  if (err != 0)
    return errno_status(err, "ftruncate(fd=" + std::to_string(fd) + ", size=" + format_bytes(size_bytes) + ")");
  return Status::ok();
}

Status fallocate_fd(int fd, uint64_t offset_bytes, uint64_t len_bytes) {
  int err = fault_errno(kFaultFallocate);
  if (err == 0) {
    // EINTR: a signal arrived while the kernel was allocating; the pages done so far stay, retry.
    while (::fallocate(fd, 0, static_cast<off_t>(offset_bytes), static_cast<off_t>(len_bytes)) != 0) {
      err = errno;
      if (err != EINTR) break;
      err = 0;
    }
  }
  if (err != 0)
    return errno_status(err, "fallocate(fd=" + std::to_string(fd) + ", offset=" + format_bytes(offset_bytes) +
                                 ", len=" + format_bytes(len_bytes) + ")");
  return Status::ok();
}

Result<FileStat> fstat_fd(int fd) {
  int err = fault_errno(kFaultFstat);
  struct stat st {};
  if (err == 0 && ::fstat(fd, &st) != 0) err = errno;
  if (err != 0) return errno_status(err, "fstat(fd=" + std::to_string(fd) + ")");
  FileStat s;
  s.size_bytes = static_cast<uint64_t>(st.st_size);
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.device = static_cast<uint64_t>(st.st_dev);
  s.blocks_512 = static_cast<uint64_t>(st.st_blocks);
  s.mode = st.st_mode;
  s.uid = st.st_uid;
  return s;
}

Result<FsSpace> fs_space_fd(int fd) {
  int err = fault_errno(kFaultFstatvfs);
  struct statvfs v {};
  struct statfs f {};
  if (err == 0 && ::fstatvfs(fd, &v) != 0) err = errno;
  if (err == 0 && ::fstatfs(fd, &f) != 0) err = errno;
  if (err != 0) return errno_status(err, "fstatvfs(fd=" + std::to_string(fd) + ")");
  FsSpace s;
  s.block_bytes = v.f_frsize;
  s.total_bytes = static_cast<uint64_t>(v.f_blocks) * v.f_frsize;
  s.free_bytes = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  s.fs_type = static_cast<uint64_t>(f.f_type);
  return s;
}

Result<FsSpace> fs_space_path(const std::string& path) {
  int err = fault_errno(kFaultFstatvfs);
  struct statvfs v {};
  struct statfs f {};
  if (err == 0 && ::statvfs(path.c_str(), &v) != 0) err = errno;
  if (err == 0 && ::statfs(path.c_str(), &f) != 0) err = errno;
  if (err != 0) return errno_status(err, "statvfs(" + path + ")");
  FsSpace s;
  s.block_bytes = v.f_frsize;
  s.total_bytes = static_cast<uint64_t>(v.f_blocks) * v.f_frsize;
  s.free_bytes = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  s.fs_type = static_cast<uint64_t>(f.f_type);
  return s;
}

Result<void*> map_shared(int fd, size_t len_bytes, uint64_t offset_bytes, void* fixed_at) {
  const std::string what = std::string(fixed_at ? "mmap(MAP_SHARED|MAP_FIXED" : "mmap(MAP_SHARED") +
                           ", fd=" + std::to_string(fd) + ", len=" + format_bytes(len_bytes) + ")";
  if (len_bytes == 0) return Status(Code::kInvalidArgument, what + ": length 0");
  if (fixed_at && reinterpret_cast<uintptr_t>(fixed_at) % page_size_bytes() != 0)
    return Status(Code::kInvalidArgument, what + ": fixed address is not page aligned");
  int err = fault_errno(kFaultMmap);
  void* p = MAP_FAILED;
  if (err == 0) {
    p = ::mmap(fixed_at, len_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (fixed_at ? MAP_FIXED : 0), fd,
               static_cast<off_t>(offset_bytes));
    if (p == MAP_FAILED) err = errno;
  }
  if (err != 0) return errno_status(err, what);
  return p;
}

namespace {
// Private anonymous mapping with protection `prot` whose start is aligned to `align_bytes`: over-map by
// one alignment unit and trim both ends so the region starts on the boundary. `what` names the call.
Result<void*> map_anonymous_aligned(size_t len_bytes, size_t align_bytes, int prot, const std::string& what) {
  if (len_bytes == 0) return Status(Code::kInvalidArgument, what + ": length 0");
  if (align_bytes == 0 || (align_bytes & (align_bytes - 1)) != 0)
    return Status(Code::kInvalidArgument, what + ": alignment is not a power of two");
  const size_t len = round_up_page(len_bytes);
  const size_t extra = align_bytes > page_size_bytes() ? align_bytes : 0;
  int err = fault_errno(kFaultMmap);
  void* p = MAP_FAILED;
  if (err == 0) {
    p = ::mmap(nullptr, len + extra, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) err = errno;
  }
  if (err != 0) return errno_status(err, what);
  if (extra == 0) return p;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (base + align_bytes - 1) & ~(uintptr_t{align_bytes} - 1);
  if (aligned > base) ::munmap(p, aligned - base);
  const uintptr_t end = base + len + extra, aligned_end = aligned + len;
  if (end > aligned_end) ::munmap(reinterpret_cast<void*>(aligned_end), end - aligned_end);
  return reinterpret_cast<void*>(aligned);
}
}  // namespace

Result<void*> map_private_aligned(size_t len_bytes, size_t align_bytes) {
  return map_anonymous_aligned(len_bytes, align_bytes, PROT_READ | PROT_WRITE,
                               "mmap(MAP_PRIVATE|MAP_ANONYMOUS, len=" + format_bytes(len_bytes) +
                                   ", align=" + format_bytes(align_bytes) + ")");
}

Result<void*> reserve_range(size_t len_bytes, size_t align_bytes) {
  return map_anonymous_aligned(len_bytes, align_bytes, PROT_NONE,
                               "mmap(PROT_NONE reservation, len=" + format_bytes(len_bytes) +
                                   ", align=" + format_bytes(align_bytes) + ")");
}

Status rereserve_range(void* addr, size_t len_bytes) {
  // No fault hook here: this is a release path (a backing going back to its reservation), and a failure
  // injected into a release would only test the hook, not the caller.
  void* p = ::mmap(addr, round_up_page(len_bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return errno_status(err, "mmap(PROT_NONE|MAP_FIXED, len=" + format_bytes(len_bytes) + ")");
  }
  return Status::ok();
}

Result<void*> map_private_fixed(void* addr, size_t len_bytes) {
  const std::string what = "mmap(MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED, len=" + format_bytes(len_bytes) + ")";
  if (len_bytes == 0) return Status(Code::kInvalidArgument, what + ": length 0");
  int err = fault_errno(kFaultMmap);
  void* p = MAP_FAILED;
  if (err == 0) {
    p = ::mmap(addr, round_up_page(len_bytes), PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) err = errno;
  }
  if (err != 0) return errno_status(err, what);
  return p;
}

Status unmap_range(void* addr, size_t len_bytes) {
  if (::munmap(addr, round_up_page(len_bytes)) != 0) {
    const int err = errno;
    return errno_status(err, "munmap(len=" + format_bytes(len_bytes) + ")");
  }
  return Status::ok();
}

Status madvise_range(void* addr, size_t len_bytes, MemAdvice advice) {
  int adv = 0;
  const char* name = "";
  switch (advice) {
    case MemAdvice::kHugePage: adv = MADV_HUGEPAGE; name = "MADV_HUGEPAGE"; break;
    case MemAdvice::kNoHugePage: adv = MADV_NOHUGEPAGE; name = "MADV_NOHUGEPAGE"; break;
    case MemAdvice::kPopulateRead: adv = MADV_POPULATE_READ; name = "MADV_POPULATE_READ"; break;
    case MemAdvice::kPopulateWrite: adv = MADV_POPULATE_WRITE; name = "MADV_POPULATE_WRITE"; break;
    case MemAdvice::kDontNeed: adv = MADV_DONTNEED; name = "MADV_DONTNEED"; break;
  }
  const std::string what = std::string("madvise(len=") + format_bytes(len_bytes) + ", " + name + ")";
  int err = fault_errno(kFaultMadvise);
  if (err == 0) {
    while (::madvise(addr, round_up_page(len_bytes), adv) != 0) {
      err = errno;
      if (err != EINTR) break;
      err = 0;
    }
  }
  if (err == 0) return Status::ok();
  if (err == EINVAL && advice != MemAdvice::kDontNeed)
    return Status(Code::kUnsupported, what + ": EINVAL (the kernel does not offer this advice here)", err);
  // MADV_POPULATE_*: EFAULT means a fault would have raised SIGBUS, for a tmpfs file that its file system
  // is full (or the file shrank under the mapping).
  if (err == EFAULT && (advice == MemAdvice::kPopulateWrite || advice == MemAdvice::kPopulateRead))
    return Status(Code::kNoSpace, what + ": EFAULT (a page could not be allocated: the file system is full)", err);
  return errno_status(err, what);
}

Result<std::vector<uint8_t>> mincore_range(const void* addr, size_t len_bytes) {
  const size_t page = page_size_bytes();
  std::vector<uint8_t> vec((len_bytes + page - 1) / page);
  int err = fault_errno(kFaultMincore);
  if (err == 0 && ::mincore(const_cast<void*>(addr), len_bytes, vec.data()) != 0) err = errno;
  if (err != 0) return errno_status(err, "mincore(len=" + format_bytes(len_bytes) + ")");
  return vec;
}

Result<std::string> random_hex(int n_chars) {
  std::vector<unsigned char> buf(static_cast<size_t>((n_chars + 1) / 2));
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t r = ::getrandom(buf.data() + got, buf.size() - got, 0);
    if (r < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return errno_status(err, "getrandom");
    }
    got += static_cast<size_t>(r);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : buf) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  s.resize(static_cast<size_t>(n_chars));
  return s;
}

}  // namespace engram::sys
