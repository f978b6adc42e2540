// A direct Engine::lookup of more tokens than the engine's max_tokens failed on the GPU (the fast path's buffers
// are sized for max_tokens): Engine::lookup now splits the batch into max_tokens-sized pieces. Every case of the
// conformance matrix (row layout x fast path x cache) looks up 6.5 x max_tokens tokens at once into poisoned
// device memory, compared bit for bit with the scalar reference. Skips with the reason without a GPU.
#include <gtest/gtest.h>

#include "cuda_test_support.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

class CudaSplit : public ::testing::TestWithParam<test::ConformanceCase> {};

TEST_P(CudaSplit, ALookupLargerThanMaxTokensMatchesTheReference) {
  ENGRAM_REQUIRE_GPU();
  const test::ConformanceCase c = GetParam();
  const uint64_t seed = test::conformance_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout layout = test::conformance_layout(c.format);
  const int64_t max_tokens = 16, tokens = 104;
  auto e = test::conformance_engine(c, layout, max_tokens, rng, /*device=*/0);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  const size_t per_token = static_cast<size_t>(layout.heads() * layout.d);
  testing::DeviceBuffer<int64_t> d_ids(static_cast<size_t>(tokens * layout.heads()));
  testing::DeviceBuffer<uint16_t> d_out(static_cast<size_t>(tokens) * per_token);
  for (int li = 0; li < layout.n_layers(); ++li) {
    const std::vector<int64_t> ids = test::conformance_ids(layout, li, tokens, rng);
    ASSERT_CUDA_OK(cudaMemcpy(d_ids.get(), ids.data(), ids.size() * 8, cudaMemcpyHostToDevice));
    ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
    auto r = engine.lookup(li, d_ids.get(), tokens, d_out.get());
    ASSERT_TRUE(r.is_ok()) << c.name() << ": " << r.status().to_string();
    ASSERT_TRUE(engine.synchronize().is_ok());
    const auto got = testing::to_host(d_out.get(), static_cast<size_t>(tokens) * per_token);
    EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids, got.data()), -1)
        << c.name() << " seed " << seed << " layer " << li << " (path " << r->launch.path << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, CudaSplit, ::testing::ValuesIn(test::conformance_matrix(BackendKind::kCuda)),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace engram
