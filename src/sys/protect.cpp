// mprotect wrapper (see protect.hpp).
#include "protect.hpp"

#include <sys/mman.h>

#include <cerrno>

#include "fault.hpp"
#include "memory.hpp"

namespace engram::sys {

Status protect_read_only(void* addr, size_t len_bytes) {
  const size_t page = page_size_bytes();
  const size_t len = (len_bytes + page - 1) / page * page;
  // Fault hook (sys/fault.hpp): an injected errno is reported as if mprotect had returned it.
  if (const int injected = fault_errno(kFaultMprotect); injected != 0)
    return errno_status(injected, "mprotect(len=" + std::to_string(len) + ", PROT_READ)");
  const int saved = errno;
  if (::mprotect(addr, len, PROT_READ) != 0) {
    const int err = errno;
    errno = saved;
    return errno_status(err, "mprotect(len=" + std::to_string(len) + ", PROT_READ)");
  }
  return Status::ok();
}

}  // namespace engram::sys
