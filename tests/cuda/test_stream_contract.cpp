// Engine::lookup runs on the caller's stream: null is the legacy default stream, never an engine stream. A
// consumer enqueued right after the lookup on the same stream (here: a device copy of `out` into a history
// buffer) must read the rows written, with no host synchronisation in between; 100 lookups of fresh ids into
// poisoned memory per case, for the legacy stream, a side stream and a captured-and-replayed CUDA graph, with the
// plain kernel and the planner's fast path; every copy is compared with the CPU reference at the end. Then CUDA
// events recorded on the caller's stream around a lookup of 196,608 rows of a 16 GiB table must enclose the work
// (>= 1 ms: a lookup that went to another stream measures a few microseconds). Skips without a GPU.
#include <gtest/gtest.h>

#include "cuda_test_support.hpp"
#include "engram/engine.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;

constexpr int kIterations = 100;
constexpr int64_t kTokens = 256;

enum class StreamKind { kLegacy, kSide, kGraph };

struct ContractCase {
  StreamKind stream;
  FastPathMode fast_path;
  std::string name() const {
    const char* s = stream == StreamKind::kLegacy ? "legacy" : stream == StreamKind::kSide ? "side" : "graph";
    return std::string(s) + "_" + (fast_path == FastPathMode::kOff ? "plain" : "planner");
  }
};

class StreamContract : public ::testing::TestWithParam<ContractCase> {};

TEST_P(StreamContract, ConsumerOnTheCallersStreamReadsTheRowsWritten) {
  ENGRAM_REQUIRE_GPU();
  const ContractCase c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  auto layout = make_preset_layout("v41-flash-mini", int64_t{256} << 20);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EngineOptions o;
  o.backend = BackendKind::kCuda;
  o.device = 0;
  o.fast_path = c.fast_path;
  o.max_tokens = kTokens;
  o.content.kind = TableContent::Kind::kSynthetic;
  o.content.seed = seed;
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  const int heads = layout->heads();
  const size_t per_call = static_cast<size_t>(kTokens) * heads * layout->d;
  const size_t ids_per_call = static_cast<size_t>(kTokens) * heads;

  // Fresh ids for every call, uploaded once before the loop (the loop itself never synchronises the host).
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> all_ids;
  for (int i = 0; i < kIterations; ++i) {
    ids.push_back(testing::random_ids(*layout, 0, kTokens, rng));
    all_ids.insert(all_ids.end(), ids.back().begin(), ids.back().end());
  }
  DeviceBuffer<int64_t> d_all_ids(all_ids.size());
  DeviceBuffer<int64_t> d_ids(ids_per_call);
  DeviceBuffer<uint16_t> d_out(per_call);
  DeviceBuffer<uint16_t> d_history(per_call * kIterations);
  ASSERT_NE(d_history.get(), nullptr);
  ASSERT_CUDA_OK(cudaMemcpy(d_all_ids.get(), all_ids.data(), all_ids.size() * 8, cudaMemcpyHostToDevice));
  ASSERT_CUDA_OK(cudaMemset(d_history.get(), 0xA5, d_history.bytes()));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());

  cudaStream_t side = nullptr;
  if (c.stream != StreamKind::kLegacy) ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  LookupCall call;
  call.stream = side;  // null for the legacy stream
  // One call: poison, lookup, consumer copy -- all on the caller's stream.
  auto enqueue_call = [&](const int64_t* ids_dev, uint16_t* history_slot) -> Status {
    if (cudaMemsetAsync(d_out.get(), 0xFF, d_out.bytes(), side) != cudaSuccess)
      return Status(Code::kCuda, "poison");
    ENGRAM_ASSIGN_OR_RETURN(LookupResult r, engine.lookup(0, ids_dev, kTokens, d_out.get(), call));
    (void)r;
    if (cudaMemcpyAsync(history_slot, d_out.get(), d_out.bytes(), cudaMemcpyDeviceToDevice, side) != cudaSuccess)
      return Status(Code::kCuda, "consumer copy");
    return Status::ok();
  };
  if (c.stream == StreamKind::kGraph) {
    // Warm-up outside the capture (the planner calibrates and sizes its buffers there), then one captured call
    // over fixed buffers, replayed with fresh ids copied in on the same stream before each replay.
    ASSERT_CUDA_OK(cudaMemcpyAsync(d_ids.get(), d_all_ids.get(), ids_per_call * 8, cudaMemcpyDeviceToDevice, side));
    ASSERT_TRUE(enqueue_call(d_ids.get(), d_out.get()).is_ok());
    ASSERT_CUDA_OK(cudaStreamSynchronize(side));
    DeviceBuffer<uint16_t> d_consumed(per_call);
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA_OK(cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal));
    const Status captured = enqueue_call(d_ids.get(), d_consumed.get());
    ASSERT_CUDA_OK(cudaStreamEndCapture(side, &graph));
    ASSERT_TRUE(captured.is_ok()) << captured.to_string();
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < kIterations; ++i) {
      ASSERT_CUDA_OK(cudaMemcpyAsync(d_ids.get(), d_all_ids.get() + i * ids_per_call, ids_per_call * 8,
                                     cudaMemcpyDeviceToDevice, side));
      ASSERT_CUDA_OK(cudaGraphLaunch(exec, side));
      ASSERT_CUDA_OK(cudaMemcpyAsync(d_history.get() + i * per_call, d_consumed.get(), per_call * 2,
                                     cudaMemcpyDeviceToDevice, side));
    }
    ASSERT_CUDA_OK(cudaStreamSynchronize(side));
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
  } else {
    for (int i = 0; i < kIterations; ++i) {
      const Status s = enqueue_call(d_all_ids.get() + i * ids_per_call, d_history.get() + i * per_call);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    ASSERT_CUDA_OK(side ? cudaStreamSynchronize(side) : cudaDeviceSynchronize());
  }
  if (side) ASSERT_CUDA_OK(cudaStreamDestroy(side));
  const std::vector<uint16_t> history = testing::to_host(d_history.get(), per_call * kIterations);
  int bad = 0;
  for (int i = 0; i < kIterations; ++i) {
    const int64_t m = test::first_reference_mismatch(engine.table().view(0), ids[i], history.data() + i * per_call);
    if (m != -1 && ++bad <= 3) ADD_FAILURE() << c.name() << " seed " << seed << " call " << i << ": mismatch at " << m;
  }
  EXPECT_EQ(bad, 0) << "calls whose consumer read rows the lookup had not written";
}

