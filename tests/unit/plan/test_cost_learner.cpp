// Cost learner on synthetic measurement streams: a path predicted fast but measured slow is dropped, a path that
// pays stays, buckets learn apart, plain's measured time replaces its price, exploration is bounded, a barred path
// comes back when a re-measurement pays, unique fractions per bucket, NaN/garbage inputs ignored; and choose()
// with a learner.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/cost_learner.hpp"
#include "plan/learned_json.hpp"
#include "plan/planner.hpp"

namespace engram::plan {
namespace {

const uint32_t kCache = learn_key(false, false, true, 0);
const uint32_t kDedup = learn_key(true, false, false, 0);
const uint32_t kDedupCache = learn_key(true, false, true, 0);

TEST(CostLearner, BucketsAreLog2OfRows) {
  EXPECT_EQ(size_bucket(0), 0);
  EXPECT_EQ(size_bucket(1), 0);
  EXPECT_EQ(size_bucket(1536), 10);    // decode 64 tokens x 24 heads
  EXPECT_EQ(size_bucket(196608), 17);  // prefill 8K x 24
  EXPECT_EQ(size_bucket(131072), 17);
  EXPECT_EQ(size_bucket(131071), 16);
  EXPECT_EQ(bucket_rows(17), (std::pair<int64_t, int64_t>{131072, 262143}));
  EXPECT_EQ(size_bucket(INT64_MAX), kSizeBuckets - 1);
}

TEST(CostLearner, KeysLeaveTheGridOutAndNameThePath) {
  Plan p;
  p.dedup = true;
  p.cache = true;
  p.background = true;
  const uint32_t bg = learn_key(p);
  p.background = false;
  EXPECT_EQ(learn_key(p), bg);
  EXPECT_EQ(bg, kDedupCache);
  EXPECT_EQ(learned_path_name(kDedupCache), "dedup(hash)+cache+uva");
  EXPECT_EQ(learned_path_name(kPlainKey), "plain-uva");
  EXPECT_EQ(learn_key(Plan{}), kPlainKey);
}

TEST(CostLearner, PlainMeasuredTimeReplacesItsPrice) {
  CostLearner l;
  EXPECT_EQ(l.correction(kPlainKey, 196608).source, CorrectionSource::kNone);
  EXPECT_DOUBLE_EQ(l.correction(kPlainKey, 196608).factor, 1);
  // Text prefill: priced 7116 us, measured ~3800 us.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(l.observe(kPlainKey, 196608, 7116, 3800));
  const Correction c = l.correction(kPlainKey, 196608);
  EXPECT_EQ(c.source, CorrectionSource::kOwn);
  EXPECT_EQ(c.samples, 5);
  EXPECT_NEAR(7116 * c.factor, 3800, 1e-6);
  EXPECT_FALSE(c.barred);
  // A path never measured in the bucket takes plain's factor (the gather dominates every path's price).
  const Correction d = l.correction(kDedup, 196608);
  EXPECT_EQ(d.source, CorrectionSource::kPlain);
  EXPECT_NEAR(d.factor, c.factor, 1e-12);
  EXPECT_EQ(d.samples, 0);
}

// A path not measured in a bucket takes the factor of a measured path with its device technique at another host
// share (the nearest split, else the device path it splits), not plain's: with plain's, every unmeasured split would
// look cheaper than the measured path it splits.
TEST(CostLearner, AnUnmeasuredSplitTakesItsDevicePathsFactor) {
  CostLearner l;
  const int64_t rows = 196608;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.observe(kPlainKey, rows, 6500, 5800));  // 0.89
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(l.observe(kCache, rows, 250, 370));       // 1.48
  const uint32_t split10 = learn_key(false, false, true, 0.10), split5 = learn_key(false, false, true, 0.05);
  Correction c = l.correction(split10, rows);
  EXPECT_EQ(c.source, CorrectionSource::kSibling);
  EXPECT_NEAR(c.factor, 370.0 / 250.0, 1e-12);
  EXPECT_EQ(c.samples, 0);
  EXPECT_FALSE(c.barred);
  // Once a split is measured, an unmeasured split takes the nearest split's factor, not the device path's: what the
  // model misses of host threads beside the device (measured at 1.65 on an all-hit prefill) the device path does
  // not show, and with its factor every other share would look cheaper and be tried in turn.
  ASSERT_TRUE(l.observe(split5, rows, 300, 495));
  EXPECT_NEAR(l.correction(split10, rows).factor, 1.65, 1e-12);
  EXPECT_NEAR(l.correction(split5, rows).factor, 1.65, 1e-12);  // its own
  EXPECT_EQ(l.correction(split5, rows).source, CorrectionSource::kOwn);
  const uint32_t split50 = learn_key(false, false, true, 0.50), split45 = learn_key(false, false, true, 0.45);
  ASSERT_TRUE(l.observe(split50, rows, 300, 240));
  EXPECT_NEAR(l.correction(split45, rows).factor, 0.8, 1e-12) << "the nearest share";
  EXPECT_NEAR(l.correction(split10, rows).factor, 1.65, 1e-12);
  // An unmeasured device path takes the smallest split's.
  CostLearner only_splits;
  ASSERT_TRUE(only_splits.observe(split50, rows, 300, 240));
  ASSERT_TRUE(only_splits.observe(split10, rows, 300, 450));
  EXPECT_NEAR(only_splits.correction(kCache, rows).factor, 1.5, 1e-12);
  // Another technique has no measured sibling: plain's factor. So has a path in another bucket: none at all.
  const Correction d = l.correction(learn_key(true, false, true, 0.10), rows);
  EXPECT_EQ(d.source, CorrectionSource::kPlain);
  EXPECT_NEAR(d.factor, 5800.0 / 6500.0, 1e-12);
  EXPECT_EQ(l.correction(split10, 1536).source, CorrectionSource::kNone);
  // Hash and sort dedup are different techniques.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(l.observe(kDedupCache, rows, 400, 200));
  EXPECT_EQ(l.correction(learn_key(true, true, true, 0), rows).source, CorrectionSource::kPlain);
  EXPECT_EQ(l.correction(learn_key(true, false, true, 0.10), rows).source, CorrectionSource::kSibling);
  EXPECT_NEAR(l.correction(learn_key(true, false, true, 0.10), rows).factor, 0.5, 1e-12);
  // The planner's account of a choice priced with a sibling's factor says so.
  Plan p;
  p.learned = p.chosen_pays = p.chosen_sibling = true;
  p.rows = static_cast<double>(rows);
  p.chosen_factor = 1.48;
  bool said = false;
  for (const auto& w : explain(p, "test")) said |= w.find("x1.48 (its technique's at another host share)") != std::string::npos;
  EXPECT_TRUE(said);
}

// The records as the reports write them: the correction the planner applies is there beside the averages, and
// every record of paths() is one object.
TEST(CostLearner, LearnedJsonCarriesTheFactorTheCorrectionApplies) {
  CostLearner l;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.observe(kPlainKey, 196608, 7116, 3800));
  ASSERT_TRUE(l.observe(kDedup, 2048, 100, 250, 90));
  const auto paths = l.paths();
  const nlohmann::json j = learned_json(paths);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), paths.size());
  ASSERT_EQ(j.size(), 2u);
  for (const auto& r : j) {
    const uint32_t key = r["path"] == "plain-uva" ? kPlainKey : kDedup;
    const int64_t rows = r["rows_min"].get<int64_t>();
    EXPECT_NEAR(r["factor"].get<double>(), l.correction(key, rows).factor, 1e-12) << r.dump();
    EXPECT_EQ(r["batches"].get<int64_t>(), l.correction(key, rows).samples) << r.dump();
  }
  EXPECT_NEAR(j[0]["factor"].get<double>() * 100, 250, 1e-9);  // bucket 11 (2048 rows) comes first
  EXPECT_NEAR(j[0]["predicted_us"].get<double>(), 90, 1e-9);
  EXPECT_NEAR(j[1]["factor"].get<double>() * 7116, 3800, 1e-6);
}

