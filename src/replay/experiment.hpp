// Experiments A1-A3 / B1-B2: each changes exactly one thing and keeps the rest fixed, and each is one call.
//
//   A1  table on node 0 <-> node 1           (bind:0 vs bind:1; the consumer runs on node 0)
//   A2  bound <-> interleaved                (bind:0 vs interleave over every memory node)
//   A3  one shared copy <-> one per node     (bind:0 vs replica-per-node; measured from the rank on the LAST
//                                             node, the one a single copy on node 0 leaves remote; capacity W
//                                             vs nodes x W)
//   B1  early <-> on-demand submission       (same table, kernel, grid, staging)
//   B2  background grid cap sweep            (CUDA: grid fraction of the SMs; CPU: the analogue, lookup
//                                             threads as a fraction of the cores)
//
// Protocol per repetition (at least kMinExperimentReps), arms in an order shuffled from a seed: the arm's engine is created from
// scratch (Engine::create_local with the arm's placement and backing: placement before the first page, never a
// reused resident backing), its census is read and checked against what the arm asked for (else the arm is
// INVALID and not timed), the backend is built (CUDA: registration after placement), and the SAME recorded
// schedule (token batches, serving.hpp) is replayed. Per arm the per-run metrics are summarised as median and
// p5/p95 over repetitions; each arm is compared with the first (the baseline) by the difference of medians
// with a bootstrap 95% confidence interval (core/stats). The acceptance chain is evaluated in order: placement changed -> lookup or wait changed -> main compute not regressed -> end-to-end improved; a
// link that cannot be judged is "n/a", and a later link is only claimed when the earlier ones hold.
//
// One rule refuses an experiment this machine cannot run: make_arms() describes what every arm really does here
// (ArmSpec::effective: where the table's pages land and the consumer runs, the prefetch mode, the grid fraction or
// lookup threads) and answers kUnsupported, naming the two arms and why, when two arms would do the same thing —
// A1-A3 on one memory node, B2's CPU analogue when the caps round to the same thread count (exit 77). With fewer
// than kMinExperimentReps repetitions a bootstrap interval is a point and every difference looks significant, so
// run_experiment() refuses them (kInvalidArgument).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/engine.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "replay/serving.hpp"

namespace engram {

inline constexpr int kMinExperimentReps = 5;

struct ArmSpec {
  std::string name;    // e.g. "node0", "early", "cap=0.50"
  std::string value;   // the one thing this arm sets, in words
  std::string effective;  // what the arm does on this machine, normalised ("pages on N0, consumer on N0, early,
                          // 1 lookup threads"): two arms with the same text would measure the same thing
  EngineOptions rig;   // the arm's table and backend (backend resolved, not auto); built with Engine::create_local
  PrefetchMode mode = PrefetchMode::kEarly;
  int consumer_node = -1;  // the replay thread (and the CPU lookup threads it starts) run on this node; -1: as is
};

struct ExperimentOptions {
  std::string id;                     // A1 A2 A3 B1 B2
  EngramLayout layout;
  EngineOptions base;                 // fixed for every arm except the one thing the experiment changes
  ServingOptions serving;
  ServingSchedule schedule;           // recorded batches; with requests but no steps: recorded live once on the
                                      // baseline arm (untimed) and replayed by every arm
  std::function<Result<std::unique_ptr<ServingIdSource>>()> make_ids;
  int reps = 5;
  uint64_t order_seed = 7;
  std::vector<double> caps = {0.25, 0.5, 1.0};  // B2 grid fractions (first = baseline)
  std::string out_dir;                // per-arm timeline traces go here ("" = none)
  nlohmann::json conditions;          // machine conditions (host/conditions) for the report
  std::function<void(const std::string&)> log;
};

// The arms of an experiment for `nodes` memory nodes and `hardware_threads` CPUs. kUnsupported when two arms
// would do the same thing on this machine (see the file comment); kInvalidArgument for an unknown id or a bad cap.
Result<std::vector<ArmSpec>> make_arms(const std::string& id, const EngineOptions& base, const std::vector<int>& nodes,
                                       const std::vector<double>& caps, int hardware_threads);

// Checks an arm's censuses against what it asked for. `evidence` gets per-node shares in words; `signature`
// a short form (e.g. "N0=100%" / "replicas=2 home N1=100%") that differs between arms when placement changed.
bool census_proves_placement(const ArmSpec& arm, const std::vector<host::PageCensus>& censuses, int n_replicas,
                             int home_node, std::string* evidence, std::string* signature);

// One replay of one arm (summaries of ServingReport).
struct RunMetrics {
  int rep = 0, order = 0;
  double ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, itl_p50_ms, itl_p95_ms, itl_p99_ms, goodput_rps, rejection_rate;
  double step_p50_us, main_compute_p50_us, lookup_p50_us, wait_per_step_us, exposed_wait_p95_us;
};
// Metric names in the order reports list them, their units and whether lower is better.
struct MetricInfo {
  const char* key;
  const char* label;
  bool lower_is_better;
  double RunMetrics::*field;
};
const std::vector<MetricInfo>& run_metric_infos();
RunMetrics summarize_run(const ServingReport& r, int rep, int order);

struct ArmResult {
  ArmSpec spec;
  bool valid = false;
  std::string evidence, signature;
  nlohmann::json censuses = nlohmann::json::array();  // first repetition's censuses
  std::vector<RunMetrics> runs;
  std::string trace_file;  // last run's timeline (Chrome trace), when written
};

struct ExperimentResult {
  std::string id, changes, holds;
  std::vector<ArmResult> arms;
  nlohmann::json json;     // everything, incl. comparisons and the acceptance chain
  std::string markdown;    // report.md
};

// Runs the experiment (see the file comment). Errors: kUnsupported (A* on one node), or the first failure of
// table creation / replay (an invalid arm is not an error: it is reported).
Result<ExperimentResult> run_experiment(const ExperimentOptions& options);

// Writes report.md and report.json into `dir` (created). kIo on failure.
Status write_experiment_report(const ExperimentResult& result, const std::string& dir);

}  // namespace engram
