// Description: the per-thread code of the CUDA hash kernels (core/hash_step.hpp), run on the CPU over every thread
// index of the kernels' grids, must give the CPU reference's ids (core/hash_batch.hpp) bit for bit on fuzzed
// batches (int64 and int32, global and head-local ids, look-back slots or rows in order, DEAD tokens, rejected
// drafts), on the benchmark's shapes and on the default text and the corpus (skipped with the reason when their
// token files are absent), write nothing beyond the step's tokens, leave the look-back rows of the reference
// update, and turn invalid contents into kDeadId ids with exact error counts; make_hash_step_tables must refuse
// inconsistent params and int32 ids for layers of more than 2^31 rows. This is the kernels' logic checked on any
// machine; tests/cuda/test_hash_kernel.cpp runs the same scenarios through the real launches on a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "engram/hash_batch.hpp"
#include "core/hash_step.hpp"
#include "engram/ngram_hash.hpp"
#include "support/hash_runner.hpp"

namespace engram {
namespace {

using testing::RunnerIds;

// The kernels of src/cuda/hash_kernel.cu with their grids, one thread after another.
class CpuStepRunner final : public testing::StepRunner {
 public:
  CpuStepRunner(HashStepTables t, bool int32_ids) : t_(std::move(t)), int32_(int32_ids) {
    c_ = t_.consts(t_.words.data(), t_.canonical.data());
  }
  int id_bytes() const override { return int32_ ? 4 : 8; }

  RunnerIds hash(const HashBatch& b, int64_t stride) override {
    EXPECT_TRUE(check_hash_batch_shape(b, c_.heads, c_.n_layers, "test").is_ok());
    const size_t n = static_cast<size_t>(stride * c_.n_layers);
    RunnerIds r;
    if (int32_) {
      std::vector<int32_t> out(n, static_cast<int32_t>(testing::id_poison(4)));
      r.errors = run_grid(b, out.data(), stride);
      r.ids.assign(out.begin(), out.end());
    } else {
      r.ids.assign(n, testing::id_poison(8));
      r.errors = run_grid(b, r.ids.data(), stride);
    }
    return r;
  }

  std::vector<int64_t> update(const HashBatch& b, const int32_t* accepted, bool in_place,
                              unsigned long long* errors) override {
    const int w = c_.max_ngram - 1;
    std::vector<int64_t> rows(b.lookback, b.lookback + b.lookback_rows * w);
    std::vector<int64_t> second = rows;
    HashBatch bb = b;
    bb.lookback = rows.data();
    int64_t* out = in_place ? rows.data() : second.data();
    for (int32_t r = 0; r < b.n_requests; ++r)
      if (!lookback_step_request(bb, w, accepted, out, r)) ++*errors;
    return in_place ? rows : second;
  }

  std::vector<int64_t> reset(const std::vector<int64_t>& rows, int64_t n_rows, const std::vector<int32_t>& slots,
                             int32_t n, unsigned long long* errors) override {
    std::vector<int64_t> out = rows;
    for (int32_t i = 0; i < n; ++i)
      if (!lookback_reset_slot(out.data(), n_rows, c_.max_ngram - 1, slots.empty() ? nullptr : slots.data(), i))
        ++*errors;
    return out;
  }

 private:
  // launch_hash: nothing for 0 requests; else ceil(max_tokens * heads / 256) blocks (at least 1) per layer.
  template <typename OutT>
  unsigned long long run_grid(const HashBatch& b, OutT* out, int64_t stride) {
    if (b.n_requests == 0) return 0;
    const int64_t per_layer = b.max_tokens * c_.heads;
    const int64_t threads = std::max<int64_t>(1, (per_layer + 255) / 256) * 256;
    unsigned long long errors = 0;
    for (int l = 0; l < c_.n_layers; ++l)
      for (int64_t x = 0; x < threads; ++x) errors += hash_step_thread<OutT>(b, c_, out, stride, l, x);
    return errors;
  }

