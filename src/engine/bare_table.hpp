// A table without a backend, for the consumers that place, load or census a table and never serve lookups through
// a queue (`engram census`, `engram table load DIR`, the lookup bench): built as the engine builds its own, named
// (shm) backings guarded from the moment each file exists (engine/guardian.hpp), then HostTable::create. So no
// consumer outside src/engine constructs a table itself (tests/unit/engine/test_engine_spine.cpp).
#pragma once

#include <memory>

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"
#include "sys/process.hpp"

namespace engram::engine {

// Members in this order: the table is released before its guardian.
struct BareTable {
  std::shared_ptr<sys::FileGuardian> guardian;  // null unless the backing is named
  std::unique_ptr<HostTable> table;
};

// Errors: the guardian's start, HostTable::create's.
Result<BareTable> create_bare_table(const EngramLayout& layout, TableOptions options);

}  // namespace engram::engine
