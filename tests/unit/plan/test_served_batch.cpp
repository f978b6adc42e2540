// Whole serving streams through plan_served_batch + CostLearner on the CPU, against a simulated device whose
// times are those the GPU machine measured on held-out text (plain prefill ~3,800 us where the start-up
// calibration priced 7,061 us; at decode 64 the cache path 0.83x of plain): the engine's loop as FastLookup runs
// it (statistics back before the timing is read), the device replaced by fixed figures. Checks what the learner
// changes: prefill measures its unique fraction on the first batch and runs dedup from then on, predictions converge
// to the measured times, plain exploration stays bounded; decode drops the cache path measured slower than plain;
// the two sizes learn apart. The simulated times are inputs, not measurements of this code.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "plan/served_batch.hpp"

namespace engram::plan {
namespace {

// The H200's start-up calibration of plain UVA by batch size (docs/results/2026-12-01-h200-fastpath.md).
Costs calibrated() {
  Costs k;
  k.uva_curve = {{512, 37.4}, {2048, 96.6}, {8192, 318.3}, {32768, 1185.0}, {131072, 4716.4}, {196608, 7061.0}};
  k.dedup_hash_fixed_us = 12;
  k.dedup_hash_ns_per_row = 0.15;
  k.scatter_ns_per_row = 0;
  k.cache_fixed_us = 10;
  k.cache_probe_ns_per_row = 0.1;
  k.source = "simulated H200 calibration";
  return k;
}

struct Batch {
  Plan plan;
  double predicted_us = 0, measured_us = 0;
};

// The engine's loop with a simulated device: `device_us(plan, rows)` is the time a path takes, `u_true` and
// `h_true` the batch's statistics that come back from the device.
struct Sim {
  Costs k = calibrated();
  PlannerOptions po;
  CostLearner learner;
  ExploreCounters counters;
  ServeOptions serve;
  double hit_ema = kUnknown, prior = kUnknown;
  std::function<double(const Plan&, int64_t)> device_us;
  std::function<double(int64_t)> u_true;
  double h_true = 0;

