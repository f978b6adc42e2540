// Description: host LFU counts of the hot-row cache (src/plan/hot_counts.hpp): decayed counts, hottest-first
// profile, candidate selection (uncached, hottest first), victims (free slots first, coldest, hysteresis), the
// bounded rate of plan(M), pruning, and the counting thread (submit/drain/try_with; batches larger than the backlog
// counted from a weighted stratified sample, dropped only past twice the backlog; plans pipelined and taken ahead of
// the batches and between the chunks of the batch being counted, slices that never name a slot or an id twice across
// plans).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "plan/hot_counts.hpp"

namespace engram::plan {
namespace {

HotCountsOptions no_decay() {
  HotCountsOptions o;
  o.half_life_batches = 0;
  o.rescale_every = 0;
  return o;
}

void observe(HotCounts& c, std::vector<int64_t> ids) { c.observe(ids.data(), static_cast<int64_t>(ids.size())); }

TEST(HotCounts, CountsRepeatsAndIgnoresPadding) {
  HotCounts c(no_decay());
  observe(c, {5, 5, 7, -1, 5});
  observe(c, {7, 9});
  EXPECT_DOUBLE_EQ(c.count(5), 3);
  EXPECT_DOUBLE_EQ(c.count(7), 2);
  EXPECT_DOUBLE_EQ(c.count(9), 1);
  EXPECT_DOUBLE_EQ(c.count(-1), 0);
  EXPECT_DOUBLE_EQ(c.count(1234), 0);
  EXPECT_EQ(c.distinct(), 3);
  HotCountsOptions lim = no_decay();
  lim.id_limit = 7;  // ids >= 7 are outside the table
  HotCounts d(lim);
  observe(d, {5, 7, 9, 6});
  EXPECT_EQ(d.distinct(), 2);
  EXPECT_DOUBLE_EQ(d.count(7), 0);
  EXPECT_EQ(c.batches(), 2);
  EXPECT_DOUBLE_EQ(c.total(), 6);
}

TEST(HotCounts, HottestFirstWithDeterministicTies) {
  HotCounts c(no_decay());
  observe(c, {3, 1, 1, 2, 2, 4, 4, 4});
  const auto h = c.hottest(3);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].first, 4);
  EXPECT_EQ(h[1].first, 1);  // tie 1 vs 2 (count 2): smaller id first
  EXPECT_EQ(h[2].first, 2);
  EXPECT_EQ(c.hottest(100).size(), 4u);
  EXPECT_TRUE(c.hottest(0).empty());
}

TEST(HotCounts, DecayHalvesAfterHalfLife) {
  HotCountsOptions o;
  o.half_life_batches = 4;
  o.rescale_every = 3;  // a rescale in the middle must not change the decayed values
  HotCounts c(o);
  observe(c, {1});
  for (int i = 0; i < 3; ++i) observe(c, {2});
  // id 1 was seen 4 batches ago (weight 1 then, the increment grew 2x since); id 2 at batches 1, 2, 3.
  EXPECT_NEAR(c.count(1), 0.5, 1e-12);
  const double g = std::exp2(0.25);
  EXPECT_NEAR(c.count(2), (g + g * g + g * g * g) / 2.0, 1e-12);
  // A recent id overtakes an old one with the same raw number of observations.
  observe(c, {1});
  EXPECT_GT(c.count(1), 0.5);
}

TEST(HotCounts, PruneDropsColdUncachedIdsButKeepsCachedOnes) {
  HotCountsOptions o;
  o.half_life_batches = 1;  // halves every batch
  o.rescale_every = 8;
  o.prune_below = 0.05;
  HotCounts c(o);
  observe(c, {10, 11});
  c.set_slots({11, -1});
  for (int i = 0; i < 7; ++i) observe(c, {20});
  // After 8 batches ids 10 and 11 weigh 2^-8 < 0.05: 10 is forgotten, 11 (cached) kept.
  EXPECT_DOUBLE_EQ(c.count(10), 0);
  EXPECT_GT(c.count(11), 0);
  EXPECT_GT(c.count(20), 0.05);
}

