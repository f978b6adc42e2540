// Decode replay: the main job of `engram run`. Each step appends one token to each of `batch` sequences, hashes
// them into Engram ids (IdSource), and walks the model's layers in order: at an Engram layer the consumer takes its
// staging from the prefetch queue (after prepare(): at step start in `early` mode, right there in `on_demand`
// mode), then the layer's synthetic compute runs. A compute-only pass (same steps, no lookups) runs first so the
// report can state the main-compute slowdown caused by concurrent lookups. A step's time runs from submitting
// its lookups to the end of its last layer; hashing the step's ids on the host happens before (as in an engine, ahead
// of the step) and is reported apart; an engine that hashes on the device does it inside the step (prepare_step).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/layout.hpp"
#include "replay/id_source.hpp"
#include "sched/layer_compute.hpp"
#include "engram/prefetch_queue.hpp"

namespace engram {

struct DecodeReplayOptions {
  int batch = 64;            // sequences (one new token each per step)
  int steps = 32;            // measured steps
  int warmup_steps = 4;      // steps run first and not measured
  int decoder_layers = 0;    // decoder layers; 0 = max(layer_ids) + 2
  PrefetchMode mode = PrefetchMode::kEarly;
  bool compute_only_baseline = true;
  std::function<double()> clock_ns;  // default steady_clock
  // Early mode: replaces the prepare of every layer at step start (an engine that hashes the step's tokens on the
  // device and prepares from there); it is given the step's host ids and runs inside the step's clock.
  std::function<Status(int64_t step, const std::vector<std::vector<int64_t>>& ids)> prepare_step;
  // Called after each step, outside its clock (verification of device ids, per-step figures).
  std::function<Status(int64_t step, bool measured, const std::vector<std::vector<int64_t>>& ids)> after_step;
};

struct LayerReport {
  int layer_id = 0;
  Distribution exposed_wait_ns;   // E = max(0, f - c), from the timeline
  Distribution measured_wait_ns;  // wait_end - c, what the consumer saw
  Distribution lookup_ns;         // L = f - s
  Distribution queue_ns;          // s - r
  Distribution residual_s_ns;     // measured s - model s (serial-queue recurrence)
};

struct DecodeReplayReport {
  int64_t measured_steps = 0;
  // The queue's timeline rows and step spans before these indices belong to warm-up steps (or earlier work):
  // Timeline::mark_warmup(first_measured_row, first_measured_step) marks them in a copy written to a trace.
  size_t first_measured_row = 0, first_measured_step = 0;
  int64_t rows_looked_up = 0;          // measured steps only
  int64_t dead_rows = 0, invalid_ids = 0;
  double lookup_busy_ns = 0;           // sum of L over measured lookups
  double rows_per_s = kNotRecorded;    // rows / lookup busy time
  double source_gbps = kNotRecorded;   // B_source / lookup busy time (GB = 1e9 B)
  double staging_gbps = kNotRecorded;  // B_staging / lookup busy time
  int64_t b_source_bytes_per_step = 0; // N*H*(d + d/32) summed over Engram layers
  int64_t b_staging_bytes_per_step = 0;  // 2*N*H*d summed over Engram layers
  Distribution step_ns;                // wall time per step with lookups
  Distribution compute_only_step_ns;   // same steps, no lookups (n/a when skipped)
  Distribution host_ids_ns;            // the id source's host time per step (hashing, statistics), not in step_ns
  double tokens_per_s = kNotRecorded;  // batch / median step
  std::vector<LayerReport> layers;
  double distinct_id_fraction = kNotRecorded;  // distinct ids / ids, averaged over layers and steps
  // Median step / median compute-only step; NaN when either is missing.
  double slowdown() const;
};

// The report's figures as the "lookup", "bytes", "steps" and "layers" keys of `j` (run and run --ranks write the same
// document parts); unreadable figures are null.
void add_replay_json(const DecodeReplayReport& r, nlohmann::json& j);

// Runs the replay. `queue` and `compute` must be built for `layout`. Errors come from the id source, the queue
// (e.g. an invalid id in checked mode) or the compute.
Result<DecodeReplayReport> run_decode_replay(const EngramLayout& layout, IdSource& ids, PrefetchQueue& queue,
                                             LayerCompute& compute, const DecodeReplayOptions& options);

}  // namespace engram