  Batch step(int64_t rows) {
    const BatchStats before{rows, learner.unique_fraction(rows), hit_ema, prior};
    Batch r;
    r.plan = plan_served_batch(before, k, po, &learner, counters, serve, /*capturing=*/false);
    r.predicted_us = model_price(r.plan, before, k, po.cache_present) * learner.correction(learn_key(r.plan), rows).factor;
    r.measured_us = device_us(r.plan, rows);
    if (r.plan.dedup) learner.observe_unique(rows, rows, std::llround(u_true(rows) * static_cast<double>(rows)));
    if (r.plan.cache) hit_ema = std::isfinite(hit_ema) ? 0.5 * hit_ema + 0.5 * h_true : h_true;
    const BatchStats after{rows, learner.unique_fraction(rows), hit_ema, prior};
    EXPECT_TRUE(learner.observe(learn_key(r.plan), rows, model_price(r.plan, after, k, po.cache_present),
                                r.measured_us, r.predicted_us));
    return r;
  }
};

constexpr uint8_t kExplorations = kNoteExploreDedup | kNoteExploreCache | kNoteMeasureUnique | kNoteExplorePlain |
                                  kNoteRetryBarred;
constexpr int64_t kPrefill = 8192 * 24;
constexpr int64_t kDecode = 64 * 24;

// Held-out text prefill: plain 3,800 us; hash dedup at u = 0.5 gathers the unique rows at 0.7x the uniform price.
double prefill_us(const Plan& p, const Costs& k) {
  if (!p.dedup) return 3800;
  return k.dedup_hash_fixed_us + 0.15e-3 * kPrefill + 0.7 * curve_us(k.uva_curve, 0.5 * kPrefill);
}

TEST(ServedBatch, PrefillMeasuresUniqueOnTheFirstBatchAndConverges) {
  Sim s;
  s.device_us = [&](const Plan& p, int64_t) { return prefill_us(p, s.k); };
  s.u_true = [](int64_t) { return 0.5; };
  const double dedup_us = prefill_us(Plan{.dedup = true}, s.k);
  ASSERT_LT(dedup_us, 3800 * 0.95);
  int plain_batches = 0;
  double total = 0;
  const int n = 200;
  for (int i = 0; i < n; ++i) {
    const Batch b = s.step(kPrefill);
    total += b.measured_us;
    if (i == 0) {
      EXPECT_TRUE(b.plan.notes & kNoteMeasureUnique);
      EXPECT_TRUE(b.plan.dedup);
      EXPECT_FALSE(b.plan.unique_known);
      continue;
    }
    EXPECT_TRUE(b.plan.unique_known) << i;
    if (b.plan.notes & kNoteExplorePlain) {
      ++plain_batches;
      EXPECT_FALSE(b.plan.dedup);
      continue;
    }
    EXPECT_TRUE(b.plan.dedup) << "batch " << i << ": " << b.plan.path_name();
    if (i >= 20) {
      EXPECT_NEAR(b.predicted_us, b.measured_us, 0.10 * b.measured_us) << i;
      EXPECT_NEAR(b.plan.plain_us, 3800, 0.10 * 3800) << i << ": plain's price is its measured time";
    }
  }
  // Plain: second batch, then every 4 until 3 measurements, then one in 32.
  EXPECT_LE(plain_batches, 3 + n / 32 + 1);
  EXPECT_GE(plain_batches, 3);
  // The stream's mean time against plain's: what the learner's exploration leaves of dedup's gain.
  // Simulated: dedup 2,519 us, plain 3,800 us; ~5% of the batches plain: ~1.47x over the stream.
  const double mean = total / n;
  EXPECT_LT(mean, 0.72 * 3800) << "mean " << mean << " us, dedup " << dedup_us << " us";
  const auto learned = s.learner.paths();
  ASSERT_EQ(learned.size(), 2u);  // plain-uva and dedup(hash)+uva, bucket 17
  for (const auto& r : learned) {
    EXPECT_EQ(r.bucket, 17);
    EXPECT_FALSE(r.barred);
  }
}

// Decode 64 tokens with a 5% cache, held-out text: the prior (profile coverage 0.7) makes the model choose the
// cache path, which the device runs at 0.83x of plain; dedup paths are slower still.
double decode_us(const Plan& p) {
  if (p.dedup && p.cache) return 80;
  if (p.dedup) return 70;
  if (p.cache) return 66;
  return 55;
}

// Decode with a cache whose profile coverage (the prior) and measured hit rate are 0.7, ids 97% unique.
Sim decode_sim() {
  Sim s;
  s.po.cache_present = true;
  s.prior = 0.7;
  s.h_true = 0.7;
  s.device_us = [](const Plan& p, int64_t) { return decode_us(p); };
  s.u_true = [](int64_t) { return 0.97; };
  return s;
}

TEST(ServedBatch, DecodeDropsTheCachePathMeasuredSlowerThanPlain) {
  Sim s = decode_sim();
  const int n = 400, settle = 40;
  int extra = 0;
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const Batch b = s.step(kDecode);
    if (i == 0) {
      EXPECT_TRUE(b.plan.cache) << "the model with the prior chooses the cache first: " << b.plan.path_name();
    }
    if (i < settle) continue;
    total += b.measured_us;
    if (!(b.plan.notes & kExplorations)) {
      EXPECT_EQ(learn_key(b.plan), kPlainKey) << "batch " << i << ": the planner's choice";
    } else if (learn_key(b.plan) != kPlainKey) {
      ++extra;
    }
  }
  EXPECT_TRUE(s.learner.barred(learn_key(false, false, true, 0), kDecode));
  // After settling: the learner's retries (one in 64) and the explorations of dedup and cache (one in 32 each)
  // until their paths are barred (3 measurements each).
  EXPECT_LE(extra, (n - settle) / 64 + 1 + 6);
  EXPECT_LT(total / (n - settle), 55 * 1.03);
}

TEST(ServedBatch, PrefillAndDecodeLearnApart) {
  // One stream, a prefill batch after every 8 decode batches: dedup pays at prefill and not at decode.
  Sim s;
  s.device_us = [&](const Plan& p, int64_t rows) { return rows == kPrefill ? prefill_us(p, s.k) : decode_us(p); };
  s.u_true = [](int64_t rows) { return rows == kPrefill ? 0.5 : 0.97; };
  int prefill_dedup = 0, prefill_served = 0;
  for (int i = 0; i < 900; ++i) {
    const bool prefill = i % 9 == 8;
    const Batch b = s.step(prefill ? kPrefill : kDecode);
    if (i < 300 || (b.plan.notes & kExplorations)) continue;
    if (prefill) {
      ++prefill_served;
      prefill_dedup += b.plan.dedup;
    } else {
      EXPECT_EQ(learn_key(b.plan), kPlainKey) << i;
    }
  }
  EXPECT_EQ(prefill_dedup, prefill_served);
  EXPECT_GT(prefill_served, 0);
  EXPECT_DOUBLE_EQ(s.learner.unique_fraction(kPrefill), 0.5);
  EXPECT_NEAR(s.learner.unique_fraction(kDecode), 0.97, 1e-3);
  EXPECT_FALSE(s.learner.barred(learn_key(true, false, false, 0), kPrefill));
}

TEST(ServedBatch, CaptureAddsNoLearnerExploration) {
  Sim s;
  const BatchStats b{kPrefill, kUnknown, kUnknown, kUnknown};
  for (int i = 0; i < 100; ++i) {
    const Plan p = plan_served_batch(b, s.k, s.po, &s.learner, s.counters, s.serve, /*capturing=*/true);
    EXPECT_FALSE(p.notes & (kNoteMeasureUnique | kNoteExplorePlain | kNoteRetryBarred)) << i;
  }
  // The captured batches advanced no learner schedule: the first served batch after them is still the bucket's
  // first (it measures the unique fraction), the second its first plain exploration.
  s.device_us = [&](const Plan& p, int64_t) { return prefill_us(p, s.k); };
  s.u_true = [](int64_t) { return 0.5; };
  EXPECT_TRUE(s.step(kPrefill).plan.notes & kNoteMeasureUnique);
  EXPECT_TRUE(s.step(kPrefill).plan.notes & kNoteExplorePlain);
}

// A retry of a barred path runs that path as it is, also where the periodic explorations would add a technique to
// it, so that its measurement reaches the barred path's key. Here the cache alone is barred (slower than plain)
// while dedup + cache pays: with explore_every 1 the dedup exploration would turn every retry of the cache path into
// dedup + cache.
TEST(ServedBatch, RetryOfABarredPathRunsItAsIs) {
  Sim s = decode_sim();
  s.device_us = [](const Plan& p, int64_t) {
    if (p.dedup && p.cache) return 40.0;
    return decode_us(p);
  };
  // The cache alone measured 20% slower than plain three times: barred.
  const uint32_t cache_only = learn_key(false, false, true, 0);
  const BatchStats st{kDecode, kUnknown, 0.7, 0.7};
  const Plan cache_plan{.cache = true};
  for (int i = 0; i < 3; ++i) {
    const double plain_model = model_price(Plan{}, st, s.k, true), cache_model = model_price(cache_plan, st, s.k, true);
    ASSERT_TRUE(s.learner.observe(kPlainKey, kDecode, plain_model, 55, plain_model));
    ASSERT_TRUE(s.learner.observe(cache_only, kDecode, cache_model, 66, cache_model));
  }
  ASSERT_TRUE(s.learner.barred(cache_only, kDecode));
  s.serve.explore_every = 1;
  int retries = 0;
  for (int k = 0; k < 600; ++k) {
    const Batch b = s.step(kDecode);
    if (!(b.plan.notes & kNoteRetryBarred)) continue;
    ++retries;
    EXPECT_FALSE(b.plan.notes & (kNoteExploreDedup | kNoteExploreCache | kNoteMeasureUnique))
        << "batch " << k << ": " << b.plan.path_name();
    EXPECT_EQ(learn_key(b.plan), cache_only) << "batch " << k << ": " << b.plan.path_name();
  }
  EXPECT_GE(retries, 3);
}

// A retry never runs a technique the options turned off after the path was barred.
TEST(ServedBatch, RetryRespectsTechniquesTurnedOff) {
  Sim s = decode_sim();
  int i = 0;
  for (; i < 1000 && !s.learner.barred(learn_key(false, false, true, 0), kDecode); ++i) s.step(kDecode);
  ASSERT_TRUE(s.learner.barred(learn_key(false, false, true, 0), kDecode)) << "after " << i << " batches";
  s.po.allow_cache = false;
  s.po.allow_dedup = false;
  for (int k = 0; k < 300; ++k) {
    const Batch b = s.step(kDecode);
    EXPECT_FALSE(b.plan.cache) << "batch " << k << ": " << b.plan.path_name();
    EXPECT_FALSE(b.plan.dedup) << "batch " << k << ": " << b.plan.path_name();
  }
}

// The grid of a served batch follows the path that runs: a plain exploration of a prefill whose chosen path reads
// few rows over UVA takes the large-batch share; with the planner off every batch keeps the background grid.
TEST(ServedBatch, TheGridFollowsThePathThatRuns) {
  PlannerOptions po;
  po.cache_present = true;
  po.allow_hybrid = false;
  po.background_grid_cap = *GridCap::of_blocks(64);
  BatchStats b;
  b.rows = 196608;
  b.unique_fraction = 0.75;
  b.cache_hit_fraction = 0.97;
  CostLearner learner;
  ExploreCounters counters;
  ServeOptions so;
  so.explore_every = 0;
  const Plan first = plan_served_batch(b, calibrated(), po, &learner, counters, so, false);
  ASSERT_TRUE(first.cache) << first.path_name();
  EXPECT_LT(uva_rows(first), static_cast<double>(po.large_batch_min_rows));
  EXPECT_FALSE(first.large_batch_grid);
  EXPECT_EQ(first.grid_cap, po.background_grid_cap);
  const Plan second = plan_served_batch(b, calibrated(), po, &learner, counters, so, false);  // plain's first turn
  ASSERT_NE(second.notes & kNoteExplorePlain, 0);
  EXPECT_TRUE(second.large_batch_grid);
  EXPECT_EQ(second.grid_cap, *GridCap::of_blocks(32));
  PlannerOptions off = po;
  off.enabled = false;
  const Plan plain = plan_served_batch(b, calibrated(), off, &learner, counters, so, false);
  EXPECT_FALSE(plain.planner_enabled);
  EXPECT_FALSE(plain.large_batch_grid);
  EXPECT_EQ(plain.grid_cap, po.background_grid_cap);
}

TEST(ServedBatch, WithoutALearnerOnlyThePeriodicExplorationRuns) {
  Costs k = calibrated();
  ExploreCounters c;
  ServeOptions so;
  so.explore_every = 4;
  int dedup = 0;
  for (int i = 0; i < 40; ++i) {
    const Plan p = plan_served_batch({kPrefill, kUnknown, kUnknown, kUnknown}, k, {}, nullptr, c, so, false);
    EXPECT_FALSE(p.learned);
    EXPECT_FALSE(p.notes & (kNoteMeasureUnique | kNoteExplorePlain | kNoteRetryBarred));
    dedup += p.dedup;
  }
  EXPECT_EQ(dedup, 10);
}

}  // namespace
}  // namespace engram::plan
