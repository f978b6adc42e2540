// Description: the Engram N-gram hash must equal the reference (restated with numpy in
// tests/data/gen_hash_golden.py, run at test time on fresh random inputs) for several seeds, layers,
// vocabulary sizes and layouts: multipliers, prime head sizes and per-head ids, with and without a
// compression table, with negative (pass-through) ids. Chunked prefill + decode steps, prefix-cache
// resume, snapshot/restore and speculative rollback must give the whole-sequence ids; bad input
// (ids >= vocab, V' mismatch, malformed tables, multiplier-bound overflow) must fail with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using nlohmann::json;

// A python3 that can import numpy: python3 on PATH first, then Debian's /usr/bin/python3.
std::string find_numpy_python() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return {};
}

json run_golden(const std::string& python, const json& request) {
  std::random_device rd;
  const auto path = std::filesystem::temp_directory_path() / ("engram-golden-" + std::to_string(rd()) + ".json");
  std::ofstream(path) << request.dump();
  const std::string cmd = python + " " ENGRAM_TEST_DATA_DIR "/gen_hash_golden.py " + path.string();
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  std::filesystem::remove(path);
  return out.empty() ? json::object() : json::parse(out);
}

EngramLayout custom_layout(std::vector<int> layer_ids, int max_ngram, int heads_per_order, std::vector<int64_t> vocab) {
  EngramLayout l;
  l.name = "custom";
  l.layer_ids = std::move(layer_ids);
  l.max_ngram = max_ngram;
  l.heads_per_order = heads_per_order;
  l.vocab_size_per_order = std::move(vocab);
  l.d = 32;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

using testing::random_table;
using testing::random_tokens;

struct GoldenCase {
  std::string what;
  EngramLayout layout;
  int64_t seed;
  int64_t compressed_vocab;
  int64_t pad_id;  // raw id with a table, compressed id without
  std::vector<std::vector<int64_t>> tokens;
  std::optional<CompressionTable> table;
};

class NgramHashGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = find_numpy_python();
    if (python_.empty()) GTEST_SKIP() << "python3 with numpy not found (apt-get install python3-numpy)";
  }
  std::string python_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(NgramHashGolden, MultipliersHeadSizesAndIdsEqualReference) {
  std::vector<GoldenCase> cases;
  auto batch = [&](int64_t vocab, int b, int max_t) {
    std::vector<std::vector<int64_t>> seqs;
    for (int i = 0; i < b; ++i) seqs.push_back(random_tokens(rng_, 1 + rng_() % max_t, vocab));
    return seqs;
  };
  {  // The DeepSeek-V4.1-Flash shape with the DeepSeek-V3 compressed vocabulary, seed 0, pad 2.
    auto l = make_preset_layout("v41-flash");
    ASSERT_TRUE(l.is_ok());
    cases.push_back({"v41-flash V'=98627", *l, 0, 98627, 2, batch(98627, 3, 64), std::nullopt});
  }
  {  // Small random shapes, seeds and vocabularies; one row carries negative (pass-through) ids.
    const int64_t v = 3 + static_cast<int64_t>(rng_() % 1'000'000);
    GoldenCase c{"random small", custom_layout({1, 14}, 3, 2, {1000, 1200}), static_cast<int64_t>(rng_() % 1'000'000), v,
                 static_cast<int64_t>(rng_() % v), batch(v, 4, 40), std::nullopt};
    c.tokens[0][0] = -1;
    if (c.tokens[0].size() > 3) c.tokens[0][3] = -7;
    cases.push_back(c);
  }
  {  // V' > 2^33: half_bound < 2^32 -1, so numpy draws multipliers on its 32-bit Lemire path.
    const int64_t v = (int64_t{1} << 33) + static_cast<int64_t>(rng_() % 1'000'000);
    cases.push_back({"V' > 2^33 (32-bit draws)", custom_layout({0, 7, 61}, 4, 3, {5000, 7000, 9000}),
                     static_cast<int64_t>(rng_() % 100'000), v, static_cast<int64_t>(rng_() % v), batch(v, 3, 30), std::nullopt});
  }
  {  // V' = 1: every token and the pad are 0.
    cases.push_back({"V'=1", custom_layout({2}, 5, 1, {97, 101, 103, 107}), 12345, 1, 0,
                     {std::vector<int64_t>(9, 0)}, std::nullopt});
  }
  {  // Raw ids through a random compression table (negative ids pass through it).
    CompressionTable t = random_table(rng_, 500, 0.6);
    const int64_t pad = static_cast<int64_t>(rng_() % 500);
    GoldenCase c{"compression table", custom_layout({3, 9}, 4, 2, {300, 400, 500}), static_cast<int64_t>(rng_() % 50'000),
                 t.compressed_vocab, pad, batch(500, 3, 50), t};
    c.tokens[1][0] = -3;
    cases.push_back(c);
  }

  json req;
  for (const auto& c : cases) {
    json j = {{"seed", c.seed},
              {"layer_ids", c.layout.layer_ids},
              {"max_ngram", c.layout.max_ngram},
              {"heads_per_order", c.layout.heads_per_order},
              {"vocab_sizes", c.layout.vocab_size_per_order},
              {"compressed_vocab", c.compressed_vocab},
              {"pad_id", c.pad_id}};
    // numpy needs a rectangular batch: the reference hashes [B, T]; rows here are padded to one T with
    // trailing tokens, and only each row's own prefix is compared below (a position never sees later ones).
    size_t t_max = 0;
    for (const auto& s : c.tokens) t_max = std::max(t_max, s.size());
    json rows = json::array();
    for (const auto& s : c.tokens) {
      std::vector<int64_t> r = s;
      r.resize(t_max, 0);
      rows.push_back(r);
    }
    j["tokens"] = rows;
    if (c.table) j["lookup_table"] = c.table->canonical;
    req["layers"].push_back(j);
  }
  const json res = run_golden(python_, req);
  ASSERT_EQ(res["layers"].size(), cases.size());
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const GoldenCase& c = cases[ci];
    SCOPED_TRACE(c.what + " (seed " + std::to_string(c.seed) + ", V' " + std::to_string(c.compressed_vocab) + ")");
    const json& g = res["layers"][ci];
    NgramHashOptions opt;
    opt.seed = c.seed;
    opt.pad_id = c.pad_id;
    auto h = c.table ? NgramHasher::create(c.layout, *c.table, opt) : NgramHasher::create_precompressed(c.layout, c.compressed_vocab, opt);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ(h->half_bound(), g["half_bound"].get<int64_t>());
    for (int li = 0; li < c.layout.n_layers(); ++li) {
      const std::string key = std::to_string(c.layout.layer_ids[li]);
      SCOPED_TRACE("layer " + key);
      EXPECT_EQ(h->multipliers(li), g["multipliers"][key].get<std::vector<int64_t>>());
      auto m = ngram_layer_multipliers(c.seed, c.layout.layer_ids[li], c.compressed_vocab, c.layout.max_ngram);
      ASSERT_TRUE(m.is_ok());
      EXPECT_EQ(*m, h->multipliers(li));
      EXPECT_EQ(c.layout.head_rows[li], g["head_sizes"][key].get<std::vector<int64_t>>());
      const int heads = c.layout.heads();
      for (size_t b = 0; b < c.tokens.size(); ++b) {
        const auto& seq = c.tokens[b];
        std::vector<int64_t> local(seq.size() * heads), global(seq.size() * heads);
        ASSERT_TRUE(h->hash(seq, li, local, HashIdKind::kHeadLocal).is_ok());
        ASSERT_TRUE(h->hash(seq, li, global, HashIdKind::kGlobalRow).is_ok());
        const json& gb = g["hashes"][key][b];
        for (size_t t = 0; t < seq.size(); ++t)
          for (int hd = 0; hd < heads; ++hd) {
            const int64_t want = gb[t][hd].get<int64_t>();
            ASSERT_EQ(local[t * heads + hd], want) << "row " << b << " t " << t << " head " << hd;
            ASSERT_EQ(global[t * heads + hd], c.layout.head_offsets[li][hd] + want);
          }
      }
    }
  }
}

// ---- Incremental hashing -----------------------------------------------------------------------

class NgramHashIncremental : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = make_preset_layout("v41-flash-mini");
    ASSERT_TRUE(l.is_ok());
    layout_ = *l;
    table_ = random_table(rng_, 5000, 0.7);
    NgramHashOptions opt;
    opt.seed = static_cast<int64_t>(rng_() % 1000);
    opt.max_rollback = 16;
    auto h = NgramHasher::create(layout_, table_, opt);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    hasher_.emplace(std::move(*h));
    tokens_ = random_tokens(rng_, 300, 5000);
    // Whole-sequence ids of every layer: [layers][T][heads].
    const size_t per_layer = tokens_.size() * layout_.heads();
    whole_.resize(per_layer * layout_.n_layers());
    for (int li = 0; li < layout_.n_layers(); ++li)
      ASSERT_TRUE(hasher_->hash(tokens_, li, std::span<int64_t>(whole_.data() + li * per_layer, per_layer)).is_ok());
  }

  // Expects `ids` ([layers][n][heads], from hash_chunk) to equal whole-sequence ids of positions [from, from+n).
  void expect_matches(const std::vector<int64_t>& ids, size_t from, size_t n) {
    const size_t heads = layout_.heads();
    const size_t per_layer = tokens_.size() * heads;
    for (int li = 0; li < layout_.n_layers(); ++li)
      for (size_t t = 0; t < n; ++t)
        for (size_t hd = 0; hd < heads; ++hd)
          ASSERT_EQ(ids[(li * n + t) * heads + hd], whole_[li * per_layer + (from + t) * heads + hd])
              << "layer " << li << " position " << from + t << " head " << hd;
  }

  // Hashes tokens_[from, from+n) from `state` and checks them.
  void feed(SequenceState& state, size_t from, size_t n) {
    std::vector<int64_t> ids(layout_.n_layers() * n * layout_.heads());
    ASSERT_TRUE(hasher_->hash_chunk(state, std::span<const int64_t>(tokens_).subspan(from, n), ids).is_ok());
    expect_matches(ids, from, n);
    EXPECT_EQ(state.position(), static_cast<int64_t>(from + n));
  }

  std::mt19937_64 rng_{std::random_device{}()};
  EngramLayout layout_;
  CompressionTable table_;
  std::optional<NgramHasher> hasher_;
  std::vector<int64_t> tokens_;
  std::vector<int64_t> whole_;
};

TEST_F(NgramHashIncremental, PrefillChunksThenDecodeStepsEqualWholeSequence) {
  SequenceState s = hasher_->begin_sequence();
  size_t pos = 0;
  // Random prefill chunks (sizes 1..40, the first often shorter than N-1), then one-token decode steps.
  while (pos < 200) {
    const size_t n = std::min<size_t>(1 + rng_() % 40, 200 - pos);
    feed(s, pos, n);
    pos += n;
  }
  for (; pos < tokens_.size(); ++pos) feed(s, pos, 1);
}

TEST_F(NgramHashIncremental, PrefixCacheResumeAndSnapshotRestore) {
  for (int trial = 0; trial < 10; ++trial) {
    const size_t split = rng_() % tokens_.size();
    auto resumed = hasher_->resume_sequence(std::span<const int64_t>(tokens_).first(split));
    ASSERT_TRUE(resumed.is_ok());
    EXPECT_EQ(resumed->position(), static_cast<int64_t>(split));
    feed(*resumed, split, tokens_.size() - split);

    // Snapshot after `split` tokens fed incrementally, restored into a fresh state.
    SequenceState s = hasher_->begin_sequence();
    if (split > 0) feed(s, 0, split);
    const SequenceSnapshot snap = s.snapshot();
    EXPECT_EQ(snap.tail.size(), std::min<size_t>(split, layout_.max_ngram - 1));
    auto restored = hasher_->restore(snap);
    ASSERT_TRUE(restored.is_ok()) << restored.status().to_string();
    feed(*restored, split, tokens_.size() - split);
  }
}

TEST_F(NgramHashIncremental, SpeculativeRollbackRestoresEarlierState) {
  SequenceState s = hasher_->begin_sequence();
  size_t pos = 0;
  std::vector<int64_t> ids;
  while (pos < tokens_.size()) {
    // Draft k random tokens after the accepted prefix, roll them back, then accept the real next tokens.
    const size_t k = 1 + rng_() % 8;
    const std::vector<int64_t> draft = random_tokens(rng_, k, 5000);
    ids.assign(layout_.n_layers() * k * layout_.heads(), 0);
    ASSERT_TRUE(hasher_->hash_chunk(s, draft, ids).is_ok());
    ASSERT_TRUE(s.rollback(static_cast<int64_t>(k)).is_ok());
    EXPECT_EQ(s.position(), static_cast<int64_t>(pos));
    const size_t n = std::min<size_t>(1 + rng_() % 5, tokens_.size() - pos);
    feed(s, pos, n);
    pos += n;
  }
}

TEST_F(NgramHashIncremental, RollbackBeyondKeptHistoryIsAnError) {
  SequenceState s = hasher_->begin_sequence();
  // At the start every token is kept: rolling back to position 0 works.
  feed(s, 0, 2);
  ASSERT_TRUE(s.rollback(2).is_ok());
  feed(s, 0, 100);
  EXPECT_EQ(s.rollback_limit(), 16);  // max_rollback beyond the N-1 window
  Status st = s.rollback(17);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("max_rollback"), std::string::npos) << st.message();
  EXPECT_EQ(s.rollback(101).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.rollback(-1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.position(), 100);
  ASSERT_TRUE(s.rollback(16).is_ok());
  feed(s, 84, 50);
  // A restored snapshot keeps only the N-1 window: nothing can be rolled back past it.
  auto r = hasher_->restore(s.snapshot());
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->rollback_limit(), 0);
}

