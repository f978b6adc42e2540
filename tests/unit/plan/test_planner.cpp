// Planner decisions: plain gather on uniform/unknown ids, dedup when ids repeat, sort only above the
// measured threshold, cache when hits pay, hybrid at the balanced share, inline vs background, disabled planner,
// and every plan carries its reasons.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/planner.hpp"

namespace engram::plan {
namespace {

Costs costs() {
  Costs k;
  k.source = "test";
  return k;
}

std::vector<std::string> why(const Plan& p) { return explain(p, "test"); }

TEST(Planner, UniformIdsKeepThePlainGather) {
  BatchStats b{196608, 0.999, kUnknown};
  const Plan p = choose(b, costs(), {});
  EXPECT_FALSE(p.dedup);
  EXPECT_FALSE(p.cache);
  EXPECT_EQ(p.host_share, 0);
  EXPECT_DOUBLE_EQ(p.predicted_us, p.plain_us);
  EXPECT_NE(p.path_name().find("plain-uva"), std::string::npos);
  EXPECT_GE(why(p).size(), 2u);
}

TEST(Planner, UnknownStatisticsAreTreatedAsAdversarial) {
  const Plan p = choose({196608, kUnknown, kUnknown}, costs(), {.cache_present = true});
  EXPECT_FALSE(p.dedup);
  EXPECT_FALSE(p.cache);
}

TEST(Planner, RepeatedIdsTurnDedupOn) {
  const Plan p = choose({196608, 0.4, kUnknown}, costs(), {});
  EXPECT_TRUE(p.dedup);
  EXPECT_FALSE(p.sort);  // no measured threshold in the defaults
  EXPECT_LT(p.predicted_us, p.plain_us * 0.95);
  EXPECT_NE(p.path_name().find("dedup(hash)"), std::string::npos);
}

TEST(Planner, SmallBatchDedupDoesNotPayItsFixedCost) {
  // 64 rows, half repeated: saving 32 rows (~1.1 us) does not pay ~12 us of launches.
  const Plan p = choose({64, 0.5, kUnknown}, costs(), {});
  EXPECT_FALSE(p.dedup);
}

TEST(Planner, SortOnlyAtOrAboveTheMeasuredThreshold) {
  Costs k = costs();
  k.sort_min_unique_rows = 50000;
  k.uva_sorted_rows_per_s = 40e6;
  const Plan below = choose({60000, 0.5, kUnknown}, k, {});  // 30000 unique
  EXPECT_FALSE(below.sort);
  const Plan above = choose({196608, 0.5, kUnknown}, k, {});  // 98304 unique
  EXPECT_TRUE(above.dedup);
  EXPECT_TRUE(above.sort);
  PlannerOptions no_sort;
  no_sort.allow_sort = false;
  EXPECT_FALSE(choose({196608, 0.5, kUnknown}, k, no_sort).sort);
}

TEST(Planner, CacheOnlyWhenPresentAndHitting) {
  PlannerOptions o;
  o.cache_present = true;
  EXPECT_TRUE(choose({6144, 0.9, 0.6}, costs(), o).cache);
  EXPECT_FALSE(choose({6144, 0.9, 0.0}, costs(), o).cache);
  o.cache_present = false;
  EXPECT_FALSE(choose({6144, 0.9, 0.6}, costs(), o).cache);
}

TEST(Planner, CacheHitPriorIsUsedOnlyWithACacheAndUntilMeasured) {
  // H200 run 1, text prefill: hit rate unknown -> assumed 0% -> hybrid, although the cache held 95% of the rows.
  Costs k = costs();
  k.host_rows_per_s = 39.7e6;
  PlannerOptions o;
  o.cache_present = true;
  BatchStats b{196608, kUnknown, kUnknown, 0.95};
  const Plan with_prior = choose(b, k, o);
  EXPECT_TRUE(with_prior.cache);
  EXPECT_EQ(with_prior.host_share, 0);
  EXPECT_NE(why(with_prior)[0].find("prior"), std::string::npos);
  EXPECT_LT(with_prior.predicted_us, with_prior.plain_us * 0.5);
  // No prior: the worst case (0 hits) stands, the hybrid wins.
  const Plan no_prior = choose({196608, kUnknown, kUnknown, kUnknown}, k, o);
  EXPECT_FALSE(no_prior.cache);
  EXPECT_GT(no_prior.host_share, 0);
  EXPECT_NE(why(no_prior)[0].find("assumed 0%"), std::string::npos);
  // A measured rate replaces the prior (re-plan when observations arrive): 1% hits -> no cache.
  b.cache_hit_fraction = 0.01;
  const Plan measured = choose(b, k, o);
  EXPECT_FALSE(measured.cache);
  EXPECT_EQ(why(measured)[0].find("prior"), std::string::npos);
  // Without a cache the prior is ignored: the table's unknown stats stay worst case.
  o.cache_present = false;
  const Plan no_cache = choose({196608, kUnknown, kUnknown, 0.95}, k, o);
  EXPECT_FALSE(no_cache.cache);
  EXPECT_NE(why(no_cache)[0].find("no cache"), std::string::npos);
}

TEST(Planner, SmallBatchWithFewHitsKeepsThePlainGather) {
  // H200 run 1, uniform decode 64 tokens x 24 heads: the planner probed the cache on a stale hit rate (58%, from
  // another distribution) and paid ~+30 us of launches on a 72-us call. With the cache's fixed cost priced and
  // the measured 1.2% hits, a 1536-row batch stays plain; with many hits the cache still pays.
  Costs k = costs();
  k.uva_rows_per_s = 41.4e6;
  k.uva_fixed_us = 0;
  k.cache_fixed_us = 10;
  PlannerOptions o;
  o.cache_present = true;
  const Plan few = choose({1536, 0.999, 0.012}, k, o);
  EXPECT_FALSE(few.cache);
  EXPECT_FALSE(few.dedup);
  EXPECT_DOUBLE_EQ(few.predicted_us, few.plain_us);
  EXPECT_NE(few.path_name().find("plain-uva"), std::string::npos);
  // The fixed cost alone outweighs a modest hit rate on a batch this small...
  EXPECT_FALSE(choose({1536, 0.999, 0.2}, k, o).cache);
  // ...but not the 97% of the text decode.
  EXPECT_TRUE(choose({1536, 0.97, 0.97}, k, o).cache);
  // Priced fixed cost shows in the prediction: cache on, every row a hit = fixed cost + probes.
  Costs free = k;
  free.cache_fixed_us = 0;
  const Plan a = choose({1536, 1.0, 1.0}, k, o), b = choose({1536, 1.0, 1.0}, free, o);
  ASSERT_TRUE(a.cache);
  ASSERT_TRUE(b.cache);
  EXPECT_NEAR(a.predicted_us - b.predicted_us, 10.0, 1e-9);
}

// A cached row is read from HBM in the same launch as the misses' UVA reads: the gather takes the longer of the two
// parts. At an 8K-token prefill that hits every row the cached rows are the price; at a 90% hit rate the misses
// still are; with the hit price unmeasured (0) cached rows cost only their probe.
TEST(Planner, CachedRowsArePricedBesideTheMisses) {
  Costs k = costs();
  Costs priced = k;
  priced.cache_hit_ns_per_row = 0.8;
  Plan cache;
  cache.cache = true;
  const int64_t n = 196608;
  const BatchStats all_hit{n, kUnknown, 1.0}, most_hit{n, kUnknown, 0.9};
  const double misses_only = model_price(cache, all_hit, k, true);
  EXPECT_NEAR(model_price(cache, all_hit, priced, true) - misses_only, n * 0.8e-3 - k.uva_fixed_us, 1e-6);
  EXPECT_DOUBLE_EQ(model_price(cache, most_hit, priced, true), model_price(cache, most_hit, k, true));
  // With dedup the cached rows are the unique ones.
  Plan both = cache;
  both.dedup = true;
  const BatchStats repeated{n, 0.5, 1.0};
  EXPECT_NEAR(model_price(both, repeated, priced, true) - model_price(both, repeated, k, true),
              0.5 * n * 0.8e-3 - k.uva_fixed_us, 1e-6);
  // An all-hit prefill is priced at its cached rows: above twice its price with the cached rows taken as free.
  EXPECT_GT(model_price(cache, all_hit, priced, true), 2 * misses_only);
}

TEST(Planner, HybridSplitsAtTheBalancedShare) {
  Costs k = costs();
  k.host_rows_per_s = 19e6;
  EXPECT_NEAR(balanced_host_share(28.5e6, 19e6), 0.4, 1e-12);
  const Plan p = choose({196608, 1.0, kUnknown}, k, {});
  EXPECT_NEAR(p.host_share, 0.4, 1e-12);
  EXPECT_NE(p.path_name().find("hybrid(host 40%)"), std::string::npos);
  PlannerOptions forced;
  forced.host_share_override = 0.25;
  EXPECT_NEAR(choose({196608, 1.0, kUnknown}, k, forced).host_share, 0.25, 1e-12);
  PlannerOptions off;
  off.allow_hybrid = false;
  EXPECT_EQ(choose({196608, 1.0, kUnknown}, k, off).host_share, 0);
  // Tiny batch: the host path's fixed cost does not pay.
  EXPECT_EQ(choose({1536, 1.0, kUnknown}, k, {}).host_share, 0);
}

TEST(PlannerCurve, InterpolatesClampsBelowAndExtrapolatesAbove) {
  const std::vector<std::pair<double, double>> c{{512, 15}, {8192, 65}, {196608, 6900}};
  EXPECT_TRUE(std::isnan(curve_us({}, 100)));
  EXPECT_DOUBLE_EQ(curve_us(c, 100), 15);   // below the first point: its time (fixed-cost bound)
  EXPECT_DOUBLE_EQ(curve_us(c, 512), 15);
  EXPECT_DOUBLE_EQ(curve_us(c, 4352), 40);  // halfway between 512 and 8192
  EXPECT_DOUBLE_EQ(curve_us(c, 8192), 65);
  EXPECT_DOUBLE_EQ(curve_us(c, 196608), 6900);
  const double slope = (6900.0 - 65) / (196608 - 8192);
  EXPECT_NEAR(curve_us(c, 296608), 6900 + slope * 100000, 1e-9);
  EXPECT_DOUBLE_EQ(curve_us({{1000, 10}}, 3000), 30);  // one point: proportional above it
}

// The H200 case of 2026-12-01: a rate fitted on 65 K-row batches (41.8 M rows/s) predicted a 6 K-row uniform decode
// batch at 147 us, so a hybrid with a 51 us host fixed cost looked 17% faster; measured, plain took 65 us and the
// hybrid 205 us. With the measured curves the small batch stays plain and the large one still takes the hybrid.
TEST(PlannerCurve, MeasuredCurvesKeepSmallUniformBatchesPlainAndSplitLargeOnes) {
  Costs k = costs();
  k.uva_rows_per_s = 41.8e6;
  k.uva_fixed_us = 0;
  k.host_rows_per_s = 44.8e6;
  k.host_fixed_us = 50.8;
  PlannerOptions o;
  const Plan linear = choose({6144, 1.0, kUnknown}, k, o);
  EXPECT_GT(linear.host_share, 0) << "precondition: the linear model picks the hybrid";
  k.uva_curve = {{512, 14}, {2048, 22}, {8192, 85}, {32768, 700}, {131072, 3300}, {196608, 6900}};
  k.host_curve = {{512, 60}, {2048, 90}, {8192, 230}, {32768, 780}, {131072, 2980}, {196608, 4450}};
  const Plan small = choose({6144, 1.0, kUnknown}, k, o);
  EXPECT_EQ(small.host_share, 0);
  EXPECT_FALSE(small.dedup);
  EXPECT_NEAR(small.plain_us, curve_us(k.uva_curve, 6144), 1e-9);
  const Plan large = choose({196608, 1.0, kUnknown}, k, o);
  EXPECT_GT(large.host_share, 0.2);
  EXPECT_LT(large.host_share, 0.8);
  EXPECT_LT(large.predicted_us, large.plain_us * 0.95);
  // The prediction at the chosen share is the slower of the two measured paths.
  EXPECT_NEAR(std::max(curve_us(k.uva_curve, 196608 * (1 - large.host_share)), curve_us(k.host_curve, 196608 * large.host_share)),
              large.predicted_us, 1e-6);
}

// A measured hybrid curve overrides max(UVA part, host part): at 6 K rows the split measured 181 us (plain 79 us), at
// 196 K rows 3100 us (plain 7000 us).
TEST(PlannerCurve, MeasuredHybridCurvePricesTheSplitAsAWhole) {
  Costs k = costs();
  k.uva_rows_per_s = 41.8e6;
  k.host_rows_per_s = 44.8e6;
  k.uva_curve = {{512, 14}, {2048, 22}, {8192, 95}, {32768, 700}, {131072, 3300}, {196608, 7000}};
  k.host_curve = {{512, 30}, {2048, 40}, {8192, 80}, {32768, 700}, {131072, 2900}, {196608, 4400}};
  const Plan parts = choose({6144, 1.0, kUnknown}, k, {});
  EXPECT_GT(parts.host_share, 0) << "precondition: the parts alone make the split look faster";
  k.hybrid_share = 0.55;
  k.hybrid_curve = {{512, 70}, {2048, 90}, {8192, 230}, {32768, 900}, {131072, 2400}, {196608, 3100}};
  const Plan small = choose({6144, 1.0, kUnknown}, k, {});
  EXPECT_EQ(small.host_share, 0);
  const Plan large = choose({196608, 1.0, kUnknown}, k, {});
  EXPECT_DOUBLE_EQ(large.host_share, 0.55);
  EXPECT_DOUBLE_EQ(large.predicted_us, 3100);
}

// Held-out text prefill on the H200's calibration (2026-12-01: plain, host and hybrid curves on a 32 GiB table):
// 64% unique rows, 53% of them cached. The device path with dedup and the cache still gathers 30% of the rows over
// the link; a share of the tokens on host threads beside it finishes sooner, so the planner splits. A decode-sized
// batch never does, nor a planner told not to, nor one whose hybrid was not measured.
Costs h200_costs() {
  Costs k = costs();
  k.uva_rows_per_s = 28.5e6;
  k.uva_sorted_rows_per_s = 39e6;
  k.sort_min_unique_rows = 20000;
  k.host_rows_per_s = 25e6;
  k.uva_curve = {{512, 37.4}, {2048, 96.6}, {8192, 318.3}, {32768, 1185.0}, {131072, 4716.4}, {196608, 7061.0}};
  k.host_curve = {{512, 118.9}, {2048, 135.8}, {8192, 343.0}, {32768, 1544.4}, {131072, 5071.0}, {196608, 7851.5}};
  k.hybrid_share = 0.46;
  k.hybrid_curve = {{512, 72.9}, {2048, 131.9}, {8192, 252.3}, {32768, 648.9}, {131072, 2662.4}, {196608, 3962.0}};
  return k;
}

TEST(PlannerSplit, PrefillSplitsTheCachedDevicePathWithHostThreads) {
  const Costs k = h200_costs();
  PlannerOptions o;
  o.cache_present = true;
  const BatchStats prefill{196608, 0.641, 0.531};
  const Plan p = choose(prefill, k, o);
  EXPECT_TRUE(p.dedup);
  EXPECT_TRUE(p.cache);
  EXPECT_GT(p.host_share, 0);
  EXPECT_LE(p.host_share, 0.5);
  EXPECT_NE(p.path_name().find("cache+hybrid(host "), std::string::npos) << p.path_name();
  PlannerOptions unsplit = o;
  unsplit.allow_split = false;
  const Plan d = choose(prefill, k, unsplit);
  EXPECT_TRUE(d.dedup);
  EXPECT_TRUE(d.cache);
  EXPECT_EQ(d.host_share, 0);
  EXPECT_LT(p.predicted_us, d.predicted_us);
  // The split's price: the slower of the device part (the device-only plan's model on the first tokens) and the
  // host part, times the plain hybrid's measured interference at this size (> 1 here).
  const double n = 196608;
  const Plan part = choose({std::llround(n * (1 - p.host_share)), 0.641, 0.531}, k, unsplit);
  ASSERT_EQ(part.dedup, p.dedup);
  ASSERT_EQ(part.sort, p.sort);
  ASSERT_TRUE(part.cache);
  const double parts_at_hybrid = std::max(curve_us(k.uva_curve, n * (1 - k.hybrid_share)), curve_us(k.host_curve, n * k.hybrid_share));
  const double interference = curve_us(k.hybrid_curve, n) / parts_at_hybrid;
  ASSERT_GT(interference, 1);
  EXPECT_NEAR(p.predicted_us, std::max(part.predicted_us, curve_us(k.host_curve, n * p.host_share)) * interference,
              0.1);  // the part's rows rounded to a whole row
  // Decode (64 tokens x 24 heads) is below split_min_rows.
  const Plan decode = choose({1536, 0.9, 0.7}, k, o);
  EXPECT_EQ(decode.host_share, 0);
  // Below split_min_rows no split is offered, even where the model would take one.
  PlannerOptions high = o;
  high.split_min_rows = 196609;
  EXPECT_EQ(choose(prefill, k, high).host_share, 0);
  // Without a measured hybrid (no interference price) no split is offered.
  Costs uncalibrated = k;
  uncalibrated.hybrid_curve.clear();
  uncalibrated.hybrid_share = 0;
  const Plan u = choose(prefill, uncalibrated, o);
  EXPECT_TRUE(u.cache);
  EXPECT_EQ(u.host_share, 0);
}

TEST(Planner, InlineFullGridWhenTheLookupCannotHide) {
  PlannerOptions o;
  o.overlap_budget_us = 100;
  const Plan big = choose({196608, 1.0, kUnknown}, costs(), o);
  EXPECT_FALSE(big.background);
  EXPECT_EQ(big.grid_cap, GridCap::all_sms());
  const Plan small = choose({1536, 1.0, kUnknown}, costs(), o);
  EXPECT_TRUE(small.background);
  EXPECT_EQ(small.grid_cap, o.background_grid_cap);
}

// A background batch that reads prefill-sized rows over UVA runs on the large-batch share of the background grid
// (fraction or blocks, never below one block); decode batches, inline batches and scale 1 keep theirs.
TEST(Planner, LargeBatchesRunOnAShareOfTheBackgroundGrid) {
  PlannerOptions o;
  const Plan prefill = choose({196608, 1.0, kUnknown}, costs(), o);
  EXPECT_TRUE(prefill.background);
  EXPECT_TRUE(prefill.large_batch_grid);
  EXPECT_EQ(prefill.grid_cap, *GridCap::of_fraction(0.25));
  bool said = false;
  for (const auto& w : why(prefill)) said |= w.find("large-batch share") != std::string::npos;
  EXPECT_TRUE(said);
  const Plan edge = choose({o.large_batch_min_rows, 1.0, kUnknown}, costs(), o);
  EXPECT_EQ(edge.grid_cap, *GridCap::of_fraction(0.25));
  const Plan below = choose({o.large_batch_min_rows - 1, 1.0, kUnknown}, costs(), o);
  EXPECT_FALSE(below.large_batch_grid);
  EXPECT_EQ(below.grid_cap, o.background_grid_cap);
  const Plan decode = choose({1536, 1.0, kUnknown}, costs(), o);
  EXPECT_EQ(decode.grid_cap, o.background_grid_cap);
  // A cap in blocks halves in blocks, and one block stays one block.
  PlannerOptions blocks = o;
  blocks.background_grid_cap = *GridCap::of_blocks(25);
  EXPECT_EQ(choose({196608, 1.0, kUnknown}, costs(), blocks).grid_cap, *GridCap::of_blocks(12));
  blocks.background_grid_cap = *GridCap::of_blocks(1);
  EXPECT_EQ(choose({196608, 1.0, kUnknown}, costs(), blocks).grid_cap, *GridCap::of_blocks(1));
  // Scale 1: every size on the background grid.
  PlannerOptions off = o;
  off.large_batch_grid_scale = 1;
  const Plan same = choose({196608, 1.0, kUnknown}, costs(), off);
  EXPECT_FALSE(same.large_batch_grid);
  EXPECT_EQ(same.grid_cap, o.background_grid_cap);
  // Inline (the lookup cannot hide): every SM, whatever the size.
  PlannerOptions inline_o = o;
  inline_o.overlap_budget_us = 100;
  EXPECT_EQ(choose({196608, 1.0, kUnknown}, costs(), inline_o).grid_cap, GridCap::all_sms());
  // What counts is the rows read over UVA: a prefill whose cache serves nearly every row, or whose dedup leaves few
  // rows, stays on the background grid; the same batch missing half its rows takes the share; a plan placed after
  // its path changed (an exploration) follows the new path.
  Plan cached;
  cached.rows = 196608;
  cached.cache = true;
  cached.hit = 0.97;
  place_on_grid(cached, o);
  EXPECT_FALSE(cached.large_batch_grid);
  EXPECT_EQ(cached.grid_cap, o.background_grid_cap);
  EXPECT_DOUBLE_EQ(uva_rows(cached), 196608 * (1 - 0.97));
  cached.hit = 0.5;
  place_on_grid(cached, o);
  EXPECT_TRUE(cached.large_batch_grid);
  EXPECT_EQ(cached.grid_cap, *GridCap::of_fraction(0.25));
  cached.dedup = true;
  cached.unique = 0.25;  // 24,576 unique rows, half of them missed
  place_on_grid(cached, o);
  EXPECT_FALSE(cached.large_batch_grid);
  cached.cache = cached.dedup = false;  // a plain exploration of the same batch
  place_on_grid(cached, o);
  EXPECT_TRUE(cached.large_batch_grid);
  Plan split = cached;
  split.host_share = 0.9;  // the device reads a tenth of the tokens
  place_on_grid(split, o);
  EXPECT_FALSE(split.large_batch_grid);
  Plan inl = cached;
  inl.background = false;
  inl.grid_cap = GridCap::all_sms();
  place_on_grid(inl, o);
  EXPECT_EQ(inl.grid_cap, GridCap::all_sms());
}

TEST(Planner, DisabledPlannerIsThePlainGather) {
  PlannerOptions o;
  o.enabled = false;
  o.cache_present = true;
  const Plan p = choose({196608, 0.2, 0.9}, costs(), o);
  EXPECT_FALSE(p.planner_enabled);
  EXPECT_FALSE(p.dedup);
  EXPECT_FALSE(p.cache);
  ASSERT_EQ(why(p).size(), 1u);
  EXPECT_NE(why(p)[0].find("disabled"), std::string::npos);
}

}  // namespace
}  // namespace engram::plan
