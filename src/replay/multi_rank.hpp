// Multi-rank decode replay over ONE shared table: what `engram run --ranks N` does.
//
// The parent process is the shared group's leader (host/group.hpp), through the engine: Engine::serve_group
// creates one backing per Engram layer (memfd by default, a named /dev/shm file with --backing shm), places it
// before the first page exists and writes the content (synthetic rows or a checkpoint); then the parent starts N
// rank processes (posix_spawn of the engram binary's hidden `rank-worker` subcommand: a fresh exec, so no
// descriptor or lock leaks from the parent) and admits them: describe -> attach (read-only mappings) ->
// register (each rank's backend: CUDA registration, or nothing on the CPU) -> census -> ready -> census. Each
// rank is an Engine::join_group with the job's engine options (backend, fast path, cache, ...): it replays
// (run_decode_replay) on its own queue over the SHARED mapping -- DP ranks: its own id stream (zipf / uniform
// seeded by rank; real text advanced by rank x steps), the same table -- checks sampled rows against the
// content, reports Rss/Pss of its table mappings, and sends its JSON report through the group's all-gather.
// The parent adds the census after replay, aggregates and reaps every rank.
//
// Failures: a rank that dies or fails at any step fails the run with the step and the rank named (the
// protocol's own errors); the parent then kills and reaps the remaining ranks, and no named file or
// socket is left (unlinked on failure, or by the guardian if the parent itself is killed).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/rank_job.hpp"
#include "engram/status.hpp"
#include "host/group.hpp"

namespace engram {

struct MultiRankOptions {
  int ranks = 2;
  std::string backing = "memfd";        // memfd | shm | hugetlb | hugetlb-1g (anon-thp cannot be shared)
  std::string placement = "none";       // engram/options.hpp text forms
  std::string shm_dir = "/dev/shm";
  std::string exe;                      // engram binary for the ranks; "" = /proc/self/exe
  std::string git_rev = "n/a";          // the build's revision for the report's conditions (the CLI's git_revision())
  std::vector<std::string> extra_rank_args;  // appended to every rank's command line (tests: --fault-at)
  bool read_only = true;                // ranks map the table PROT_READ
  host::ProtocolTimeouts timeouts;
  host::Millis join_timeout{60000};     // all ranks started and connected
  host::Millis replay_timeout{3600000}; // a rank's whole replay
  std::function<void(const std::string&)> progress;  // one line per phase (the CLI prints to stderr)
  // What the leader's start-up sweep removed (dead owners' objects), one line each; the CLI prints them on stderr
  // also with --json: removing files is never silent. Null: they go to `progress`.
  std::function<void(const std::string&)> notice;
  // The leader's fill or load of the shared table (TableContent::on_progress): bytes done, bytes in all, seconds.
  std::function<void(int64_t, int64_t, double)> on_load_progress;
};

// Parent side (see the file comment). The JSON: command, mode "multi-rank", ranks, conditions, table,
// group (name, socket, leader pid, protocol steps with every rank's entry), census (leader, after
// placement / load / replay), rank_census, per_rank (pid, exit, report), aggregate (summed rows/s and
// tokens/s, worst median step, per-layer worst exposed wait), memory (Rss/Pss of the table mappings per
// process and the Pss sum against the table bytes: one copy, not N), same_bytes.
// Errors: kInvalidArgument for bad options; the protocol's errors naming step and rank; a rank's own
// failure (its replay error) naming the rank.
Result<nlohmann::json> run_multi_rank(const RankJob& job, const MultiRankOptions& options);

struct RankWorkerOptions {
  std::string socket_path;
  std::string group;
  host::Millis join_timeout{60000};
  host::ProtocolTimeouts timeouts;
  host::Millis replay_timeout{3600000};
  std::string fault_at;  // testing: this rank SIGKILLs itself on entering this step
  int fault_rank = -1;   // ... when its rank is this (-1: every rank)
};
// The steps a rank can be told to die at (RankWorkerOptions::fault_at): the group protocol's steps, then
// "replayed" and "report".
const std::vector<std::string>& rank_fault_steps();
// Rank side: the body of `engram rank-worker`. Errors as they reached this rank (its own, or the
// group's naming another rank).
Status run_rank_worker(const RankWorkerOptions& options);

// Human-readable report of run_multi_rank's JSON.
std::string multi_rank_text(const nlohmann::json& report);

}  // namespace engram