INSTANTIATE_TEST_SUITE_P(Streams, StreamContract,
                         ::testing::Values(ContractCase{StreamKind::kLegacy, FastPathMode::kOff},
                                           ContractCase{StreamKind::kLegacy, FastPathMode::kPlanner},
                                           ContractCase{StreamKind::kSide, FastPathMode::kOff},
                                           ContractCase{StreamKind::kSide, FastPathMode::kPlanner},
                                           ContractCase{StreamKind::kGraph, FastPathMode::kOff},
                                           ContractCase{StreamKind::kGraph, FastPathMode::kPlanner}),
                         [](const auto& tp) { return tp.param.name(); });

// Events on the caller's stream enclose the lookup: 8,192 tokens x 24 heads = 196,608 rows of a layer of >= 16 GiB
// (zero pages: the reads cost the same), on the legacy stream and on a side stream.
TEST(StreamContractTiming, EventsOnTheCallersStreamEncloseTheLookup) {
  ENGRAM_REQUIRE_GPU();
  auto layout = make_preset_layout("v41-flash-mini", int64_t{33} << 30);  // two layers
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  ASSERT_GE(layout->table_bytes(0), int64_t{16} << 30);
  EngineOptions o;
  o.backend = BackendKind::kCuda;
  o.device = 0;
  o.fast_path = FastPathMode::kOff;
  o.max_tokens = 8192;
  o.content.kind = TableContent::Kind::kZero;
  auto e = Engine::create_local(*layout, o);
  if (!e.is_ok() && (e.status().code() == Code::kNoSpace || e.status().code() == Code::kOutOfMemory))
    GTEST_SKIP() << "a 33 GiB table does not fit here: " << e.status().to_string();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  constexpr int64_t tokens = 8192;
  std::mt19937_64 rng(testing::fresh_seed());
  DeviceBuffer<int64_t> d_ids(static_cast<size_t>(tokens) * layout->heads());
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(tokens) * layout->heads() * layout->d);
  cudaStream_t side = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  for (cudaStream_t s : {static_cast<cudaStream_t>(nullptr), side}) {
    std::vector<int64_t> ids = testing::random_ids(*layout, 0, tokens, rng);  // fresh ids: cold translation caches
    ASSERT_CUDA_OK(cudaMemcpy(d_ids.get(), ids.data(), ids.size() * 8, cudaMemcpyHostToDevice));
    cudaEvent_t a = nullptr, b = nullptr;
    ASSERT_CUDA_OK(cudaEventCreate(&a));
    ASSERT_CUDA_OK(cudaEventCreate(&b));
    LookupCall call;
    call.stream = s;
    ASSERT_CUDA_OK(cudaEventRecord(a, s));
    auto r = engine.lookup(0, d_ids.get(), tokens, d_out.get(), call);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_CUDA_OK(cudaEventRecord(b, s));
    ASSERT_CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    ASSERT_CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    EXPECT_GE(ms, 1.0f) << (s ? "side" : "legacy") << " stream: the events enclosed " << ms * 1e3
                        << " us for 196,608 rows of a >= 16 GiB layer";
    std::printf("stream contract: %s stream, %lld rows of a %.1f GiB table: %.3f ms between the caller's events\n",
                s ? "side" : "legacy", static_cast<long long>(r->stats.rows),
                static_cast<double>(layout->table_bytes(0)) / (1 << 30), static_cast<double>(ms));
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
  }
  ASSERT_CUDA_OK(cudaStreamDestroy(side));
}

}  // namespace
}  // namespace engram
