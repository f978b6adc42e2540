// Sample statistics (see stats.hpp). The bootstrap draws indices with splitmix64 and a multiply-shift
// (Lemire's unbiased-enough reduction, bias < n/2^64), so results are reproducible across standard libraries.
#include "core/stats.hpp"

#include <algorithm>
#include <cmath>

#include "core/splitmix.hpp"

namespace engram::stats {

std::vector<double> finite_sorted(const std::vector<double>& v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v)
    if (std::isfinite(x)) out.push_back(x);
  std::sort(out.begin(), out.end());
  return out;
}

double percentile_sorted(const std::vector<double>& s, double pct) {
  if (s.empty() || !std::isfinite(pct)) return kNaN;
  pct = std::clamp(pct, 0.0, 100.0);
  const double h = static_cast<double>(s.size() - 1) * pct / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = h - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

double percentile(const std::vector<double>& v, double pct) { return percentile_sorted(finite_sorted(v), pct); }

double median(const std::vector<double>& v) { return percentile(v, 50); }

double mean(const std::vector<double>& v) {
  double sum = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      sum += x;
      ++n;
    }
  return n == 0 ? kNaN : sum / static_cast<double>(n);
}

double stdev(const std::vector<double>& v) {
  const double m = mean(v);
  double ss = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      ss += (x - m) * (x - m);
      ++n;
    }
  return n < 2 ? kNaN : std::sqrt(ss / static_cast<double>(n - 1));
}

Summary summarize(const std::vector<double>& v) {
  Summary s;
  const std::vector<double> f = finite_sorted(v);
  s.n = f.size();
  s.n_unreadable = v.size() - f.size();
  if (f.empty()) return s;
  s.min = f.front();
  s.max = f.back();
  s.p5 = percentile_sorted(f, 5);
  s.median = percentile_sorted(f, 50);
  s.p95 = percentile_sorted(f, 95);
  s.p99 = percentile_sorted(f, 99);
  s.mean = mean(f);
  s.stdev = stdev(f);
  return s;
}

namespace {

size_t draw_index(uint64_t& state, size_t n) {
  const uint64_t r = splitmix64(state);
  return static_cast<size_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}

double resampled_median(const std::vector<double>& s, uint64_t& state, std::vector<double>& scratch) {
  scratch.resize(s.size());
  for (auto& x : scratch) x = s[draw_index(state, s.size())];
  const size_t mid = scratch.size() / 2;
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(mid), scratch.end());
  const double hi = scratch[mid];
  if (scratch.size() % 2 == 1) return hi;
  const double lo = *std::max_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

}  // namespace

MedianDiff bootstrap_median_diff(const std::vector<double>& a, const std::vector<double>& b, double confidence,
                                 int resamples, uint64_t seed) {
  MedianDiff d;
  d.confidence = confidence;
  const std::vector<double> fa = finite_sorted(a), fb = finite_sorted(b);
  if (fa.empty() || fb.empty() || resamples < 1 || !(confidence > 0 && confidence < 1)) return d;
  const double ma = percentile_sorted(fa, 50), mb = percentile_sorted(fb, 50);
  d.diff = mb - ma;
  d.ratio = ma != 0 ? mb / ma : kNaN;
  d.resamples = resamples;
  uint64_t state = seed;
  std::vector<double> diffs(static_cast<size_t>(resamples)), scratch;
  for (auto& x : diffs) {
    const double ra = resampled_median(fa, state, scratch);
    const double rb = resampled_median(fb, state, scratch);
    x = rb - ra;
  }
  std::sort(diffs.begin(), diffs.end());
  const double tail = (1 - confidence) / 2 * 100;
  d.ci_low = percentile_sorted(diffs, tail);
  d.ci_high = percentile_sorted(diffs, 100 - tail);
  return d;
}

}  // namespace engram::stats
