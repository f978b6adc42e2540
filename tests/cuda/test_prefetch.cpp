// CUDA prefetch queue: early and on_demand (the B1 pair) give the same staging as the CPU reference; a step
// captured into a CUDA graph gives the same staging as an eager one (and replays with new ids); timeline rows are
// complete and ordered; misuse is reported; dead/invalid ids are counted; the cuBLAS layer compute calibrates.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/backend.cuh"
#include "cuda_test_support.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;

constexpr int kModelLayers = 5;  // Engram layers at model layers 1 and 3

struct Fixture {
  EngramLayout layout;
  std::unique_ptr<HostTable> host;
  std::unique_ptr<cuda::CudaBackend> be;
};

Fixture make_fixture(std::mt19937_64& rng, double layer_us = 0, bool timeline = true, bool checked = false,
                     RowFormat fmt = RowFormat::kFused) {
  Fixture f;
  f.layout = testing::make_layout(256, fmt, 24, 3000, {1, 3});
  f.host = testing::random_host_table(f.layout, rng);
  cuda::CudaBackendOptions o;
  o.layer_ids = f.layout.layer_ids;
  o.heads = f.layout.heads();
  o.queue.max_tokens = 512;
  o.layer_us = layer_us;
  o.queue.record_timeline = timeline;
  o.queue.checked = checked;
  std::vector<TableView> views;
  for (int li = 0; li < f.layout.n_layers(); ++li) views.push_back(f.host->view(li));
  auto be = cuda::make_cuda_backend(o, views);
  EXPECT_TRUE(be.is_ok()) << be.status().to_string();
  if (be.is_ok()) f.be = std::move(*be);
  return f;
}

