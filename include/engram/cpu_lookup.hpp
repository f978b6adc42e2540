// The CPU lookup entry point: one Engram layer's ids -> BF16 staging on the host, decoded with engram/format.hpp
// (bit-identical to the CUDA backend). The request's contract is engram/lookup.hpp's. The engine
// (engram/engine.hpp: Engine::lookup, the prefetch queue) runs the same lookup on its own worker threads.
#pragma once

#include "engram/export.hpp"
#include "engram/lookup.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {
class ThreadPool;  // the engine's gather workers (src/cpu/thread_pool.hpp)
}  // namespace engram

namespace engram::cpu {
ENGRAM_API_BEGIN

// Decodes req.ids over `table` into req.out using `pool` (nullptr = the calling thread only).
// A TP slice's view takes the layer's ids and writes its local heads (engram/lookup.hpp).
// Errors: kInvalidArgument for null pointers, tokens/heads < 0, ids whose heads are not the sliced
// layer's, or (checked) an id out of range.
Result<LookupStats> lookup(const TableView& table, const LookupRequest& req, ThreadPool* pool = nullptr);

ENGRAM_API_END
}  // namespace engram::cpu
