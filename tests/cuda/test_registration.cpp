// Chunked host registration: chunk planning (no GPU needed), zero length, device pointers, rollback after an
// injected and after a real failure (pending error cleared), and no device copy of a registered table.
#include <gtest/gtest.h>

#include <cerrno>
#include <numeric>
#include <utility>
#include <random>

#include "cuda/backend.cuh"
#include "cuda/registration.cuh"
#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "cuda_test_support.hpp"
#include "sys/fault.hpp"
#include "sys/memory.hpp"

namespace engram {
namespace {

// Anonymous page-aligned test memory.
struct Mapping {
  explicit Mapping(size_t n) : bytes(n) {
    auto m = sys::map_anonymous(n);
    p = m.is_ok() ? static_cast<uint8_t*>(*m) : nullptr;
  }
  ~Mapping() {
    if (p) (void)sys::unmap(p, bytes);
  }
  uint8_t* p = nullptr;
  size_t bytes = 0;
};

TEST(ChunkPlan, CoversTheRangeWithRowAlignedPageAlignedChunks) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t page = 4096;
  for (int iter = 0; iter < 500; ++iter) {
    cuda::RegistrationOptions o;
    o.boundary_bytes = (rng() % 3 == 0) ? 1 : 16 * (1 + static_cast<int64_t>(rng() % 200));  // fused strides
    const int64_t granule = std::lcm(page, o.boundary_bytes);
    o.max_chunk_bytes = granule * (1 + static_cast<int64_t>(rng() % 8)) + static_cast<int64_t>(rng() % granule);
    const int64_t bytes = 1 + static_cast<int64_t>(rng() % (o.max_chunk_bytes * 6));
    auto plan = cuda::plan_chunks(0x7f0000000000ull, bytes, page, o);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    const int64_t total = (bytes + page - 1) / page * page;
    int64_t at = 0;
    for (size_t i = 0; i < plan->size(); ++i) {
      const auto& c = (*plan)[i];
      EXPECT_EQ(c.offset, at);
      EXPECT_GT(c.bytes, 0);
      EXPECT_LE(c.bytes, o.max_chunk_bytes);
      EXPECT_EQ(c.offset % page, 0);
      if (i > 0) {
        EXPECT_EQ(c.offset % o.boundary_bytes, 0) << "chunk boundary inside a row";
      }
      at += c.bytes;
    }
    EXPECT_EQ(at, total);
  }
}

TEST(ChunkPlan, RejectsBadInput) {
  cuda::RegistrationOptions o;
  EXPECT_EQ(cuda::plan_chunks(0x10000, 0, 4096, o).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(cuda::plan_chunks(0x10001, 100, 4096, o).status().code(), Code::kInvalidArgument);
  o.max_chunk_bytes = 8192;
  o.boundary_bytes = 272;  // lcm(4096, 272) = 69632 > 8192: no boundary fits
  EXPECT_EQ(cuda::plan_chunks(0x10000, 100000, 4096, o).status().code(), Code::kInvalidArgument);
}

TEST(HostRegistration, ZeroLengthAndNullAreRejected) {
  Mapping m(4096);
  ASSERT_NE(m.p, nullptr);
  EXPECT_EQ(cuda::HostRegistration::register_range(m.p, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(cuda::HostRegistration::register_range(nullptr, 4096).status().code(), Code::kInvalidArgument);
}

TEST(HostRegistration, RegistersInChunksWithDevicePointers) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  const size_t bytes = 69632 * 40 + 12345;  // 40 fused-272 granules and a bit
  Mapping m(bytes);
  ASSERT_NE(m.p, nullptr);
  for (size_t i = 0; i < bytes; ++i) m.p[i] = static_cast<uint8_t>(rng());
  cuda::RegistrationOptions o;
  o.max_chunk_bytes = 69632 * 7;
  o.boundary_bytes = 272;
  auto reg = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(bytes), o);
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  EXPECT_EQ(reg->chunks().size(), 6u);
  EXPECT_GT(reg->register_ns(), 0);
  EXPECT_GE(reg->bytes(), static_cast<int64_t>(bytes));
  for (const auto& c : reg->chunks()) {
    EXPECT_EQ((c.host - m.p) % 272, 0) << "chunk does not start on a row boundary";
    ASSERT_NE(c.device, nullptr);
    cudaPointerAttributes attr{};
    ASSERT_CUDA_OK(cudaPointerGetAttributes(&attr, c.host));
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    // The device address resolves to the same bytes.
    std::vector<uint8_t> back(4096);
    ASSERT_CUDA_OK(cudaMemcpy(back.data(), c.device + c.bytes - 4096, 4096, cudaMemcpyDefault));
    EXPECT_EQ(std::memcmp(back.data(), c.host + c.bytes - 4096, 4096), 0);
  }
  ASSERT_TRUE(reg->release().is_ok());
  cudaPointerAttributes attr{};
  ASSERT_CUDA_OK(cudaPointerGetAttributes(&attr, m.p));
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
}

// Progress: one report per chunk, in order, bytes of the range as asked (not the page-widened length), the last
// one the whole range; and the engine's on_register_progress ends at the table's registered bytes.
TEST(HostRegistration, ReportsProgressAfterEveryChunk) {
  ENGRAM_REQUIRE_GPU();
  const size_t bytes = 69632 * 20 + 777;
  Mapping m(bytes);
  ASSERT_NE(m.p, nullptr);
  cuda::RegistrationOptions o;
  o.max_chunk_bytes = 69632 * 7;
  o.boundary_bytes = 272;
  std::vector<std::pair<int64_t, int64_t>> seen;
  o.on_progress = [&seen](int64_t done, int64_t total) { seen.emplace_back(done, total); };
  auto reg = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(bytes), o);
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  ASSERT_EQ(seen.size(), reg->chunks().size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].second, static_cast<int64_t>(bytes));
    if (i > 0) {
      EXPECT_GT(seen[i].first, seen[i - 1].first);
    }
  }
  EXPECT_EQ(seen.back().first, static_cast<int64_t>(bytes));
}