std::vector<uint16_t> copy_staging(const StagingView& v) {
  std::vector<uint16_t> out(static_cast<size_t>(v.tokens * v.heads * v.d));
  EXPECT_EQ(cudaMemcpy(out.data(), v.data, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// One decode step in the replay's call order; returns each Engram layer's staging (copied after end_step).
std::vector<std::vector<uint16_t>> run_step(Fixture& f, const std::vector<std::vector<int64_t>>& ids, int64_t tokens,
                                            PrefetchMode mode, int64_t step) {
  auto& q = f.be->queue();
  std::vector<StagingView> views(ids.size());
  q.begin_step(step);
  if (mode == PrefetchMode::kEarly) {
    for (size_t li = 0; li < ids.size(); ++li) {
      EXPECT_TRUE(q.prepare(static_cast<int>(li), ids[li].data(), tokens).is_ok());
    }
  }
  for (int layer = 0; layer < kModelLayers; ++layer) {
    const int li = f.layout.layer_index(layer);
    if (li >= 0) {
      if (mode == PrefetchMode::kOnDemand) {
        EXPECT_TRUE(q.prepare(li, ids[static_cast<size_t>(li)].data(), tokens).is_ok());
      }
      auto v = q.consume(li);
      EXPECT_TRUE(v.is_ok()) << v.status().to_string();
      if (v.is_ok()) views[static_cast<size_t>(li)] = *v;
    }
    EXPECT_TRUE(f.be->compute().run_layer(layer).is_ok());  // a no-op compute when layer_us == 0
  }
  const Status st = q.end_step();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  std::vector<std::vector<uint16_t>> out;
  for (const auto& v : views) out.push_back(copy_staging(v));
  return out;
}

TEST(CudaPrefetch, EarlyAndOnDemandGiveTheReferenceStaging) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f = make_fixture(rng, /*layer_us=*/30);
  ASSERT_TRUE(f.be);
  int64_t expected_rows = 0, expected_dead = 0;
  for (int64_t step = 0; step < 3; ++step) {
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % 512);
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<uint16_t>> ref;
    for (int li = 0; li < 2; ++li) {
      ids.push_back(testing::random_ids(f.layout, li, tokens, rng));
      LookupStats st;
      ref.push_back(testing::reference_staging(f.host->view(li), ids.back(), f.layout.heads(), &st));
      expected_dead += 2 * st.dead_rows;  // both modes
      expected_rows += 2 * st.rows;
    }
    const auto early = run_step(f, ids, tokens, PrefetchMode::kEarly, 2 * step);
    const auto on_demand = run_step(f, ids, tokens, PrefetchMode::kOnDemand, 2 * step + 1);
    for (int li = 0; li < 2; ++li) {
      EXPECT_EQ(testing::first_mismatch(early[li], ref[li]), -1) << "early, layer index " << li;
      EXPECT_EQ(testing::first_mismatch(on_demand[li], ref[li]), -1) << "on_demand, layer index " << li;
      EXPECT_EQ(f.be->queue().last_launch(li).rows, tokens * f.layout.heads());
    }
  }
  const LookupStats tot = f.be->queue().totals();
  EXPECT_EQ(tot.rows, expected_rows);
  EXPECT_EQ(tot.dead_rows, expected_dead);
  EXPECT_EQ(tot.invalid_ids, 0);
  // Every lookup has a complete, causally ordered timeline row (event resolution ~0.5 us: 2 us slack).
  const auto& rows = f.be->queue().timeline().rows();
  ASSERT_EQ(rows.size(), 12u);
  const double slack = 2000;
  for (const auto& t : rows) {
    ASSERT_TRUE(std::isfinite(t.r_ns) && std::isfinite(t.s_ns) && std::isfinite(t.f_ns) && std::isfinite(t.c_ns) &&
                std::isfinite(t.wait_end_ns))
        << "step " << t.step << " layer " << t.layer_id;
    EXPECT_TRUE(std::isnan(t.submit_ns));
    EXPECT_GE(t.s_ns, t.r_ns - slack);
    EXPECT_GE(t.f_ns, t.s_ns - slack);
    EXPECT_GE(t.wait_end_ns, t.c_ns - slack);
    EXPECT_GE(t.wait_end_ns, t.f_ns - slack) << "consumer released before the lookup finished";
    EXPECT_EQ(t.layer_id, f.layout.layer_ids[static_cast<size_t>(t.layer_index)]);
  }
}

TEST(CudaPrefetch, CapturedStepEqualsEagerStep) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f = make_fixture(rng, /*layer_us=*/30);
  ASSERT_TRUE(f.be);
  auto& q = f.be->queue();
  const auto ms = static_cast<cudaStream_t>(f.be->main_stream());
  const int64_t tokens = 200;
  const size_t staging_bytes = static_cast<size_t>(tokens) * f.layout.heads() * f.layout.d * 2;
  std::vector<std::vector<int64_t>> ids_a, ids_b;
  for (int li = 0; li < 2; ++li) {
    ids_a.push_back(testing::random_ids(f.layout, li, tokens, rng));
    ids_b.push_back(testing::random_ids(f.layout, li, tokens, rng));
  }
  const auto eager = run_step(f, ids_a, tokens, PrefetchMode::kEarly, 0);

  // Capture the same step (early mode, compute included) into a graph.
  q.begin_step(1);
  ASSERT_CUDA_OK(cudaStreamBeginCapture(ms, cudaStreamCaptureModeThreadLocal));
  for (int li = 0; li < 2; ++li) ASSERT_TRUE(q.prepare(li, ids_a[li].data(), tokens).is_ok());
  for (int layer = 0; layer < kModelLayers; ++layer) {
    const int li = f.layout.layer_index(layer);
    if (li >= 0) {
      ASSERT_TRUE(q.consume(li).is_ok());
    }
    ASSERT_TRUE(f.be->compute().run_layer(layer).is_ok());
  }
  EXPECT_EQ(q.end_step().code(), Code::kInvalidArgument) << "end_step must refuse to synchronise a capture";
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamEndCapture(ms, &graph));
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  // Poison the staging, replay, compare with the eager step.
  for (int li = 0; li < 2; ++li)
    ASSERT_CUDA_OK(cudaMemset(const_cast<uint16_t*>(q.staging_buffer(li)), 0xA5, staging_bytes));
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, ms));
  ASSERT_TRUE(q.end_step().is_ok());
  for (int li = 0; li < 2; ++li) {
    std::vector<uint16_t> got(staging_bytes / 2);
    ASSERT_CUDA_OK(cudaMemcpy(got.data(), q.staging_buffer(li), staging_bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(testing::first_mismatch(got, eager[li]), -1) << "captured step differs, layer index " << li;
  }
  // The captured step's timeline rows exist but carry no times (captured events are dependencies, not times).
  const auto& rows = q.timeline().rows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(std::isnan(rows[2].r_ns) && std::isnan(rows[3].f_ns));

  // Replay with new ids written into the pinned buffers the graph's copies read.
  q.begin_step(2);
  for (int li = 0; li < 2; ++li) {
    ASSERT_TRUE(q.write_ids(li, ids_b[li].data(), tokens).is_ok());
    ASSERT_CUDA_OK(cudaMemset(const_cast<uint16_t*>(q.staging_buffer(li)), 0xA5, staging_bytes));
  }
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, ms));
  ASSERT_TRUE(q.end_step().is_ok());
  for (int li = 0; li < 2; ++li) {
    std::vector<uint16_t> got(staging_bytes / 2);
    ASSERT_CUDA_OK(cudaMemcpy(got.data(), q.staging_buffer(li), staging_bytes, cudaMemcpyDeviceToHost));
    const auto ref = testing::reference_staging(f.host->view(li), ids_b[li], f.layout.heads());
    EXPECT_EQ(testing::first_mismatch(got, ref), -1) << "replay with new ids, layer index " << li;
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
}

