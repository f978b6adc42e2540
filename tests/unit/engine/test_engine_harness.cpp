// The harness knobs live outside the public EngineOptions (src/engine/harness.hpp): a copy of the options carries
// them, writing through mutable_engine_harness changes those options only, the text key layer_us still sets them;
// the clock EngineOptions::clock_ns injects is the one the CPU queue's timeline records. The file hashers of the public header
// (ngram_hasher_from_table_file) give the hasher NgramHasher::create gives from the same table.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "engine/harness.hpp"
#include "engram/engine.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/prefetch_queue.hpp"
#include "host/token_io.hpp"

using namespace engram;

TEST(EngineHarness, OptionsWithoutAHarnessReadTheDefaults) {
  const EngineOptions o;
  EXPECT_EQ(o.harness, nullptr);
  EXPECT_EQ(engine_harness(o).layer_us, 0);
  EXPECT_FALSE(o.clock_ns);
  EXPECT_FALSE(engine_harness(o).on_protocol_step);
}

TEST(EngineHarness, AWriteChangesTheseOptionsOnlyAndCopiesCarryIt) {
  EngineOptions a;
  mutable_engine_harness(a).layer_us = 7;
  EngineOptions b = a;  // carries the knobs
  EXPECT_EQ(engine_harness(b).layer_us, 7);
  mutable_engine_harness(b).layer_us = 9;
  EXPECT_EQ(engine_harness(a).layer_us, 7) << "a write through a copy changed the original";
  EXPECT_EQ(engine_harness(b).layer_us, 9);
}

TEST(EngineHarness, TheTextKeyLayerUsSetsTheHarness) {
  EngineOptions o;
  ASSERT_TRUE(set_engine_option(o, "layer-us", "12.5").is_ok());
  EXPECT_EQ(engine_harness(o).layer_us, 12.5);
  EXPECT_EQ(set_engine_option(o, "layer_us", "-1").code(), Code::kInvalidArgument);
}

TEST(EngineOptions, TheInjectedClockTimesTheCpuQueue) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.lookup_threads = 1;
  o.table.group = "harness";
  // Read by the driving thread and the queue's worker: an atomic tick count.
  std::atomic<int64_t> ticks{0};
  const double kTick = 1000;
  o.clock_ns = [&ticks, kTick] { return static_cast<double>(++ticks) * kTick; };
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  PrefetchQueue& q = (*e)->queue();
  std::vector<int64_t> ids(static_cast<size_t>(2 * layout->heads()), 1);
  q.begin_step(0);
  ASSERT_TRUE(q.prepare(0, ids.data(), 2).is_ok());
  ASSERT_TRUE(q.consume(0).is_ok());
  ASSERT_TRUE(q.end_step().is_ok());
  ASSERT_EQ(q.timeline().rows().size(), 1u);
  const LayerTiming& row = q.timeline().rows()[0];
  for (double v : {row.r_ns, row.submit_ns, row.s_ns, row.f_ns, row.c_ns, row.wait_end_ns}) {
    ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(std::fmod(v, kTick), 0) << v << " is not a reading of the injected clock";
    EXPECT_LE(v, static_cast<double>(ticks.load()) * kTick);
  }
}

TEST(PublicHasher, FromATableFileEqualsCreateFromTheSameTable) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  const std::string path = default_compression_table_path();
  auto table = read_compression_table(path);
  if (!table.is_ok()) GTEST_SKIP() << "no compression table here: " << table.status().to_string();
  NgramHashOptions ho;
  ho.seed = 3;
  auto a = ngram_hasher_from_table_file(*layout, path, ho);
  auto b = NgramHasher::create(*layout, *table, ho);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(a->compressed_vocab(), b->compressed_vocab());
  EXPECT_EQ(a->vocab_size(), b->vocab_size());
  for (int l = 0; l < layout->n_layers(); ++l) EXPECT_EQ(a->multipliers(l), b->multipliers(l));
  std::vector<int64_t> tokens{5, 17, 99, 3, 5};
  std::vector<int64_t> ia(tokens.size() * static_cast<size_t>(layout->heads())), ib(ia.size());
  ASSERT_TRUE(a->hash(tokens, 0, ia).is_ok());
  ASSERT_TRUE(b->hash(tokens, 0, ib).is_ok());
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ngram_hasher_from_table_file(*layout, path + ".missing").status().code(), Code::kNotFound);
}