TEST(CostLearner, PathPredictedFastButMeasuredSlowIsDropped) {
  // Decode 64: the cache path predicted 1.44x, measured 0.83x of plain.
  CostLearner l;
  const int64_t rows = 1536;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.observe(kPlainKey, rows, 50, 55));
  ASSERT_TRUE(l.observe(kCache, rows, 35, 66));
  ASSERT_TRUE(l.observe(kCache, rows, 35, 66));
  EXPECT_FALSE(l.barred(kCache, rows)) << "fewer than min_samples measurements";
  ASSERT_TRUE(l.observe(kCache, rows, 35, 66));
  EXPECT_TRUE(l.barred(kCache, rows));
  // The planner then does not choose it, although its corrected price would still look fine if it were not barred.
  Costs k;
  k.source = "test";
  PlannerOptions o;
  o.cache_present = true;
  BatchStats b{rows, 0.95, 0.7};
  const Plan without = choose(b, k, o);
  ASSERT_TRUE(without.cache) << "the model alone chooses the cache here";
  const Plan with = choose(b, k, o, &l);
  EXPECT_NE(learn_key(with), kCache);  // dedup+cache, not measured here yet, may still be tried
  EXPECT_GE(with.barred_paths, 1);
  EXPECT_TRUE(with.learned);
  // allow_barred (a retry) offers it again.
  EXPECT_EQ(choose(b, k, o, &l, /*allow_barred=*/true).barred_paths, 0);
  bool mentions = false;
  for (const auto& w : explain(with, "test")) mentions |= w.find("barred") != std::string::npos;
  EXPECT_TRUE(mentions);
}

