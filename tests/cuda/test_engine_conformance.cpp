// Engine conformance, cuda backend: the same options matrix as tests/backend/test_engine_conformance.cpp (row
// layout x fast path x cache) built with Engine::create_local on the GPU over a fresh random table; lookups through
// the engine's queue (early and on-demand, several steps: the hot-row cache is filled after the first and updated
// online after every later one) and directly on the engine's stream, into poisoned staging, compared bit for bit
// with the scalar reference. Skips with the reason without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cuda_test_support.hpp"
#include "engram/prefetch_queue.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

class CudaConformance : public ::testing::TestWithParam<test::ConformanceCase> {};

using testing::to_host;

TEST_P(CudaConformance, QueueAndDirectLookupsMatchTheReference) {
  ENGRAM_REQUIRE_GPU();
  const test::ConformanceCase c = GetParam();
  const uint64_t seed = test::conformance_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout layout = test::conformance_layout(c.format);
  const int64_t max_tokens = 192;
  auto e = test::conformance_engine(c, layout, max_tokens, rng, /*device=*/0);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  PrefetchQueue& q = engine.queue();
  const size_t per_token = static_cast<size_t>(layout.heads() * layout.d);
  testing::DeviceBuffer<int64_t> d_ids(static_cast<size_t>(max_tokens * layout.heads()));
  testing::DeviceBuffer<uint16_t> d_out(static_cast<size_t>(max_tokens) * per_token);
  for (int64_t step = 0; step < 8; ++step) {
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_tokens));
    std::vector<std::vector<int64_t>> ids;
    for (int li = 0; li < layout.n_layers(); ++li) ids.push_back(test::conformance_ids(layout, li, tokens, rng));
    q.begin_step(step);
    const bool early = step % 2 == 0;
    if (early) {
      for (int li = 0; li < layout.n_layers(); ++li) ASSERT_TRUE(q.prepare(li, ids[li].data(), tokens).is_ok());
    }
    std::vector<const uint16_t*> staging;
    for (int li = 0; li < layout.n_layers(); ++li) {
      if (!early) {
        ASSERT_TRUE(q.prepare(li, ids[li].data(), tokens).is_ok());
      }
      auto st = q.consume(li);
      ASSERT_TRUE(st.is_ok()) << st.status().to_string();
      ASSERT_TRUE(st->on_device);
      staging.push_back(st->data);
    }
    ASSERT_TRUE(q.end_step().is_ok());
    for (int li = 0; li < layout.n_layers(); ++li) {
      const auto got = to_host(staging[static_cast<size_t>(li)], static_cast<size_t>(tokens) * per_token);
      EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[li], got.data()), -1)
          << c.name() << " seed " << seed << " step " << step << " layer " << li;
    }
    // The same ids through the engine's direct lookup (same lookup path), into poisoned device memory.
    for (int li = 0; li < layout.n_layers(); ++li) {
      ASSERT_CUDA_OK(cudaMemcpy(d_ids.get(), ids[li].data(), ids[li].size() * 8, cudaMemcpyHostToDevice));
      ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
      auto r = engine.lookup(li, d_ids.get(), tokens, d_out.get());
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      ASSERT_TRUE(engine.synchronize().is_ok());
      const auto got = to_host(d_out.get(), static_cast<size_t>(tokens) * per_token);
      EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[li], got.data()), -1)
          << c.name() << " seed " << seed << " direct, layer " << li << " (path " << r->launch.path << ")";
    }
  }
  const nlohmann::json d = engine.describe();
  EXPECT_EQ(d["backend"], "cuda");
  if (c.fast_path == FastPathMode::kOff) {
    EXPECT_TRUE(d["fast_path"].empty()) << d.dump();
  } else {
    ASSERT_EQ(d["fast_path"].size(), static_cast<size_t>(layout.n_layers())) << d.dump();
    const auto& cache = d["fast_path"][0]["cache"];
    if (c.cache && c.fast_path == FastPathMode::kPlanner) {
      EXPECT_EQ(cache["state"], "on") << cache.dump();
      EXPECT_GT(cache["rows_cached"].get<int64_t>(), 0) << cache.dump();
    } else {
      EXPECT_NE(cache["state"], "on") << cache.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, CudaConformance, ::testing::ValuesIn(test::conformance_matrix(BackendKind::kCuda)),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace engram
