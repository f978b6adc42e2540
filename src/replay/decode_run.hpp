// One decode run on a built engine: what `engram run` does in its own process and what every rank of `engram run
// --ranks` does on its engine over the shared table. Both fill one DecodeRunSpec (from the run's RankJob: the same
// fields, the same defaults), make the id source first (a missing token file fails before minutes of table
// building), then call run_decode: device hashing wired when asked for (replay/device_hashing.hpp), the decode
// replay on the engine's queue and compute (replay/decode_replay.hpp), and the timeline written as a Chrome trace
// with the warm-up marked.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/rank_job.hpp"
#include "engram/engine.hpp"
#include "replay/decode_ids.hpp"
#include "replay/decode_replay.hpp"
#include "replay/device_hashing.hpp"
#include "replay/id_source.hpp"

namespace engram {

struct DecodeRunSpec {
  DecodeIdsSpec ids;                    // the id source (make_decode_id_source)
  int batch = 64;                       // sequences per step
  int steps = 32;                       // measured steps
  int warmup = 4;                       // steps before them, not measured
  int decoder_layers = 0;               // decoder layers of the synthetic model; 0 = last Engram layer + 2
  bool compute_only_baseline = true;    // the compute-only pass that the slowdown is measured against
  HashPlace hash = HashPlace::kCpu;     // where real-text ids are hashed
  std::string timeline;                 // Chrome trace file; "" or "none": not written
  bool timeline_absolute = false;       // trace timestamps since the Unix epoch
  // Called once the hashing is wired, right before the replay starts (the CLI says what is about to run).
  std::function<void(const DeviceHashingReport&)> on_start;
};

// The job's workload as a decode run: ids (kind, token file, model hashing, zipf alpha, seed), steps, baseline and
// timeline; hashing on the CPU.
DecodeRunSpec decode_run_spec(const RankJob& job);

struct DecodeRun {
  DecodeReplayReport replay;
  std::shared_ptr<DeviceHashingReport> hashing;  // where the ids were hashed, GPU times and verified ids
  std::string timeline_path;                     // the trace written; "" when none
};

// Replays `spec` on `engine` (its layout, queue, compute and prefetch mode) with the ids of `source`. Errors: the
// hashing's (kInvalidArgument when GPU hashing was asked for and cannot apply), the replay's, kIo when the timeline
// file cannot be written.
Result<DecodeRun> run_decode(Engine& engine, IdSource& source, const DecodeRunSpec& spec);

}  // namespace engram