TEST(CostLearner, PathThatPaysStays) {
  CostLearner l;
  const int64_t rows = 196608;
  Costs k;
  k.source = "test";
  BatchStats b{rows, 0.5, kUnknown};
  const Plan first = choose(b, k, {}, &l);
  ASSERT_TRUE(first.dedup);
  const double model_dedup = model_price(first, b, k, false);
  const double model_plain = model_price(Plan{}, b, k, false);
  EXPECT_NEAR(first.model_us, model_dedup, 1e-9);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, rows, model_plain, 3800));
    ASSERT_TRUE(l.observe(kDedup, rows, model_dedup, 1900));
  }
  EXPECT_FALSE(l.barred(kDedup, rows));
  const Plan p = choose(b, k, {}, &l);
  EXPECT_TRUE(p.dedup);
  EXPECT_NEAR(p.plain_us, 3800, 1e-6);
  EXPECT_NEAR(p.predicted_us, 1900, 1e-6);
  EXPECT_NEAR(p.plain_model_us, model_plain, 1e-9);
  EXPECT_EQ(p.barred_paths, 0);
}

TEST(CostLearner, CorrectedPlainPriceCanMakeATechniqueStopPaying) {
  // The model says dedup saves a lot; measured, both take the same time: the corrected prices say so and the
  // planner keeps plain (no bar needed: within the margin).
  CostLearner l;
  const int64_t rows = 65536;
  Costs k;
  BatchStats b{rows, 0.6, kUnknown};
  Plan d;
  d.dedup = true;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, rows, model_price(Plan{}, b, k, false), 1000));
    ASSERT_TRUE(l.observe(kDedup, rows, model_price(d, b, k, false), 1010));
  }
  EXPECT_FALSE(l.barred(kDedup, rows));
  EXPECT_TRUE(choose(b, k, {}).dedup);
  EXPECT_FALSE(choose(b, k, {}, &l).dedup);
}

