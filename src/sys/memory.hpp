// Private anonymous mappings (HostTable::allocate) and the page size. The table mappings are all made in
// src/sys: these here; shared and fixed mappings, reservations, madvise and mincore of the table backings in
// memfd.hpp; read-only file windows in file.hpp. No code outside src/sys calls mmap, munmap or madvise.
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
