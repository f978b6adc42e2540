// Description: the CUDA hash kernel (cuda/hash_kernel.cuh) must produce, bit for bit, the ids of the CPU batch
// reference (core/hash_batch.hpp, itself checked against whole-sequence hashing by tests/unit/core) for every step
// of fuzzed batches (random composition and order, chunked prefill, decode, speculative drafts rejected and rolled
// back, prefix-cache starts, DEAD tokens by id and by mask, look-back slots or rows in order with empty padding
// requests), in int64 and int32, global and head-local ids, into poisoned outputs with padded strides (nothing
// beyond the step's tokens written); the look-back update and reset kernels must leave the rows the CPU update
// leaves; on the default text and the corpus (skipped with the reason when their token files are absent); at the
// benchmark's shapes (decode 64 / 512, prefill 8192); inside a captured CUDA graph replayed with new steps; and
// invalid contents (ids >= vocab, bad slots, offsets beyond max_tokens, bad accept counts) must give kDeadId ids and
// exact error counts, never out-of-bounds accesses. Skips without a GPU (the int32 refusal runs everywhere).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/hash_batch.hpp"
#include "core/ngram_hash.hpp"
#include "cuda/hash_kernel.cuh"
#include "cuda_test_support.hpp"
#include "host/token_io.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using testing::DeviceBuffer;
using testing::FuzzStep;
using testing::HashCase;
using testing::StepFuzzer;
using testing::TestSequence;

constexpr uint8_t kPoisonByte = 0x5A;

