// Description: TextIdSource serves, step by step, exactly the reference ids of each slot's text (the
// whole-sequence hash of the tokens it has read), starts a new sequence at document boundaries and after
// seq_len tokens, rejects out-of-order steps and foreign vocabularies; the N-gram statistics count
// distinct ids, top-k share and in-batch repeats correctly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "replay/text_id_source.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

// Random compression tables (about 2/3 of the ids kept) and token files of the shared hashing helpers.
CompressionTable random_table(std::mt19937_64& rng, int64_t vocab) { return testing::random_table(rng, vocab, 0.67); }
using testing::random_token_file;

class TextIdSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = make_preset_layout("tiny");
    ASSERT_TRUE(l.is_ok());
    layout_ = *l;
    auto h = NgramHasher::create(layout_, random_table(rng_, 300), NgramHashOptions{.seed = static_cast<int64_t>(rng_() % 1000)});
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    hasher_.emplace(std::move(*h));
  }
  // Global ids of the last token of tokens[begin, end) hashed as one sequence, for layer li.
  std::vector<int64_t> last_ids(const TokenFile& tf, int64_t begin, int64_t end, int li) {
    std::vector<int64_t> seq(tf.ids.begin() + begin, tf.ids.begin() + end);
    std::vector<int64_t> out(seq.size() * layout_.heads());
    EXPECT_TRUE(hasher_->hash(seq, li, out).is_ok());
    return std::vector<int64_t>(out.end() - layout_.heads(), out.end());
  }
  std::mt19937_64 rng_{std::random_device{}()};
  EngramLayout layout_;
  std::optional<NgramHasher> hasher_;
};

TEST_F(TextIdSourceTest, StepsEqualWholeSequenceIdsOfEachSlot) {
  // One long document, no seq_len cut inside the run: slot b reads from b*N/B on.
  const TokenFile tf = random_token_file(rng_, {400}, 300);
  auto src = TextIdSource::create(*hasher_, tf, TextIdSourceOptions{.seq_len = 1000});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  const int batch = 4;
  std::vector<std::vector<int64_t>> ids;
  const int heads = layout_.heads();
  for (int64_t step = 0; step < 60; ++step) {
    ASSERT_TRUE((*src)->next_step(step, batch, ids).is_ok());
    for (int b = 0; b < batch; ++b) {
      const int64_t start = b * 400 / batch;
      for (int li = 0; li < layout_.n_layers(); ++li) {
        const auto want = last_ids(tf, start, start + step + 1, li);
        const std::vector<int64_t> got(ids[li].begin() + b * heads, ids[li].begin() + (b + 1) * heads);
        ASSERT_EQ(got, want) << "step " << step << " slot " << b;
      }
    }
  }
  const NgramStats s = (*src)->stats();
  EXPECT_EQ(s.batches, 60);
  EXPECT_EQ(s.heads[0][0].lookups, 60 * batch);
}

TEST_F(TextIdSourceTest, NewSequenceAtDocumentBoundaryAndAfterSeqLen) {
  const TokenFile tf = random_token_file(rng_, {10, 50}, 300);
  auto src = TextIdSource::create(*hasher_, tf, TextIdSourceOptions{.seq_len = 20});
  ASSERT_TRUE(src.is_ok());
  std::vector<std::vector<int64_t>> ids;
  const int heads = layout_.heads();
  // One slot from token 0: doc 0 is tokens 0..9, doc 1 starts at 10; with seq_len 20, doc 1's first
  // sequence is tokens 10..29 and the next starts at 30.
  for (int64_t step = 0; step < 45; ++step) {
    ASSERT_TRUE((*src)->next_step(step, 1, ids).is_ok());
    const int64_t seq_begin = step < 10 ? 0 : step < 30 ? 10 : step < 50 ? 30 : 50;
    const auto want = last_ids(tf, seq_begin, step + 1, 0);
    ASSERT_EQ(std::vector<int64_t>(ids[0].begin(), ids[0].begin() + heads), want) << "step " << step;
  }
}

TEST_F(TextIdSourceTest, OutOfOrderStepsAndForeignVocabularyAreErrors) {
  const TokenFile tf = random_token_file(rng_, {100}, 300);
  auto src = TextIdSource::create(*hasher_, tf);
  ASSERT_TRUE(src.is_ok());
  std::vector<std::vector<int64_t>> ids;
  EXPECT_FALSE((*src)->next_step(1, 2, ids).is_ok());  // must start at step 0
  ASSERT_TRUE((*src)->next_step(0, 2, ids).is_ok());
  EXPECT_FALSE((*src)->next_step(2, 2, ids).is_ok());  // skipped step 1
  EXPECT_FALSE((*src)->next_step(1, 3, ids).is_ok());  // batch changed
  EXPECT_TRUE((*src)->next_step(1, 2, ids).is_ok());
  EXPECT_TRUE((*src)->next_step(0, 3, ids).is_ok());   // restart with a new batch
  EXPECT_NE((*src)->describe().find("mem.tokens"), std::string::npos);

  TokenFile other = random_token_file(rng_, {10}, 301);
  auto bad = TextIdSource::create(*hasher_, other);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("vocab size 301"), std::string::npos) << bad.status().message();
  TokenFile empty = random_token_file(rng_, {}, 300);
  EXPECT_FALSE(TextIdSource::create(*hasher_, empty).is_ok());
}