TEST(HotCounts, PlanFillsFreeSlotsWithHottestUncachedFirst) {
  HotCounts c(no_decay());
  c.set_slots({-1, -1, 100, -1});
  observe(c, {1, 1, 1, 2, 2, 3, 100, 100, 100, 100});
  const auto sw = c.plan(2);  // bounded: 2 rows at most
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].new_id, 1);
  EXPECT_EQ(sw[1].new_id, 2);
  EXPECT_EQ(sw[0].slot, 0);  // free slots lowest first
  EXPECT_EQ(sw[1].slot, 1);
  for (const auto& s : sw) {
    EXPECT_EQ(s.old_id, -1);
    EXPECT_NE(s.slot, 2);  // slot 2 holds 100 and there were free slots
  }
  EXPECT_TRUE(c.cached(1));
  EXPECT_TRUE(c.cached(2));
  EXPECT_TRUE(c.cached(100));
  EXPECT_EQ(c.free_slots(), 1);
  const auto sw2 = c.plan(8);
  ASSERT_EQ(sw2.size(), 1u);  // only 3 is left uncached; one free slot
  EXPECT_EQ(sw2[0].new_id, 3);
  EXPECT_EQ(sw2[0].slot, 3);
  EXPECT_EQ(c.free_slots(), 0);
  EXPECT_TRUE(c.plan(8).empty());  // nothing uncached left
}

TEST(HotCounts, PlanEvictsColdestAndRespectsHysteresis) {
  HotCountsOptions o = no_decay();
  o.min_gain = 2;
  HotCounts c(o);
  observe(c, {10, 10, 10, 10, 11, 12, 12});  // cached: 10 (4), 11 (1), 12 (2)
  c.set_slots({10, 11, 12});
  observe(c, {50, 50, 50, 60, 60});  // candidates: 50 (3), 60 (2)
  const auto sw = c.plan(4);
  // 50 (3) >= 11 (1) + 2: swapped; 60 (2) < 12 (2) + 2: not (and no colder victim is left).
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].new_id, 50);
  EXPECT_EQ(sw[0].old_id, 11);
  EXPECT_EQ(sw[0].slot, 1);
  EXPECT_TRUE(c.cached(50));
  EXPECT_FALSE(c.cached(11));
  EXPECT_TRUE(c.cached(10));
  EXPECT_TRUE(c.cached(12));
  // The evicted id is a candidate again once it is hot enough.
  for (int i = 0; i < 6; ++i) observe(c, {11});
  const auto back = c.plan(4);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].new_id, 11);
  EXPECT_EQ(back[0].old_id, 12);  // the coldest cached now: 12 (2) < 50 (3) < 10 (4)
}

// The default hysteresis lets an id seen once lately replace a cached row whose count has decayed to ~0, and
// keeps an id of the same count as the victim out.
TEST(HotCounts, DefaultGainAdmitsAnIdSeenOnceOverAForgottenRow) {
  HotCountsOptions o;  // defaults: half-life 256 batches, min_gain 0.5
  o.rescale_every = 0;
  HotCounts c(o);
  observe(c, {7});  // cached id 7, seen once, then 1024 batches (4 half-lives) without it
  c.set_slots({7});
  for (int b = 0; b < 1024; ++b) observe(c, {});
  EXPECT_LT(c.count(7), 0.07);
  observe(c, {42});  // seen once, now: count 1
  const auto sw = c.plan(1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].old_id, 7);
  EXPECT_EQ(sw[0].new_id, 42);
  // 42 and 9 now weigh the same (one sighting each, in the same batch): 9 does not replace 42.
  HotCounts d(o);
  observe(d, {42, 9});
  d.set_slots({42});
  EXPECT_TRUE(d.plan(1).empty());
}

TEST(HotCounts, PlanIsBoundedAndSwapsAreConsistent) {
  HotCounts c(no_decay());
  std::vector<int64_t> slots(64, -1);
  c.set_slots(slots);
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 1000; ++id)
    for (int64_t k = 0; k < 1 + (1000 - id) / 100; ++k) ids.push_back(id);
  c.observe(ids.data(), static_cast<int64_t>(ids.size()));
  std::set<int64_t> held;
  for (int round = 0; round < 20; ++round) {
    const auto sw = c.plan(7);
    EXPECT_LE(sw.size(), 7u);
    for (const auto& s : sw) {
      EXPECT_EQ(held.count(s.new_id), 0u);
      if (s.old_id >= 0) held.erase(s.old_id);
      held.insert(s.new_id);
    }
  }
  EXPECT_EQ(held.size(), 64u);
  for (int64_t id : held) EXPECT_TRUE(c.cached(id));
  // Every cached id is at least as hot as every uncached one seen (counts step by 1 per 100 ids).
  double min_cached = 1e30;
  for (int64_t id : held) min_cached = std::min(min_cached, c.count(id));
  for (int64_t id = 0; id < 1000; ++id) {
    if (!held.count(id)) {
      EXPECT_LE(c.count(id), min_cached + 1.0) << id;
    }
  }
}

