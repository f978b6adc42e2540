// Memory-mapping primitives: the only place that calls mmap/munmap/madvise for tables.
//
// Contract (in the liburing/mimalloc manner): every function returns a Status (or Result), never
// touches the caller's errno, and names the call and its arguments on failure. Sizes in bytes.
#pragma once

#include <cstddef>

#include "engram/status.hpp"

namespace engram::sys {

// Private anonymous read/write mapping of `size_bytes` (rounded up to the page size). No page is
// touched. kOutOfMemory / kInvalidArgument from mmap(2).
Result<void*> map_anonymous(size_t size_bytes);
// munmap; kInvalidArgument on a bad range.
Status unmap(void* addr, size_t size_bytes);
size_t page_size_bytes();

}  // namespace engram::sys