TEST(CudaPrefetch, TimelineOffAddsNoRowsAndKeepsStaging) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  Fixture f = make_fixture(rng, 0, /*timeline=*/false);
  ASSERT_TRUE(f.be);
  const int64_t tokens = 64;
  std::vector<std::vector<int64_t>> ids;
  for (int li = 0; li < 2; ++li) ids.push_back(testing::random_ids(f.layout, li, tokens, rng));
  const auto got = run_step(f, ids, tokens, PrefetchMode::kEarly, 0);
  for (int li = 0; li < 2; ++li)
    EXPECT_EQ(testing::first_mismatch(got[li], testing::reference_staging(f.host->view(li), ids[li], f.layout.heads())), -1);
  EXPECT_TRUE(f.be->queue().timeline().rows().empty());
  // Switched on between steps: the next step has complete rows; switching inside a step is refused.
  ASSERT_TRUE(f.be->queue().set_record_timeline(true).is_ok());
  const auto again = run_step(f, ids, tokens, PrefetchMode::kOnDemand, 1);
  EXPECT_EQ(testing::first_mismatch(again[1], got[1]), -1);
  ASSERT_EQ(f.be->queue().timeline().rows().size(), 2u);
  EXPECT_TRUE(std::isfinite(f.be->queue().timeline().rows()[1].wait_end_ns));
  f.be->queue().begin_step(2);
  ASSERT_TRUE(f.be->queue().prepare(0, ids[0].data(), tokens).is_ok());
  EXPECT_EQ(f.be->queue().set_record_timeline(false).code(), Code::kInvalidArgument);
  ASSERT_TRUE(f.be->queue().consume(0).is_ok());
  ASSERT_TRUE(f.be->queue().end_step().is_ok());
}

TEST(CudaPrefetch, DeviceIdsAndSplitLayout) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  Fixture f = make_fixture(rng, 0, true, false, RowFormat::kSplit);
  ASSERT_TRUE(f.be);
  auto& q = f.be->queue();
  const int64_t tokens = 300;
  const auto ids = testing::random_ids(f.layout, 1, tokens, rng);
  DeviceBuffer<int64_t> dids(ids.size());
  ASSERT_CUDA_OK(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice));
  q.begin_step(0);
  ASSERT_TRUE(q.prepare_device(1, dids.get(), tokens).is_ok());
  auto v = q.consume(1);
  ASSERT_TRUE(v.is_ok());
  ASSERT_TRUE(q.end_step().is_ok());
  EXPECT_EQ(testing::first_mismatch(copy_staging(*v), testing::reference_staging(f.host->view(1), ids, f.layout.heads())), -1);
}

