// Engine conformance, cpu backend: every case of the options matrix (row layout x fast path x cache) built with
// Engine::create_local over a fresh random table, looked up through the engine's queue (early and on-demand
// submission over several steps) and directly, into poisoned staging, compared bit for bit with the scalar
// reference. The cuda cases of the same matrix are in tests/cuda/test_engine_conformance.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engram/prefetch_queue.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

class CpuConformance : public ::testing::TestWithParam<test::ConformanceCase> {};

TEST_P(CpuConformance, QueueAndDirectLookupsMatchTheReference) {
  const test::ConformanceCase c = GetParam();
  const uint64_t seed = test::conformance_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout layout = test::conformance_layout(c.format);
  const int64_t max_tokens = 96;
  auto e = Engine::create_local(layout, test::conformance_options(c, max_tokens));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  ASSERT_EQ(engine.backend(), BackendKind::kCpu);
  test::randomize_table(engine.table(), rng);
  PrefetchQueue& q = engine.queue();
  for (int64_t step = 0; step < 6; ++step) {
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_tokens));
    std::vector<std::vector<int64_t>> ids;
    for (int li = 0; li < layout.n_layers(); ++li) ids.push_back(test::conformance_ids(layout, li, tokens, rng));
    q.begin_step(step);
    const bool early = step % 2 == 0;
    if (early) {
      for (int li = 0; li < layout.n_layers(); ++li) ASSERT_TRUE(q.prepare(li, ids[li].data(), tokens).is_ok());
    }
    for (int li = 0; li < layout.n_layers(); ++li) {
      if (!early) {
        ASSERT_TRUE(q.prepare(li, ids[li].data(), tokens).is_ok());
      }
      auto st = q.consume(li);
      ASSERT_TRUE(st.is_ok()) << st.status().to_string();
      ASSERT_EQ(st->tokens, tokens);
      EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[li], st->data), -1)
          << c.name() << " seed " << seed << " step " << step << " layer " << li;
    }
    ASSERT_TRUE(q.end_step().is_ok());
    // The same ids through the engine's direct lookup, into a poisoned buffer.
    for (int li = 0; li < layout.n_layers(); ++li) {
      std::vector<uint16_t> out(static_cast<size_t>(tokens * layout.heads() * layout.d), 0xFFFF);
      auto r = engine.lookup(li, ids[li].data(), tokens, out.data());
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(r->stats.rows, tokens * layout.heads());
      EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[li], out.data()), -1)
          << c.name() << " seed " << seed << " direct, layer " << li;
    }
  }
  // The cpu backend runs without a cache and says so once when one was asked for.
  const nlohmann::json d = engine.describe();
  EXPECT_EQ(d["backend"], "cpu");
  EXPECT_EQ(d["cache_note"].is_string(), c.cache) << d.dump();
}

INSTANTIATE_TEST_SUITE_P(Matrix, CpuConformance, ::testing::ValuesIn(test::conformance_matrix(BackendKind::kCpu)),
                         [](const auto& p) { return p.param.name(); });

// The checked mode refuses an id >= rows before writing; an unchecked lookup writes a zero row and counts it.
TEST(CpuConformance, OutOfRangeIdsAreRefusedOrZeroed) {
  std::mt19937_64 rng(test::conformance_seed());
  const EngramLayout layout = test::conformance_layout(RowFormat::kFused);
  EngineOptions o = test::conformance_options({}, 8);
  auto e = Engine::create_local(layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  test::randomize_table((*e)->table(), rng);
  std::vector<int64_t> ids = test::conformance_ids(layout, 0, 2, rng);
  ids[3] = layout.rows(0) + 5;
  std::vector<uint16_t> out(static_cast<size_t>(2 * layout.heads() * layout.d), 0xFFFF);
  LookupCall checked;
  checked.checked = true;
  auto refused = (*e)->lookup(0, ids.data(), 2, out.data(), checked);
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  for (uint16_t v : out) ASSERT_EQ(v, 0xFFFF) << "a refused lookup wrote its output";
  auto zeroed = (*e)->lookup(0, ids.data(), 2, out.data());
  ASSERT_TRUE(zeroed.is_ok());
  EXPECT_EQ(zeroed->stats.invalid_ids, 1);
  EXPECT_EQ(test::first_reference_mismatch((*e)->table().view(0), ids, out.data()), -1);
}

}  // namespace
}  // namespace engram