// ---- Bad input ----------------------------------------------------------------------------------

TEST(NgramHash, TokenIdAtOrAboveVocabIsAnErrorNamingThePosition) {
  std::mt19937_64 rng{std::random_device{}()};
  const EngramLayout l = custom_layout({1}, 3, 2, {1000, 1000});
  CompressionTable t = random_table(rng, 100, 0.5);
  t.tokenizer = "test-tokenizer";
  auto h = NgramHasher::create(l, t);
  ASSERT_TRUE(h.is_ok());
  std::vector<int64_t> tokens = random_tokens(rng, 10, 100);
  tokens[7] = 100;
  std::vector<int64_t> out(10 * l.heads());
  Status st = h->hash(tokens, 0, out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("token id 100 at position 7 >= vocab size 100"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("test-tokenizer"), std::string::npos) << st.message();
  // A failed chunk leaves the state where it was.
  SequenceState s = h->begin_sequence();
  std::vector<int64_t> chunk_out(10 * l.heads());
  EXPECT_FALSE(h->hash_chunk(s, tokens, chunk_out).is_ok());
  EXPECT_EQ(s.position(), 0);
}

TEST(NgramHash, CompressedVocabMismatchIsAnError) {
  std::mt19937_64 rng{std::random_device{}()};
  const EngramLayout l = custom_layout({1}, 3, 2, {1000, 1000});
  CompressionTable t = random_table(rng, 200, 0.5);
  NgramHashOptions opt;
  opt.expected_compressed_vocab = t.compressed_vocab + 1;
  auto h = NgramHasher::create(l, t, opt);
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("compressed vocabulary mismatch"), std::string::npos) << h.status().message();
  opt.expected_compressed_vocab = t.compressed_vocab;
  EXPECT_TRUE(NgramHasher::create(l, t, opt).is_ok());
}