TEST(HostRegistration, EngineReportsRegistrationProgressToTheEnd) {
  ENGRAM_REQUIRE_GPU();
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EngineOptions o;
  o.backend = BackendKind::kCuda;
  o.device = 0;
  std::vector<std::pair<int64_t, int64_t>> seen;
  o.on_register_progress = [&seen](int64_t done, int64_t total, double elapsed) {
    EXPECT_GE(elapsed, 0);
    seen.emplace_back(done, total);
  };
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].first, seen[i - 1].first);
  }
  EXPECT_EQ(seen.back().first, seen.back().second);
  EXPECT_GT(seen.back().second, 0);
}

// After a failed registration, no chunk of the range may stay registered and no CUDA error may stay pending.
void expect_rolled_back(const Mapping& m) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "pending CUDA error after a failed registration";
  cudaPointerAttributes attr{};
  ASSERT_CUDA_OK(cudaPointerGetAttributes(&attr, m.p));
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered) << "chunk 0 still registered after rollback";
  // The whole range registers again, which it could not if any chunk had stayed registered.
  auto again = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(m.bytes));
  EXPECT_TRUE(again.is_ok()) << again.status().to_string();
}

TEST(HostRegistration, RollsBackAfterAnInjectedFailure) {
  ENGRAM_REQUIRE_GPU();
  Mapping m(size_t{8} << 20);
  ASSERT_NE(m.p, nullptr);
  cuda::RegistrationOptions o;
  o.max_chunk_bytes = int64_t{1} << 20;
  o.inject_failure_at_chunk = 5;
  auto reg = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(m.bytes), o);
  ASSERT_FALSE(reg.is_ok());
  EXPECT_EQ(reg.status().code(), Code::kCuda) << reg.status().to_string();
  EXPECT_NE(reg.status().message().find("chunk 5"), std::string::npos) << reg.status().message();
  EXPECT_NE(reg.status().message().find("1048576 B"), std::string::npos) << reg.status().message();
  EXPECT_NE(reg.status().sys_error(), 0);
  expect_rolled_back(m);
}