TEST(CostLearner, BucketsAreIndependent) {
  CostLearner l;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, 1536, 50, 50));
    ASSERT_TRUE(l.observe(kCache, 1536, 35, 70));
  }
  EXPECT_TRUE(l.barred(kCache, 1536));
  EXPECT_TRUE(l.barred(kCache, 2000));  // same bucket (1024-2047)
  EXPECT_FALSE(l.barred(kCache, 196608));
  EXPECT_EQ(l.correction(kCache, 196608).source, CorrectionSource::kNone);
  EXPECT_DOUBLE_EQ(l.correction(kCache, 196608).factor, 1);
  // Prefill learns that the cache pays there; decode keeps its bar.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, 196608, 7000, 3800));
    ASSERT_TRUE(l.observe(kCache, 196608, 3000, 2000));
  }
  EXPECT_FALSE(l.barred(kCache, 196608));
  EXPECT_TRUE(l.barred(kCache, 1536));
  l.observe_unique(196608, 196608, 98304);
  EXPECT_DOUBLE_EQ(l.unique_fraction(196608), 0.5);
  EXPECT_TRUE(std::isnan(l.unique_fraction(1536)));
  l.observe_unique(1536, 1536, 1500);
  EXPECT_NEAR(l.unique_fraction(1536), 1500.0 / 1536, 1e-12);
  EXPECT_DOUBLE_EQ(l.unique_fraction(196608), 0.5);
  l.observe_unique(196608, 196608, 196608 * 3 / 4);
  EXPECT_DOUBLE_EQ(l.unique_fraction(196608), 0.625);  // averaged with the earlier estimate
  ASSERT_EQ(l.unique_by_bucket().size(), 2u);
  EXPECT_EQ(l.unique_by_bucket()[0].first, 10);
}

TEST(CostLearner, BarredPathComesBackWhenARemeasurementPays) {
  CostLearner l;
  const int64_t rows = 1536;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, rows, 50, 50));
    ASSERT_TRUE(l.observe(kCache, rows, 35, 60));
  }
  ASSERT_TRUE(l.barred(kCache, rows));
  ASSERT_TRUE(l.observe(kCache, rows, 35, 58));  // still slower: stays barred
  EXPECT_TRUE(l.barred(kCache, rows));
  EXPECT_EQ(l.correction(kCache, rows).samples, 4);
  ASSERT_TRUE(l.observe(kCache, rows, 35, 30));  // the traffic changed: now it pays
  const Correction c = l.correction(kCache, rows);
  EXPECT_FALSE(c.barred);
  EXPECT_EQ(c.samples, 1) << "restarted from the paying measurement";
  EXPECT_NEAR(c.factor, 30.0 / 35, 1e-12);
}

