// Cost learner: corrects the planner's prices with what the served batches then measured.
//
// The planner (planner.hpp) prices each path with a model calibrated on uniform random rows; real traffic repeats
// and clusters ids, so a path can run much faster or slower than its price. The learner keeps, per path (its
// technique key: dedup, sort, cache, host share; the grid is left out) and per batch-size bucket (floor(log2(rows)):
// decode and prefill batches learn apart), a running estimate of measured / predicted time and of the measured time
// per row:
// - correction: the planner multiplies a path's model price by the path's own measured/predicted ratio in the
//   bucket (an exponential average in the log domain, so a single outlier moves it by a bounded factor); a path not
//   yet measured there takes the ratio of a path with the same device technique at another host share (a split
//   the nearest measured split, else the device path it splits), else the plain gather's (the gather dominates
//   every path's price), else 1. The plain
//   gather's corrected price is thus its own measured time in the bucket, scaled by the model's shape between sizes.
// - guard: a path with at least `min_samples` measurements whose measured time per row exceeds the plain gather's
//   in the same bucket by more than `guard_margin` is barred there: the planner does not choose it. A later
//   measurement of it (a periodic retry, or an exploration batch of the engine) that is within the margin restarts
//   its estimate from that measurement and lifts the bar; one that is not keeps it.
// - exploration: while another path is chosen in a bucket, the plain gather is run once every `plain_every`
//   batches of that bucket (every `plain_warm_every` until it has `min_samples` measurements there), so that plain's
//   measured time stays current; at most 1/plain_every of a bucket's batches lose the chosen path's gain. Once
//   both are measured there, the plain batch comes rarer the more the chosen path gains, so that plain batches cost
//   at most `plain_overhead` of the bucket's time (up to one in plain_every while plain has fewer than min_samples
//   measurements, one in `plain_every_max` after): a path measured 1.4x faster than plain is far from being
//   overtaken by it, and each plain batch costs it 40% of one batch. A chosen path not yet measured in the bucket is
//   spaced by its price instead. A path `plain_warm_gain` times faster than plain's first measurement skips the
//   rest of the warm-up (an 8K-token prefill from the cache runs 20-30x faster than plain). A path not measured
//   faster than plain keeps the warm-up rate, so the guard sees plain soon. A barred path is retried once per
//   `retry_every` batches of its bucket.
// - unique fraction: an estimate per bucket (a decode batch of 64 tokens repeats far less than an 8K prefill).
// Inputs that are not finite or not positive are ignored. Pure C++, deterministic; not thread-safe (one per
// lookup stream, like the planner's caller).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/planner.hpp"

namespace engram::plan {

inline constexpr int kSizeBuckets = 40;

// floor(log2(rows)) clamped to [0, kSizeBuckets); rows <= 1 give 0.
int size_bucket(int64_t rows);
// Smallest and largest row count of bucket `b`.
std::pair<int64_t, int64_t> bucket_rows(int b);

// Plan::path_key() without the grid bit: what the learner keys by.
uint32_t learn_key(const Plan& p);
uint32_t learn_key(bool dedup, bool sort, bool cache, double host_share);
inline constexpr uint32_t kPlainKey = 0;
// The path's name without the grid, e.g. "dedup(hash)+cache+uva", "plain-uva".
std::string learned_path_name(uint32_t key);
// The path of a learner key as a plan shape (dedup, sort, cache, host share; grid and figures left default).
Plan plan_of_key(uint32_t key);

struct LearnerOptions {
  double weight = 0.25;        // weight of a new measurement in the running estimates
  int min_samples = 3;         // measurements of a path in a bucket before the guard may bar it
  double guard_margin = 0.03;  // barred when its measured time per row exceeds plain's by more than this
  int plain_every = 32;        // one plain batch in this many of a bucket while another path is chosen; 0 = never
  int plain_warm_every = 4;    // ... while plain has fewer than min_samples measurements in the bucket
  // Plain batches take at most this share of a bucket's time once both paths are measured there: one in
  // (plain / chosen - 1) / plain_overhead, no more often than the rates above, at most one in plain_every (warm-up)
  // or plain_every_max (after). 0: the rates above.
  double plain_overhead = 0.005;
  int plain_every_max = 512;
  // A chosen path measured (before its first measurement: predicted) this many times faster per row than plain's
  // measured time in the bucket ends plain's warm-up there: no plausible error in plain's first measurements brings
  // plain within the guard's margin, and at prefill sizes each warm-up batch of plain costs tens of chosen batches.
  // Plain then comes at the spacing after the warm-up. 0: always warm up.
  double plain_warm_gain = 4;
  int retry_every = 64;        // a barred path is retried once per this many batches of its bucket; 0 = never
  double max_factor = 16;      // corrections are clamped to [1/max_factor, max_factor]
  // Timing a batch puts an event record before its launches on the serving thread (several us on a decode batch
  // of tens of us; the end event and the query come after the launches): a path with steady_samples measurements
  // in a bucket (>= min_samples, so the guard sees them) is timed on one batch in time_every; before that, on every
  // batch. time_every 1: every batch.
  int steady_samples = 4;
  int time_every = 16;
};

// Where a path's correction came from.
enum class CorrectionSource : uint8_t {
  kNone,
  kOwn,
  kSibling,  // a path with the same device technique (dedup, sort, cache) at another host share
  kPlain,
};

struct Correction {
  double factor = 1;  // multiply the model's price by this
  bool barred = false;
  int64_t samples = 0;  // the path's own measurements in the bucket
  CorrectionSource source = CorrectionSource::kNone;
};

// What the engine should run for a batch beside the planner's choice.
enum class Explore : uint8_t {
  kNone,         // the chosen path
  kPlain,        // the plain gather (its measured time is stale or missing in this bucket)
  kRetryBarred,  // plan again with barred paths allowed (choose(..., allow_barred = true))
};

// One (bucket, path) record, plain numbers for reports.
struct LearnedPath {
  int bucket = 0;
  int64_t rows_min = 0, rows_max = 0;  // the bucket's row range
  uint32_t key = 0;
  std::string name;
  int64_t samples = 0;
  double predicted_us = 0;  // running average of what was predicted for the measured batches before they ran
  double measured_us = 0;   // running average of their measured time
  double factor = 1;        // the correction applied (measured / predicted, log-domain average)
  bool barred = false;
};

class CostLearner {
 public:
  explicit CostLearner(LearnerOptions o = {}) : o_(o) {}

