// Description: the CUDA hash kernels (cuda/hash_kernel.cuh) must produce, bit for bit, the ids of the CPU batch
// reference (core/hash_batch.hpp, itself checked against whole-sequence hashing by tests/unit/core) for every step
// of fuzzed batches (random composition and order, chunked prefill, decode, speculative drafts rejected and rolled
// back, prefix-cache starts, DEAD tokens by id and by mask, look-back slots or rows in order with empty padding
// requests), in int64 and int32, global and head-local ids, into poisoned outputs with padded strides (nothing
// beyond the step's tokens written); the look-back update (in place and into a second buffer) and reset kernels
// must leave the rows the CPU update leaves; on the default text and the corpus (skipped with the reason when
// their token files are absent); at the benchmark's shapes (decode 64 / 512, prefill 8192); inside a captured CUDA
// graph replayed with new steps; and invalid contents (ids >= vocab, bad slots, offsets beyond max_tokens, bad
// accept counts) must give kDeadId ids and exact error counts. The scenarios are those tests/unit/core/
// test_hash_step.cpp runs on the kernels' per-thread code on the CPU (tests/support/hash_runner.hpp); here they
// go through the real launches. Skips without a GPU (the int32 refusal runs everywhere).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "cuda/hash_kernel.cuh"
#include "cuda_test_support.hpp"
#include "support/hash_runner.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;
using testing::FuzzStep;
using testing::HashCase;
using testing::RunnerIds;
using testing::StepFuzzer;
using testing::TestSequence;

constexpr uint8_t kPoisonByte = 0x5A;

