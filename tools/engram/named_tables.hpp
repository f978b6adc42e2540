// Commands that make named (shm) tables in one process -- run, replay, census -- do what a group's leader does
// before it makes its own: sweep the objects of dead owners (host/sweep.hpp: a process killed with its guardian
// left them) from the shm and socket directories, saying what was removed. (Their own tables are guarded by the
// engine: engine/guardian.hpp; census, which builds its table without an Engine, starts that guardian itself.)
#pragma once

#include <cstdio>
#include <string>

#include "engram/table.hpp"
#include "host/sweep.hpp"

namespace engram::cli {

// Sweeps when the table's backing is named; prints each removal on stderr as "engram <command>: removed ...".
inline void sweep_before_named_table(const std::string& command, const TableOptions& table) {
  if (table.backing.kind != BackingKind::kShmFile) return;
  const host::SweepReport swept = host::sweep_stale({host::default_sweep_dirs(table.shm_dir)});
  for (const auto& line : swept.lines(false)) std::fprintf(stderr, "engram %s: %s\n", command.c_str(), line.c_str());
}

}  // namespace engram::cli