TEST(NgramHash, MalformedTablesAndPadIdsAreErrors) {
  const EngramLayout l = custom_layout({1}, 3, 2, {1000, 1000});
  CompressionTable t;
  EXPECT_EQ(t.validate().code(), Code::kInvalidArgument);  // empty
  t.canonical = {0, 1, 3, 2};                               // 3 before 2: not first-seen order
  t.compressed_vocab = 4;
  EXPECT_NE(t.validate().message().find("first-seen"), std::string::npos);
  t.canonical = {0, 1, 1, 2};
  t.compressed_vocab = 4;  // the map has 3 distinct ids
  EXPECT_NE(t.validate().message().find("3 distinct"), std::string::npos) << t.validate().message();
  t.compressed_vocab = 3;
  EXPECT_TRUE(t.validate().is_ok());
  NgramHashOptions opt;
  opt.pad_id = 4;
  EXPECT_FALSE(NgramHasher::create(l, t, opt).is_ok());
  opt.pad_id = 3;
  EXPECT_TRUE(NgramHasher::create(l, t, opt).is_ok());
  EXPECT_FALSE(NgramHasher::create_precompressed(l, 0).is_ok());
  EXPECT_FALSE(NgramHasher::create_precompressed(l, 2, NgramHashOptions{.pad_id = 2}).is_ok());
  EngramLayout unfinished;
  EXPECT_FALSE(NgramHasher::create_precompressed(unfinished, 10).is_ok());
}