TEST(CostLearner, ExplorationIsBounded) {
  LearnerOptions o;
  o.plain_every = 32;
  o.plain_overhead = 0;  // one in plain_every whatever the gain
  o.plain_warm_every = 4;
  o.min_samples = 3;
  o.retry_every = 0;
  CostLearner l(o);
  const int64_t rows = 196608;
  int plain_runs = 0;
  std::vector<int> at;
  for (int i = 1; i <= 200; ++i) {
    const Explore e = l.explore(rows, kDedup);
    if (e == Explore::kPlain) {
      ++plain_runs;
      at.push_back(i);
      ASSERT_TRUE(l.observe(kPlainKey, rows, 7000, 3800));
    } else {
      EXPECT_EQ(e, Explore::kNone);
      ASSERT_TRUE(l.observe(kDedup, rows, 3600, 1900));
    }
  }
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[0], 2) << "the first plain batch of a bucket is its second batch";
  EXPECT_EQ(at[1], 6);   // warm-up: every 4 until min_samples
  EXPECT_EQ(at[2], 10);
  EXPECT_EQ(at[3], 42);  // then one in 32
  EXPECT_LE(plain_runs, 3 + 200 / 32 + 1);
  // A bucket whose chosen path is plain never explores plain.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(l.explore(1536, kPlainKey), Explore::kNone);
  // plain_every = 0: never.
  CostLearner never(LearnerOptions{.plain_every = 0, .retry_every = 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(never.explore(rows, kDedup), Explore::kNone);
}

// Once plain and the chosen path are both measured, plain batches come one in (gain - 1) / plain_overhead, no more
// often than the warm-up and steady rates, at most one in plain_every while warming and plain_every_max after: their
// cost stays within the overhead.
// The spacing tests' learner: plain one in 32 (warm-up one in 4 until 3 samples), at most one in 512 after, no retries.
LearnerOptions spacing(double overhead, double warm_gain) {
  LearnerOptions o;
  o.plain_every = 32;
  o.plain_warm_every = 4;
  o.min_samples = 3;
  o.retry_every = 0;
  o.plain_overhead = overhead;
  o.plain_every_max = 512;
  o.plain_warm_gain = warm_gain;
  return o;
}

TEST(CostLearner, PlainBatchesCostAtMostTheirOverhead) {
  auto plain_batches_at = [](double chosen_us, double overhead) {
    CostLearner l(spacing(overhead, LearnerOptions{}.plain_warm_gain));
    const int64_t rows = 1536;
    std::vector<int> at;
    for (int i = 1; i <= 2000; ++i) {
      if (l.explore(rows, kCache) == Explore::kPlain) {
        at.push_back(i);
        EXPECT_TRUE(l.observe(kPlainKey, rows, 30, 30));
      } else {
        EXPECT_TRUE(l.observe(kCache, rows, 20, chosen_us));
      }
    }
    return at;
  };
  // Chosen 1.5x faster than plain, 1% overhead: one plain batch in 50, at most one in 32 while plain warms up.
  std::vector<int> at = plain_batches_at(20, 0.01);
  ASSERT_GE(at.size(), 5u);
  EXPECT_EQ(at[0], 2) << "the first plain batch of a bucket is its second batch";
  EXPECT_EQ(at[1], 2 + 32);
  EXPECT_EQ(at[2], 2 + 64);
  EXPECT_EQ(at[3], 66 + 50);
  EXPECT_EQ(at[4], 116 + 50);
  // 30x faster (beyond plain_warm_gain): plain's first measurement ends its warm-up; then one in plain_every_max.
  at = plain_batches_at(1, 0.01);
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[0], 2);
  EXPECT_EQ(at[1], 2 + 512);
  EXPECT_EQ(at[2], 2 + 1024);
  // Barely faster (1.7%): the warm-up's one in 4, then plain_every.
  at = plain_batches_at(29.5, 0.01);
  ASSERT_GE(at.size(), 4u);
  EXPECT_EQ(at[1], 6);
  EXPECT_EQ(at[2], 10);
  EXPECT_EQ(at[3], 10 + 32);
  // Slower than plain: the warm-up's rate.
  at = plain_batches_at(40, 0.01);
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[1], 6);
  EXPECT_EQ(at[2], 10);
}

// A chosen path with no measurement in the bucket is spaced by its price: a prefill path priced 20x faster than
// plain's one measurement does not run plain again within the next plain_every_max batches, while one priced at
// plain's time keeps the warm-up's one in plain_warm_every; without plain_warm_gain the price only spaces plain up to
// the warm-up's one in plain_every.
TEST(CostLearner, AnUnmeasuredChoiceIsSpacedByItsPrice) {
  auto plain_batches_at = [](double chosen_us, double warm_gain) {
    CostLearner l(spacing(0.005, warm_gain));
    const int64_t rows = 196608;
    std::vector<int> at;
    for (int i = 1; i <= 1200; ++i)
      if (l.explore(rows, kCache, chosen_us) == Explore::kPlain) {
        at.push_back(i);
        EXPECT_TRUE(l.observe(kPlainKey, rows, 6000, 6000));
      }  // the chosen path is never measured: only its price spaces plain
    return at;
  };
  std::vector<int> at = plain_batches_at(300, 4);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], 2) << "the first plain batch of a bucket is its second batch";
  EXPECT_EQ(at[1], 2 + 512);
  EXPECT_EQ(at[2], 2 + 1024);
  at = plain_batches_at(300, 0);  // the warm-up's cap: one in plain_every
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[1], 2 + 32);
  EXPECT_EQ(at[2], 2 + 64);
  at = plain_batches_at(6000, 4);  // priced as plain: the warm-up's rate
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[1], 6);
  EXPECT_EQ(at[2], 10);
  at = plain_batches_at(kUnknown, 4);  // no price: the warm-up's rate
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[1], 6);
}