template <typename T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  if (h.empty()) return;
  ASSERT_CUDA_OK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) {
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

// A step's batch copied to the device (buffers sized for it, at least one element each).
struct DeviceStep {
  DeviceBuffer<int32_t> qsl, slots, accepted;
  DeviceBuffer<int64_t> tokens;
  DeviceBuffer<uint8_t> mask;
  explicit DeviceStep(const FuzzStep& st)
      : qsl(st.query_start_loc.size()), slots(std::max<size_t>(1, st.slots.size())),
        accepted(std::max<size_t>(1, st.accepted.size())), tokens(std::max<size_t>(1, st.tokens.size())),
        mask(std::max<size_t>(1, st.dead_mask.size())) {
    upload(qsl, st.query_start_loc);
    upload(slots, st.slots);
    upload(accepted, st.accepted);
    upload(tokens, st.tokens);
    upload(mask, st.dead_mask);
  }
  HashBatch batch(const FuzzStep& st, const int64_t* lookback, int64_t rows) const {
    HashBatch b = st.batch(lookback, rows);
    b.query_start_loc = qsl.get();
    b.tokens = tokens.get();
    b.dead_mask = st.use_mask ? mask.get() : nullptr;
    b.lookback_slot = st.slots.empty() ? nullptr : slots.get();
    return b;
  }
};

// The kernel's ids of one layout of [layers][stride] widened to int64, and whether every byte it should not have
// written is still poison.
struct KernelIds {
  std::vector<int64_t> ids;
  bool poison_intact = true;
  unsigned long long errors = 0;
};

KernelIds run_kernel(const cuda::DeviceHasher& dh, const HashBatch& b, int64_t stride, int64_t n_tokens,
                     cudaStream_t s) {
  KernelIds k;
  const size_t elem = dh.id_type() == cuda::HashIdType::kInt32 ? 4 : 8;
  const size_t n = static_cast<size_t>(stride * dh.n_layers());
  DeviceBuffer<uint8_t> out(std::max<size_t>(1, n * elem));
  DeviceBuffer<unsigned long long> err(1);
  EXPECT_EQ(cudaMemset(out.get(), kPoisonByte, out.bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(err.get(), 0, err.bytes()), cudaSuccess);
  const Status st = dh.launch_hash(b, out.get(), stride, err.get(), s);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<uint8_t> raw = download(out.get(), n * elem);
  k.errors = download(err.get(), 1)[0];
  k.ids.assign(n, 0);
  const int64_t written = n_tokens * dh.heads();
  for (size_t i = 0; i < n; ++i) {
    const bool in_step = static_cast<int64_t>(i % static_cast<size_t>(stride)) < written;
    if (elem == 4) {
      int32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      k.ids[i] = v;
    } else {
      std::memcpy(&k.ids[i], raw.data() + i * 8, 8);
    }
    if (!in_step)
      for (size_t j = 0; j < elem; ++j) k.poison_intact = k.poison_intact && raw[i * elem + j] == kPoisonByte;
  }
  return k;
}

class HashKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    ENGRAM_REQUIRE_GPU();
    ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (s_) cudaStreamDestroy(s_);
  }

  std::unique_ptr<cuda::DeviceHasher> device_hasher(const NgramHasher& h, HashIdKind kind, cuda::HashIdType t) {
    auto d = cuda::DeviceHasher::create(ngram_hash_params(h, kind), t);
    EXPECT_TRUE(d.is_ok()) << d.status().to_string();
    return d.is_ok() ? std::move(*d) : nullptr;
  }

  // Every step of `fz` through the CPU reference and the kernels: ids bit for bit (all tokens of the step, drafts
  // included), poison, no errors, look-back rows after the update kernel equal to the CPU update's. Returns steps.
  int run_fuzz(const NgramHasher& h, const cuda::DeviceHasher& dh, StepFuzzer& fz, HashIdKind kind) {
    const int heads = h.layout().heads();
    const int layers = h.layout().n_layers();
    const int w = h.layout().max_ngram - 1;
    std::vector<int64_t> lookback = fz.initial_lookback();
    DeviceBuffer<int64_t> d_lookback(lookback.size());
    DeviceBuffer<int64_t> d_lookback2(lookback.size());
    DeviceBuffer<unsigned long long> d_err(1);
    upload(d_lookback, lookback);
    int steps = 0;
    while (!fz.done()) {
      const FuzzStep st = fz.next();
      const int64_t stride = st.max_tokens * heads + static_cast<int64_t>(rng_() % 5);
      std::vector<int64_t> want(static_cast<size_t>(stride * layers), 0);
      const Status s = hash_batch_reference(h, st.batch(lookback.data(), fz.lookback_rows()), kind, want.data(), stride);
      EXPECT_TRUE(s.is_ok()) << s.to_string();
      if (!s.is_ok()) return steps;
      const DeviceStep ds(st);
      const HashBatch b = ds.batch(st, d_lookback.get(), fz.lookback_rows());
      const KernelIds got = run_kernel(dh, b, stride, st.n_tokens(), s_);
      EXPECT_TRUE(got.poison_intact) << "step " << steps << ": the kernel wrote beyond the step's tokens";
      EXPECT_EQ(got.errors, 0u) << "step " << steps;
      for (int l = 0; l < layers; ++l)
        for (int64_t i = 0; i < st.n_tokens() * heads; ++i) {
          const size_t k = static_cast<size_t>(l * stride + i);
          if (got.ids[k] != want[k]) {
            ADD_FAILURE() << "step " << steps << " layer " << l << " token " << i / heads << " head " << i % heads
                          << ": kernel " << got.ids[k] << ", CPU " << want[k] << " (" << st.n_requests()
                          << " requests, " << st.n_tokens() << " tokens)";
            return steps;
          }
        }
      // Update: CPU in place; the kernel in place or into a second buffer (then copied back).
      EXPECT_TRUE(update_lookback_reference(w, st.batch(lookback.data(), fz.lookback_rows()), st.accepted.data(),
                                            lookback.data()).is_ok());
      const bool in_place = rng_() & 1;
      if (!in_place) {
        EXPECT_EQ(cudaMemcpy(d_lookback2.get(), d_lookback.get(), d_lookback.bytes(), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
      }
      EXPECT_EQ(cudaMemset(d_err.get(), 0, d_err.bytes()), cudaSuccess);
      const Status u = dh.launch_update_lookback(b, ds.accepted.get(), in_place ? d_lookback.get() : d_lookback2.get(),
                                                 d_err.get(), s_);
      EXPECT_TRUE(u.is_ok()) << u.to_string();
      EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
      if (!in_place) {
        EXPECT_EQ(cudaMemcpy(d_lookback.get(), d_lookback2.get(), d_lookback.bytes(), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
      }
      EXPECT_EQ(download(d_err.get(), 1)[0], 0u);
      const std::vector<int64_t> dev_rows = download(d_lookback.get(), lookback.size());
      EXPECT_EQ(dev_rows, lookback) << "step " << steps << ": look-back rows after the update kernel";
      if (dev_rows != lookback) return steps;
      ++steps;
    }
    return steps;
  }

  void run_text(const std::string& path, const std::string& what) {
    auto tokens = read_token_file(path);
    if (!tokens.is_ok()) GTEST_SKIP() << what << " tokens not available: " << tokens.status().message();
    auto table = read_compression_table(default_compression_table_path());
    ASSERT_TRUE(table.is_ok()) << table.status().to_string();
    ASSERT_TRUE(check_token_file_matches_table(*tokens, *table, default_compression_table_path()).is_ok());
    auto layout = make_preset_layout("v41-flash");
    ASSERT_TRUE(layout.is_ok());
    auto h = NgramHasher::create(*layout, std::move(*table));
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    for (cuda::HashIdType t : {cuda::HashIdType::kInt64, cuda::HashIdType::kInt32}) {
      SCOPED_TRACE(what + ", " + cuda::hash_id_type_name(t));
      auto dh = device_hasher(*h, HashIdKind::kGlobalRow, t);
      ASSERT_TRUE(dh);
      testing::FuzzOptions o;
      o.prefix_start_fraction = 0.5;
      StepFuzzer fz(testing::text_sequences(*tokens, 64, 400), layout->max_ngram - 1, rng_, h->vocab_size(), o);
      run_fuzz(*h, *dh, fz, HashIdKind::kGlobalRow);
      EXPECT_TRUE(fz.done());
    }
  }

  cudaStream_t s_ = nullptr;
  std::mt19937_64 rng_{testing::fresh_seed()};
};

TEST_F(HashKernel, FuzzedBatchesEqualTheCpuReference) {
  for (const HashCase& c : testing::hash_cases(rng_)) {
    const NgramHasher h = testing::make_hasher(c);
    for (cuda::HashIdType t : {cuda::HashIdType::kInt64, cuda::HashIdType::kInt32})
      for (HashIdKind kind : {HashIdKind::kGlobalRow, HashIdKind::kHeadLocal})
        for (bool use_slots : {true, false}) {
          SCOPED_TRACE(c.what + ", " + cuda::hash_id_type_name(t) + (kind == HashIdKind::kGlobalRow ? ", global" : ", head-local") +
                       (use_slots ? ", slots" : ", rows in order"));
          auto dh = device_hasher(h, kind, t);
          ASSERT_TRUE(dh);
          EXPECT_EQ(dh->window(), c.layout.max_ngram - 1);
          std::vector<TestSequence> seqs;
          const int n = 3 + static_cast<int>(rng_() % 12);
          for (int i = 0; i < n; ++i)
            seqs.push_back(testing::random_sequence(rng_, 1 + rng_() % 200, c.table.vocab_size(), 0.08));
          // Negative pass-through ids hash as the reference does, on the GPU too.
          seqs[0].tokens[0] = -3;
          testing::FuzzOptions o;
          o.use_slots = use_slots;
          StepFuzzer fz(std::move(seqs), c.layout.max_ngram - 1, rng_, c.table.vocab_size(), o);
          const int steps = run_fuzz(h, *dh, fz, kind);
          EXPECT_TRUE(fz.done()) << "stopped after " << steps << " steps";
        }
  }
}

TEST_F(HashKernel, DefaultTextEqualsTheCpuReference) { run_text(default_token_file_path(), "default text"); }

TEST_F(HashKernel, CorpusEqualsTheCpuReference) {
  const char* dir = std::getenv("ENGRAM_CORPUS_DIR");
  const std::string path = std::string(dir ? dir : ENGRAM_SOURCE_DIR "/build/data/corpus") + "/corpus-test.tokens";
  run_text(path, "corpus (scripts/tokenize-corpus; ENGRAM_CORPUS_DIR)");
}

// One step of `requests` requests with `tokens_each` new tokens each (random ids, no DEAD), fresh look-back rows.
FuzzStep uniform_step(std::mt19937_64& rng, int32_t requests, int32_t tokens_each, int64_t vocab) {
  FuzzStep st;
  st.query_start_loc.push_back(0);
  for (int32_t r = 0; r < requests; ++r) {
    const auto t = testing::random_tokens(rng, static_cast<size_t>(tokens_each), vocab);
    st.tokens.insert(st.tokens.end(), t.begin(), t.end());
    st.query_start_loc.push_back(static_cast<int32_t>(st.tokens.size()));
    st.seq.push_back(r);
    st.first_pos.push_back(0);
    st.real.push_back(tokens_each);
    st.accepted.push_back(tokens_each);
  }
  st.dead_mask.assign(st.tokens.size(), 0);
  st.max_tokens = static_cast<int64_t>(st.tokens.size());
  return st;
}

TEST_F(HashKernel, BenchmarkShapesEqualTheCpuReference) {
  auto layout = make_preset_layout("v41-flash");
  ASSERT_TRUE(layout.is_ok());
  CompressionTable table = testing::random_table(rng_, 129280, 0.75);
  auto h = NgramHasher::create(*layout, table);
  ASSERT_TRUE(h.is_ok());
  auto dh = device_hasher(*h, HashIdKind::kGlobalRow, cuda::HashIdType::kInt64);
  ASSERT_TRUE(dh);
  const int w = layout->max_ngram - 1;
  for (auto [requests, each] : {std::pair{64, 1}, std::pair{512, 1}, std::pair{1, 8192}}) {
    SCOPED_TRACE(std::to_string(requests) + " x " + std::to_string(each) + " tokens");
    const FuzzStep st = uniform_step(rng_, requests, each, table.vocab_size());
    // Look-back rows of random prefixes (some shorter than N-1).
    std::vector<int64_t> lookback(static_cast<size_t>(requests * w));
    for (int r = 0; r < requests; ++r) {
      const auto prefix = testing::random_tokens(rng_, rng_() % 6, table.vocab_size());
      lookback_of_prefix(prefix.data(), static_cast<int64_t>(prefix.size()), w, lookback.data() + r * w);
    }
    const int64_t stride = st.max_tokens * layout->heads();
    std::vector<int64_t> want(static_cast<size_t>(stride * 2));
    ASSERT_TRUE(hash_batch_reference(*h, st.batch(lookback.data(), requests), HashIdKind::kGlobalRow, want.data()).is_ok());
    DeviceBuffer<int64_t> dl(lookback.size());
    upload(dl, lookback);
    const DeviceStep ds(st);
    const KernelIds got = run_kernel(*dh, ds.batch(st, dl.get(), requests), stride, st.n_tokens(), s_);
    EXPECT_EQ(got.errors, 0u);
    EXPECT_EQ(got.ids, want);
  }
}

TEST_F(HashKernel, CapturedGraphReplaysNewStepsExactly) {
  const HashCase c = testing::hash_cases(rng_)[0];
  const NgramHasher h = testing::make_hasher(c);
  auto dh = device_hasher(h, HashIdKind::kGlobalRow, cuda::HashIdType::kInt64);
  ASSERT_TRUE(dh);
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

TEST_F(HashKernel, InvalidContentsGiveDeadIdsAndExactCounts) {
  const HashCase c = testing::hash_cases(rng_)[1];  // N=5, 3 layers
  const NgramHasher h = testing::make_hasher(c);
  auto dh = device_hasher(h, HashIdKind::kGlobalRow, cuda::HashIdType::kInt64);
  ASSERT_TRUE(dh);
  const int heads = c.layout.heads();
  const int layers = c.layout.n_layers();
  const int k_heads = c.layout.heads_per_order;
  const int w = c.layout.max_ngram - 1;
  const int64_t vocab = c.table.vocab_size();
  // Three requests of 10 tokens, rows 0..2; request 0 gets a bad new token at chunk index 3, request 1 a bad
  // look-back id at row index 1, request 2 a slot out of range.
  FuzzStep st = uniform_step(rng_, 3, 10, vocab);
  st.slots = {0, 1, 7};
  std::vector<int64_t> lookback = testing::random_tokens(rng_, static_cast<size_t>(3 * w), vocab);
  FuzzStep good = st;
  good.slots = {0, 1, 2};
  std::vector<int64_t> want(static_cast<size_t>(30 * heads * layers));
  ASSERT_TRUE(hash_batch_reference(h, good.batch(lookback.data(), 3), HashIdKind::kGlobalRow, want.data()).is_ok());
  st.tokens[3] = vocab + 11;
  lookback[static_cast<size_t>(1 * w + 1)] = vocab;
  // Expected: an id of chunk position i and order n is kDeadId when its walk [i-n+1, i] reaches the bad position
  // q (chunk index, or w - look-back index below 0).
  unsigned long long dead = 0;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 10; ++i)
      for (int hd = 0; hd < heads; ++hd) {
        const int n = hd / k_heads + 2;
        const int q = r == 0 ? 3 : 1 - w;
        const bool bad = r == 2 || (i - n + 1 <= q && q <= i);
        if (!bad) continue;
        for (int l = 0; l < layers; ++l) want[static_cast<size_t>(l * 30 * heads + (r * 10 + i) * heads + hd)] = kDeadId;
        dead += static_cast<unsigned long long>(layers);
      }
  DeviceBuffer<int64_t> dl(lookback.size());
  upload(dl, lookback);
  const DeviceStep ds(st);
  HashBatch b = ds.batch(st, dl.get(), 3);
  KernelIds got = run_kernel(*dh, b, 30 * heads, 30, s_);
  EXPECT_EQ(got.ids, want);
  EXPECT_EQ(got.errors, dead);

  // Offsets that claim more tokens than max_tokens: the ids beyond are not written (the stride keeps room for
  // them: still poison), and counted.
  b.max_tokens = 25;
  got = run_kernel(*dh, b, 30 * heads, 25, s_);
  EXPECT_TRUE(got.poison_intact);
  unsigned long long dead25 = 0;
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < 25 * heads; ++i) {
      const size_t k = static_cast<size_t>(l * 30 * heads + i);
      EXPECT_EQ(got.ids[k], want[k]) << "layer " << l << " entry " << i;
      dead25 += got.ids[k] == kDeadId;
    }
  EXPECT_EQ(got.errors, dead25 + static_cast<unsigned long long>(5 * heads * layers));

  // The update: request 2's slot and request 0's accept count are invalid; only request 1's row advances.
  const std::vector<int32_t> acc = {11, 4, 2};
  DeviceBuffer<int32_t> dacc(3);
  upload(dacc, acc);
  DeviceBuffer<unsigned long long> err(1);
  ASSERT_CUDA_OK(cudaMemset(err.get(), 0, err.bytes()));
  b.max_tokens = 30;
  ASSERT_TRUE(dh->launch_update_lookback(b, dacc.get(), dl.get(), err.get(), s_).is_ok());
  ASSERT_CUDA_OK(cudaStreamSynchronize(s_));
  EXPECT_EQ(download(err.get(), 1)[0], 2u);
  std::vector<int64_t> rows = lookback;
  for (int j = 0; j < w; ++j) rows[static_cast<size_t>(w + j)] = st.tokens[static_cast<size_t>(10 + 4 - w + j)];
  EXPECT_EQ(download(dl.get(), rows.size()), rows);

  // Reset: rows 2 and 0 become DEAD, slot 9 is out of range and counted.
  const std::vector<int32_t> reset_slots = {2, 9, 0};
  DeviceBuffer<int32_t> drs(3);
  upload(drs, reset_slots);
  ASSERT_CUDA_OK(cudaMemset(err.get(), 0, err.bytes()));
  ASSERT_TRUE(dh->launch_reset_lookback(dl.get(), 3, drs.get(), 3, err.get(), s_).is_ok());
  ASSERT_CUDA_OK(cudaStreamSynchronize(s_));
  EXPECT_EQ(download(err.get(), 1)[0], 1u);
  for (int j = 0; j < w; ++j) rows[static_cast<size_t>(j)] = rows[static_cast<size_t>(2 * w + j)] = kDeadToken;
  EXPECT_EQ(download(dl.get(), rows.size()), rows);
  ASSERT_TRUE(dh->launch_reset_lookback(dl.get(), 3, nullptr, 3, nullptr, s_).is_ok());
  ASSERT_CUDA_OK(cudaStreamSynchronize(s_));
  EXPECT_EQ(download(dl.get(), rows.size()), std::vector<int64_t>(rows.size(), kDeadToken));
}

TEST_F(HashKernel, BadShapesFailBeforeAnyLaunch) {
  const HashCase c = testing::hash_cases(rng_)[2];
  const NgramHasher h = testing::make_hasher(c);
  auto dh = device_hasher(h, HashIdKind::kGlobalRow, cuda::HashIdType::kInt64);
  ASSERT_TRUE(dh);
  DeviceBuffer<int32_t> qsl(2);
  DeviceBuffer<int64_t> tok(4), lb(4), out(64);
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
