// Description: the traffic bench's reference-style split-row kernel (bench/reference_lookup.cu) writes what the CPU
// decoder and the project's plain kernel write, bit for bit: every FP8 code (NaN included), scale codes 1..254 (its
// documented range), dead and out-of-range ids, batches smaller than one block and larger than the grid, one block
// and every SM. Skips without a GPU.
#include <gtest/gtest.h>

#include "bench/reference_lookup.hpp"
#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"
#include "cuda_test_support.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;

TEST(ReferenceLookup, MatchesTheCpuDecoderAndThePlainKernelBitForBit) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  const EngramLayout l = testing::make_layout(256, RowFormat::kSplit, 4, 1009);
  auto host = testing::random_host_table(l, rng);
  ASSERT_NE(host, nullptr);
  const TableView v = host->view(0);
  for (int64_t r = 0; r < v.rows; ++r)  // scale codes 1..254: the range the kernel decodes as the project does
    for (int k = 0; k < v.d / 32; ++k) {
      uint8_t& s = const_cast<uint8_t*>(v.scales_of(r))[k];
      s = static_cast<uint8_t>(1 + s % 254);
    }
  cuda::RegistrationOptions ro;
  ro.boundary_bytes = v.d;
  auto reg = cuda::HostRegistration::register_range(v.data, v.rows * (v.d + v.d / 32), ro);
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  auto uva = cuda::UvaTable::make(v, {&*reg});
  ASSERT_TRUE(uva.is_ok()) << uva.status().to_string();
  if (!uva->uniform()) GTEST_SKIP() << "per-chunk translation: the reference kernel reads through one offset";

  for (int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{700}}) {
    const auto ids = testing::random_ids(l, 0, tokens, rng, 0.05);
    const auto want = testing::reference_staging(v, ids, l.heads());
    const int64_t rows = static_cast<int64_t>(ids.size());
    DeviceBuffer<int64_t> dids(ids.size());
    DeviceBuffer<uint16_t> dout(want.size()), dplain(want.size());
    ASSERT_CUDA_OK(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice));
    for (int cap : {1, 0}) {
      ASSERT_CUDA_OK(cudaMemset(dout.get(), 0xA5, dout.bytes()));  // poison: every element must be written
      bench::ReferenceLookupArgs a;
      a.payload = v.data + uva->uniform_delta();
      a.scales = v.scales + uva->uniform_delta();
      a.table_rows = v.rows;
      a.ids = dids.get();
      a.rows = rows;
      a.out = dout.get();
      a.grid_cap = cap;
      auto launched = bench::launch_reference_lookup(a, nullptr);
      ASSERT_TRUE(launched.is_ok()) << launched.status().to_string();
      EXPECT_EQ(launched->tiles, (rows + 15) / 16);
      if (cap == 1) {
        EXPECT_EQ(launched->grid, 1);
      }
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint16_t> got(want.size());
      ASSERT_CUDA_OK(cudaMemcpy(got.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost));
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
      EXPECT_EQ(bad, 0u) << "tokens " << tokens << ", grid cap " << cap;
    }
    cuda::LookupArgs p;
    p.table = &*uva;
    p.ids = dids.get();
    p.tokens = tokens;
    p.heads = l.heads();
    p.out = dplain.get();
    ASSERT_TRUE(cuda::launch_lookup(p, nullptr).is_ok());
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> plain(want.size()), ref(want.size());
    ASSERT_CUDA_OK(cudaMemcpy(plain.data(), dplain.get(), dplain.bytes(), cudaMemcpyDeviceToHost));
    ASSERT_CUDA_OK(cudaMemcpy(ref.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(plain, ref) << "tokens " << tokens;
  }
}

TEST(ReferenceLookup, RefusesWhatItCannotRead) {
  bench::ReferenceLookupArgs a;
  a.d = 128;
  a.rows = 1;
  EXPECT_EQ(bench::launch_reference_lookup(a, nullptr).status().code(), Code::kInvalidArgument);
  a.d = 256;
  EXPECT_EQ(bench::launch_reference_lookup(a, nullptr).status().code(), Code::kInvalidArgument) << "null pointers";
  a.rows = 0;
  auto none = bench::launch_reference_lookup(a, nullptr);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->grid, 0);
}

}  // namespace
}  // namespace engram
