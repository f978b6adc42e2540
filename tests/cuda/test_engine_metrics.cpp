// Description: an engine on the GPU (planner, hot-row cache filled after the first step and updated online) exports
// what its describe() says: the cache's probes, hits, link bytes avoided, rows swapped and rows held, the planner's
// batches per path, its last prediction, the registered bytes; and its timeline families count
// every lookup of the queue. Skips without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cuda_test_support.hpp"
#include "engram/metrics.hpp"
#include "engram/prefetch_queue.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

double value_of(const MetricsSnapshot& m, const std::string& name, const std::string& layer) {
  const MetricSample* s = m.find(name, {{"layer", layer}});
  return s ? s->value : -1;
}

// Serves `steps` steps of fresh conformance ids through the engine's queue (every layer prepared, then consumed);
// every staging is compared with the scalar reference.
void serve_steps(Engine& engine, const EngramLayout& layout, int64_t tokens, int steps, std::mt19937_64& rng) {
  PrefetchQueue& q = engine.queue();
  const size_t per_token = static_cast<size_t>(layout.heads() * layout.d);
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<std::vector<int64_t>> ids;
    for (int li = 0; li < layout.n_layers(); ++li) ids.push_back(test::conformance_ids(layout, li, tokens, rng));
    q.begin_step(step);
    for (int li = 0; li < layout.n_layers(); ++li) ASSERT_TRUE(q.prepare(li, ids[li].data(), tokens).is_ok());
    std::vector<const uint16_t*> staging;
    for (int li = 0; li < layout.n_layers(); ++li) {
      auto st = q.consume(li);
      ASSERT_TRUE(st.is_ok()) << st.status().to_string();
      staging.push_back(st->data);
    }
    ASSERT_TRUE(q.end_step().is_ok());
    for (int li = 0; li < layout.n_layers(); ++li) {
      const auto got = testing::to_host(staging[static_cast<size_t>(li)], static_cast<size_t>(tokens) * per_token);
      EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[li], got.data()), -1)
          << "step " << step << " layer " << li;
    }
  }
}

TEST(CudaEngineMetrics, CacheAndPlannerFiguresMatchDescribe) {
  ENGRAM_REQUIRE_GPU();
  test::ConformanceCase c{BackendKind::kCuda, RowFormat::kFused, FastPathMode::kPlanner, /*cache=*/true};
  std::mt19937_64 rng(test::conformance_seed());
  const EngramLayout layout = test::conformance_layout(c.format);
  const int64_t tokens = 64;
  auto e = test::conformance_engine(c, layout, tokens, rng, /*device=*/0);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  const int steps = 8;
  serve_steps(engine, layout, tokens, steps, rng);
  // Before describe() the device counters are not read: the cache families are absent, the timeline ones live.
  const MetricsSnapshot before = engine.metrics();
  EXPECT_EQ(before.find("engram_cache_hits_total", {}), nullptr);
  EXPECT_EQ(before.sum("engram_lookups_total"), steps * layout.n_layers());
  const nlohmann::json d = engine.describe();
  const MetricsSnapshot m = engine.metrics();
  EXPECT_EQ(m.sum("engram_lookups_total"), steps * layout.n_layers());
  EXPECT_EQ(m.sum("engram_lookup_duration_seconds"), steps * layout.n_layers());
  EXPECT_EQ(m.sum("engram_table_registered_bytes"), d["registration"]["bytes"].get<double>());
  ASSERT_EQ(d["fast_path"].size(), static_cast<size_t>(layout.n_layers())) << d.dump();
  for (const auto& f : d["fast_path"]) {
    const std::string layer = std::to_string(layout.layer_ids[f["layer_index"].get<size_t>()]);
    double batches = 0;
    for (auto it = f["paths"].begin(); it != f["paths"].end(); ++it) batches += it.value().get<double>();
    EXPECT_EQ(m.sum("engram_path_batches_total", {{"layer", layer}}), batches);
    EXPECT_EQ(batches, steps) << "served calls only: the start-up calibration's batches are not counted";
    EXPECT_GT(value_of(m, "engram_plan_predicted_seconds", layer), 0);
    const auto& cache = f["cache"];
    ASSERT_EQ(cache["state"], "on") << cache.dump();
    EXPECT_EQ(value_of(m, "engram_cache_probes_total", layer), cache["probes"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_hits_total", layer), cache["hits"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_link_bytes_avoided_total", layer), cache["link_bytes_avoided"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_rows_swapped_total", layer), cache["rows_swapped"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_rows", layer), cache["rows_cached"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_updates_due_total", layer), cache["update_attempts"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_updates_deferred_total", layer), cache["updates_deferred"].get<double>());
    EXPECT_EQ(value_of(m, "engram_cache_count_batches_dropped_total", layer), cache["dropped_batches"].get<double>());
    EXPECT_LE(cache["hbm_bytes"].get<double>(), cache["budget_bytes"].get<double>());
  }
  EXPECT_EQ(m.sum("engram_errors_total"), 0);
  EXPECT_NE(prometheus_text(m).find("# TYPE engram_cache_hits_total counter"), std::string::npos);
}

// planner_learn = false reaches every layer's fast path: describe() says so, the learner holds no measurement,
// and the batches are still served bit-identical to the scalar reference.
TEST(CudaEngineMetrics, PlannerLearningOffLearnsNothing) {
  ENGRAM_REQUIRE_GPU();
  test::ConformanceCase c{BackendKind::kCuda, RowFormat::kFused, FastPathMode::kPlanner, /*cache=*/false};
  std::mt19937_64 rng(test::conformance_seed());
  const EngramLayout layout = test::conformance_layout(c.format);
  const int64_t tokens = 64;
  EngineOptions o = test::conformance_options(c, tokens);
  o.device = 0;
  o.planner_learn = false;
  auto e = Engine::create_local(layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  test::randomize_table(engine.table(), rng);
  serve_steps(engine, layout, tokens, 12, rng);
  const nlohmann::json d = engine.describe();
  ASSERT_EQ(d["fast_path"].size(), static_cast<size_t>(layout.n_layers())) << d.dump();
  for (const auto& f : d["fast_path"]) {
    EXPECT_EQ(f["learning"], false) << f.dump();
    EXPECT_TRUE(f["learned"].empty()) << f.dump();
  }
}

}  // namespace
}  // namespace engram
