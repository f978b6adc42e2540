// Timeline of Engram lookups and the critical-path model that explains it.
//
// One LayerTiming per (rank, step, Engram layer): r hash ids ready, submit (host enqueued the lookup), s lookup
// start, f lookup finish, c consumer arrival at its wait, wait_end consumer released. All in nanoseconds from one
// origin on one time base (CPU: steady_clock; CUDA: elapsed time of events from one origin event). A value that
// was not recorded is NaN and prints as n/a, never 0. One StepSpan per step (begin_step .. end_step on the same
// time base). Warm-up steps are marked (LayerTiming::warmup, or a step number < 0 as the serving harness numbers
// them): reports leave them out, and so does `engram trace analyze` unless asked.
//
// Model of a serial prefetch queue: s_i = max(r_i, f_{i-1}), f_i = s_i + L_i, exposed wait E_i = max(0, f_i - c_i),
// queue time s_i - r_i. It explains an observed timeline; it does not predict one with fixed parameters
// (waits move later consumers; contention changes L_i). `explain()` replays the recurrence with the measured
// r, L and c and reports the residual between modelled and measured s (large = another dependency).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

inline constexpr double kNotRecorded = std::numeric_limits<double>::quiet_NaN();
// The largest rank and layer number a timeline file may name (from_json refuses a larger one).
inline constexpr int kMaxTimelineRank = 1 << 20;
inline constexpr int kMaxTimelineLayer = 1 << 16;
// The largest step number (2^53: what a JSON double holds exactly).
inline constexpr int64_t kMaxTimelineStep = int64_t{1} << 53;

struct LayerTiming {
  int rank = 0;
  int64_t step = 0;
  int layer_index = 0;   // index into EngramLayout::layer_ids
  int layer_id = 0;      // model layer number
  int64_t rows = 0;      // tokens * heads looked up
  double r_ns = kNotRecorded;
  double submit_ns = kNotRecorded;
  double s_ns = kNotRecorded;
  double f_ns = kNotRecorded;
  double c_ns = kNotRecorded;
  double wait_end_ns = kNotRecorded;
  bool warmup = false;   // a warm-up step's lookup (not measured)

  bool is_warmup() const { return warmup || step < 0; }

  double lookup_ns() const { return f_ns - s_ns; }               // L
  double queue_ns() const { return s_ns - r_ns; }                // s - r
  // E (model definition); kNotRecorded when f or c is (std::max would turn the NaN into an exposed wait of 0).
  double exposed_wait_ns() const { return std::isnan(f_ns - c_ns) ? kNotRecorded : std::max(0.0, f_ns - c_ns); }
  double measured_wait_ns() const { return wait_end_ns - c_ns; } // what the consumer saw
  double lead_ns() const { return c_ns - r_ns; }                 // c - r
};

// Result of replaying the serial-queue recurrence over the lookups of one queue, in submission order.
struct ModelRow {
  const LayerTiming* timing = nullptr;
  double model_s_ns = kNotRecorded;   // max(r_i, model f_{i-1})
  double model_f_ns = kNotRecorded;   // model_s + L_i (measured L)
  double model_e_ns = kNotRecorded;   // max(0, model_f - c_i)
  double residual_s_ns = kNotRecorded;  // measured s - model s
};

// Replays the recurrence over `queue` (lookups of one rank's serial queue, in submission order);
// f0_ns is the time the queue was first available (use the first r when unknown). `scale_l` scales every
// L_i and `advance_r_ns` moves every r_i earlier (what-if analysis); 1 and 0 replay the measurement.
std::vector<ModelRow> explain_serial_queue(const std::vector<LayerTiming>& queue, double f0_ns,
                                           double scale_l = 1.0, double advance_r_ns = 0.0);

// Work that keeps the serving state fresh but is not a lookup (the hot-row cache's online update): one span per
// (rank, step, Engram layer, phase), on the lookups' time base. `what`: "stage" (rows copied to device staging on
// the low-priority maintenance stream) or "commit" (staged rows and map edits applied on the prefetch stream).
struct MaintenanceSpan {
  int rank = 0;
  int64_t step = 0;      // the step whose end enqueued it
  int layer_index = 0;
  int layer_id = 0;
  std::string what;
  int64_t rows = 0;
  double start_ns = kNotRecorded;
  double end_ns = kNotRecorded;
  double host_us = kNotRecorded;  // serving-thread time spent enqueuing it
};

// One step of one rank on the timeline's time base: begin_step .. end_step (CUDA: the step's origin event ..
// the end-of-step event on the main stream).
struct StepSpan {
  int rank = 0;
  int64_t step = 0;
  double begin_ns = kNotRecorded;
  double end_ns = kNotRecorded;
  bool warmup = false;
  bool is_warmup() const { return warmup || step < 0; }
};

// How to_chrome_trace() writes its events.
struct ChromeTraceOptions {
  int pid = 0;                 // OS process id of the events (the rank goes into the process name and args)
  bool absolute_time = false;  // ts in microseconds since the Unix epoch (needs origin_unix_ns), so the trace
                               // lines up with other traces of the same run (a torch profiler trace) in Perfetto
};