TEST(HotCountsWorker, CountsOnItsThreadAndDrains) {
  HotCountsWorker w(2, no_decay());
  std::vector<int64_t> a = {1, 1, 2}, b = {7};
  for (int i = 0; i < 10; ++i) w.submit(0, a.data(), 3);
  w.submit(1, b.data(), 1);
  w.drain();
  EXPECT_EQ(w.counted_batches(), 11);
  EXPECT_EQ(w.dropped_batches(), 0);
  double c1 = -1, c7 = -1;
  w.with(0, [&](HotCounts& c) { c1 = c.count(1); });
  EXPECT_TRUE(w.try_with(1, [&](HotCounts& c) { c7 = c.count(7); }));  // idle worker: never busy
  EXPECT_DOUBLE_EQ(c1, 20);
  EXPECT_DOUBLE_EQ(c7, 1);
  EXPECT_FALSE(w.try_with(5, [](HotCounts&) {}));  // no such layer
}

// A batch larger than the whole backlog (a prefill batch) is counted from a sample, not dropped: the sample's
// weights add up to the batch, and a [token][head] layout (id = head) keeps every head in the sample.
TEST(HotCountsWorker, SamplesBatchesLargerThanTheBacklogWithScaledWeights) {
  const int64_t heads = 24, tokens = 1000;
  HotCountsWorker w(1, no_decay(), /*max_pending_ids=*/2400);
  std::vector<int64_t> ids(static_cast<size_t>(heads * tokens));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) ids[static_cast<size_t>(t * heads + h)] = h;
  w.submit(0, ids.data(), static_cast<int64_t>(ids.size()));
  w.drain();
  EXPECT_EQ(w.dropped_batches(), 0);
  EXPECT_EQ(w.counted_batches(), 1);
  EXPECT_EQ(w.sampled_batches(), 1);
  EXPECT_EQ(w.sampled_out_ids(), heads * tokens - 2400);
  w.with(0, [&](HotCounts& c) {
    EXPECT_DOUBLE_EQ(c.total(), static_cast<double>(heads * tokens)) << "weights scale the sample to the batch";
    EXPECT_EQ(c.batches(), 1);
    for (int64_t h = 0; h < heads; ++h) {
      // 1000 expected per head; the stratified sample (100 per head on average) stays within half of it.
      EXPECT_GT(c.count(h), 500) << "head " << h;
      EXPECT_LT(c.count(h), 1500) << "head " << h;
    }
  });
  // A batch that fits is copied whole.
  std::vector<int64_t> small(100, 3);
  w.submit(0, small.data(), 100);
  w.drain();
  EXPECT_EQ(w.sampled_batches(), 1);
  EXPECT_EQ(w.counted_batches(), 2);
}

// While the counting thread is held (here: by with()), batches are sampled down to limit/64 ids each; one is
// dropped only once the backlog would pass twice the limit.
TEST(HotCountsWorker, DropsOnlyPastTwiceTheBacklog) {
  HotCountsWorker w(1, no_decay(), /*max_pending_ids=*/64);
  std::vector<int64_t> ids(200, 5);
  w.with(0, [&](HotCounts&) {
    w.submit(0, ids.data(), 64);  // fits: 64 pending
    for (int i = 0; i < 64; ++i) w.submit(0, ids.data(), 200);  // 1 id each (the floor): 128 pending
    EXPECT_EQ(w.dropped_batches(), 0);
    EXPECT_EQ(w.sampled_batches(), 64);
    w.submit(0, ids.data(), 200);  // would make 129 > 2 x 64
    EXPECT_EQ(w.dropped_batches(), 1);
  });
  w.drain();
  EXPECT_EQ(w.counted_batches(), 65);
  double c5 = 0;
  w.with(0, [&](HotCounts& c) { c5 = c.count(5); });
  EXPECT_DOUBLE_EQ(c5, 64 + 64 * 200);  // each sample of one id weighs its batch
}

// Updates are pipelined: the next plan may be asked for while the previous one's swaps still wait, and a slice
// stops before a swap of the later plan that re-uses a slot of the earlier one.
TEST(HotCountsWorker, PipelinedPlansNeverNameASlotTwiceInASlice) {
  HotCountsWorker w(1, no_decay());
  w.with(0, [](HotCounts& c) { c.set_slots({-1}); });
  std::vector<int64_t> five(3, 5), six(9, 6);
  w.submit(0, five.data(), 3);
  w.drain();
  ASSERT_TRUE(w.request_plan(0, 1));
  w.drain();
  EXPECT_EQ(w.planned_backlog(0), 1);  // slot 0: free -> 5, not taken yet
  EXPECT_FALSE(w.request_plan(0, 1)) << "a whole update (1 row) still waits";
  w.submit(0, six.data(), 9);
  w.drain();
  ASSERT_TRUE(w.request_plan(0, 2)) << "one swap waiting, fewer than the 2 asked: pipelined";
  w.drain();
  ASSERT_EQ(w.planned_backlog(0), 2);  // then slot 0: 5 -> 6
  const std::vector<CacheSwap> a = w.take_planned(0, 8);
  ASSERT_EQ(a.size(), 1u) << "the slice stops before slot 0 comes again";
  EXPECT_EQ(a[0].old_id, -1);
  EXPECT_EQ(a[0].new_id, 5);
  const std::vector<CacheSwap> b = w.take_planned(0, 8);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].old_id, 5);
  EXPECT_EQ(b[0].new_id, 6);
  EXPECT_FALSE(w.update_in_progress(0));
}

// A plan request is served before the batches still waiting (it never waits behind a prefill backlog).
TEST(HotCountsWorker, PlansGoAheadOfWaitingBatches) {
  HotCountsWorker w(1, no_decay());
  w.with(0, [](HotCounts& c) { c.set_slots({-1, -1}); });
  std::vector<int64_t> seven(4, 7), eight(10, 8), pad(1, -1);
  w.submit(0, seven.data(), 4);
  w.drain();
  w.with(0, [&](HotCounts&) {  // holds the counting thread (at the latest when it starts on `pad`)
    w.submit(0, pad.data(), 1);
    w.submit(0, eight.data(), 10);
    ASSERT_TRUE(w.request_plan(0, 2));
  });
  w.drain();
  const std::vector<CacheSwap> s = w.take_planned(0, 8);
  ASSERT_EQ(s.size(), 1u) << "planned before the batch of 8s was counted";
  EXPECT_EQ(s[0].new_id, 7);
  EXPECT_EQ(w.counted_batches(), 3);
}

// A plan asked for while a batch is being counted is computed between the batch's chunks, before the batch ends
// (a prefill batch takes tens of milliseconds to count; an update due meanwhile would otherwise be deferred).
TEST(HotCountsWorker, PlansAreServedWhileABatchIsCounted) {
  HotCountsWorker w(1, no_decay(), int64_t{1} << 23);
  w.with(0, [](HotCounts& c) { c.set_slots({-1, -1}); });
  std::vector<int64_t> seven(4, 7);
  w.submit(0, seven.data(), 4);
  w.drain();
  std::vector<int64_t> big(int64_t{1} << 21);  // distinct ids: a hundred milliseconds of counting or more
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int64_t>(i) * 7919 + 100;
  w.submit(0, big.data(), static_cast<int64_t>(big.size()));
  while (w.try_with(0, [](HotCounts&) {})) {
  }  // until the counting thread holds the counts: it is counting `big`
  ASSERT_TRUE(w.request_plan(0, 2));
  while (w.plan_queued(0)) {
  }
  EXPECT_EQ(w.counted_batches(), 1) << "the plan came back before the batch was counted";
  const std::vector<CacheSwap> s = w.take_planned(0, 8);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s[0].new_id, 7) << "the hottest id counted so far";
  w.drain();
  EXPECT_EQ(w.counted_batches(), 2);
}

