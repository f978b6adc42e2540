// Page protection of a mapped table: a peer that attaches read-only maps the table shared, then
// drops write access with mprotect(2), so a stray write faults in that process (SIGSEGV) instead of
// silently changing the rows every other rank reads. This protects against bugs, not against a
// hostile peer: the descriptor it holds could still be mapped writable again.
// Contract as in the rest of src/sys (Status, errno left as found).
#pragma once

#include <cstddef>

#include "engram/status.hpp"

namespace engram::sys {

// mprotect(addr, len rounded up to the page size, PROT_READ). kInvalidArgument for an unaligned
// address; kOutOfMemory (ENOMEM) when the range is not mapped.
Status protect_read_only(void* addr, size_t len_bytes);

}  // namespace engram::sys