  // A batch of `rows` rows ran path `key` (learn_key), priced `model_us` by the model (uncorrected; best priced with
  // the statistics known once the batch ran, e.g. its own unique fraction), measured `measured_us`; `predicted_us`
  // is what the planner predicted before it ran (reports; NaN: model_us). Returns false (and records nothing) for
  // non-finite or non-positive inputs.
  bool observe(uint32_t key, int64_t rows, double model_us, double measured_us, double predicted_us = kUnknown);
  // The correction of path `key` for a batch of `rows` rows.
  Correction correction(uint32_t key, int64_t rows) const;
  bool barred(uint32_t key, int64_t rows) const { return correction(key, rows).barred; }
  // The barred path of the bucket of `rows` measured closest to plain (lowest time per row): the one a retry
  // re-measures when the planner would not pick a barred path itself. kPlainKey when none is barred.
  uint32_t retry_key(int64_t rows) const;
  // Counts one served batch of `rows` rows whose planner choice is `chosen_key`, and says what to run instead, if
  // anything (plain exploration, barred-path retry). `chosen_us`: the planner's price of the choice (spaces plain's
  // batches while the choice has no measurement in the bucket; NaN: unknown).
  Explore explore(int64_t rows, uint32_t chosen_key, double chosen_us = kUnknown);
  // Whether to time this batch of path `key` (LearnerOptions::steady_samples, time_every); counts the batch.
  bool wants_timing(uint32_t key, int64_t rows);

  // Unique fraction of `dedup_rows` rows of batches in the bucket of `rows` (device-counted distinct ids).
  void observe_unique(int64_t rows, int64_t dedup_rows, int64_t unique_rows);
  double unique_fraction(int64_t rows) const;  // the bucket's estimate; NaN when none

  std::vector<LearnedPath> paths() const;  // bucket ascending, then key
  std::vector<std::pair<int, double>> unique_by_bucket() const;  // (bucket, unique fraction) where known
  const LearnerOptions& options() const { return o_; }
  LearnerOptions& options() { return o_; }
  void reset();

 private:
  struct Entry {
    int64_t samples = 0;
    double log_ratio = 0;    // log(measured / predicted), running average
    double log_us_row = 0;   // log(measured us / rows), running average
    double predicted_us = 0, measured_us = 0;  // running averages (reports)
    int64_t untimed = 0;     // batches since the last timed one (wants_timing)
  };
  struct Bucket {
    std::map<uint32_t, Entry> paths;
    int64_t batches = 0, since_plain = 0, since_retry = 0;
    double unique = kUnknown;
  };
  bool barred_in(const Bucket& b, uint32_t key) const;
  LearnerOptions o_;
  std::array<Bucket, kSizeBuckets> b_{};
};

}  // namespace engram::plan
