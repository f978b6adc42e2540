// Tensor-parallel slices on the GPU: for TP = 1, 2, 3, 4 over fresh random non-zero tables (5 and 6 heads, both row
// layouts), every rank's table (its rows only, registered for UVA) looked up by the UVA kernel into poisoned device
// memory equals the whole table's CPU lookup restricted to the rank's heads, zeros for padded heads and for ids
// outside its rows, with dead / invalid counts of its heads; the same through the engine (queue and direct lookup)
// with the fast path asked for (planner) and off: a slice's lookup runs the plain kernel (FastLookup refuses a
// slice with kUnsupported and the backend says so). Skips without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"
#include "cuda_test_support.hpp"
#include "host/checkpoint.hpp"
#include "engram/prefetch_queue.hpp"
#include "support/tp_reference.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;

using testing::to_host;

class CudaTpKernel : public ::testing::TestWithParam<std::tuple<int, RowFormat, bool>> {};

TEST_P(CudaTpKernel, EveryShardEqualsTheWholeTableRestrictedToItsHeads) {
  ENGRAM_REQUIRE_GPU();
  const auto [hc, fmt, force_segments] = GetParam();
  const uint64_t seed = test::tp_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout l = test::tp_layout(hc, fmt);
  const int H = l.heads(), d = l.d;
  auto whole = test::tp_table(l);
  ASSERT_TRUE(whole);
  test::randomize_nonzero(*whole, rng);
  const int64_t tokens = 1 + static_cast<int64_t>(rng() % 300);
  for (int size = 1; size <= 4; ++size)
    for (int rank = 0; rank < size; ++rank) {
      const TpSlice tp{size, rank};
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + tp.to_string() + " heads " + std::to_string(H) + " " +
                   row_format_name(fmt) + (force_segments ? " per-chunk translation" : ""));
      auto t = test::tp_table(l, tp);
      ASSERT_TRUE(t);
      for (int li = 0; li < l.n_layers(); ++li) {
        const TableView v = t->view(li), wv = whole->view(li);
        const LayerSlice sl = size == 1 ? LayerSlice{H, 0, H, 0, l.rows(li), l.rows(li)} : v.slice;
        const TableSpan mine = t->span(li);
        for (int64_t r = 0; r < mine.rows; ++r) {  // the rank's rows of the whole table
          std::memcpy(mine.payload_of(r), wv.payload_of(sl.row_begin + r), static_cast<size_t>(d));
          std::memcpy(mine.scales_of(r), wv.scales_of(sl.row_begin + r), static_cast<size_t>(d / 32));
        }
        std::vector<cuda::HostRegistration> regs;
        if (v.rows > 0) {
          cuda::RegistrationOptions ro;
          ro.boundary_bytes = fmt == RowFormat::kFused ? v.stride_bytes : v.d;
          auto reg = cuda::HostRegistration::register_range(v.data, t->layer_bytes(li), ro);
          ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
          regs.push_back(std::move(*reg));
        }
        std::vector<const cuda::HostRegistration*> reg_ptrs;
        for (const auto& r : regs) reg_ptrs.push_back(&r);
        auto ut = cuda::UvaTable::make(v, reg_ptrs, force_segments);
        ASSERT_TRUE(ut.is_ok()) << ut.status().to_string();

        const std::vector<int64_t> ids = test::tp_ids(l, li, tokens, true, rng);
        const std::vector<uint16_t> full = testing::reference_staging(wv, ids, H);
        const int P = t->staging_heads();
        DeviceBuffer<int64_t> dids(ids.size());
        DeviceBuffer<uint16_t> dout(static_cast<size_t>(tokens * P * d));
        DeviceBuffer<unsigned long long> dcnt(2);
        ASSERT_CUDA_OK(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice));
        ASSERT_CUDA_OK(cudaMemset(dout.get(), 0xA5, dout.bytes()));
        ASSERT_CUDA_OK(cudaMemset(dcnt.get(), 0, dcnt.bytes()));
        cuda::LookupArgs a;
        a.table = &*ut;
        a.ids = dids.get();
        a.tokens = tokens;
        a.heads = H;
        a.out = dout.get();
        a.counters = dcnt.get();
        auto launched = cuda::launch_lookup(a, nullptr);
        ASSERT_TRUE(launched.is_ok()) << launched.status().to_string();
        EXPECT_EQ(launched->rows, tokens * P);
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        const auto got = to_host(dout.get(), dout.size());
        EXPECT_EQ(test::first_slice_mismatch(sl, ids, tokens, d, full.data(), got.data()), -1) << "layer " << li;
        unsigned long long counters[2] = {0, 0};
        ASSERT_CUDA_OK(cudaMemcpy(counters, dcnt.get(), sizeof counters, cudaMemcpyDeviceToHost));
        int64_t dead = 0, invalid = 0;
        for (int64_t tk = 0; tk < tokens; ++tk)
          for (int h = sl.head_begin; h < std::min(H, sl.head_begin + sl.local_heads); ++h) {
            const int64_t id = ids[static_cast<size_t>(tk * H + h)];
            dead += id < 0;
            invalid += id >= l.rows(li);
          }
        EXPECT_EQ(static_cast<int64_t>(counters[0]), dead);
        EXPECT_EQ(static_cast<int64_t>(counters[1]), invalid);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaTpKernel,
                         ::testing::Combine(::testing::Values(5, 6), ::testing::Values(RowFormat::kFused, RowFormat::kSplit),
                                            ::testing::Bool()));