class Timeline {
 public:
  void add(const LayerTiming& t) { rows_.push_back(t); }
  void add_maintenance(const MaintenanceSpan& m) { maintenance_.push_back(m); }
  const std::vector<MaintenanceSpan>& maintenance() const { return maintenance_; }
  void add_step(const StepSpan& s) { steps_.push_back(s); }
  const std::vector<LayerTiming>& rows() const { return rows_; }
  std::vector<LayerTiming>& rows() { return rows_; }
  const std::vector<StepSpan>& steps() const { return steps_; }
  void clear() {
    rows_.clear();
    steps_.clear();
    maintenance_.clear();
  }
  // Marks the lookups and steps recorded before row `first_measured_row` / step span `first_measured_step` as
  // warm-up (a harness calls it with the counts it saw when its measured steps began).
  void mark_warmup(size_t first_measured_row, size_t first_measured_step);
  // The lookups and steps that are not warm-up.
  Timeline measured() const;
  // Wall-clock time (CLOCK_REALTIME, ns since the Unix epoch) of this timeline's time origin; NaN when unknown.
  double origin_unix_ns = kNotRecorded;

  // Reads to_json() output, or a Chrome trace written by to_chrome_trace() (its "engram_timeline" key). A field of
  // the wrong kind or out of its range (a time that is not a number in [0, 1e18] ns or null, a fractional or
  // negative rank) is refused with its place, e.g. "timeline: rows[3].c_ns: ...".
  static Result<Timeline> from_json(const nlohmann::json& j);
  // JSON: {"unit":"ns","origin_unix_ns":..,"rows":[{rank,step,layer_id,r_ns,...,warmup}],"steps":[...]} with
  // null for NaN.
  nlohmann::json to_json() const;
  // Chrome trace event JSON (opens in Perfetto / chrome://tracing): one process per rank (its OS pid), with a
  // "steps" lane (one slice per step), a "main (consumer)" lane (main compute between the consumer's waits, and
  // the waits), a "prefetch queue" lane (lookups), instant events for r and submit, and a "cache maintenance" lane
  // when maintenance spans were recorded. Warm-up slices are named "warm-up ..." and carry args.warmup = true.
  // Times in microseconds from the origin, or since the epoch. to_json() carries the maintenance spans as
  // "maintenance" (only when there are some); from_json() does not read them back.
  nlohmann::json to_chrome_trace(const ChromeTraceOptions& options = {}) const;

 private:
  std::vector<LayerTiming> rows_;
  std::vector<StepSpan> steps_;
  std::vector<MaintenanceSpan> maintenance_;
};

// Percentile (0..100) of the finite values, linear interpolation; NaN when there are none.
double percentile(std::vector<double> values, double pct);

// Median and tails of a sample (NaN entries ignored; all NaN when the sample has no finite value).
struct Distribution {
  double median = kNotRecorded, p5 = kNotRecorded, p95 = kNotRecorded, p99 = kNotRecorded;
  size_t n = 0;  // finite values
  static Distribution of(const std::vector<double>& v);
  // {"median","p5","p95","p99","n"}, each value divided by `scale` (1e6: ns -> ms), null where not recorded.
  nlohmann::json to_json(double scale = 1.0) const;
};

// Per (rank, Engram layer) statistics of a timeline and the serial-queue model replayed per rank over all its
// lookups in submission order (f0 = the rank's first r). What-if knobs as in explain_serial_queue; consumer
// arrivals c stay as measured (in reality an earlier wait also moves later c: the what-if is a bound, not a
// prediction of a re-run).
struct LayerAnalysis {
  int rank = 0;
  int layer_id = 0;
  Distribution queue_ns, lookup_ns, exposed_wait_ns, measured_wait_ns, lead_ns, residual_s_ns, model_exposed_wait_ns;
  double total_exposed_wait_ns = 0;        // sum of measured E
  double total_model_exposed_wait_ns = 0;  // sum of modelled E (what-if)
};
std::vector<LayerAnalysis> analyze_timeline(const Timeline& timeline, double scale_l = 1.0, double advance_r_ns = 0.0);

// What-if: the lookups of Engram layer `moved_layer_id` run on a second serial queue of their own (free from the
// rank's first r), every other layer keeps the first queue; both recurrences use the measured r, L and c. Per
// (rank, layer) the modelled E lands in model_exposed_wait_ns / total_model_exposed_wait_ns (the measured fields
// are as in analyze_timeline). A bound, like the other what-ifs: later consumer arrivals stay as measured.
std::vector<LayerAnalysis> analyze_timeline_moved(const Timeline& timeline, int moved_layer_id);

// Lookups of one step of one rank, for drawing its lanes (main stream waits, prefetch queue). Sorted by submission.
std::vector<LayerTiming> step_rows(const Timeline& timeline, int rank, int64_t step);

ENGRAM_API_END
}  // namespace engram
