// mmap wrappers for table memory (see memory.hpp for the contract).
#include "memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "fault.hpp"

namespace engram::sys {

size_t page_size_bytes() {
  static const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return kPage;
}

Result<void*> map_anonymous(size_t size_bytes) {
  if (size_bytes == 0) return Status(Code::kInvalidArgument, "map_anonymous: size 0");
  const size_t page = page_size_bytes();
  const size_t len = (size_bytes + page - 1) / page * page;
  // Fault hook (sys/fault.hpp): an injected errno is reported as if mmap had returned it.
  if (const int injected = fault_errno(kFaultMmap); injected != 0)
    return errno_status(injected, "mmap(anonymous, len=" + std::to_string(len) + " B)");
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return errno_status(err, "mmap(anonymous, len=" + std::to_string(len) + " B)");
  }
  return p;
}

Status unmap(void* addr, size_t size_bytes) {
  const size_t page = page_size_bytes();
  const size_t len = (size_bytes + page - 1) / page * page;
  if (munmap(addr, len) != 0) {
    const int err = errno;
    return errno_status(err, "munmap(len=" + std::to_string(len) + " B)");
  }
  return Status::ok();
}

}  // namespace engram::sys
