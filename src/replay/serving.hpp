// Serving replay (`engram replay`): requests arrive on the real clock of the replay, a continuous-
// batching scheduler forms token batches (decode tokens first, then chunked prefill, within a token budget),
// and every scheduled token's Engram ids are looked up through the real backend's prefetch queue while
// synthetic layer compute sized by a model shape runs on the main stream.
//
// Three parts, each usable alone:
//  - the workload (make_requests): Poisson arrivals at `rate_rps` (exponential gaps from a seeded generator),
//    prompt/output lengths from a distribution or a CSV trace; a fixed seed gives the same requests.
//  - the schedule (ServingSchedule): the token batches a scheduler actually formed, recorded to JSON so that
//    A/B arms replay the *same* batches ("same input" with different batching is not a
//    same-condition comparison). A live run records it; a replay of a recorded schedule runs step k when its
//    previous step has ended AND every request whose first tokens it schedules has arrived (arrivals stay on
//    the real clock: a faster arm cannot schedule a request before the client sent it).
//  - the executor (run_serving_replay): per step, hash the batch's tokens (real text through the reference
//    N-gram hash, or Zipf ids), submit the Engram lookups (early: at step start; on_demand: at the consumer),
//    run the layers; the step ends when its queue's end_step() returns (CUDA: one host sync per step).
//
// Time: everything runs on one steady clock started when the first request may arrive; nothing is simulated
// except the layer compute's *size* (ModelShape, below) and the lengths. Client metrics:
// TTFT = time from a request's arrival (send) to the end of the step that produced its first token (the step
// that finishes its prefill); ITL = gaps between the ends of the steps that produced its consecutive tokens;
// goodput = requests that finished meeting both SLOs (TTFT <= slo, mean ITL <= slo) per second of the replay
// (first arrival to last completion); rejection = requests refused at arrival because the waiting queue was
// full. Step time (what a GPU profile would show) is reported separately and never replaces them.
//
// Layer compute sizing: a layer of `active_params` parameters over T tokens takes
//   t_layer(T) = max(active_params * weight_bytes / weight_gbps, 2 * T * active_params / compute_tflops)
// (weights read once per step; FLOPs of the dense/active-expert GEMMs), executed as ceil(t_layer / unit)
// repetitions of a calibrated unit of LayerCompute (CUDA: cuBLAS GEMMs sized to `unit_us`; CPU: calibrated
// arithmetic). The shape and rates are assumptions named in the report, not measurements of a real model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "host/token_io.hpp"
#include "sched/layer_compute.hpp"
#include "engram/prefetch_queue.hpp"
#include "engram/timeline.hpp"

namespace engram {

// ---- workload -------------------------------------------------------------------------------------------

// Length distribution: fixed N, uniform:MIN-MAX, lognormal:MEDIAN,SIGMA (clipped to [1, max_tokens]).
struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal } kind = Kind::kFixed;
  double a = 128, b = 0;  // fixed: a; uniform: [a, b]; lognormal: median a, sigma b
  int64_t max_tokens = 32768;
  static Result<LengthDist> parse(const std::string& text);
  std::string describe() const;
};

struct ServingRequest {
  int64_t id = 0;
  double arrival_ns = 0;     // from the replay's origin
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // >= 1; the first one comes with the end of prefill
  int64_t text_offset = 0;    // where its tokens start in the text stream (real-text ids)
};

struct WorkloadOptions {
  double rate_rps = 4;       // Poisson arrival rate (requests per second)
  int n_requests = 32;
  uint64_t seed = 1;
  LengthDist prompt, output;
  std::string trace_file;    // CSV "prompt_tokens,output_tokens[,arrival_s]" per line ('#' comments): overrides
                             // the distributions; arrivals from the file when given, else Poisson
};
// Deterministic for the options. kInvalidArgument for rate <= 0, n < 1, or a bad trace line (named).
Result<std::vector<ServingRequest>> make_requests(const WorkloadOptions& options, int64_t text_tokens = 0);

// ---- schedule -------------------------------------------------------------------------------------------

struct ScheduledChunk {
  int64_t request = 0;
  int64_t pos = 0;       // first position in the request's sequence (prompt then output tokens)
  int64_t tokens = 0;
  bool prefill = false;  // part of the prompt (else a decode token)
};
struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;
  int64_t tokens() const;
};
struct ServingSchedule {
  std::vector<ServingRequest> requests;
  std::vector<int64_t> rejected;       // request ids refused at arrival (waiting queue full)
  std::vector<ScheduledStep> steps;
  nlohmann::json to_json() const;
  static Result<ServingSchedule> from_json(const nlohmann::json& j);
  Status save(const std::string& path) const;
  static Result<ServingSchedule> load(const std::string& path);
};

struct SchedulerOptions {
  int64_t token_budget = 2048;  // tokens per step (decode + prefill)
  int64_t prefill_chunk = 512;  // most prompt tokens of one request per step
  int max_running = 64;         // requests holding a batch slot (decoding or in prefill)
  int max_waiting = 256;        // a request arriving to a full waiting queue is rejected
};

// ---- model shape and compute sizing ---------------------------------------------------------------------

struct ModelShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  double active_params_per_layer = 0;  // parameters touched per token per layer
  double weight_bytes_per_param = 2;
  std::string note;
  // "v41-flash" (assumed: 43 layers, hidden 4096, ~0.3 G active params/layer), "tiny" (4 layers, hidden 256).
  static Result<ModelShape> preset(const std::string& name);
  static std::vector<std::string> preset_names();
};
struct ComputeRates {
  double tflops = 400;        // achieved dense GEMM rate the model assumes
  double weight_gbps = 4000;  // weight read rate (HBM) for the per-step floor
  double unit_us = 50;        // calibrated unit the executor repeats
};
// Modelled duration of one layer over `tokens` tokens, and the unit repetitions that execute it (>= 1).
double model_layer_ns(const ModelShape& m, const ComputeRates& r, int64_t tokens);
int units_for_layer(const ModelShape& m, const ComputeRates& r, int64_t tokens);