  HashStepTables t_;
  HashStepConsts c_;
  bool int32_;
};

std::unique_ptr<testing::StepRunner> make_cpu_runner(const NgramHashParams& p, bool int32_ids) {
  auto t = make_hash_step_tables(p, int32_ids);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return nullptr;
  return std::make_unique<CpuStepRunner>(std::move(*t), int32_ids);
}

class HashStep : public ::testing::Test {
 protected:
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(HashStep, FuzzedBatchesEqualTheCpuReference) { testing::check_fuzzed_steps(make_cpu_runner, rng_); }

TEST_F(HashStep, DefaultTextEqualsTheCpuReference) {
  testing::check_text_steps(make_cpu_runner, default_token_file_path(), "default text", rng_);
}

TEST_F(HashStep, CorpusEqualsTheCpuReference) {
  testing::check_text_steps(make_cpu_runner, testing::corpus_test_tokens_path(),
                            "corpus (scripts/tokenize-corpus; ENGRAM_CORPUS_DIR)", rng_);
}

TEST_F(HashStep, BenchmarkShapesEqualTheCpuReference) {
  auto layout = make_preset_layout("v41-flash");
  ASSERT_TRUE(layout.is_ok());
  auto h = NgramHasher::create(*layout, testing::random_table(rng_, 129280, 0.75));
  ASSERT_TRUE(h.is_ok());
  auto run = make_cpu_runner(ngram_hash_params(*h, HashIdKind::kGlobalRow), false);
  ASSERT_TRUE(run);
  testing::check_benchmark_shapes(*run, *h, rng_);
}

TEST_F(HashStep, InvalidContentsGiveDeadIdsAndExactCounts) {
  const NgramHasher h = testing::make_hasher(testing::hash_cases(rng_)[1]);  // N = 5, 3 layers
  auto run = make_cpu_runner(ngram_hash_params(h, HashIdKind::kGlobalRow), false);
  ASSERT_TRUE(run);
  testing::check_invalid_contents(*run, h, rng_);
}

TEST(HashStepTables, RefuseInconsistentParamsAndInt32ForLayersOver2To31Rows) {
  const EngramLayout big = testing::hash_layout({1}, 2, 2, int64_t{1} << 31);  // 2 heads of > 2^31 rows
  auto h = NgramHasher::create_precompressed(big, 1000);
  ASSERT_TRUE(h.is_ok());
  const NgramHashParams p = ngram_hash_params(*h, HashIdKind::kGlobalRow);
  EXPECT_TRUE(make_hash_step_tables(p, false).is_ok());
  auto t32 = make_hash_step_tables(p, true);
  ASSERT_FALSE(t32.is_ok());
  EXPECT_EQ(t32.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t32.status().message().find("int32 ids requested"), std::string::npos) << t32.status().message();
  // The V4.1-Flash layout (about 384 M rows per layer) fits int32.
  auto flash = make_preset_layout("v41-flash");
  ASSERT_TRUE(flash.is_ok());
  auto hf = NgramHasher::create_precompressed(*flash, 98627);
  ASSERT_TRUE(hf.is_ok());
  EXPECT_TRUE(make_hash_step_tables(ngram_hash_params(*hf, HashIdKind::kGlobalRow), true).is_ok());
  auto bad = [&](auto mutate) {
    NgramHashParams q = p;
    mutate(q);
    return make_hash_step_tables(q, false).status().code();
  };
  EXPECT_EQ(bad([](NgramHashParams& q) { q.heads = 3; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](NgramHashParams& q) { q.max_ngram = 17; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](NgramHashParams& q) { q.multipliers.pop_back(); }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](NgramHashParams& q) { q.head_rows[0] = 0; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](NgramHashParams& q) { q.canonical.assign(5, 0); }), Code::kInvalidArgument);
  // The layout of the words: multipliers, head rows, Barrett constants, offsets.
  auto t = make_hash_step_tables(p, false);
  ASSERT_TRUE(t.is_ok());
  const HashStepConsts c = t->consts(t->words.data(), nullptr);
  EXPECT_EQ(c.mult[1], static_cast<uint64_t>(h->multipliers(0)[1]));
  EXPECT_EQ(c.rows[1], static_cast<uint64_t>(big.head_rows[0][1]));
  EXPECT_EQ(c.magic[1], make_fast_mod(static_cast<uint64_t>(big.head_rows[0][1])));
  EXPECT_EQ(c.offs[1], big.head_offsets[0][1]);
  EXPECT_EQ(c.canonical, nullptr);
}

}  // namespace
}  // namespace engram