TEST(CostLearner, SteadyPathsAreTimedOnAShareOfTheirBatches) {
  CostLearner l(LearnerOptions{.steady_samples = 8, .time_every = 4});
  const int64_t rows = 1536;
  int timed = 0;
  std::vector<int> at;
  for (int i = 1; i <= 40; ++i) {
    if (!l.wants_timing(kDedup, rows)) continue;
    ++timed;
    at.push_back(i);
    ASSERT_TRUE(l.observe(kDedup, rows, 30, 28));
  }
  // Every batch until 8 measurements, then one in 4.
  ASSERT_GE(at.size(), 10u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(at[static_cast<size_t>(i)], i + 1);
  EXPECT_EQ(at[8], 12);
  EXPECT_EQ(at[9], 16);
  EXPECT_EQ(timed, 8 + 32 / 4);
  // Another path and another bucket count apart: both are timed from their first batch.
  EXPECT_TRUE(l.wants_timing(kPlainKey, rows));
  EXPECT_TRUE(l.wants_timing(kDedup, rows * 64));
  // The grid bit does not make another path.
  int background_timed = 0;
  for (int i = 0; i < 8; ++i) background_timed += l.wants_timing(kDedup | 8u, rows);
  EXPECT_EQ(background_timed, 2);
  // time_every 1: every batch.
  CostLearner every(LearnerOptions{.time_every = 1});
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(every.wants_timing(kDedup, rows));
    ASSERT_TRUE(every.observe(kDedup, rows, 30, 28));
  }
}

TEST(CostLearner, BarredPathsAreRetriedPeriodically) {
  LearnerOptions o;
  o.retry_every = 10;
  o.plain_every = 0;
  CostLearner l(o);
  const int64_t rows = 1536;
  int retries = 0;
  for (int i = 0; i < 50; ++i) retries += l.explore(rows, kPlainKey) == Explore::kRetryBarred;
  EXPECT_EQ(retries, 0) << "nothing barred";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, rows, 50, 50));
    ASSERT_TRUE(l.observe(kCache, rows, 35, 70));
  }
  for (int i = 0; i < 50; ++i) retries += l.explore(rows, kPlainKey) == Explore::kRetryBarred;
  EXPECT_EQ(retries, 5);
}

TEST(CostLearner, RetryKeyIsTheBarredPathClosestToPlain) {
  CostLearner l;
  const int64_t rows = 1536;
  EXPECT_EQ(l.retry_key(rows), kPlainKey);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, rows, 50, 50));
    ASSERT_TRUE(l.observe(kCache, rows, 35, 66));
    ASSERT_TRUE(l.observe(kDedupCache, rows, 40, 80));
  }
  EXPECT_EQ(l.retry_key(rows), kCache);
  EXPECT_EQ(l.retry_key(196608), kPlainKey);
  const Plan p = plan_of_key(kDedupCache);
  EXPECT_TRUE(p.dedup);
  EXPECT_TRUE(p.cache);
  EXPECT_FALSE(p.sort);
  EXPECT_EQ(learn_key(p), kDedupCache);
  const uint32_t split = learn_key(true, true, false, 0.35);
  EXPECT_EQ(learn_key(plan_of_key(split)), split);
  EXPECT_DOUBLE_EQ(plan_of_key(split).host_share, 0.35);
}

