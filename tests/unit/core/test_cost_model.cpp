// The cost arithmetic reproduces worked examples (16 GB over each path; 32 K-token KV of a 70B GQA model:
// swap ≈ 0.21 s at 50 GB/s vs recompute ≈ 7.6 s at 600 TFLOPS) and the byte accounting of docs/terms.md.
#include <gtest/gtest.h>

#include "core/cost_model.hpp"

namespace engram::cost_model {
namespace {

double path(const std::string& name) {
  for (const auto& p : named_paths())
    if (p.name == name) return p.bytes_per_s;
  return 0;
}

TEST(CostModel, SixteenGigabytesOverEachPath) {
  const double b = 16e9;
  EXPECT_NEAR(transfer_s(b, path("pcie4-pinned")) * 1e3, 640, 0.5);
  EXPECT_NEAR(transfer_s(b, path("pcie4-pageable")) * 1e3, 1333, 0.5);
  EXPECT_NEAR(transfer_s(b, path("pcie5-pinned")) * 1e3, 320, 0.5);
  EXPECT_NEAR(transfer_s(b, path("nvlink-c2c")) * 1e3, 36, 0.5);
  EXPECT_NEAR(transfer_s(b, path("rdma-400g")) * 1e3, 356, 0.5);
}

TEST(CostModel, KvSwapInVersusRecompute70B) {
  const KvShape s{80, 8, 128, 2};
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(s), 327680);
  const double tokens = 32768;
  const double kv = kv_bytes_per_token(s) * tokens;
  EXPECT_DOUBLE_EQ(kv, 10.0 * (1ull << 30));  // 10 GiB
  EXPECT_NEAR(transfer_s(kv, 50e9), 0.21, 0.005);
  EXPECT_NEAR(recompute_flops(70e9, tokens) / 600e12, 7.6, 0.05);
}

TEST(CostModel, EngramByteAccounting) {
  // V4.1-Flash decode step of 64 tokens, one Engram layer: 64 * 24 rows of 256 + 8 bytes.
  EXPECT_DOUBLE_EQ(engram_source_bytes(64, 24, 256), 64.0 * 24 * 264);
  EXPECT_DOUBLE_EQ(engram_staging_bytes(64, 24, 256), 2.0 * 64 * 24 * 256);
  EXPECT_DOUBLE_EQ(lookup_s(1536, 28.5e6), 1536 / 28.5e6);
}

}  // namespace
}  // namespace engram::cost_model