TEST(CudaPrefetch, InvalidIdsAreCountedOrRejected) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  {
    Fixture f = make_fixture(rng);
    ASSERT_TRUE(f.be);
    const auto ids = testing::random_ids(f.layout, 0, 100, rng, 0.2);
    LookupStats st;
    const auto ref = testing::reference_staging(f.host->view(0), ids, f.layout.heads(), &st);
    auto& q = f.be->queue();
    q.begin_step(0);
    ASSERT_TRUE(q.prepare(0, ids.data(), 100).is_ok());
    auto v = q.consume(0);
    ASSERT_TRUE(v.is_ok());
    ASSERT_TRUE(q.end_step().is_ok());
    EXPECT_EQ(testing::first_mismatch(copy_staging(*v), ref), -1);
    EXPECT_EQ(q.totals().invalid_ids, st.invalid_ids);
    EXPECT_EQ(q.totals().dead_rows, st.dead_rows);
  }
  {
    Fixture f = make_fixture(rng, 0, true, /*checked=*/true);
    ASSERT_TRUE(f.be);
    auto ids = testing::random_ids(f.layout, 0, 100, rng);
    ids[17] = f.layout.rows(0);
    auto& q = f.be->queue();
    q.begin_step(0);
    const Status st = q.prepare(0, ids.data(), 100);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("position 17"), std::string::npos) << st.message();
    EXPECT_EQ(q.consume(0).status().code(), Code::kInvalidArgument) << "a rejected prepare left a pending lookup";
    EXPECT_TRUE(q.end_step().is_ok());
  }
}

TEST(CudaPrefetch, MisuseIsReported) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  Fixture f = make_fixture(rng);
  ASSERT_TRUE(f.be);
  auto& q = f.be->queue();
  const auto ids = testing::random_ids(f.layout, 0, 600, rng);
  q.begin_step(0);
  EXPECT_EQ(q.consume(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(q.prepare(2, ids.data(), 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(q.prepare(0, ids.data(), 600).code(), Code::kInvalidArgument) << "tokens > max_tokens";
  EXPECT_EQ(q.prepare(0, nullptr, 5).code(), Code::kInvalidArgument);
  ASSERT_TRUE(q.prepare(0, ids.data(), 10).is_ok());
  EXPECT_EQ(q.prepare(0, ids.data(), 10).code(), Code::kInvalidArgument) << "prepared twice";
  EXPECT_EQ(q.end_step().code(), Code::kInvalidArgument) << "pending lookup at end_step";
  ASSERT_TRUE(q.consume(0).is_ok());
  EXPECT_TRUE(q.end_step().is_ok());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaCompute, CalibratesAndRuns) {
  ENGRAM_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreate(&s));
  {
    auto c = cuda::CudaLayerCompute::create(s, 100);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_GE((*c)->gemms_per_layer(), 1);
    EXPECT_GT((*c)->layer_ns(), 0);
    EXPECT_GT((*c)->gemm_ns(), 0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->run_layer(i).is_ok());
    EXPECT_TRUE((*c)->synchronize().is_ok());
    RecordProperty("gemm_n", (*c)->gemm_n());
    RecordProperty("gemms_per_layer", (*c)->gemms_per_layer());
    RecordProperty("layer_ns", std::to_string((*c)->layer_ns()));
  }
  EXPECT_EQ(cuda::CudaLayerCompute::create(s, 0).status().code(), Code::kInvalidArgument);
  ASSERT_CUDA_OK(cudaStreamDestroy(s));
}

}  // namespace
}  // namespace engram