class CudaTpEngine : public ::testing::TestWithParam<FastPathMode> {};

TEST_P(CudaTpEngine, QueueAndDirectLookupOfEveryShard) {
  ENGRAM_REQUIRE_GPU();
  const FastPathMode mode = GetParam();
  const uint64_t seed = test::tp_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout l = test::tp_layout(5, RowFormat::kFused);
  const int H = l.heads(), d = l.d;
  const auto source = test::whole_checkpoint(l, rng);
  ASSERT_TRUE(source->table);
  const HostTable* whole = source->table.get();
  const std::string& ckpt = source->path;
  const int64_t max_tokens = 128;
  for (int size = 1; size <= 4; ++size)
    for (int rank = 0; rank < size; ++rank) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " tp " + std::to_string(rank) + "/" + std::to_string(size) +
                   " fast path " + fast_path_mode_name(mode));
      EngineOptions o;
      o.backend = BackendKind::kCuda;
      o.device = 0;
      o.fast_path = mode;
      o.max_tokens = max_tokens;
      o.content.kind = TableContent::Kind::kCheckpoint;
      o.content.path = ckpt;
      o.table.tp = {size, rank};
      auto e = Engine::create_local(l, o);
      ASSERT_TRUE(e.is_ok()) << e.status().to_string();
      Engine& engine = **e;
      ASSERT_EQ(engine.backend(), BackendKind::kCuda);
      const int P = engine.staging_heads();
      ASSERT_EQ(P, (H + size - 1) / size);
      DeviceBuffer<int64_t> d_ids(static_cast<size_t>(max_tokens * H));
      DeviceBuffer<uint16_t> d_out(static_cast<size_t>(max_tokens * P * d));
      PrefetchQueue& q = engine.queue();
      for (int64_t step = 0; step < 3; ++step) {
        const int64_t tokens = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_tokens));
        std::vector<std::vector<int64_t>> ids;
        q.begin_step(step);
        for (int li = 0; li < l.n_layers(); ++li) {
          ids.push_back(test::tp_ids(l, li, tokens, false, rng));
          ASSERT_TRUE(q.prepare(li, ids.back().data(), tokens).is_ok());
        }
        std::vector<const uint16_t*> staging;
        for (int li = 0; li < l.n_layers(); ++li) {
          auto st = q.consume(li);
          ASSERT_TRUE(st.is_ok()) << st.status().to_string();
          ASSERT_EQ(st->heads, P);
          staging.push_back(st->data);
        }
        ASSERT_TRUE(q.end_step().is_ok());
        for (int li = 0; li < l.n_layers(); ++li) {
          const LayerSlice sl = size == 1 ? LayerSlice{H, 0, H, 0, l.rows(li), l.rows(li)} : engine.table().view(li).slice;
          const std::vector<uint16_t> full = testing::reference_staging(whole->view(li), ids[li], H);
          const auto got = to_host(staging[static_cast<size_t>(li)], static_cast<size_t>(tokens * P * d));
          EXPECT_EQ(test::first_slice_mismatch(sl, ids[li], tokens, d, full.data(), got.data()), -1)
              << "queue, step " << step << " layer " << li;
          ASSERT_CUDA_OK(cudaMemcpy(d_ids.get(), ids[li].data(), ids[li].size() * 8, cudaMemcpyHostToDevice));
          ASSERT_CUDA_OK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
          auto r = engine.lookup(li, d_ids.get(), tokens, d_out.get());
          ASSERT_TRUE(r.is_ok()) << r.status().to_string();
          ASSERT_TRUE(engine.synchronize().is_ok());
          const auto direct = to_host(d_out.get(), static_cast<size_t>(tokens * P * d));
          EXPECT_EQ(test::first_slice_mismatch(sl, ids[li], tokens, d, full.data(), direct.data()), -1)
              << "direct, step " << step << " layer " << li << " (path " << r->launch.path << ")";
        }
      }
      const nlohmann::json desc = engine.describe();
      if (size == 1) {
        EXPECT_TRUE(desc["tp"].is_null()) << desc.dump();
      } else {
        ASSERT_TRUE(desc["tp"].is_object()) << desc.dump();
        EXPECT_EQ(desc["tp"]["local_heads"], P);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(FastPath, CudaTpEngine, ::testing::Values(FastPathMode::kPlanner, FastPathMode::kOff),
                         [](const auto& p) { return std::string(fast_path_mode_name(p.param)); });

}  // namespace
}  // namespace engram
