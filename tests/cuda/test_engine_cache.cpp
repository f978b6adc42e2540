// Description: the engine's GPU hot-row cache (CudaBackend::queue() and its hooks): with the cache on — filled
// from a warm-up window or a profile, then swapped online every step — every step's staging is bit-identical to
// the same steps with the fast path off and to the CPU reference, on random non-zero tables (every byte random),
// with the staging poisoned between steps so that a row the cache path forgot to write shows. The cache must
// actually serve (hits > 0) and actually change (rows swapped > 0, including enough swaps to force a map rebuild).
// HotRowCache::replace rejects bad swaps without enqueueing anything. Online updates applied in small slices
// (stage on the maintenance stream, commit at a later step) keep every step bit-identical and show in the
// timeline's cache-maintenance lane; a probe between a slice's stage and its commit still sees the old cache,
// exactly. A cache whose rows are gathered on the GPU from the registered table probes exactly as a host-filled one.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "cuda/backend.cuh"
#include "cuda/dedup.cuh"
#include "cuda/hot_cache.cuh"
#include "cuda_test_support.hpp"
#include "engram/timeline.hpp"
#include "plan/hot_cache_sizing.hpp"
#include "registered_table.hpp"

namespace engram {
namespace {

constexpr int kModelLayers = 5;  // Engram layers at model layers 1 and 3
constexpr int64_t kTokens = 64;

struct CacheSetup {
  bool fast_path = true;
  bool force_cache = false;      // every batch probes the cache (else the planner decides)
  int64_t budget_bytes = 0;      // per layer; 0 = no cache
  int warmup_steps = 2;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> profile;
  int update_every = 1;
  int64_t update_rows = 64;
  int64_t slice_rows = 64;
  bool record_timeline = false;
  bool device_ids = false;       // prepare from ids in device memory (CudaBackend::prepare_device), as a GPU hasher does
  int64_t burst = 1;             // update growth factor while plans come back full
  bool step_series = false;      // record each step's probes and hits
};

// Ids of one step: a hot window of `hot` ids per head that drifts with the step (so online updates have work),
// plus uniform ids over the head's range and ~1/16 dead ids.
std::vector<int64_t> drifting_ids(const EngramLayout& l, int li, int64_t step, std::mt19937_64& rng, int64_t hot = 40) {
  const int heads = l.heads();
  const auto& off = l.head_offsets.at(li);
  std::vector<int64_t> ids(static_cast<size_t>(kTokens * heads));
  for (int64_t t = 0; t < kTokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const int64_t span = off[h + 1] - off[h];
      const uint64_t x = rng() % 16;
      int64_t& id = ids[static_cast<size_t>(t * heads + h)];
      if (x == 0) id = -1;
      else if (x < 12) id = off[h] + (step * 7 + static_cast<int64_t>(rng() % hot)) % span;
      else id = off[h] + static_cast<int64_t>(rng() % static_cast<uint64_t>(span));
    }
  return ids;
}

struct StepsRun {
  std::vector<std::vector<std::vector<uint16_t>>> staging;  // [step][layer]
  std::vector<cuda::EngineCacheReport> reports;             // per layer, after the run
  std::vector<MaintenanceSpan> maintenance;                 // the timeline's cache-maintenance spans
};

// Builds a backend on `host` (registration is per backend: one at a time), runs the steps through queue()
// in the replay's call order, poisons each staging after copying it, and returns everything.
StepsRun run_steps(const EngramLayout& layout, HostTable& host, const CacheSetup& s,
              const std::vector<std::vector<std::vector<int64_t>>>& ids, cuda::CacheFormat format) {
  StepsRun out;
  cuda::CudaBackendOptions o;
  o.layer_ids = layout.layer_ids;
  o.heads = layout.heads();
  o.queue.max_tokens = kTokens;
  o.fast_path = s.fast_path;
  o.queue.record_timeline = s.record_timeline;
  if (s.budget_bytes > 0) o.cache.budget_bytes.assign(static_cast<size_t>(layout.n_layers()), s.budget_bytes);
  o.cache.format = format;
  o.cache.warmup_steps = s.warmup_steps;
  o.cache.profile = s.profile;
  o.cache.profile_source = "test profile";
  o.cache.update_every = s.update_every;
  o.cache.update_rows = s.update_rows;
  o.cache.update_slice_rows = s.slice_rows;
  o.cache.update_burst = s.burst;
  o.cache.step_series = s.step_series;
  o.cache.counts.half_life_batches = 2;  // fast decay: the drifting window's new ids beat the old ones
  std::vector<TableView> views;
  for (int li = 0; li < layout.n_layers(); ++li) views.push_back(host.view(li));
  auto be = cuda::make_cuda_backend(o, views);
  EXPECT_TRUE(be.is_ok()) << be.status().to_string();
  if (!be.is_ok()) return out;
  if (s.force_cache)
    for (int li = 0; li < layout.n_layers(); ++li) {
      cuda::ForcedPlan fp;
      fp.use = true;
      fp.plan.cache = true;
      (*be)->fast_lookup(li)->force(fp);
    }
  PrefetchQueue& q = (*be)->queue();
  int64_t* dev_ids = nullptr;  // one buffer per layer: [n_layers][kTokens * heads]
  const size_t per_layer_ids = static_cast<size_t>(kTokens * layout.heads());
  if (s.device_ids) {
    EXPECT_EQ(cudaMalloc(&dev_ids, per_layer_ids * layout.n_layers() * sizeof(int64_t)), cudaSuccess);
  }
  for (size_t step = 0; step < ids.size(); ++step) {
    q.begin_step(static_cast<int64_t>(step));
    for (int li = 0; li < layout.n_layers(); ++li) {
      const std::vector<int64_t>& v = ids[step][static_cast<size_t>(li)];
      if (!s.device_ids) {
        EXPECT_TRUE(q.prepare(li, v.data(), kTokens).is_ok());
        continue;
      }
      int64_t* d = dev_ids + per_layer_ids * static_cast<size_t>(li);
      // On the main stream, as a hasher would write them; prepare_device orders the lookup after it.
      EXPECT_EQ(cudaMemcpyAsync(d, v.data(), per_layer_ids * sizeof(int64_t), cudaMemcpyHostToDevice,
                                static_cast<cudaStream_t>((*be)->main_stream())),
                cudaSuccess);
      EXPECT_TRUE((*be)->prepare_device(li, d, kTokens).is_ok());
    }
    std::vector<StagingView> sv(static_cast<size_t>(layout.n_layers()));
    for (int layer = 0; layer < kModelLayers; ++layer) {
      const int li = layout.layer_index(layer);
      if (li < 0) continue;
      auto v = q.consume(li);
      EXPECT_TRUE(v.is_ok()) << v.status().to_string();
      if (v.is_ok()) sv[static_cast<size_t>(li)] = *v;
    }
    const Status st = q.end_step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    std::vector<std::vector<uint16_t>> per_layer;
    for (const auto& v : sv) {
      std::vector<uint16_t> h(static_cast<size_t>(v.tokens * v.heads * v.d));
      EXPECT_EQ(cudaMemcpy(h.data(), v.data, h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      // Poison: the next step must write every row again (a hit the probe forgot would keep 0x7FC1 here).
      EXPECT_EQ(cudaMemset(const_cast<uint16_t*>(v.data), 0x7F, h.size() * 2), cudaSuccess);
      per_layer.push_back(std::move(h));
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.staging.push_back(std::move(per_layer));
  }
  for (int li = 0; li < layout.n_layers(); ++li) {
    auto r = (*be)->cache_report(li);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (r.is_ok()) out.reports.push_back(*r);
  }
  out.maintenance = (*be)->queue().timeline().maintenance();
  if (dev_ids) {
    EXPECT_EQ(cudaFree(dev_ids), cudaSuccess);
  }
  return out;
}

struct Fixture {
  EngramLayout layout;
  std::unique_ptr<HostTable> host;
  std::vector<std::vector<std::vector<int64_t>>> ids;  // [step][layer]
  std::vector<std::vector<std::vector<uint16_t>>> ref;  // CPU reference [step][layer]
};

Fixture make_fixture(std::mt19937_64& rng, int steps) {
  Fixture f;
  f.layout = testing::make_layout(256, RowFormat::kFused, 24, 3000, {1, 3});
  f.host = testing::random_host_table(f.layout, rng);
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<int64_t>> per_layer;
    std::vector<std::vector<uint16_t>> ref;
    for (int li = 0; li < f.layout.n_layers(); ++li) {
      per_layer.push_back(drifting_ids(f.layout, li, step, rng));
      ref.push_back(testing::reference_staging(f.host->view(li), per_layer.back(), f.layout.heads()));
    }
    f.ids.push_back(std::move(per_layer));
    f.ref.push_back(std::move(ref));
  }
  return f;
}

void expect_identical(const StepsRun& a, const StepsRun& b, const Fixture& f, const std::string& what) {
  ASSERT_EQ(a.staging.size(), f.ids.size());
  ASSERT_EQ(b.staging.size(), f.ids.size());
  for (size_t step = 0; step < f.ids.size(); ++step)
    for (size_t li = 0; li < f.ids[step].size(); ++li) {
      EXPECT_EQ(testing::first_mismatch(b.staging[step][li], a.staging[step][li]), -1)
          << what << " vs fast path off, step " << step << ", layer index " << li;
      EXPECT_EQ(testing::first_mismatch(b.staging[step][li], f.ref[step][li]), -1)
          << what << " vs CPU reference, step " << step << ", layer index " << li;
    }
}

// ~200 cache slots per layer (fp8 records: 272 B + 24 B of map per slot).
// About 200 FP8 rows of d = 256 with the staging of 64-row slices (rows, map and staging all count).
const int64_t kSmallBudget = plan::hot_cache_bytes(200, 272, 64);

class EngineCache : public ::testing::TestWithParam<cuda::CacheFormat> {};

// The steps with the fast path off (the path every cached run is compared with).
StepsRun run_plain(const Fixture& f, cuda::CacheFormat format) {
  CacheSetup off;
  off.fast_path = false;
  return run_steps(f.layout, *f.host, off, f.ids, format);
}

// A small cache that every batch probes, filled from the warm-up window, updated online.
CacheSetup small_forced_cache() {
  CacheSetup on;
  on.force_cache = true;
  on.budget_bytes = kSmallBudget;
  return on;
}

TEST_P(EngineCache, WarmupWindowThenOnlineUpdatesStayBitIdentical) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f = make_fixture(rng, 40);
  const StepsRun plain = run_plain(f, GetParam());
  CacheSetup on = small_forced_cache();
  const StepsRun cached = run_steps(f.layout, *f.host, on, f.ids, GetParam());
  expect_identical(plain, cached, f, "cache forced");
  ASSERT_EQ(cached.reports.size(), 2u);
  for (const auto& r : cached.reports) {
    EXPECT_EQ(r.state, "on") << r.note;
    EXPECT_EQ(r.created_after_step, 1);  // warm-up window: steps 0 and 1
    EXPECT_GT(r.slots, 0);
    EXPECT_GT(r.hits, 0);
    EXPECT_GT(r.probes, r.hits);
    EXPECT_TRUE(std::isfinite(r.hit_rate));
    EXPECT_EQ(r.link_bytes_avoided, r.hits * (256 + 8));
    EXPECT_GT(r.updates, 0);
    EXPECT_GT(r.rows_swapped, 0);
    // Map rebuilds are not asserted: inserts reuse the tombstones on their probe path, so whether keys + tombstones
    // reach 3/4 of the map depends on the ids (H200 2026-12-01: fp8 and bf16 runs ended with 0 rebuilds).
    EXPECT_EQ(r.dropped_batches, 0);
    EXPECT_GT(r.hbm_bytes, 0);
    EXPECT_TRUE(std::isfinite(r.update_host_us_max));
  }
  // The planner's own choices (cache or not, dedup...) on the same steps: also bit-identical.
  on.force_cache = false;
  const StepsRun planned = run_steps(f.layout, *f.host, on, f.ids, GetParam());
  expect_identical(plain, planned, f, "planner with cache");

  // Updates of 16 rows applied 8 rows per step: each slice is staged at one step's end and committed at a later
  // one, so lookups run while a slice is in flight; every step stays identical to the plain path and the
  // reference, and each stage and commit is a span of the timeline's cache-maintenance lane.
  CacheSetup sliced = small_forced_cache();
  sliced.update_every = 2;
  sliced.update_rows = 16;
  sliced.slice_rows = 8;  // 16 rows / 2 steps: the slice stays 8
  sliced.record_timeline = true;
  const StepsRun in_flight = run_steps(f.layout, *f.host, sliced, f.ids, GetParam());
  expect_identical(plain, in_flight, f, "sliced updates");
  ASSERT_EQ(in_flight.reports.size(), 2u);
  int64_t stages = 0, commits = 0;
  for (const auto& m : in_flight.maintenance) {
    EXPECT_TRUE(m.what == "stage" || m.what == "commit") << m.what;
    EXPECT_GT(m.rows, 0);
    EXPECT_LE(m.rows, 8);
    EXPECT_TRUE(std::isfinite(m.start_ns) && std::isfinite(m.end_ns)) << m.what << " step " << m.step;
    EXPECT_GE(m.end_ns, m.start_ns);
    EXPECT_TRUE(std::isfinite(m.host_us));
    (m.what == "stage" ? stages : commits) += 1;
  }
  EXPECT_GT(commits, 0);
  EXPECT_GE(stages, commits);  // the last slice may still be staged when the run ends
  for (const auto& r : in_flight.reports) {
    EXPECT_EQ(r.state, "on") << r.note;
    EXPECT_GT(r.updates, 0);
    EXPECT_GT(r.rows_swapped, 0);
    EXPECT_GT(r.rows_swapped, 8) << "more rows than one slice holds: several slices were applied";
    EXPECT_LE(r.rows_swapped, 8 * r.slices);
    EXPECT_EQ(r.update_slice_rows, 8);
    EXPECT_LE(r.hbm_bytes, r.budget_bytes);
    EXPECT_GE(r.update_attempts, r.updates);  // a deferred update is asked for later or merges into the next
    EXPECT_LE(r.updates_deferred, r.update_attempts);
    EXPECT_TRUE(std::isfinite(r.update_host_us_max));
    EXPECT_TRUE(std::isfinite(r.plan_us_max));
  }

  // Bursting updates (16 rows every 2 steps, slices of 4, up to 8x while plans come back full: the drifting hot
  // window keeps them full) with the per-step series: still identical, slices grow past the base, and the series'
  // sums are the report's totals.
  CacheSetup burst = small_forced_cache();
  burst.update_every = 2;
  burst.update_rows = 16;
  burst.slice_rows = 4;
  burst.burst = 8;
  burst.step_series = true;
  const StepsRun bursting = run_steps(f.layout, *f.host, burst, f.ids, GetParam());
  expect_identical(plain, bursting, f, "bursting updates");
  int64_t burst_updates = 0;
  for (const auto& r : bursting.reports) {
    EXPECT_EQ(r.state, "on") << r.note;
    burst_updates += r.burst_updates;
    EXPECT_LE(r.update_scale_max, 8);
    EXPECT_EQ(r.update_slice_rows, 8);  // slices of 4 raised to 16 rows / 2 steps
    EXPECT_LE(r.rows_swapped, r.update_slice_rows * r.update_scale_max * r.slices);
    ASSERT_EQ(r.step_probes.size(), f.ids.size());
    ASSERT_EQ(r.step_hits.size(), f.ids.size());
    int64_t probes = 0, hits = 0;
    for (size_t i = 0; i < r.step_probes.size(); ++i) {
      EXPECT_LE(r.step_hits[i], r.step_probes[i]) << "step " << i;
      probes += r.step_probes[i];
      hits += r.step_hits[i];
    }
    EXPECT_EQ(r.step_probes[0], 0) << "no cache in the warm-up window";
    EXPECT_EQ(probes, r.probes);
    EXPECT_EQ(hits, r.hits);
  }
  EXPECT_GT(burst_updates, 0) << "full plans grew the update";
}

// Ids in device memory (a GPU hasher's, torch tensors) are counted as host ids are: the warm-up window fills the
// same cache, which then serves the same hits; lookups stay bit-identical. No online updates: their timing-driven
// deferrals would make the two runs' swaps differ.
TEST_P(EngineCache, DeviceIdsAreCountedLikeHostIds) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f = make_fixture(rng, 12);
  const StepsRun plain = run_plain(f, GetParam());
  CacheSetup host = small_forced_cache();
  host.update_every = 0;
  CacheSetup dev = host;
  dev.device_ids = true;
  const StepsRun from_host = run_steps(f.layout, *f.host, host, f.ids, GetParam());
  const StepsRun from_dev = run_steps(f.layout, *f.host, dev, f.ids, GetParam());
  expect_identical(plain, from_dev, f, "device ids");
  ASSERT_EQ(from_host.reports.size(), 2u);
  ASSERT_EQ(from_dev.reports.size(), 2u);
  for (size_t li = 0; li < 2; ++li) {
    const auto& a = from_host.reports[li];
    const auto& b = from_dev.reports[li];
    EXPECT_EQ(b.state, "on") << b.note;
    EXPECT_GT(b.counted_batches, 0);
    EXPECT_EQ(b.counted_batches, a.counted_batches);
    EXPECT_EQ(b.filled, a.filled);
    EXPECT_GT(b.hits, 0);
    EXPECT_EQ(b.hits, a.hits) << "layer index " << li;
    EXPECT_EQ(b.probes, a.probes) << "layer index " << li;
  }
}

TEST_P(EngineCache, ProfileFillsAtStartUp) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f = make_fixture(rng, 6);
  // Profile: the ids of all steps, counted (in-sample: every step hits).
  CacheSetup on;
  on.force_cache = true;
  on.budget_bytes = kSmallBudget * 4;  // fewer slots than the profile has ids: the cache takes its hottest part
  on.update_every = 0;
  for (int li = 0; li < f.layout.n_layers(); ++li) {
    std::map<int64_t, int64_t> n;
    for (const auto& step : f.ids)
      for (int64_t id : step[static_cast<size_t>(li)])
        if (id >= 0) ++n[id];
    std::vector<std::pair<int64_t, int64_t>> p(n.begin(), n.end());
    std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    on.profile.push_back(std::move(p));
  }
  const StepsRun plain = run_plain(f, GetParam());
  const StepsRun cached = run_steps(f.layout, *f.host, on, f.ids, GetParam());
  expect_identical(plain, cached, f, "profile cache");
  ASSERT_EQ(cached.reports.size(), on.profile.size());
  for (size_t li = 0; li < cached.reports.size(); ++li) {
    const auto& r = cached.reports[li];
    EXPECT_EQ(r.state, "on") << r.note;
    EXPECT_EQ(r.fill, "gpu") << "the backend passes its registered table: the rows are gathered on the GPU";
    EXPECT_EQ(r.created_after_step, -1);
    EXPECT_EQ(r.source, "test profile");
    EXPECT_GT(r.hits, 0);
    EXPECT_EQ(r.updates, 0);
    // The profile's ids are valid and distinct: the cache holds its first rows_cached records, hottest first.
    EXPECT_LT(r.filled, static_cast<int64_t>(on.profile[li].size())) << "the budget should hold part of the profile";
    double all = 0, held = 0;
    for (size_t k = 0; k < on.profile[li].size(); ++k) {
      all += static_cast<double>(on.profile[li][k].second);
      if (static_cast<int64_t>(k) < r.filled) held += static_cast<double>(on.profile[li][k].second);
    }
    EXPECT_NEAR(r.profile_coverage, held / all, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineCache, ::testing::Values(cuda::CacheFormat::kFp8, cuda::CacheFormat::kBf16),
                         [](const auto& i) { return std::string(cuda::cache_format_name(i.param)); });

TEST(EngineCacheOff, ZeroBudgetAndFastPathOffSayWhy) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  Fixture f = make_fixture(rng, 3);
  CacheSetup none;
  const StepsRun a = run_steps(f.layout, *f.host, none, f.ids, cuda::CacheFormat::kFp8);
  for (const auto& r : a.reports) {
    EXPECT_EQ(r.state, "off");
    EXPECT_FALSE(r.note.empty());
    EXPECT_TRUE(std::isnan(r.hit_rate));  // n/a, never 0
  }
  CacheSetup off;
  off.fast_path = false;
  off.budget_bytes = kSmallBudget;
  const StepsRun b = run_steps(f.layout, *f.host, off, f.ids, cuda::CacheFormat::kFp8);
  for (const auto& r : b.reports) {
    EXPECT_EQ(r.state, "off");
    EXPECT_NE(r.note.find("fast path"), std::string::npos) << r.note;
  }
  expect_identical(a, b, f, "no cache");
}

// Every device buffer of a cache (rows, map, update staging) fits its budget: hbm_bytes() <= budget_bytes for FP8
// and BF16, budgets from a few rows to more than the table, and staging sizes; the slots are plan::hot_cache_sizing's
// and a stage() larger than the staging is refused.
TEST(HotRowCacheBudget, HbmWithinTheBudgetForEveryFormatAndSize) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 1, 5000, {0});
  auto host = testing::random_host_table(l, rng);
  ASSERT_TRUE(host);
  const int64_t rows = host->view(0).rows;
  std::vector<int64_t> hot(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) hot[static_cast<size_t>(i)] = i;
  for (const cuda::CacheFormat format : {cuda::CacheFormat::kFp8, cuda::CacheFormat::kBf16})
    for (const int64_t budget : {int64_t{600}, int64_t{3000}, int64_t{20'000}, int64_t{100'000}, int64_t{1} << 20,
                                 int64_t{8} << 20})
      for (const int64_t staging : {int64_t{1}, int64_t{64}, int64_t{256}}) {
        SCOPED_TRACE(std::string(cuda::cache_format_name(format)) + " budget " + std::to_string(budget) +
                     " staging " + std::to_string(staging));
        cuda::HotCacheOptions o;
        o.format = format;
        o.budget_bytes = budget;
        o.staging_rows = staging;
        const plan::HotCacheSizing want =
            plan::hot_cache_sizing(budget, plan::hot_cache_row_bytes(256, format), rows, staging);
        auto c = cuda::HotRowCache::create(host->view(0), hot, o);
        if (want.slots == 0) {
          ASSERT_FALSE(c.is_ok());
          EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
          continue;
        }
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        EXPECT_LE((*c)->hbm_bytes(), budget);
        EXPECT_EQ((*c)->hbm_bytes(), want.hbm_bytes);
        EXPECT_EQ((*c)->slots(), want.slots);
        EXPECT_EQ((*c)->staging_rows(), want.staging_rows);
        EXPECT_EQ((*c)->filled(), std::min(want.slots, rows));
        if (want.slots < rows) {
          std::vector<std::pair<int64_t, int64_t>> too_many;
          for (int64_t k = 0; k <= (*c)->staging_rows() && k < want.slots; ++k) too_many.push_back({k, rows - 1 - k});
          if (static_cast<int64_t>(too_many.size()) > (*c)->staging_rows()) {
            auto st = (*c)->stage(too_many, nullptr);
            ASSERT_FALSE(st.is_ok()) << "more rows than the staging holds";
            EXPECT_EQ(st.status().code(), Code::kInvalidArgument);
            EXPECT_NE(st.status().message().find("the staging holds " + std::to_string((*c)->staging_rows())),
                      std::string::npos)
                << st.status().message();
          }
        }
      }
}