template <typename T>
void upload(DeviceBuffer<T>& d, const T* h, size_t n) {
  if (n == 0) return;
  ASSERT_CUDA_OK(cudaMemcpy(d.get(), h, n * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  upload(d, h.data(), h.size());
}
template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) {
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

// A host batch copied to the device (each array at least one element).
struct DeviceBatch {
  DeviceBuffer<int32_t> qsl, slots;
  DeviceBuffer<int64_t> tokens, lookback;
  DeviceBuffer<uint8_t> mask;
  HashBatch b;
  DeviceBatch(const HashBatch& h, int w)
      : qsl(static_cast<size_t>(h.n_requests) + 1), slots(std::max<int32_t>(1, h.n_requests)),
        tokens(static_cast<size_t>(std::max<int64_t>(1, h.max_tokens))),
        lookback(static_cast<size_t>(std::max<int64_t>(1, h.lookback_rows * w))),
        mask(static_cast<size_t>(std::max<int64_t>(1, h.max_tokens))), b(h) {
    upload(qsl, h.query_start_loc, static_cast<size_t>(h.n_requests) + 1);
    upload(tokens, h.tokens, static_cast<size_t>(h.max_tokens));
    upload(lookback, h.lookback, static_cast<size_t>(h.lookback_rows * w));
    b.query_start_loc = qsl.get();
    b.tokens = tokens.get();
    b.lookback = lookback.get();
    if (h.dead_mask) {
      upload(mask, h.dead_mask, static_cast<size_t>(h.max_tokens));
      b.dead_mask = mask.get();
    }
    if (h.lookback_slot) {
      upload(slots, h.lookback_slot, static_cast<size_t>(h.n_requests));
      b.lookback_slot = slots.get();
    }
  }
};

// The real launches on a non-blocking stream, every result copied back.
class GpuStepRunner final : public testing::StepRunner {
 public:
  GpuStepRunner(std::unique_ptr<cuda::DeviceHasher> d, cudaStream_t s) : d_(std::move(d)), s_(s) {}
  int id_bytes() const override { return d_->id_type() == cuda::HashIdType::kInt32 ? 4 : 8; }

  RunnerIds hash(const HashBatch& h, int64_t stride) override {
    const DeviceBatch db(h, d_->window());
    const size_t elem = static_cast<size_t>(id_bytes());
    const size_t n = static_cast<size_t>(stride * d_->n_layers());
    DeviceBuffer<uint8_t> out(std::max<size_t>(1, n * elem));
    DeviceBuffer<unsigned long long> err(1);
    EXPECT_EQ(cudaMemset(out.get(), kPoisonByte, out.bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(err.get(), 0, err.bytes()), cudaSuccess);
    const Status st = d_->launch_hash(db.b, out.get(), stride, err.get(), s_);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const std::vector<uint8_t> raw = download(out.get(), n * elem);
    RunnerIds r;
    r.errors = download(err.get(), 1)[0];
    r.ids.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (elem == 4) {
        int32_t v;
        std::memcpy(&v, raw.data() + i * 4, 4);
        r.ids[i] = v;
      } else {
        std::memcpy(&r.ids[i], raw.data() + i * 8, 8);
      }
    }
    return r;
  }

  std::vector<int64_t> update(const HashBatch& h, const int32_t* accepted, bool in_place,
                              unsigned long long* errors) override {
    const int w = d_->window();
    const DeviceBatch db(h, w);
    const size_t rows = static_cast<size_t>(h.lookback_rows * w);
    DeviceBuffer<int32_t> acc(std::max<int32_t>(1, h.n_requests));
    upload(acc, accepted, static_cast<size_t>(h.n_requests));
    DeviceBuffer<int64_t> second(std::max<size_t>(1, rows));
    upload(second, h.lookback, rows);
    DeviceBuffer<unsigned long long> err(1);
    EXPECT_EQ(cudaMemset(err.get(), 0, err.bytes()), cudaSuccess);
    int64_t* out = in_place ? const_cast<int64_t*>(db.b.lookback) : second.get();
    const Status st = d_->launch_update_lookback(db.b, acc.get(), out, err.get(), s_);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    *errors += download(err.get(), 1)[0];
    return download(static_cast<const int64_t*>(out), rows);
  }

  std::vector<int64_t> reset(const std::vector<int64_t>& rows, int64_t n_rows, const std::vector<int32_t>& slots,
                             int32_t n, unsigned long long* errors) override {
    DeviceBuffer<int64_t> d_rows(std::max<size_t>(1, rows.size()));
    upload(d_rows, rows);
    DeviceBuffer<int32_t> d_slots(std::max<size_t>(1, slots.size()));
    upload(d_slots, slots);
    DeviceBuffer<unsigned long long> err(1);
    EXPECT_EQ(cudaMemset(err.get(), 0, err.bytes()), cudaSuccess);
    const Status st = d_->launch_reset_lookback(d_rows.get(), n_rows, slots.empty() ? nullptr : d_slots.get(), n,
                                                err.get(), s_);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    *errors += download(err.get(), 1)[0];
    return download(d_rows.get(), rows.size());
  }

 private:
  std::unique_ptr<cuda::DeviceHasher> d_;
  cudaStream_t s_;
};

class HashKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    ENGRAM_REQUIRE_GPU();
    ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    make_ = [this](const NgramHashParams& p, bool int32_ids) -> std::unique_ptr<testing::StepRunner> {
      auto d = cuda::DeviceHasher::create(p, int32_ids ? cuda::HashIdType::kInt32 : cuda::HashIdType::kInt64);
      EXPECT_TRUE(d.is_ok()) << d.status().to_string();
      if (!d.is_ok()) return nullptr;
      EXPECT_EQ((*d)->window(), p.max_ngram - 1);
      return std::make_unique<GpuStepRunner>(std::move(*d), s_);
    };
  }
  void TearDown() override {
    if (s_) cudaStreamDestroy(s_);
  }

  cudaStream_t s_ = nullptr;
  testing::MakeRunner make_;
  std::mt19937_64 rng_{testing::fresh_seed()};
};

TEST_F(HashKernel, FuzzedBatchesEqualTheCpuReference) { testing::check_fuzzed_steps(make_, rng_); }

TEST_F(HashKernel, DefaultTextEqualsTheCpuReference) {
  testing::check_text_steps(make_, default_token_file_path(), "default text", rng_);
}

TEST_F(HashKernel, CorpusEqualsTheCpuReference) {
  testing::check_text_steps(make_, testing::corpus_test_tokens_path(),
                            "corpus (scripts/tokenize-corpus; ENGRAM_CORPUS_DIR)", rng_);
}

TEST_F(HashKernel, BenchmarkShapesEqualTheCpuReference) {
  auto layout = make_preset_layout("v41-flash");
  ASSERT_TRUE(layout.is_ok());
  auto h = NgramHasher::create(*layout, testing::random_table(rng_, 129280, 0.75));
  ASSERT_TRUE(h.is_ok());
  auto run = make_(ngram_hash_params(*h, HashIdKind::kGlobalRow), false);
  ASSERT_TRUE(run);
  testing::check_benchmark_shapes(*run, *h, rng_);
}

