// UVA lookup kernel vs the CPU reference, bit for bit, on fresh random tables (every byte value) and fresh random
// ids (dead and out-of-range ids included), both row layouts, several d, poisoned outputs, grid caps, per-chunk
// address translation, checked mode, and the plain gather. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"
#include "cuda_test_support.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;

struct Registered {
  std::unique_ptr<HostTable> host;
  std::vector<cuda::HostRegistration> regs;
  cuda::UvaTable table;
};

// Registers the table's one layer (whole mapping) and builds its UvaTable.
Registered register_table(const EngramLayout& l, std::mt19937_64& rng, cuda::RegistrationOptions ro = {},
                          bool force_segments = false) {
  Registered r;
  r.host = testing::random_host_table(l, rng);
  const TableView v = r.host->view(0);
  const int64_t bytes = v.rows * v.stride_bytes + (v.format == RowFormat::kSplit ? v.rows * (v.d / 32) : 0);
  ro.boundary_bytes = v.format == RowFormat::kFused ? v.stride_bytes : v.d;
  auto reg = cuda::HostRegistration::register_range(v.data, bytes, ro);
  EXPECT_TRUE(reg.is_ok()) << reg.status().to_string();
  if (!reg.is_ok()) return r;
  r.regs.push_back(std::move(*reg));
  auto t = cuda::UvaTable::make(v, {&r.regs[0]}, force_segments);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (t.is_ok()) r.table = std::move(*t);
  return r;
}

struct RunResult {
  std::vector<uint16_t> out;
  cuda::LaunchInfo info;
  unsigned long long counters[2] = {0, 0};
  Status status;
};

RunResult run_lookup(const cuda::UvaTable& table, const std::vector<int64_t>& ids, int heads, double fraction = 1.0,
                     bool checked = false) {
  RunResult r;
  const int d = table.host_view().d;
  DeviceBuffer<int64_t> dids(ids.size());
  DeviceBuffer<uint16_t> dout(ids.size() * static_cast<size_t>(d));
  DeviceBuffer<unsigned long long> dcnt(2);
  EXPECT_EQ(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dout.get(), 0xA5, dout.bytes()), cudaSuccess);  // poison
  EXPECT_EQ(cudaMemset(dcnt.get(), 0, dcnt.bytes()), cudaSuccess);
  cuda::LookupArgs a;
  a.table = &table;
  a.ids = dids.get();
  a.tokens = static_cast<int64_t>(ids.size()) / heads;
  a.heads = heads;
  a.out = dout.get();
  a.counters = dcnt.get();
  a.grid_cap = GridCap::of_fraction(fraction).value();
  a.checked = checked;
  auto li = cuda::launch_lookup(a, nullptr);
  if (!li.is_ok()) {
    r.status = li.status();
  } else {
    r.info = *li;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.out.resize(ids.size() * static_cast<size_t>(d));
  EXPECT_EQ(cudaMemcpy(r.out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(r.counters, dcnt.get(), dcnt.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return r;
}

class LookupKernelVsReference : public ::testing::TestWithParam<std::tuple<int, RowFormat>> {};

TEST_P(LookupKernelVsReference, BitIdentical) {
  ENGRAM_REQUIRE_GPU();
  const auto [d, fmt] = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int heads = 5;
  const EngramLayout l = testing::make_layout(d, fmt, heads, 1500 + static_cast<int64_t>(rng() % 500));
  Registered r = register_table(l, rng);
  ASSERT_FALSE(r.regs.empty());
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % 700);
    const auto ids = testing::random_ids(l, 0, tokens, rng);
    LookupStats ref_stats;
    const auto ref = testing::reference_staging(r.host->view(0), ids, heads, &ref_stats);
    RunResult got = run_lookup(r.table, ids, heads);
    ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
    const int64_t bad = testing::first_mismatch(got.out, ref);
    ASSERT_EQ(bad, -1) << "first mismatch at element " << bad << " (row " << bad / d << ", id " << ids[bad / d]
                       << "): got 0x" << std::hex << got.out[bad] << " want 0x" << ref[bad];
    EXPECT_EQ(static_cast<int64_t>(got.counters[0]), ref_stats.dead_rows);
    EXPECT_EQ(got.counters[1], 0u);
    EXPECT_EQ(got.info.rows, tokens * heads);
    EXPECT_EQ(got.info.tiles, (tokens * heads + got.info.tile_rows - 1) / got.info.tile_rows);
    EXPECT_EQ(got.info.grid, std::min<int64_t>(got.info.tiles, got.info.cap));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LookupKernelVsReference,
                         ::testing::Combine(::testing::Values(32, 64, 96, 128, 256, 512, 1024),
                                            ::testing::Values(RowFormat::kFused, RowFormat::kSplit)),
                         [](const auto& p) {
                           return "d" + std::to_string(std::get<0>(p.param)) + "_" +
                                  row_format_name(std::get<1>(p.param));
                         });

TEST(LookupKernel, OutOfRangeIdsAreZeroRowsAndCounted) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (RowFormat fmt : {RowFormat::kFused, RowFormat::kSplit}) {
    const EngramLayout l = testing::make_layout(256, fmt, 24, 2000);
    Registered r = register_table(l, rng);
    ASSERT_FALSE(r.regs.empty());
    const auto ids = testing::random_ids(l, 0, 333, rng, /*invalid_fraction=*/0.1);
    LookupStats ref_stats;
    const auto ref = testing::reference_staging(r.host->view(0), ids, l.heads(), &ref_stats);
    ASSERT_GT(ref_stats.invalid_ids, 0);
    RunResult got = run_lookup(r.table, ids, l.heads());
    ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
    EXPECT_EQ(testing::first_mismatch(got.out, ref), -1);
    EXPECT_EQ(static_cast<int64_t>(got.counters[0]), ref_stats.dead_rows);
    EXPECT_EQ(static_cast<int64_t>(got.counters[1]), ref_stats.invalid_ids);
  }
}

TEST(LookupKernel, CheckedModeRejectsBeforeWriting) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 24, 2000);
  Registered r = register_table(l, rng);
  ASSERT_FALSE(r.regs.empty());
  auto ids = testing::random_ids(l, 0, 100, rng);
  const size_t pos = rng() % ids.size();
  ids[pos] = l.rows(0) + 7;
  RunResult got = run_lookup(r.table, ids, l.heads(), 1.0, /*checked=*/true);
  ASSERT_EQ(got.status.code(), Code::kInvalidArgument) << got.status.to_string();
  EXPECT_NE(got.status.message().find("position " + std::to_string(pos)), std::string::npos) << got.status.message();
  for (uint16_t v : got.out) ASSERT_EQ(v, 0xA5A5) << "checked mode wrote staging";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Valid ids pass the check and match the reference.
  ids[pos] = kDeadId;
  RunResult ok = run_lookup(r.table, ids, l.heads(), 1.0, true);
  ASSERT_TRUE(ok.status.is_ok()) << ok.status.to_string();
  EXPECT_EQ(testing::first_mismatch(ok.out, testing::reference_staging(r.host->view(0), ids, l.heads())), -1);
}