TEST(HotRowCacheReplace, RejectsBadSwapsWithoutChangingTheCache) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 1, 5000, {0});
  auto host = testing::random_host_table(l, rng);
  ASSERT_TRUE(host);
  cuda::HotCacheOptions o;
  o.staging_rows = 1;  // the two swaps below are applied in two chunks
  o.budget_bytes = plan::hot_cache_bytes(8, 272, o.staging_rows);
  auto c = cuda::HotRowCache::create(host->view(0), {1, 2, 3}, o);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ASSERT_EQ((*c)->slots(), 8);
  EXPECT_FALSE((*c)->replace({{8, 10}}, nullptr).is_ok());           // slot out of range
  EXPECT_FALSE((*c)->replace({{4, 10}, {4, 11}}, nullptr).is_ok());  // slot twice
  EXPECT_FALSE((*c)->replace({{4, 2}}, nullptr).is_ok());            // already cached
  const int64_t past_end = host->view(0).rows;                        // the layout rounds rows per head up
  EXPECT_FALSE((*c)->replace({{4, past_end}}, nullptr).is_ok());     // outside the table
  EXPECT_EQ((*c)->filled(), 3);
  EXPECT_EQ((*c)->swapped_rows(), 0);
  auto r = (*c)->replace({{0, 10}, {5, 11}}, nullptr);  // evict id 1 (slot 0), fill free slot 5
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, 2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE((*c)->contains(1));
  EXPECT_TRUE((*c)->contains(10));
  EXPECT_TRUE((*c)->contains(11));
  EXPECT_EQ((*c)->filled(), 4);
  EXPECT_EQ((*c)->slot_ids()[0], 10);
  EXPECT_EQ((*c)->slot_ids()[5], 11);
}

// A probe between stage() and commit() sees the cache as it was (the evicted row still served, exactly; the
// admitted id a miss); after commit() the admitted row is served, exactly, and the evicted id misses.
TEST(HotRowCacheStage, ProbesBetweenStageAndCommitSeeTheOldCacheExactly) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 1, 5000, {0});
  auto host = testing::random_host_table(l, rng);
  ASSERT_TRUE(host);
  for (const cuda::CacheFormat format : {cuda::CacheFormat::kFp8, cuda::CacheFormat::kBf16}) {
    SCOPED_TRACE(cuda::cache_format_name(format));
    cuda::HotCacheOptions o;
    o.format = format;
    o.staging_rows = 1;
    o.budget_bytes = plan::hot_cache_bytes(8, plan::hot_cache_row_bytes(256, format), o.staging_rows);
    const int64_t a = 100 + static_cast<int64_t>(rng() % 1000), b = a + 1, c_new = a + 2000;
    auto c = cuda::HotRowCache::create(host->view(0), {a, b}, o);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const std::vector<int64_t> ids = {a, b, c_new};
    const std::vector<uint16_t> ref = testing::reference_staging(host->view(0), ids, 1);
    const int64_t d = 256, n = 3;
    int64_t *d_ids = nullptr, *d_miss = nullptr;
    uint16_t* d_out = nullptr;
    cudaStream_t side = nullptr, lookups = nullptr;
    ASSERT_EQ(cudaMalloc(&d_ids, n * 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_miss, n * 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, n * d * 2), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&side), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&lookups), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_ids, ids.data(), n * 8, cudaMemcpyHostToDevice), cudaSuccess);
    auto probe = [&](std::vector<int64_t>& miss, std::vector<uint16_t>& out) {
      ASSERT_EQ(cudaMemset(d_out, 0x7F, n * d * 2), cudaSuccess);  // poison
      ASSERT_TRUE((*c)->launch_probe(d_ids, n, nullptr, d_miss, d_out, nullptr, lookups).is_ok());
      ASSERT_EQ(cudaStreamSynchronize(lookups), cudaSuccess);
      miss.assign(n, 0);
      out.assign(static_cast<size_t>(n * d), 0);
      ASSERT_EQ(cudaMemcpy(miss.data(), d_miss, n * 8, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(out.data(), d_out, n * d * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    };
    auto row = [&](const std::vector<uint16_t>& v, int64_t k) {
      return std::vector<uint16_t>(v.begin() + k * d, v.begin() + (k + 1) * d);
    };
    const int64_t slot_a = std::find((*c)->slot_ids().begin(), (*c)->slot_ids().end(), a) - (*c)->slot_ids().begin();
    auto st = (*c)->stage({{slot_a, c_new}}, side);  // evict a, admit c_new, in a's slot
    ASSERT_TRUE(st.is_ok()) << st.status().to_string();
    EXPECT_TRUE((*c)->has_staged());
    EXPECT_FALSE((*c)->stage({{7, c_new + 1}}, side).is_ok()) << "one stage at a time";  // slot 7 is free
    ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
    EXPECT_TRUE((*c)->stage_ready());
    std::vector<int64_t> miss;
    std::vector<uint16_t> out;
    probe(miss, out);  // staged, not committed: the device still holds a, b
    EXPECT_EQ(miss[0], cuda::kSkipId);
    EXPECT_EQ(miss[1], cuda::kSkipId);
    EXPECT_EQ(miss[2], c_new);
    EXPECT_EQ(testing::first_mismatch(row(out, 0), row(ref, 0)), -1) << "evicted row, before commit";
    EXPECT_EQ(testing::first_mismatch(row(out, 1), row(ref, 1)), -1);
    auto cm = (*c)->commit(lookups);
    ASSERT_TRUE(cm.is_ok()) << cm.status().to_string();
    EXPECT_EQ(*cm, 1);
    EXPECT_FALSE((*c)->has_staged());
    probe(miss, out);
    EXPECT_EQ(miss[0], a);
    EXPECT_EQ(miss[1], cuda::kSkipId);
    EXPECT_EQ(miss[2], cuda::kSkipId);
    EXPECT_EQ(testing::first_mismatch(row(out, 1), row(ref, 1)), -1);
    EXPECT_EQ(testing::first_mismatch(row(out, 2), row(ref, 2)), -1) << "admitted row, after commit";
    EXPECT_EQ((*c)->swapped_rows(), 1);
    (void)cudaFree(d_ids);
    (void)cudaFree(d_miss);
    (void)cudaFree(d_out);
    (void)cudaStreamDestroy(side);
    (void)cudaStreamDestroy(lookups);
  }
}

// A cache given the registered table as its device source gathers its initial rows on the GPU; it holds the same
// ids in the same slots as a host-filled cache, and every probe gives the CPU reference's rows, for FP8 and BF16
// caches over fused and split tables (whose record layouts differ), with more hot ids than slots, repeated and
// out-of-range ids among them (skipped, as the host fill skips them).
TEST(HotRowCacheFill, RowsGatheredOnTheGpuProbeLikeTheHostFill) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const RowFormat f : {RowFormat::kFused, RowFormat::kSplit})
    for (const int d : {256, 1024}) {
      SCOPED_TRACE(std::string(f == RowFormat::kFused ? "fused" : "split") + " d " + std::to_string(d));
      auto x = testing::make_registered_table(f, d, rng);
      ASSERT_TRUE(x);
      const TableView v = x->host->view(0);
      std::vector<int64_t> all(static_cast<size_t>(v.rows));
      for (int64_t i = 0; i < v.rows; ++i) all[static_cast<size_t>(i)] = i;
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int64_t> hot(all.begin(), all.begin() + 3000);
      hot.insert(hot.begin() + 5, hot[2]);   // repeated: skipped
      hot.insert(hot.begin() + 9, v.rows);   // outside the table: skipped
      hot.insert(hot.begin() + 11, -1);      // dead: skipped
      constexpr int64_t kSlots = 2000;
      for (const cuda::CacheFormat format : {cuda::CacheFormat::kFp8, cuda::CacheFormat::kBf16}) {
        SCOPED_TRACE(cuda::cache_format_name(format));
        cuda::HotCacheOptions o;
        o.format = format;
        o.staging_rows = 4;
        o.budget_bytes = plan::hot_cache_bytes(kSlots, plan::hot_cache_row_bytes(d, format), o.staging_rows);
        auto on_host = cuda::HotRowCache::create(v, hot, o);
        ASSERT_TRUE(on_host.is_ok()) << on_host.status().to_string();
        o.device_source = &x->table;
        auto on_gpu = cuda::HotRowCache::create(v, hot, o);
        ASSERT_TRUE(on_gpu.is_ok()) << on_gpu.status().to_string();
        EXPECT_FALSE((*on_host)->filled_on_device());
        EXPECT_TRUE((*on_gpu)->filled_on_device());
        ASSERT_EQ((*on_gpu)->slots(), kSlots);
        EXPECT_EQ((*on_gpu)->filled(), kSlots);
        EXPECT_EQ((*on_gpu)->slot_ids(), (*on_host)->slot_ids());
        EXPECT_EQ((*on_gpu)->hbm_bytes(), (*on_host)->hbm_bytes());
        // Coverage probing only the records the fill drew from equals probing them all (the rest are not cached).
        std::vector<std::pair<int64_t, int64_t>> counts;
        for (size_t k = 0; k < all.size(); ++k) counts.push_back({all[k], 1 + static_cast<int64_t>(rng() % 50)});
        EXPECT_DOUBLE_EQ((*on_gpu)->coverage_of(counts, static_cast<int64_t>(hot.size())), (*on_gpu)->coverage_of(counts));
        EXPECT_GT((*on_gpu)->coverage_of(counts), 0.0);
        EXPECT_EQ((*on_gpu)->coverage_of(counts, 0), 0.0);
        // 2,600 probes: the cached ids (hits) and 600 ids that missed the slots.
        std::vector<int64_t> ids(all.begin(), all.begin() + kSlots + 600);
        std::shuffle(ids.begin(), ids.end(), rng);
        const int64_t n = static_cast<int64_t>(ids.size());
        const std::vector<uint16_t> ref = testing::reference_staging(v, ids, 1);
        testing::DeviceBuffer<int64_t> d_ids(static_cast<size_t>(n)), d_miss(static_cast<size_t>(n));
        testing::DeviceBuffer<uint16_t> d_out(static_cast<size_t>(n * d));
        ASSERT_TRUE(d_ids.get() && d_miss.get() && d_out.get());
        ASSERT_EQ(cudaMemcpy(d_ids.get(), ids.data(), n * 8, cudaMemcpyHostToDevice), cudaSuccess);
        for (const auto* c : {&*on_host, &*on_gpu}) {
          const bool gpu = c == &*on_gpu;
          SCOPED_TRACE(gpu ? "filled on the GPU" : "filled on the host");
          ASSERT_EQ(cudaMemset(d_out.get(), 0x7F, d_out.bytes()), cudaSuccess);  // poison
          ASSERT_TRUE((*c)->launch_probe(d_ids.get(), n, nullptr, d_miss.get(), d_out.get(), nullptr, nullptr).is_ok());
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<int64_t> miss(static_cast<size_t>(n));
          std::vector<uint16_t> out(static_cast<size_t>(n * d));
          ASSERT_EQ(cudaMemcpy(miss.data(), d_miss.get(), n * 8, cudaMemcpyDeviceToHost), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(out.data(), d_out.get(), n * d * 2, cudaMemcpyDeviceToHost), cudaSuccess);
          int64_t hits = 0;
          for (int64_t k = 0; k < n; ++k) {
            const bool cached = (*c)->contains(ids[static_cast<size_t>(k)]);
            ASSERT_EQ(miss[static_cast<size_t>(k)], cached ? cuda::kSkipId : ids[static_cast<size_t>(k)]) << k;
            if (!cached) continue;
            ++hits;
            const std::vector<uint16_t> got(out.begin() + k * d, out.begin() + (k + 1) * d);
            const std::vector<uint16_t> want(ref.begin() + k * d, ref.begin() + (k + 1) * d);
            ASSERT_EQ(testing::first_mismatch(got, want), -1) << "probe " << k << " id " << ids[static_cast<size_t>(k)];
          }
          EXPECT_EQ(hits, kSlots);
        }
      }
    }
}

}  // namespace
}  // namespace engram
