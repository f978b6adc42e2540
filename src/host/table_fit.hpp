// The whole-table room check of HostTable::create (a shared group's leader builds its table there too):
// every backing they will make (each Engram layer, replica and head-range shard) is listed and
// checked at once with check_backings_fit (host/placement.hpp) before the first one is made, so a
// table that does not fit is refused in a moment instead of after its first layers were allocated
// and prefaulted. create calls it in one line at its top; the per-backing check of
// Backing::create still runs, and fallocate stays the authority.
#pragma once

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::host {

// The backings HostTable::create(layout, options) makes: one per layer (per layer and node with
// replica-per-node; per layer and shard with head_shards), sized as the layer or shard. Returns OK
// or kNoSpace only: anything else wrong (option text, a node that does not exist, no hugepage
// pool, combinations create refuses) is left to create, which names the layer and shard.
Status check_table_fits(const EngramLayout& layout, const TableOptions& options);

}  // namespace engram::host