TEST(LookupKernel, GridCapsChangeTheGridNotTheStaging) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  auto dev = cuda::device_info(0);
  ASSERT_TRUE(dev.is_ok());
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 24, 3000);
  Registered r = register_table(l, rng);
  ASSERT_FALSE(r.regs.empty());
  const auto ids = testing::random_ids(l, 0, 2048, rng);
  const auto ref = testing::reference_staging(r.host->view(0), ids, l.heads());
  for (double f : {1.0, 0.5, 0.25, 0.001}) {
    RunResult got = run_lookup(r.table, ids, l.heads(), f);
    ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
    const int cap = std::max(1, static_cast<int>(std::floor(f * dev->sm_count)));
    EXPECT_EQ(got.info.cap, cap) << "fraction " << f;
    EXPECT_EQ(got.info.grid, std::min<int64_t>(got.info.tiles, cap)) << "fraction " << f;
    EXPECT_EQ(testing::first_mismatch(got.out, ref), -1) << "fraction " << f;
  }
}

TEST(LookupKernel, PerChunkTranslationMatchesReference) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  for (RowFormat fmt : {RowFormat::kFused, RowFormat::kSplit}) {
    const EngramLayout l = testing::make_layout(256, fmt, 24, 4000);  // ~26 MB
    cuda::RegistrationOptions ro;
    ro.max_chunk_bytes = int64_t{1} << 20;  // many chunks
    Registered r = register_table(l, rng, ro, /*force_segments=*/true);
    ASSERT_FALSE(r.regs.empty());
    ASSERT_GT(r.regs[0].chunks().size(), 10u);
    EXPECT_FALSE(r.table.uniform());
    ASSERT_NE(r.table.device_segments(), nullptr);
    const auto ids = testing::random_ids(l, 0, 1000, rng);
    RunResult got = run_lookup(r.table, ids, l.heads());
    ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
    EXPECT_EQ(testing::first_mismatch(got.out, testing::reference_staging(r.host->view(0), ids, l.heads())), -1)
        << row_format_name(fmt);
  }
}