// An injected ENOMEM / EPERM at cudaHostRegister (sys/fault.hpp hook) fails with the errno's code, leaves no
// chunk registered, and registration works again once the fault is cleared.
TEST(HostRegistration, InjectedErrnoFaultsFailCleanlyAndLeaveNothingRegistered) {
  ENGRAM_REQUIRE_GPU();
  Mapping m(size_t{4} << 20);
  ASSERT_NE(m.p, nullptr);
  cuda::RegistrationOptions o;
  o.max_chunk_bytes = int64_t{1} << 20;
  for (const auto& [err, code] : {std::pair{ENOMEM, Code::kOutOfMemory}, std::pair{EPERM, Code::kPermission}}) {
    {
      sys::ScopedFault f(sys::kFaultHostRegister, err);
      auto reg = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(m.bytes), o);
      ASSERT_FALSE(reg.is_ok());
      EXPECT_EQ(reg.status().code(), code) << reg.status().to_string();
      EXPECT_NE(reg.status().message().find("injected"), std::string::npos) << reg.status().message();
    }
    expect_rolled_back(m);
    auto again = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(m.bytes), o);
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  }
}

TEST(HostRegistration, RollsBackAfterARealConflict) {
  ENGRAM_REQUIRE_GPU();
  Mapping m(size_t{8} << 20);
  ASSERT_NE(m.p, nullptr);
  // Someone else registered chunk 3's pages: our chunk 3 fails with cudaErrorHostMemoryAlreadyRegistered.
  ASSERT_CUDA_OK(cudaHostRegister(m.p + (3 << 20), 1 << 20, cudaHostRegisterDefault));
  cuda::RegistrationOptions o;
  o.max_chunk_bytes = int64_t{1} << 20;
  auto reg = cuda::HostRegistration::register_range(m.p, static_cast<int64_t>(m.bytes), o);
  ASSERT_FALSE(reg.is_ok());
  EXPECT_EQ(reg.status().sys_error(), static_cast<int>(cudaErrorHostMemoryAlreadyRegistered))
      << reg.status().to_string();
  EXPECT_NE(reg.status().message().find("chunk 3"), std::string::npos) << reg.status().message();
  ASSERT_CUDA_OK(cudaHostUnregister(m.p + (3 << 20)));
  expect_rolled_back(m);
}

TEST(HostRegistration, NoDeviceCopyOfTheTable) {
  ENGRAM_REQUIRE_GPU();
  // A 1 GiB fused table registered through the backend: device memory must not drop by anything like its size.
  const EngramLayout l = testing::make_layout(256, RowFormat::kFused, 24, (int64_t{1} << 30) / (24 * 272));
  auto t = HostTable::allocate(l);
  ASSERT_TRUE(t.is_ok());
  (*t)->fill_synthetic(testing::fresh_seed());
  ASSERT_CUDA_OK(cudaSetDevice(0));
  ASSERT_CUDA_OK(cudaFree(nullptr));  // create the context before the first reading
  size_t free0 = 0, total = 0;
  ASSERT_CUDA_OK(cudaMemGetInfo(&free0, &total));
  cuda::CudaBackendOptions o;
  o.layer_ids = l.layer_ids;
  o.heads = l.heads();
  o.queue.max_tokens = 16;  // staging 16 x 24 x 256 x 2 B: negligible
  auto be = cuda::make_cuda_backend(o, {(*t)->view(0)});
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  // Run one lookup so that any lazy copy would have happened.
  std::mt19937_64 rng(testing::fresh_seed());
  const auto ids = testing::random_ids(l, 0, 16, rng);
  auto& q = (*be)->queue();
  q.begin_step(0);
  ASSERT_TRUE(q.prepare(0, ids.data(), 16).is_ok());
  ASSERT_TRUE(q.consume(0).is_ok());
  ASSERT_TRUE(q.end_step().is_ok());
  size_t free1 = 0;
  ASSERT_CUDA_OK(cudaMemGetInfo(&free1, &total));
  const int64_t table_bytes = l.table_bytes(0);
  const int64_t dropped = static_cast<int64_t>(free0) - static_cast<int64_t>(free1);
  EXPECT_LT(dropped, table_bytes / 8) << "device memory dropped by " << dropped << " B for a " << table_bytes
                                      << " B table";
  EXPECT_GE((*be)->registration().bytes, table_bytes);
  RecordProperty("device_bytes_dropped", std::to_string(dropped));
}

}  // namespace
}  // namespace engram
