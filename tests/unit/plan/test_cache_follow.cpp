// Description: the hot-row cache's policy follows a change of traffic: plan::UpdateBudget (rows and slice double
// while plans come back full, up to the burst factor, and halve back), plan::UpdateClock (updates due and deferred as
// the engine counts them), and HotCounts' decayed counts with the
// engine's update loop (plan every K batches, slices applied per batch) after the id distribution switches to
// disjoint ids: the counts' top set becomes mostly the new distribution's, the cache mirror holds >= 90% of the new hot
// set within a bounded number of updates, and bursts get there in fewer updates than the base budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "plan/hot_counts.hpp"
#include "plan/update_budget.hpp"

namespace engram::plan {
namespace {

TEST(UpdateBudget, DoublesOnFullPlansUpToTheBurstAndHalvesBack) {
  UpdateBudget b(256, 64, 16);
  EXPECT_EQ(b.rows(), 256);
  EXPECT_EQ(b.slice(), 64);
  EXPECT_EQ(b.max_rows(), 4096);
  b.on_plan(256);  // full
  EXPECT_EQ(b.rows(), 512);
  EXPECT_EQ(b.slice(), 128);
  for (int i = 0; i < 10; ++i) b.on_plan(b.rows());
  EXPECT_EQ(b.scale(), 16);  // capped
  EXPECT_EQ(b.rows(), 4096);
  EXPECT_EQ(b.slice(), 1024);
  b.on_plan(3000);  // between half and full: unchanged
  EXPECT_EQ(b.scale(), 16);
  b.on_plan(2048);  // half full: halves
  EXPECT_EQ(b.scale(), 8);
  b.on_plan(0);
  b.on_plan(0);
  b.on_plan(0);
  b.on_plan(0);
  EXPECT_EQ(b.scale(), 1);  // never below the base
  EXPECT_EQ(b.rows(), 256);
  UpdateBudget fixed(256, 64, 1);
  fixed.on_plan(256);
  EXPECT_EQ(fixed.rows(), 256);
  EXPECT_EQ(fixed.slice(), 64);
}

// UpdateClock counts as the engine's report does: one update due every `every` steps; one that comes due while the
// previous one waits is deferred (merged into it); a due update refused at a step is deferred once and waits a step.
TEST(UpdateClock, CountsDueDeferredAndWaitedUpdates) {
  UpdateClock c(4);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(c.tick());
  EXPECT_TRUE(c.tick());
  EXPECT_TRUE(c.due());
  c.asked();
  EXPECT_FALSE(c.due());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(c.tick());
  EXPECT_TRUE(c.tick());  // due at step 8
  c.refused();
  c.refused();  // still the same update: deferred once, two steps waited
  EXPECT_EQ(c.deferred(), 1);
  EXPECT_EQ(c.waited_steps(), 2);
  for (int i = 0; i < 3; ++i) (void)c.tick();
  EXPECT_TRUE(c.tick());  // due again while the previous one waits: merged, deferred
  EXPECT_EQ(c.deferred(), 2);
  c.asked();
  EXPECT_EQ(c.attempts(), 3);
  EXPECT_FALSE(c.due());
  UpdateClock never(0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(never.tick());
  EXPECT_EQ(never.attempts(), 0);
}

// One slice is staged per step: slice_for(every) applies a whole update within its period, raising a smaller slice
// to ceil(rows / every) and scaling with the burst like rows() and slice().
TEST(UpdateBudget, SliceForThePeriodAppliesAnUpdateWithinIt) {
  UpdateBudget b(256, 64, 16);
  EXPECT_EQ(b.slice_for(4), 64);   // 256 / 4: the configured slice already fits the period
  EXPECT_EQ(b.slice_for(8), 64);   // a larger slice than needed is kept
  EXPECT_EQ(b.slice_for(2), 128);  // raised: 256 rows in 2 steps
  EXPECT_EQ(b.slice_for(3), 86);   // ceil(256 / 3)
  EXPECT_EQ(b.slice_for(0), 64);   // no updates: the configured slice
  EXPECT_EQ(b.max_slice_for(2), 16 * 128);
  b.on_plan(256);  // full: doubles
  EXPECT_EQ(b.slice_for(2), 256);
  EXPECT_GE(b.slice_for(2) * 2, b.rows());
  UpdateBudget small(16, 4, 8);
  EXPECT_EQ(small.slice_for(2), 8);
  EXPECT_EQ(small.max_slice_for(2), 64);
}

// Zipf(1) ranks over `n` ids starting at `base`, sampled with a fixed seed.
class Traffic {
 public:
  Traffic(int64_t base, int n, uint64_t seed) : base_(base), rng_(seed) {
    std::vector<double> w(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) w[static_cast<size_t>(k)] = 1.0 / (k + 1);
    dist_ = std::discrete_distribution<int>(w.begin(), w.end());
  }
  std::vector<int64_t> batch(int n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = base_ + dist_(rng_);
    return v;
  }
  // The `k` hottest ids (ranks 0..k-1).
  std::set<int64_t> top(int k) const {
    std::set<int64_t> s;
    for (int i = 0; i < k; ++i) s.insert(base_ + i);
    return s;
  }

 private:
  int64_t base_;
  std::mt19937_64 rng_;
  std::discrete_distribution<int> dist_;
};

// The engine's loop on one layer: observe a batch, then at its end take the next slice of the plan (applied to
// the mirror by plan() already) and plan every `every` batches with the budget's rows.
struct Loop {
  HotCounts counts;
  UpdateBudget budget;
  int every;
  std::deque<CacheSwap> planned;
  int64_t batches = 0, updates = 0, last_plan = 0;
  Loop(const HotCountsOptions& o, UpdateBudget b, int e) : counts(o), budget(b), every(e) {}
  void step(const std::vector<int64_t>& ids) {
    counts.observe(ids.data(), static_cast<int64_t>(ids.size()));
    for (int64_t i = 0; i < budget.slice() && !planned.empty(); ++i) planned.pop_front();
    if (++batches % every == 0 && planned.empty()) {
      if (updates > 0) budget.on_plan(last_plan);
      const auto p = counts.plan(budget.rows());
      planned.assign(p.begin(), p.end());
      last_plan = static_cast<int64_t>(p.size());
      ++updates;
    }
  }
  double held_share(const std::set<int64_t>& ids) const {
    int64_t n = 0;
    for (int64_t id : ids) n += counts.cached(id) ? 1 : 0;
    return static_cast<double>(n) / static_cast<double>(ids.size());
  }
};

constexpr int kBatch = 1024, kEvery = 4;

HotCountsOptions options_for(const UpdateBudget& b) {
  HotCountsOptions o;  // the engine's defaults: half-life 256 batches, min gain 1
  o.pool_size = 4 * b.max_rows();
  return o;
}

struct Followed {
  int64_t batches = -1;    // batches of the new traffic until the mirror held >= 90% of its hot set; -1: not within the limit
  int64_t new_in_top = 0;  // of the counts' `slots / 4` hottest ids after `limit` batches, those of the new traffic
};

// A cache of `slots` slots filled from the counts of 8 batches of the old traffic, `old_batches` more of it with
// online updates, then `limit` batches of the new traffic (disjoint ids) while we watch the mirror hold its hottest
// `slots / 2` ids.
Followed follow(UpdateBudget budget, int slots, int old_batches, int64_t limit) {
  Loop l(options_for(budget), budget, kEvery);
  Traffic a(0, 50000, 7), b(1'000'000, 50000, 11);
  for (int i = 0; i < 8; ++i) l.counts.observe(a.batch(kBatch).data(), kBatch);
  std::vector<int64_t> slot_ids(static_cast<size_t>(slots), -1);
  const auto hot = l.counts.hottest(slots);
  for (size_t i = 0; i < hot.size(); ++i) slot_ids[i] = hot[i].first;
  l.counts.set_slots(slot_ids);
  for (int i = 0; i < old_batches; ++i) l.step(a.batch(kBatch));
  if (old_batches > 0) {
    EXPECT_GT(l.held_share(a.top(slots / 2)), 0.9) << "the cache follows the old traffic before the switch";
  }
  const std::set<int64_t> target = b.top(slots / 2);
  Followed f;
  for (int64_t t = 1; t <= limit; ++t) {
    l.step(b.batch(kBatch));
    if (f.batches < 0 && l.held_share(target) >= 0.9) f.batches = t;
  }
  for (const auto& [id, n] : l.counts.hottest(slots / 4)) f.new_in_top += id >= 1'000'000 ? 1 : 0;
  return f;
}

// A full cache of hot old rows: the new ids must out-count them (decay), and the mirror follows.
TEST(CacheFollow, CountsTopSetFollowsASwitchOfDistribution) {
  const int slots = 2048;
  const Followed f = follow(UpdateBudget(256, 64, 16), slots, 300, 600);
  ASSERT_GT(f.batches, 0) << "the cache did not follow the new traffic within 600 batches";
  EXPECT_LE(f.batches, 300);
  // The decayed counts' own top set is mostly the new traffic's (>= 80% of its hottest quarter after 600 batches,
  // about two half-lives): the old ids' counts have decayed below the new ones'.
  EXPECT_GE(f.new_in_top, slots / 4 * 4 / 5);
}

// A cache with room for much more than one update: how fast it fills is the update budget's rate.
TEST(CacheFollow, BurstsFollowInFewerBatchesThanTheBaseBudget) {
  const int slots = 16384;
  const Followed burst = follow(UpdateBudget(64, 16, 16), slots, 0, 1500);
  const Followed base = follow(UpdateBudget(64, 16, 1), slots, 0, 1500);
  ASSERT_GT(burst.batches, 0);
  // The base budget (64 rows every 4 batches) needs more batches, or does not get there within the limit.
  EXPECT_TRUE(base.batches < 0 || base.batches > 2 * burst.batches)
      << "burst " << burst.batches << " batches, base " << base.batches;
}

}  // namespace
}  // namespace engram::plan