// ---- ids of scheduled tokens ----------------------------------------------------------------------------

// Engram ids of positions [pos, pos+n) of a request, per Engram layer: out[layer] gets n*heads ids appended.
// Chunks of one request must come in position order (the text source hashes incrementally).
class ServingIdSource {
 public:
  virtual ~ServingIdSource() = default;
  virtual Status append(const ServingRequest& r, int64_t pos, int64_t n, std::vector<std::vector<int64_t>>& out) = 0;
  virtual void reset() = 0;          // forget every request's state (a new replay)
  virtual int64_t text_tokens() const { return 0; }  // stream length for text offsets (0: none)
  virtual std::string describe() const = 0;
  // Sources hashed from tokens (real text): the hasher, and out := the raw token ids of positions [pos, pos+n) of
  // `r`, what a device hasher takes. Others: nullptr and kUnsupported.
  virtual const NgramHasher* hasher() const { return nullptr; }
  virtual Status raw_tokens(const ServingRequest& r, int64_t pos, int64_t n, std::vector<int64_t>& out) const;
};
// Real text: request r reads tokens [text_offset + pos) of the stream (wrapping), hashed with `hasher`.
Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(NgramHasher hasher, TokenFile tokens);
// As make_text_id_source: reads the token file (empty: default) and the committed compression table.
Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(const EngramLayout& layout, const std::string& token_file);
// Zipf(alpha) ids per head, a pure function of (seed, request, position, head).
Result<std::unique_ptr<ServingIdSource>> make_zipf_serving_ids(const EngramLayout& layout, double alpha, uint64_t seed);

// ---- executor -------------------------------------------------------------------------------------------

struct ServingOptions {
  PrefetchMode mode = PrefetchMode::kEarly;
  ModelShape model;
  ComputeRates rates;
  double slo_ttft_ms = 2000;
  double slo_itl_ms = 100;
  int warmup_steps = 2;        // steps of the first batch run before the clock starts (not measured)
  SchedulerOptions scheduler;  // live mode only
  std::function<double()> clock_ns;  // default steady_clock from the replay's origin
  // Early mode only. prepare_step replaces the prepare of every Engram layer at the step's start (e.g. the ids
  // hashed on the device from the chunks' tokens); host_ids are the id source's ids of the step. after_step runs
  // after the step's end, outside the step's time (e.g. the device ids compared with host_ids); measured is false
  // for warm-up steps (step < 0).
  std::function<Status(const ScheduledStep& step, int64_t index, const std::vector<std::vector<int64_t>>& host_ids)>
      prepare_step;
  std::function<Status(const ScheduledStep& step, int64_t index, bool measured,
                       const std::vector<std::vector<int64_t>>& host_ids)>
      after_step;
  // The replay's clock stands still while the id source hashes and after_step runs: when the ids the lookups use
  // come from elsewhere (the device) and the host's serve only as a check, they must not delay the client.
  bool host_ids_off_clock = false;
};

struct ServingReport {
  int64_t requests = 0, completed = 0, rejected = 0, good = 0;
  double duration_s = kNotRecorded;    // first arrival to last completion
  double goodput_rps = kNotRecorded;   // good requests per second
  double throughput_tokens_per_s = kNotRecorded;  // output tokens per second
  double request_throughput_rps = kNotRecorded;   // completed requests per second
  double rejection_rate = kNotRecorded;
  int64_t output_tokens = 0;
  // Client metrics: TTFT, TPOT (per request: (end - first token) / (output tokens - 1)), end-to-end latency per
  // request; ITL per gap between tokens.
  Distribution ttft_ns, tpot_ns, itl_ns, e2e_ns;
  std::vector<double> ttft_samples_ns, tpot_samples_ns, itl_samples_ns, e2e_samples_ns;
  // Engine-side (GPU step time): reported separately.
  int64_t steps = 0, scheduled_tokens = 0, prefill_tokens = 0, decode_tokens = 0;
  Distribution step_ns, decode_step_ns, mixed_step_ns;  // all steps; decode-only; steps with prefill
  Distribution main_compute_ns;        // step time minus measured consumer waits (per step)
  Distribution host_ids_ns;            // the id source's time per step (host hashing; before the step's clock)
  Distribution lookup_ns, exposed_wait_ns, measured_wait_ns, queue_ns;  // per lookup
  double idle_wait_s = 0;              // time the engine waited for arrivals
  int64_t rows_looked_up = 0;
  double rows_per_s = kNotRecorded;    // rows / lookup busy time
  std::vector<double> step_samples_ns, main_compute_samples_ns;
  nlohmann::json to_json() const;
};

// Live mode: schedules on the real clock (the scheduler sees a request only once it has arrived) and records
// the batches into `recorded`. Replay mode (`recorded` given as input via run_serving_replay_recorded): runs
// the recorded batches. `queue` and `compute` must be built for `layout` with room for token_budget tokens.
Result<ServingReport> run_serving_live(const EngramLayout& layout, const std::vector<ServingRequest>& requests,
                                       ServingIdSource& ids, PrefetchQueue& queue, LayerCompute& compute,
                                       const ServingOptions& options, ServingSchedule* recorded);
Result<ServingReport> run_serving_recorded(const EngramLayout& layout, const ServingSchedule& schedule,
                                           ServingIdSource& ids, PrefetchQueue& queue, LayerCompute& compute,
                                           const ServingOptions& options);

}  // namespace engram