TEST(LookupKernel, PlainGatherCopiesTheRowBytes) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  for (RowFormat fmt : {RowFormat::kFused, RowFormat::kSplit}) {
    for (int d : {64, 256, 1024, 2048}) {
      const EngramLayout l = testing::make_layout(d, fmt, 4, 1000);
      Registered r = register_table(l, rng);
      ASSERT_FALSE(r.regs.empty());
      const TableView v = r.host->view(0);
      const auto ids = testing::random_ids(l, 0, 300, rng);
      for (auto what : {cuda::GatherBytes::kRowBytes, cuda::GatherBytes::kPayloadOnly}) {
        const int64_t stride = cuda::plain_gather_out_stride(v, what);
        DeviceBuffer<int64_t> dids(ids.size());
        DeviceBuffer<uint8_t> dout(ids.size() * static_cast<size_t>(stride));
        ASSERT_CUDA_OK(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice));
        ASSERT_CUDA_OK(cudaMemset(dout.get(), 0xA5, dout.bytes()));
        cuda::GatherArgs a;
        a.table = &r.table;
        a.ids = dids.get();
        a.rows = static_cast<int64_t>(ids.size());
        a.out = dout.get();
        a.what = what;
        auto li = cuda::launch_plain_gather(a, nullptr);
        ASSERT_TRUE(li.is_ok()) << li.status().to_string();
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        std::vector<uint8_t> out(dout.size());
        ASSERT_CUDA_OK(cudaMemcpy(out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ids.size(); ++i) {
          const uint8_t* o = out.data() + i * static_cast<size_t>(stride);
          const int64_t id = ids[i];
          const bool live = id >= 0 && id < v.rows;
          const bool whole_record = fmt == RowFormat::kFused && what == cuda::GatherBytes::kRowBytes;
          const int64_t payload = whole_record ? v.stride_bytes : d;
          for (int64_t k = 0; k < payload; ++k)
            ASSERT_EQ(o[k], live ? v.payload_of(id)[k] : 0) << "row " << i << " byte " << k << " d " << d;
          if (fmt == RowFormat::kSplit && what == cuda::GatherBytes::kRowBytes) {
            for (int k = 0; k < d / 32; ++k) ASSERT_EQ(o[d + k], live ? v.scales_of(id)[k] : 0) << "scale " << k;
          }
        }
      }
    }
  }
}

TEST(LookupKernel, CanLaunchRejectsBadArguments) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 24, 1000);
  Registered r = register_table(l, rng);
  ASSERT_FALSE(r.regs.empty());
  DeviceBuffer<int64_t> ids(48);
  DeviceBuffer<uint16_t> out(48 * 256 + 8);
  cuda::LookupArgs a;
  a.table = &r.table;
  a.ids = ids.get();
  a.tokens = 2;
  a.heads = 24;
  a.out = out.get();
  EXPECT_TRUE(cuda::can_launch(a).is_ok());
  auto b = a;
  b.out = out.get() + 1;  // not 16-byte aligned
  EXPECT_EQ(cuda::can_launch(b).code(), Code::kInvalidArgument);
  b = a;
  b.heads = 0;
  EXPECT_EQ(cuda::can_launch(b).code(), Code::kInvalidArgument);
  // A grid fraction outside (0, 1] is refused where a grid cap is made: no LookupArgs can hold one.
  EXPECT_EQ(GridCap::of_fraction(1.5).status().code(), Code::kInvalidArgument);
  b = a;
  b.ids = nullptr;
  EXPECT_EQ(cuda::launch_lookup(b, nullptr).status().code(), Code::kInvalidArgument);
  b = a;
  b.tokens = 0;  // nothing to do: no launch
  auto z = cuda::launch_lookup(b, nullptr);
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(z->grid, 0);
  // A view with d % 32 != 0, or rows outside the registration, never becomes a UvaTable.
  TableView v = r.host->view(0);
  v.d = 48;
  EXPECT_EQ(cuda::UvaTable::make(v, {&r.regs[0]}).status().code(), Code::kInvalidArgument);
  v = r.host->view(0);
  v.rows += 1000;
  EXPECT_EQ(cuda::UvaTable::make(v, {&r.regs[0]}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram
