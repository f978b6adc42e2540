// An engine's metrics agree with what its queue did: lookups, rows and B_source bytes per layer, one histogram
// observation per lookup, steps, errors by kind; table families at build; CUDA-only families absent on the cpu.
#include <gtest/gtest.h>

#include <vector>

#include "engram/engine.hpp"
#include "engram/metrics.hpp"
#include "engram/prefetch_queue.hpp"

namespace {

using namespace engram;

TEST(EngineMetrics, CpuQueueLookupsFoldedAtEndStep) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.lookup_threads = 1;
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  const int tokens = 4, heads = layout->heads(), steps = 3;
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads), 0);
  for (int step = 0; step < steps; ++step) {
    engine.queue().begin_step(step);
    for (int li = 0; li < layout->n_layers(); ++li) ASSERT_TRUE(engine.queue().prepare(li, ids.data(), tokens).is_ok());
    for (int li = 0; li < layout->n_layers(); ++li) ASSERT_TRUE(engine.queue().consume(li).is_ok());
    if (step == 0) {
      // Before the step ends nothing is folded: counters stay at zero.
      EXPECT_EQ(engine.metrics().sum("engram_lookups_total"), 0);
    }
    ASSERT_TRUE(engine.queue().end_step().is_ok());
  }
  const MetricsSnapshot m = engine.metrics();
  const std::string layer0 = std::to_string(layout->layer_ids[0]);
  EXPECT_EQ(m.sum("engram_lookups_total", {{"layer", layer0}, {"rank", "0"}}), steps);
  EXPECT_EQ(m.sum("engram_lookups_total"), steps * layout->n_layers());
  EXPECT_EQ(m.sum("engram_lookup_rows_total"), static_cast<double>(engine.queue().totals().rows));
  EXPECT_EQ(m.sum("engram_lookup_source_bytes_total"),
            static_cast<double>(engine.queue().totals().rows * layout->source_bytes_per_row()));
  EXPECT_EQ(m.sum("engram_lookup_duration_seconds"), steps * layout->n_layers());  // histogram counts
  EXPECT_EQ(m.sum("engram_exposed_wait_seconds"), steps * layout->n_layers());
  EXPECT_EQ(m.sum("engram_steps_total"), steps);
  ASSERT_NE(m.find("engram_table_bytes"), nullptr);
  EXPECT_EQ(m.sum("engram_table_bytes"), static_cast<double>(layout->total_bytes()));
  EXPECT_NE(m.find("engram_table_info", {{"backend", "cpu"}}), nullptr);
  EXPECT_NE(m.find("engram_table_load_seconds"), nullptr);
  // Not measured on the cpu backend: no sample, never 0.
  for (const char* absent : {"engram_cache_hits_total", "engram_plan_predicted_seconds", "engram_path_batches_total",
                             "engram_device_hash_seconds"})
    EXPECT_EQ(m.find(absent, {}), nullptr) << absent;
  EXPECT_EQ(m.sum("engram_errors_total"), 0);
  const std::string text = prometheus_text(m);
  EXPECT_NE(text.find("# TYPE engram_lookups_total counter"), std::string::npos);
}

TEST(EngineMetrics, ErrorsCountedByKind) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.lookup_threads = 1;
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  engine.queue().begin_step(0);
  EXPECT_FALSE(engine.queue().consume(0).is_ok());  // never prepared
  EXPECT_FALSE(engine.queue().prepare(99, nullptr, 0).is_ok());
  const MetricsSnapshot m = engine.metrics();
  EXPECT_EQ(m.sum("engram_errors_total", {{"kind", "invalid_argument"}}), 2);
  EXPECT_EQ(m.sum("engram_errors_total", {{"kind", "cuda"}}), 0);
}

}  // namespace