TEST(NgramHash, VocabOverflowingTheMultiplierBoundIsAnError) {
  const EngramLayout l = custom_layout({1}, 3, 2, {1000, 1000});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // (INT64_MAX // V') // 2 == 0 for V' > INT64_MAX / 2: the reference would fall back to m = 1.
  auto h = NgramHasher::create_precompressed(l, kMax / 2 + 1, NgramHashOptions{.pad_id = 0});
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("overflows the multiplier bound"), std::string::npos) << h.status().message();
  auto ok = NgramHasher::create_precompressed(l, kMax / 2, NgramHashOptions{.pad_id = 0});
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->half_bound(), 1);
  EXPECT_EQ(ngram_multiplier_half_bound(98627), (kMax / 98627) / 2);
  EXPECT_FALSE(ngram_layer_multipliers(-20015, 1, 100, 3).is_ok());  // negative numpy seed
}

TEST(NgramHash, SnapshotValidationAndOutSizes) {
  const EngramLayout l = custom_layout({1, 2}, 4, 2, {1000, 1000, 1000});
  auto h = NgramHasher::create_precompressed(l, 50, NgramHashOptions{.pad_id = 1});
  ASSERT_TRUE(h.is_ok());
  EXPECT_FALSE(h->restore(SequenceSnapshot{5, {1, 2}}).is_ok());      // needs 3 tail tokens
  EXPECT_FALSE(h->restore(SequenceSnapshot{2, {1, 2, 3}}).is_ok());   // needs 2
  EXPECT_FALSE(h->restore(SequenceSnapshot{5, {1, 2, 50}}).is_ok());  // 50 is not a compressed id
  EXPECT_FALSE(h->restore(SequenceSnapshot{-1, {}}).is_ok());
  EXPECT_TRUE(h->restore(SequenceSnapshot{5, {1, 2, 3}}).is_ok());
  std::vector<int64_t> tokens = {1, 2, 3};
  std::vector<int64_t> out(3 * l.heads());
  EXPECT_FALSE(h->hash(tokens, 2, out).is_ok());  // layer index out of range
  std::vector<int64_t> short_out(3 * l.heads() - 1);
  EXPECT_FALSE(h->hash(tokens, 0, short_out).is_ok());
  SequenceState s = h->begin_sequence();
  EXPECT_FALSE(h->hash_chunk(s, tokens, out).is_ok());  // needs 2 layers of ids
}

}  // namespace
}  // namespace engram
