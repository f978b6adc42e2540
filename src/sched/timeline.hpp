// Timeline of Engram lookups and the critical-path model that explains it (seed 000 §4).
//
// One LayerTiming per (rank, step, Engram layer): r hash ids ready, submit (host enqueued the lookup), s lookup
// start, f lookup finish, c consumer arrival at its wait, wait_end consumer released. All in nanoseconds from one
// origin on one time base (CPU: steady_clock; CUDA: elapsed time of events from one origin event). A value that
// was not recorded is NaN and prints as n/a, never 0.
//
// Model of a serial prefetch queue: s_i = max(r_i, f_{i-1}), f_i = s_i + L_i, exposed wait E_i = max(0, f_i - c_i),
// queue time s_i - r_i. It explains an observed timeline; it does not predict one with fixed parameters
// (waits move later consumers; contention changes L_i). `explain()` replays the recurrence with the measured
// r, L and c and reports the residual between modelled and measured s (large = another dependency).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engram/status.hpp"

namespace engram {

inline constexpr double kNotRecorded = std::numeric_limits<double>::quiet_NaN();

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

  double lookup_ns() const { return f_ns - s_ns; }               // L
  double queue_ns() const { return s_ns - r_ns; }                // s - r
  double exposed_wait_ns() const { return std::max(0.0, f_ns - c_ns); }  // E (model definition)
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

class Timeline {
 public:
  void add(const LayerTiming& t) { rows_.push_back(t); }
  void add_maintenance(const MaintenanceSpan& m) { maintenance_.push_back(m); }
  const std::vector<MaintenanceSpan>& maintenance() const { return maintenance_; }
  const std::vector<LayerTiming>& rows() const { return rows_; }
  std::vector<LayerTiming>& rows() { return rows_; }
  void clear() {
    rows_.clear();
    maintenance_.clear();
  }

  // Reads to_json() output, or a Chrome trace written by to_chrome_trace() (its "engram_timeline" key).
  static Result<Timeline> from_json(const nlohmann::json& j);
  // JSON: {"unit":"ns","rows":[{rank,step,layer_id,r_ns,...}]} with null for NaN.
  nlohmann::json to_json() const;
  // Chrome trace event JSON (opens in Perfetto / chrome://tracing): per rank one "main" lane (consumer waits)
  // and one "prefetch queue" lane (lookups), plus instant events for r and submit, and a "cache maintenance" lane
  // when maintenance spans were recorded. Times in microseconds. to_json() carries the spans as "maintenance"
  // (only when there are some); from_json() reads the lookup rows only.
  nlohmann::json to_chrome_trace() const;

 private:
  std::vector<LayerTiming> rows_;
  std::vector<MaintenanceSpan> maintenance_;
};

// Percentile (0..100) of the finite values, linear interpolation; NaN when there are none.
double percentile(std::vector<double> values, double pct);

// Median and tails of a sample (NaN entries ignored; all NaN when the sample has no finite value).
struct Distribution {
  double median = kNotRecorded, p5 = kNotRecorded, p95 = kNotRecorded, p99 = kNotRecorded;
  size_t n = 0;  // finite values
  static Distribution of(const std::vector<double>& v);
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

}  // namespace engram
