// The job of a rank group: what the shared table holds and what every rank replays. The leader of `engram run
// --ranks`, `engram serve-table` and `engram soak` writes it as the group's job text (Engine::serve_group); every
// peer reads it back from Engine::group_job() (the rank workers take their engine options and workload from it,
// Python peers see it as Engine.group_job). Plain data with a JSON form whose keys stay stable; the table half
// (layout, size, row layout, content) is what serving needs, the workload half is what the decode replay reads
// (src/replay/decode_run.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {

struct RankJob {
  // ---- the table ----
  std::string layout = "v41-flash-mini";  // preset (ignored with a checkpoint)
  int64_t table_bytes = 512LL << 20;      // preset's total table bytes
  std::string row_layout = "fused";       // fused | split
  std::string checkpoint;                 // the leader loads this file; "" = synthetic rows (seed)
  std::string model_dir;                  // ... or this Hugging Face model directory (its layout and hashing)
  std::string tensor_names;               // model: "WEIGHT,SCALE" with {L}; "" = the released names
  uint64_t seed = 1;                      // synthetic content, and the ids (plus the rank)
  // ---- the workload of every rank ----
  int batch = 64;                         // sequences per rank and step
  int steps = 32;
  int warmup = 4;
  int decoder_layers = 0;                 // decoder layers of the synthetic model; 0 = last Engram layer + 2
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
// kInvalidArgument for an unknown row layout; the preset's or the content reader's errors.
Result<EngramLayout> job_layout(const RankJob& job);

}  // namespace engram