// Counting a batch in parts is counting it whole: the same counts, one batch of the decay.
TEST(HotCounts, ABatchCountedInPartsIsOneBatch) {
  HotCountsOptions o;
  o.half_life_batches = 4;
  HotCounts whole(o), parts(o);
  const std::vector<int64_t> a{1, 2, 2, 3}, b{3, 3, 4, -1};
  std::vector<int64_t> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  for (int i = 0; i < 3; ++i) {
    whole.observe(ab.data(), static_cast<int64_t>(ab.size()), 2.0);
    parts.observe_part(a.data(), static_cast<int64_t>(a.size()), 2.0);
    parts.observe_part(b.data(), static_cast<int64_t>(b.size()), 2.0);
    parts.end_batch();
  }
  EXPECT_EQ(parts.batches(), whole.batches());
  EXPECT_EQ(parts.distinct(), 4);
  for (int64_t id = 0; id <= 5; ++id) EXPECT_DOUBLE_EQ(parts.count(id), whole.count(id)) << id;
}

// The counting thread plans an online update from the batches counted before it, and hands the swaps out in
// slices of a row budget: concatenated, the slices are exactly what HotCounts::plan gives for the same traffic,
// no slice names a slot or an id twice, and a second plan is refused until the first is used up.
TEST(HotCountsWorker, PlansOnItsThreadAndHandsOutSlices) {
  HotCountsOptions o = no_decay();
  o.pool_size = 64;
  HotCountsWorker w(2, o);
  HotCounts ref(o);
  std::vector<int64_t> slots(40);
  for (int64_t s = 0; s < 40; ++s) slots[static_cast<size_t>(s)] = s < 30 ? 1000 + s : -1;  // 10 free slots
  w.with(0, [&](HotCounts& c) { c.set_slots(slots); });
  ref.set_slots(slots);
  std::vector<int64_t> batch;
  for (int64_t id = 0; id < 50; ++id)
    for (int64_t r = 0; r <= id % 7; ++r) batch.push_back(id);  // ids 0..49 with 1..7 hits each
  for (int i = 0; i < 3; ++i) {
    w.submit(0, batch.data(), static_cast<int64_t>(batch.size()));
    ref.observe(batch.data(), static_cast<int64_t>(batch.size()));
  }
  EXPECT_TRUE(w.take_planned(0, 8).empty());  // nothing planned yet: empty, no wait
  w.drain();  // a plan goes ahead of the batches still waiting: these are counted first
  w.with(0, [&](HotCounts&) {  // holds the counting thread: the first request is still queued at the second
    ASSERT_TRUE(w.request_plan(0, 24));
    EXPECT_FALSE(w.request_plan(0, 24)) << "the layer's previous plan is still queued";
    EXPECT_TRUE(w.update_in_progress(0));
    EXPECT_FALSE(w.update_in_progress(1));
  });
  w.drain();
  const std::vector<CacheSwap> want = ref.plan(24);
  ASSERT_FALSE(want.empty());
  std::vector<CacheSwap> got;
  int slices = 0;
  while (true) {
    std::vector<CacheSwap> s = w.take_planned(0, 7);
    if (s.empty()) break;
    EXPECT_LE(s.size(), 7u);
    ++slices;
    std::set<int64_t> slot_set, id_set;
    for (const auto& sw : s) {
      EXPECT_TRUE(slot_set.insert(sw.slot).second) << "slot twice in a slice";
      EXPECT_TRUE(id_set.insert(sw.new_id).second) << "id twice in a slice";
    }
    got.insert(got.end(), s.begin(), s.end());
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(w.last_plan_rows(0), static_cast<int64_t>(want.size())) << "the plan's size stays known once taken";
  EXPECT_EQ(w.last_plan_rows(1), 0);
  EXPECT_EQ(slices, static_cast<int>((want.size() + 6) / 7));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].slot, want[i].slot) << i;
    EXPECT_EQ(got[i].old_id, want[i].old_id) << i;
    EXPECT_EQ(got[i].new_id, want[i].new_id) << i;
  }
  EXPECT_FALSE(w.update_in_progress(0));
  EXPECT_EQ(w.plan_times().plans, 1);
  EXPECT_EQ(w.counted_batches(), 3);  // a plan request is not a counted batch
  EXPECT_TRUE(w.request_plan(0, 24)) << "the next update may start once the previous one is used up";
  EXPECT_FALSE(w.request_plan(7, 24));  // no such layer
  EXPECT_FALSE(w.request_plan(1, 0));   // nothing to plan
}

}  // namespace
}  // namespace engram::plan
