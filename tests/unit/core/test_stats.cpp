// Sample statistics (core/stats): percentiles against hand-computed numpy values, NaN handling (unreadable
// entries ignored; an empty sample gives NaN, never 0), and the bootstrap interval of a difference of medians
// (reproducible from its seed, covers the true shift, excludes 0 only when the samples differ).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/stats.hpp"

namespace engram::stats {
namespace {

TEST(Stats, PercentilesMatchNumpyLinear) {
  // numpy.percentile([1..10], [0, 5, 50, 95, 99, 100]) = 1, 1.45, 5.5, 9.55, 9.91, 10
  std::vector<double> v = {10, 3, 5, 1, 2, 4, 6, 7, 9, 8};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_NEAR(percentile(v, 5), 1.45, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);
  EXPECT_NEAR(percentile(v, 95), 9.55, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({1, 2, 3}), 2);
}

TEST(Stats, MeanAndSampleStdev) {
  // numpy: mean([2,4,4,4,5,5,7,9]) = 5, std(ddof=1) = 2.138089935299395
  std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(v), 5);
  EXPECT_NEAR(stdev(v), 2.138089935299395, 1e-12);
  EXPECT_TRUE(std::isnan(stdev({3})));
}

TEST(Stats, UnreadableEntriesAreIgnoredAndEmptyIsNaN) {
  const double nan = std::nan("");
  std::vector<double> v = {nan, 1, INFINITY, 3, nan};
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 2u);
  EXPECT_EQ(s.n_unreadable, 3u);
  EXPECT_DOUBLE_EQ(s.median, 2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  const Summary e = summarize({nan, nan});
  EXPECT_EQ(e.n, 0u);
  EXPECT_TRUE(std::isnan(e.median));
  EXPECT_TRUE(std::isnan(e.p99));
  EXPECT_TRUE(std::isnan(e.mean));
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

TEST(Stats, SummaryOrdersTails) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(0, 0.5);
  std::vector<double> v(1001);
  for (auto& x : v) x = d(rng);
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 1001u);
  EXPECT_LE(s.min, s.p5);
  EXPECT_LT(s.p5, s.median);
  EXPECT_LT(s.median, s.p95);
  EXPECT_LT(s.p95, s.p99);
  EXPECT_LE(s.p99, s.max);
}

TEST(Stats, BootstrapIsReproducibleAndCoversTheShift) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> n(100, 5);
  std::vector<double> a(41), b(41);
  for (auto& x : a) x = n(rng);
  for (auto& x : b) x = n(rng) + 20;  // true shift of the medians: 20
  const MedianDiff d1 = bootstrap_median_diff(a, b, 0.95, 2000, 42);
  const MedianDiff d2 = bootstrap_median_diff(a, b, 0.95, 2000, 42);
  EXPECT_EQ(d1.ci_low, d2.ci_low);
  EXPECT_EQ(d1.ci_high, d2.ci_high);
  EXPECT_EQ(d1.resamples, 2000);
  EXPECT_DOUBLE_EQ(d1.diff, median(b) - median(a));
  EXPECT_LT(d1.ci_low, d1.diff);
  EXPECT_GT(d1.ci_high, d1.diff);
  EXPECT_LT(d1.ci_low, 20);
  EXPECT_GT(d1.ci_high, 20);
  EXPECT_TRUE(d1.significant());
  EXPECT_NEAR(d1.ratio, median(b) / median(a), 1e-12);
}

TEST(Stats, BootstrapOfEqualSamplesIncludesZero) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> n(50, 2);
  std::vector<double> a(31), b(31);
  for (auto& x : a) x = n(rng);
  b = a;
  std::shuffle(b.begin(), b.end(), rng);
  const MedianDiff d = bootstrap_median_diff(a, b);
  EXPECT_DOUBLE_EQ(d.diff, 0);
  EXPECT_LE(d.ci_low, 0);
  EXPECT_GE(d.ci_high, 0);
  EXPECT_FALSE(d.significant());
}

TEST(Stats, BootstrapOfEmptySampleIsNaN) {
  const MedianDiff d = bootstrap_median_diff({}, {1, 2, 3});
  EXPECT_TRUE(std::isnan(d.diff));
  EXPECT_TRUE(std::isnan(d.ci_low));
  EXPECT_FALSE(d.significant());
  const MedianDiff bad = bootstrap_median_diff({1}, {2}, 1.5);
  EXPECT_TRUE(std::isnan(bad.ci_high));
}

}  // namespace
}  // namespace engram::stats