TEST_F(TextIdSourceTest, StatsCountDistinctTopKAndRepeats) {
  NgramStatsAccumulator acc(layout_);
  const int heads = layout_.heads();
  // Batch 1 of 4 lookups: head h sees ids {7,7,7,9}+h; batch 2 of 2: {7,5}+h.
  std::vector<int64_t> b1, b2;
  for (int64_t v : {7, 7, 7, 9})
    for (int h = 0; h < heads; ++h) b1.push_back(v + 100 * h);
  for (int64_t v : {7, 5})
    for (int h = 0; h < heads; ++h) b2.push_back(v + 100 * h);
  acc.add_batch(0, b1);
  acc.add_batch(0, b2);
  const NgramStats s = acc.finish(1);
  EXPECT_EQ(s.batches, 2);
  for (int h = 0; h < heads; ++h) {
    const NgramHeadStats& hs = s.heads[0][h];
    EXPECT_EQ(hs.lookups, 6);
    EXPECT_EQ(hs.distinct, 3);                  // 7, 9, 5
    EXPECT_DOUBLE_EQ(hs.top_k_share, 4.0 / 6);  // id 7: 4 of 6
    EXPECT_DOUBLE_EQ(hs.repeat_rate, 2.0 / 6);  // two repeats in batch 1, none in batch 2
  }
}

TEST_F(TextIdSourceTest, TextStatsCoverEveryTokenOnce) {
  const TokenFile tf = random_token_file(rng_, {130, 70, 5}, 300);
  auto s = compute_text_ngram_stats(*hasher_, tf, 3, 32);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->tokens, 205);
  EXPECT_EQ(s->sequences, 5 + 3 + 1);  // ceil(130/32) + ceil(70/32) + 1
  for (const auto& layer : s->prefill.heads)
    for (const auto& h : layer) EXPECT_EQ(h.lookups, 205);
  EXPECT_EQ(s->prefill.batches, 3);       // 9 sequences in groups of 3
  EXPECT_EQ(s->decode_step.batches, 96);  // 3 groups x 32 positions
  EXPECT_FALSE(compute_text_ngram_stats(*hasher_, tf, 0, 32).is_ok());
  EXPECT_FALSE(compute_text_ngram_stats(*hasher_, tf, 3, 0).is_ok());
}

TEST_F(TextIdSourceTest, MakeTextIdSourceReadsFilesAndExplainsAMissingDefault) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("engram-text-src-" + std::to_string(rng_()));
  fs::create_directories(dir);
  std::vector<uint32_t> ids(200);
  for (auto& x : ids) x = static_cast<uint32_t>(rng_() % 128815);
  const fs::path p = dir / "t.tokens";
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  std::ofstream(p.string() + ".json") << nlohmann::json({{"format", "engram-tokens"}, {"format_version", 1},
                                                         {"tokenizer", "deepseek-ai/DeepSeek-V3"}, {"tokenizer_version", "3.7.2"},
                                                         {"vocab_size", 128815}, {"dtype", "uint32le"}, {"token_count", 200}})
                                             .dump();
  auto src = make_text_id_source(layout_, p.string(), "", 0);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  std::vector<std::vector<int64_t>> out;
  ASSERT_TRUE((*src)->next_step(0, 8, out).is_ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(), static_cast<size_t>(8 * layout_.heads()));
  for (size_t i = 0; i < out[0].size(); ++i) {
    EXPECT_GE(out[0][i], 0);
    EXPECT_LT(out[0][i], layout_.rows(0));
  }
  // The default token file comes from setup: its absence says how to make it.
  const char* old = std::getenv("ENGRAM_DATA_DIR");
  const std::string saved = old ? old : "";
  setenv("ENGRAM_DATA_DIR", dir.string().c_str(), 1);
  auto missing = make_text_id_source(layout_, "", "", 0);
  if (old) setenv("ENGRAM_DATA_DIR", saved.c_str(), 1); else unsetenv("ENGRAM_DATA_DIR");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("tokenize-setup"), std::string::npos) << missing.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace engram
