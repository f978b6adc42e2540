// CPU lookup backend: gather rows of a host table and decode them to BF16 staging in parallel.
#pragma once

#include "cpu/thread_pool.hpp"
#include "engram/lookup.hpp"

namespace engram::cpu {

// Decodes req.ids over `table` into req.out using `pool` (nullptr = the calling thread only).
// A TP slice's view takes the layer's ids and writes its local heads (engram/lookup.hpp).
// Errors: kInvalidArgument for null pointers, tokens/heads < 0, ids whose heads are not the sliced
// layer's, or (checked) an id out of range.
Result<LookupStats> lookup(const TableView& table, const LookupRequest& req, ThreadPool* pool);

}  // namespace engram::cpu
