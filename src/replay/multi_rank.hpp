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

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/engine.hpp"
#include "engram/table.hpp"
#include "host/group.hpp"
#include "host/sweep.hpp"
#include "sys/process.hpp"

namespace engram {

// What the table holds and what every rank replays. Travels to the ranks as the group's job (JSON).
struct RankJob {
  std::string layout = "v41-flash-mini";  // preset (ignored with a checkpoint)
  int64_t table_bytes = 512LL << 20;      // preset's total table bytes
  std::string row_layout = "fused";       // fused | split
  std::string checkpoint;                 // the leader loads this file; "" = synthetic rows (seed)
  std::string model;                      // ... or this Hugging Face model directory (its layout and hashing)
  std::string tensor_names;               // model: "WEIGHT,SCALE" with {L}; "" = the released names
  uint64_t seed = 1;                      // synthetic content, and the ids (plus the rank)
  int batch = 64;                         // sequences per rank and step
  int steps = 32;
  int warmup = 4;
  int model_layers = 0;                   // 0 = last Engram layer + 2
  std::string prefetch = "early";         // early | on_demand
  double layer_us = 200;
  std::string ids = "auto";               // auto (text when available, else zipf) | text | zipf | uniform
  std::string tokens;                     // token file for text ids ("" = the setup's default)
  double zipf_alpha = 1.0;
  bool compute_only_baseline = true;
  int verify_rows = 64;                   // rows per layer each rank compares with the expected content
  std::string timeline;                   // "" / "none": no trace; else rank r writes "<timeline>.rank<r>.json"
  bool timeline_absolute = false;         // trace timestamps since the Unix epoch (Timeline::to_chrome_trace)
  int ranks = 1;                          // filled in by run_multi_rank
  // Every rank's engine options as text (set_engine_option keys: backend, fast_path, cache_size, grid_fraction,
  // threads, ...). A rank without threads takes max(1, cores / ranks - 1) lookup threads.
  std::vector<std::pair<std::string, std::string>> engine;
  int gpus = 0;                           // cuda: rank r uses device r % gpus; 0 = every visible device

  // What the leader writes into the table: the model, the checkpoint, or synthetic rows of `seed`.
  TableContent content() const;
  nlohmann::json to_json() const;
  // kInvalidArgument naming the field for a malformed job.
  static Result<RankJob> from_json(const std::string& text);
};

// The job's layout: the preset's, or the checkpoint's or model's (read from its header / config.json).
Result<EngramLayout> job_layout(const RankJob& job);

// The leader's start of a rank group, shared by `engram run --ranks` and `engram soak`: a sweep of the shm and
// socket directories (what dead leaders left, host/sweep.hpp), the file guardian (it is forked, and removes the
// socket if the leader is killed), then the listening socket (armed in the guardian). Errors: the guardian's, the
// listener's.
struct RankGroupLeader {
  host::SweepReport swept;  // stale tables and sockets of dead leaders, removed first (host/sweep.hpp)
  std::shared_ptr<sys::FileGuardian> guardian;
  std::unique_ptr<host::UnixGroupListener> listener;
};
Result<RankGroupLeader> start_rank_group_leader(const std::string& group_name, const std::string& shm_dir);

struct MultiRankOptions {
  int ranks = 2;
  std::string backing = "memfd";        // memfd | shm | hugetlb | hugetlb-1g (anon-thp cannot be shared)
  std::string placement = "none";       // engram/options.hpp text forms
  std::string shm_dir = "/dev/shm";
  std::string exe;                      // engram binary for the ranks; "" = /proc/self/exe
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