TEST_F(HashKernel, InvalidContentsGiveDeadIdsAndExactCounts) {
  const NgramHasher h = testing::make_hasher(testing::hash_cases(rng_)[1]);  // N = 5, 3 layers
  auto run = make_(ngram_hash_params(h, HashIdKind::kGlobalRow), false);
  ASSERT_TRUE(run);
  testing::check_invalid_contents(*run, h, rng_);
}

TEST_F(HashKernel, CapturedGraphReplaysNewStepsExactly) {
  const HashCase c = testing::hash_cases(rng_)[0];
  const NgramHasher h = testing::make_hasher(c);
  auto d = cuda::DeviceHasher::create(ngram_hash_params(h, HashIdKind::kGlobalRow));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  const auto& dh = *d;
  const int heads = c.layout.heads();
  const int w = c.layout.max_ngram - 1;
  const int32_t kRequests = 8;
  const int64_t kMaxTokens = 256;  // >= 8 requests x (16 prefill + 4 draft)
  std::vector<TestSequence> seqs;
  for (int i = 0; i < kRequests; ++i) seqs.push_back(testing::random_sequence(rng_, 20 + rng_() % 120, c.table.vocab_size(), 0.05));
  testing::FuzzOptions o;
  o.use_slots = false;  // every step has all 8 requests (finished ones empty): n_requests stays fixed
  o.max_prefill_chunk = 16;
  StepFuzzer fz(std::move(seqs), w, rng_, c.table.vocab_size(), o);
  std::vector<int64_t> lookback = fz.initial_lookback();

  // Fixed device buffers the graph reads and writes.
  DeviceBuffer<int32_t> qsl(kRequests + 1), accepted(kRequests);
  DeviceBuffer<int64_t> tokens(kMaxTokens), d_lookback(lookback.size()), out(kMaxTokens * heads * c.layout.n_layers());
  DeviceBuffer<uint8_t> mask(kMaxTokens);
  DeviceBuffer<unsigned long long> err(1);
  upload(d_lookback, lookback);
  ASSERT_CUDA_OK(cudaMemset(err.get(), 0, err.bytes()));
  HashBatch b;
  b.n_requests = kRequests;
  b.max_tokens = kMaxTokens;
  b.query_start_loc = qsl.get();
  b.tokens = tokens.get();
  b.dead_mask = mask.get();
  b.lookback = d_lookback.get();
  b.lookback_rows = fz.lookback_rows();

  ASSERT_CUDA_OK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeGlobal));
  const Status hs = dh->launch_hash(b, out.get(), 0, err.get(), s_);
  const Status us = dh->launch_update_lookback(b, accepted.get(), d_lookback.get(), err.get(), s_);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamEndCapture(s_, &graph));
  ASSERT_TRUE(hs.is_ok()) << hs.to_string();
  ASSERT_TRUE(us.is_ok()) << us.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  int replays = 0;
  while (!fz.done()) {
    FuzzStep st = fz.next();
    ASSERT_LE(st.n_tokens(), kMaxTokens);
    ASSERT_EQ(st.n_requests(), kRequests);
    st.use_mask = true;  // the graph always reads the mask buffer
    st.tokens.resize(static_cast<size_t>(kMaxTokens), 1);
    st.dead_mask.resize(static_cast<size_t>(kMaxTokens), 0);
    st.max_tokens = kMaxTokens;
    std::vector<int64_t> want(static_cast<size_t>(kMaxTokens * heads * c.layout.n_layers()), 0);
    ASSERT_TRUE(hash_batch_reference(h, st.batch(lookback.data(), fz.lookback_rows()), HashIdKind::kGlobalRow,
                                     want.data()).is_ok());
    ASSERT_TRUE(update_lookback_reference(w, st.batch(lookback.data(), fz.lookback_rows()), st.accepted.data(),
                                          lookback.data()).is_ok());
    upload(qsl, st.query_start_loc);
    upload(accepted, st.accepted);
    upload(tokens, st.tokens);
    upload(mask, st.dead_mask);
    ASSERT_CUDA_OK(cudaMemset(out.get(), kPoisonByte, out.bytes()));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, s_));
    ASSERT_CUDA_OK(cudaStreamSynchronize(s_));
    const auto got = download(out.get(), want.size());
    for (int l = 0; l < c.layout.n_layers(); ++l)
      for (int64_t i = 0; i < kMaxTokens * heads; ++i) {
        const size_t k = static_cast<size_t>(l * kMaxTokens * heads + i);
        if (i < st.n_tokens() * heads) {
          ASSERT_EQ(got[k], want[k]) << "replay " << replays << " layer " << l << " entry " << i;
        } else {
          ASSERT_EQ(got[k], 0x5A5A5A5A5A5A5A5ALL) << "replay " << replays << " wrote beyond its tokens";
        }
      }
    ASSERT_EQ(download(d_lookback.get(), lookback.size()), lookback) << "replay " << replays;
    ++replays;
  }
  EXPECT_GT(replays, 3);
  EXPECT_EQ(download(err.get(), 1)[0], 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(HashKernel, BadShapesFailBeforeAnyLaunch) {
  const HashCase c = testing::hash_cases(rng_)[2];
  const NgramHasher h = testing::make_hasher(c);
  auto d = cuda::DeviceHasher::create(ngram_hash_params(h, HashIdKind::kGlobalRow));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  const auto& dh = *d;
  DeviceBuffer<int32_t> qsl(2);
  DeviceBuffer<int64_t> tok(4), lb(4), out(64);
  ASSERT_CUDA_OK(cudaMemset(qsl.get(), 0, qsl.bytes()));  // an empty request: the one good launch writes nothing
  HashBatch b;
  b.n_requests = 1;
  b.max_tokens = 4;
  b.query_start_loc = qsl.get();
  b.tokens = tok.get();
  b.lookback = lb.get();
  b.lookback_rows = 4;
  auto code = [&](const HashBatch& x, void* o, int64_t stride) { return dh->launch_hash(x, o, stride, nullptr, s_).code(); };
  EXPECT_EQ(code(b, out.get(), 0), Code::kOk);
  EXPECT_EQ(code(b, nullptr, 0), Code::kInvalidArgument);
  EXPECT_EQ(code(b, out.get(), 4 * c.layout.heads() - 1), Code::kInvalidArgument);
  HashBatch x = b;
  x.n_requests = -2;
  EXPECT_EQ(code(x, out.get(), 0), Code::kInvalidArgument);
  x = b;
  x.tokens = nullptr;
  EXPECT_EQ(code(x, out.get(), 0), Code::kInvalidArgument);
  x = b;
  x.lookback_rows = 0;
  EXPECT_EQ(code(x, out.get(), 0), Code::kInvalidArgument);
  EXPECT_EQ(dh->launch_update_lookback(b, nullptr, nullptr, nullptr, s_).code(), Code::kInvalidArgument);
  EXPECT_EQ(dh->launch_reset_lookback(lb.get(), 4, nullptr, -1, nullptr, s_).code(), Code::kInvalidArgument);
  EXPECT_EQ(dh->launch_reset_lookback(nullptr, 4, nullptr, 2, nullptr, s_).code(), Code::kInvalidArgument);
  ASSERT_CUDA_OK(cudaStreamSynchronize(s_));
}

// Runs without a GPU: the refusal happens before anything touches the device.
TEST(HashKernelCreate, Int32IsRefusedWhenALayerHasMoreThan2To31Rows) {
  const EngramLayout big = testing::hash_layout({1}, 2, 2, int64_t{1} << 31);  // 2 heads of > 2^31 rows
  auto h = NgramHasher::create_precompressed(big, 1000);
  ASSERT_TRUE(h.is_ok());
  auto d = cuda::DeviceHasher::create(ngram_hash_params(*h, HashIdKind::kGlobalRow), cuda::HashIdType::kInt32);
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("int32 ids requested"), std::string::npos) << d.status().message();
  // Inconsistent parameters are refused before the device is touched, too.
  auto bad_params = ngram_hash_params(*h, HashIdKind::kGlobalRow);
  bad_params.heads = 3;
  auto d2 = cuda::DeviceHasher::create(bad_params, cuda::HashIdType::kInt64);
  EXPECT_EQ(d2.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram
