// Whole-table verification of synthetic content: every row compared with synth_row (include/engram/table.hpp),
// as `engram table load --verify` does after loading a directory that `engram table create` wrote.
#pragma once

#include <cstdint>

#include "engram/table.hpp"

namespace engram::host {

// Rows of `t` that differ from synth_row(seed, ...), counted with `threads` threads (0 = one per CPU this process
// may run on).
int64_t count_synthetic_mismatches(const HostTable& t, uint64_t seed, int threads);

}  // namespace engram::host
