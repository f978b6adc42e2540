// Named tables are guarded from the moment each file exists, in every engine that makes one (a single process's
// table, a serving leader's, a group leader's): a guardian child (sys/process.hpp) is forked before the table is
// created, and the table's creation arms it for each file it makes (TableOptions::on_named_created). Whatever
// ends the process -- a termination signal (sys::kTerminationSignals) with its default action, an uncaught
// exception, SIGKILL -- the guardian sees its end of the socket close and unlinks the files (and their owner
// records) still armed. Internal to src/engine.
#pragma once

#include <memory>

#include "engram/status.hpp"
#include "engram/table.hpp"
#include "sys/process.hpp"

namespace engram::engine {

// Starts a guardian and chains it into table.on_named_created when the backing is named (shm); null otherwise.
Result<std::shared_ptr<sys::FileGuardian>> guard_named_backings(TableOptions& table);

}  // namespace engram::engine
