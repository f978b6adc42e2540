// Sample statistics for measurements (docs/measurement.md): median and tails (p5/p95, p99 for
// latencies), mean and standard deviation, and a bootstrap confidence interval of the difference of two
// medians (A/B comparisons), all NaN-aware: a NaN entry is an unreadable measurement and is ignored, and a
// statistic of a sample with no finite value is NaN (reported as n/a / null), never 0.
//
// Percentiles use linear interpolation between closest ranks (numpy's default, "type 7"): p of the sorted
// finite values x[0..n-1] is x[h] interpolated at h = (n-1)·p/100. The bootstrap resamples both samples with
// replacement from a fixed seed, so the same inputs give the same interval on every machine (the generator is
// splitmix64 and the index draw is a 128-bit multiply-shift, neither of which depends on the standard library's
// distributions).
//
// Pure functions: no state, thread-safe, no allocation beyond copies of the inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace engram::stats {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The finite values of `v`, sorted ascending.
std::vector<double> finite_sorted(const std::vector<double>& v);

// Percentile `pct` (0..100) of the finite values of `v` (linear interpolation); NaN when there are none.
double percentile(const std::vector<double>& v, double pct);
// Same, on values already finite and sorted ascending (no copy).
double percentile_sorted(const std::vector<double>& sorted, double pct);

double median(const std::vector<double>& v);
double mean(const std::vector<double>& v);
// Sample standard deviation (n-1 denominator) of the finite values; NaN when fewer than two.
double stdev(const std::vector<double>& v);

// Summary of one sample. `n` counts finite values; `n_unreadable` the NaN/inf entries left out.
struct Summary {
  size_t n = 0;
  size_t n_unreadable = 0;
  double min = kNaN, p5 = kNaN, median = kNaN, p95 = kNaN, p99 = kNaN, max = kNaN;
  double mean = kNaN, stdev = kNaN;
};
Summary summarize(const std::vector<double>& v);

// Bootstrap confidence interval of median(b) - median(a).
struct MedianDiff {
  double diff = kNaN;        // median(b) - median(a) of the samples themselves
  double ci_low = kNaN;      // lower bound of the central `confidence` interval of the bootstrap distribution
  double ci_high = kNaN;     // upper bound
  double ratio = kNaN;       // median(b) / median(a) (NaN when median(a) is 0 or NaN)
  double confidence = 0.95;  // e.g. 0.95
  int resamples = 0;
  // True when the interval excludes 0: the difference is larger than the resampling noise.
  bool significant() const { return ci_low > 0 || ci_high < 0; }
};
// `resamples` bootstrap draws (>= 1; default 2000) from `seed`; `confidence` in (0, 1). NaN entries are
// dropped first; the result is all NaN when either sample has no finite value.
MedianDiff bootstrap_median_diff(const std::vector<double>& a, const std::vector<double>& b,
                                 double confidence = 0.95, int resamples = 2000, uint64_t seed = 0x5EEDull);

}  // namespace engram::stats
