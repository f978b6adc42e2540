// FastLookup with the cost learner: calibration batches are not served calls; served batches are timed and reach
// the learner (by event query, read after the next launch or at stats()); a path the learner measured slower than the
// plain gather is not chosen again in that size range; a batch whose size range has no unique-fraction estimate
// measures it; every batch, exploration ones included, stays bit-identical to the reference. No timing assertion:
// the measurements that decide are fed to the learner by the test. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/fast_lookup.cuh"
#include "cuda_test_support.hpp"
#include "registered_table.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;
using testing::make_registered_table;
using testing::repeated_ids;

// One planner-driven launch (what the prefetch queue calls); returns the staging rows.
std::vector<uint16_t> launch(cuda::FastLookup& fl, const cuda::UvaTable& t, const std::vector<int64_t>& ids,
                             int heads) {
  return testing::fast_launch(fl, t, ids, heads, nullptr).staging;
}

constexpr int kHeads = 4;
constexpr int64_t kTokens = 2000;
constexpr int64_t kRows = kTokens * kHeads;

TEST(FastLookupLearner, CalibrationBatchesAreNotServedCalls) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto x = make_registered_table(RowFormat::kFused, 256, rng);
  ASSERT_TRUE(x);
  cuda::FastLookupOptions fo;
  fo.max_rows = kRows;
  auto fl = cuda::FastLookup::create(&x->table, fo);
  ASSERT_TRUE(fl.is_ok());
  ASSERT_TRUE((*fl)->calibrate(nullptr).is_ok());
  auto st = (*fl)->stats(nullptr);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->batches, 0);
  EXPECT_TRUE(st->paths.empty());
  EXPECT_TRUE(st->learned.empty()) << "calibration is not learned from";
  EXPECT_EQ(st->timed_batches + st->untimed_batches, 0);
  const int served = 3;
  for (int i = 0; i < served; ++i) {
    const auto ids = repeated_ids(x->layout, kTokens, rng, 5);
    const auto want = testing::reference_staging(x->host->view(0), ids, kHeads);
    EXPECT_EQ(testing::first_mismatch(launch(**fl, x->table, ids, kHeads), want), -1) << "batch " << i;
  }
  st = (*fl)->stats(nullptr);
  ASSERT_TRUE(st.is_ok());
  int64_t counted = 0;
  for (const auto& [name, n] : st->paths) counted += n;
  EXPECT_EQ(counted, served);
  EXPECT_EQ(st->batches, served);
}

TEST(FastLookupLearner, ServedBatchesAreTimedAndReachTheLearner) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto x = make_registered_table(RowFormat::kFused, 256, rng);
  ASSERT_TRUE(x);
  cuda::FastLookupOptions fo;
  fo.max_rows = kRows;
  fo.serve.measure_unique_max_overhead = 1;  // the first batch of the size range measures its unique fraction
  auto fl = cuda::FastLookup::create(&x->table, fo);
  ASSERT_TRUE(fl.is_ok());
  const int served = 12;
  bool measured_unique = false;
  for (int i = 0; i < served; ++i) {
    const auto ids = repeated_ids(x->layout, kTokens, rng, 5);
    const auto want = testing::reference_staging(x->host->view(0), ids, kHeads);
    const auto got = launch(**fl, x->table, ids, kHeads);
    const plan::Plan& p = (*fl)->last_plan();
    EXPECT_EQ(testing::first_mismatch(got, want), -1) << "batch " << i << ": " << p.path_name();
    if (i == 0) {
      EXPECT_TRUE(p.notes & plan::kNoteMeasureUnique) << "batch 0 has no unique-fraction estimate";
      EXPECT_TRUE(p.dedup);
      measured_unique = true;
    } else {
      EXPECT_TRUE(p.unique_known) << "batch " << i << ": the first batch measured it";
    }
    EXPECT_TRUE(p.learned);
  }
  EXPECT_TRUE(measured_unique);
  auto st = (*fl)->stats(nullptr);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->timed_batches + st->untimed_batches, served);
  EXPECT_GT(st->timed_batches, 0);
  ASSERT_FALSE(st->learned.empty());
  int64_t samples = 0;
  for (const plan::LearnedPath& r : st->learned) {
    EXPECT_EQ(r.bucket, plan::size_bucket(kRows));
    EXPECT_GT(r.samples, 0);
    EXPECT_TRUE(std::isfinite(r.predicted_us) && r.predicted_us > 0) << r.name;
    EXPECT_TRUE(std::isfinite(r.measured_us) && r.measured_us > 0) << r.name;
    samples += r.samples;
  }
  // Every timed batch reached the learner once (fewer samples remain only where a barred path's paying
  // re-measurement restarted its estimate).
  EXPECT_LE(samples, st->timed_batches);
  ASSERT_EQ(st->unique_by_bucket.size(), 1u);
  EXPECT_EQ(st->unique_by_bucket[0].first, plan::size_bucket(kRows));
  EXPECT_LT(st->unique_by_bucket[0].second, 0.5);
}