TEST(CostLearner, NanAndGarbageInputsAreIgnored) {
  CostLearner l;
  EXPECT_FALSE(l.observe(kPlainKey, 1536, kUnknown, 50));
  EXPECT_FALSE(l.observe(kPlainKey, 1536, 50, kUnknown));
  EXPECT_FALSE(l.observe(kPlainKey, 1536, 50, std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(l.observe(kPlainKey, 1536, 0, 50));
  EXPECT_FALSE(l.observe(kPlainKey, 1536, 50, -1));
  EXPECT_FALSE(l.observe(kPlainKey, 0, 50, 50));
  EXPECT_FALSE(l.observe(kPlainKey, -5, 50, 50));
  EXPECT_TRUE(l.paths().empty());
  l.observe_unique(1536, 0, 0);
  l.observe_unique(1536, 100, 200);
  l.observe_unique(1536, 100, -1);
  EXPECT_TRUE(std::isnan(l.unique_fraction(1536)));
  EXPECT_TRUE(l.unique_by_bucket().empty());
  // A wild measurement moves the factor by a bounded amount.
  ASSERT_TRUE(l.observe(kPlainKey, 1536, 50, 1e12));
  EXPECT_LE(l.correction(kPlainKey, 1536).factor, l.options().max_factor * (1 + 1e-12));
  // choose() with a NaN batch still gives a valid plan.
  const Plan p = choose({1536, kUnknown, kUnknown}, Costs{}, {}, &l);
  EXPECT_TRUE(std::isfinite(p.predicted_us));
  EXPECT_FALSE(p.dedup);
}

TEST(CostLearner, ReportsPredictedAndMeasuredPerPathAndBucket) {
  CostLearner l;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.observe(kPlainKey, 1536, 50, 50));
    ASSERT_TRUE(l.observe(kCache, 1536, 35, 60));
    ASSERT_TRUE(l.observe(kDedupCache, 196608, 2000, 2400));
  }
  const auto r = l.paths();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].bucket, 10);
  EXPECT_EQ(r[0].name, "plain-uva");
  EXPECT_EQ(r[1].name, "cache+uva");
  EXPECT_DOUBLE_EQ(r[1].predicted_us, 35);
  EXPECT_DOUBLE_EQ(r[1].measured_us, 60);
  EXPECT_TRUE(r[1].barred);
  EXPECT_EQ(r[1].samples, 3);
  EXPECT_EQ(r[2].bucket, 17);
  EXPECT_EQ(r[2].rows_min, 131072);
  EXPECT_NEAR(r[2].factor, 1.2, 1e-12);
  EXPECT_FALSE(r[2].barred) << "no plain measurement in that bucket: nothing to compare with";
  l.reset();
  EXPECT_TRUE(l.paths().empty());
}

TEST(CostLearner, ChooseWithoutLearnerIsUnchanged) {
  Costs k;
  CostLearner empty;
  for (int64_t rows : {int64_t{64}, int64_t{1536}, int64_t{65536}, int64_t{196608}})
    for (double u : {0.3, 0.7, 1.0}) {
      const BatchStats b{rows, u, kUnknown};
      const Plan a = choose(b, k, {});
      const Plan c = choose(b, k, {}, &empty);
      EXPECT_EQ(a.path_key(), c.path_key());
      EXPECT_DOUBLE_EQ(a.predicted_us, c.predicted_us);
      EXPECT_DOUBLE_EQ(a.plain_us, c.plain_us);
      EXPECT_FALSE(a.learned);
      EXPECT_DOUBLE_EQ(model_price(a, b, k, false), a.predicted_us);
    }
}

// A hybrid with a host share under half a percent is still a hybrid to the learner: its times never land on the
// device-only path's key, and its key names the host share.
TEST(CostLearner, SmallHostShareKeepsItsOwnKey) {
  const Plan tiny{.host_share = 0.003};
  EXPECT_NE(learn_key(tiny), kPlainKey);
  EXPECT_EQ(learn_key(tiny), learn_key(Plan{.host_share = 0.01}));
  EXPECT_EQ(plan_of_key(learn_key(tiny)).host_share, 0.01);
  EXPECT_EQ(learn_key(Plan{.host_share = 0}), kPlainKey);
  EXPECT_EQ(learn_key(Plan{.host_share = 0.37}), learn_key(false, false, false, 0.37));
}

}  // namespace
}  // namespace engram::plan