TEST(FastLookupLearner, PathMeasuredSlowerThanPlainIsNotChosenAgain) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto x = make_registered_table(RowFormat::kFused, 256, rng);
  ASSERT_TRUE(x);
  cuda::FastLookupOptions fo;
  fo.max_rows = kRows;
  fo.serve.explore_every = 0;               // decisions from the planner and the learner only
  fo.learner.plain_every = 0;
  fo.learner.retry_every = 0;
  fo.serve.measure_unique_max_overhead = 1;
  auto fl = cuda::FastLookup::create(&x->table, fo);
  ASSERT_TRUE(fl.is_ok());
  // Batch 0 measures the unique fraction (heavily repeated ids: the model then prices hash dedup far below plain).
  {
    const auto ids = repeated_ids(x->layout, kTokens, rng, 5);
    const auto want = testing::reference_staging(x->host->view(0), ids, kHeads);
    EXPECT_EQ(testing::first_mismatch(launch(**fl, x->table, ids, kHeads), want), -1);
    ASSERT_TRUE((*fl)->last_plan().dedup);
  }
  ASSERT_TRUE((*fl)->stats(nullptr).is_ok());  // syncs: the snapshot and the timing are readable now
  // Without the learner's verdict the model chooses hash dedup for this batch.
  plan::BatchStats b;
  b.rows = kRows;
  b.unique_fraction = (*fl)->learner().unique_fraction(kRows);
  ASSERT_TRUE(std::isfinite(b.unique_fraction));
  ASSERT_TRUE(plan::choose(b, (*fl)->costs(), (*fl)->planner_options()).dedup);
  // Measurements that show dedup far slower than plain in this size range.
  const uint32_t dedup = plan::learn_key(true, false, false, 0);
  (*fl)->learner().reset();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*fl)->learner().observe(plan::kPlainKey, kRows, 300, 30));
    ASSERT_TRUE((*fl)->learner().observe(dedup, kRows, 100, 1e5));
  }
  (*fl)->learner().observe_unique(kRows, kRows, kRows / 10);
  ASSERT_TRUE((*fl)->learner().barred(dedup, kRows));
  for (int i = 0; i < 4; ++i) {
    const auto ids = repeated_ids(x->layout, kTokens, rng, 5);
    const auto want = testing::reference_staging(x->host->view(0), ids, kHeads);
    EXPECT_EQ(testing::first_mismatch(launch(**fl, x->table, ids, kHeads), want), -1) << "batch " << i;
    const plan::Plan& p = (*fl)->last_plan();
    EXPECT_EQ(plan::learn_key(p), plan::kPlainKey) << "batch " << i << ": " << p.path_name();
    EXPECT_GE(p.barred_paths, 1);
    bool said = false;
    for (const auto& w : plan::explain(p, (*fl)->costs().source)) said |= w.find("barred") != std::string::npos;
    EXPECT_TRUE(said);
  }
  // The plain batches served meanwhile were timed and joined plain's estimate; dedup stays barred.
  ASSERT_TRUE((*fl)->stats(nullptr).is_ok());
  EXPECT_TRUE((*fl)->learner().barred(dedup, kRows));
}

TEST(FastLookupLearner, ExplorationBatchesStayBitIdentical) {
  // Every exploration the learner asks for (plain batches, barred-path retries, unique measurements) at its
  // highest rate, on repeated and uniform ids alternately, at two batch sizes.
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto x = make_registered_table(RowFormat::kFused, 256, rng);
  ASSERT_TRUE(x);
  cuda::FastLookupOptions fo;
  fo.max_rows = kRows;
  fo.serve.explore_every = 2;
  fo.learner.plain_every = 2;
  fo.learner.plain_overhead = 0;  // one plain batch in 2 whatever the gain
  fo.learner.plain_warm_every = 1;
  fo.learner.retry_every = 3;
  fo.learner.min_samples = 1;
  fo.serve.measure_unique_max_overhead = 1;
  auto fl = cuda::FastLookup::create(&x->table, fo);
  ASSERT_TRUE(fl.is_ok());
  uint8_t seen = 0;
  for (int i = 0; i < 24; ++i) {
    const int64_t tokens = i % 3 == 0 ? 64 : kTokens;
    const auto ids = i % 2 == 0 ? repeated_ids(x->layout, tokens, rng, 5)
                                : testing::random_ids(x->layout, 0, tokens, rng, 0.03);
    const auto want = testing::reference_staging(x->host->view(0), ids, kHeads);
    const auto got = launch(**fl, x->table, ids, kHeads);
    seen |= (*fl)->last_plan().notes;
    EXPECT_EQ(testing::first_mismatch(got, want), -1) << "batch " << i << ": " << (*fl)->last_plan().path_name();
  }
  // Which explorations run depends on the measured times; the first batch of each size range always measures.
  EXPECT_TRUE(seen & plan::kNoteMeasureUnique);
  auto st = (*fl)->stats(nullptr);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->batches, 24);
}

}  // namespace
}  // namespace engram
