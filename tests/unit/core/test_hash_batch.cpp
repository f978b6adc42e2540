// Description: batch hashing (core/hash_batch) must give, for every request of every engine step, exactly the ids of
// hashing its whole sequence at once — under random batch composition and order, chunked prefill, decode steps,
// speculative verify steps whose drafts are rejected (rollback = accepting fewer), prefix-cache starts, look-back
// slots or row order with empty padding requests, DEAD tokens by id or by mask, poisoned outputs with padded
// strides — and the look-back rows after every step must equal the rows of the sequences' prefixes. DEAD tokens
// must follow hash_batch.hpp's rule, checked against two independent oracles: the rule written out directly, and
// "a sequence hashes as its DEAD-free segments hashed as fresh sequences, a DEAD position as the lone pad token".
// Also on the default text (build/data, skipped with the reason when absent); bad batches must fail with
// kInvalidArgument and write nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "host/token_io.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using testing::FuzzStep;
using testing::StepFuzzer;
using testing::TestSequence;

constexpr int64_t kPoison = 0x5A5A5A5A5A5A5A5A;

using testing::HashCase;
using testing::hash_cases;
using testing::make_hasher;

// ---- DEAD semantics --------------------------------------------------------------------------------------------

// The rule of hash_batch.hpp written out: walk each n-gram back from t; from the first DEAD token (or the first
// position before the start) on, the compressed pad. Python's modulo.
std::vector<int64_t> rule_oracle(const NgramHasher& h, const CompressionTable& table, const std::vector<int64_t>& seq,
                                 int li) {
  const EngramLayout& l = h.layout();
  const int heads = l.heads();
  std::vector<int64_t> out(seq.size() * static_cast<size_t>(heads));
  const auto& m = h.multipliers(li);
  for (size_t t = 0; t < seq.size(); ++t)
    for (int n = 2; n <= l.max_ngram; ++n) {
      uint64_t mix = 0;
      bool blocked = false;
      for (int s = 0; s < n; ++s) {
        const int64_t p = static_cast<int64_t>(t) - s;
        blocked = blocked || p < 0 || seq[static_cast<size_t>(p)] == kDeadToken;
        int64_t v = h.compressed_pad_id();
        if (!blocked) {
          const int64_t raw = seq[static_cast<size_t>(p)];
          v = raw < 0 ? raw : table.canonical[static_cast<size_t>(raw)];
        }
        mix ^= static_cast<uint64_t>(v) * static_cast<uint64_t>(m[static_cast<size_t>(s)]);
      }
      for (int j = 0; j < l.heads_per_order; ++j) {
        const int hd = (n - 2) * l.heads_per_order + j;
        const __int128 p = l.head_rows[li][hd];
        __int128 r = static_cast<__int128>(static_cast<int64_t>(mix)) % p;
        if (r < 0) r += p;
        out[t * heads + hd] = l.head_offsets[li][hd] + static_cast<int64_t>(r);
      }
    }
  return out;
}

TEST(HashBatchDead, WholeSequenceHashingFollowsTheDeadRule) {
  std::mt19937_64 rng{std::random_device{}()};
  for (const HashCase& c : hash_cases(rng)) {
    SCOPED_TRACE(c.what);
    const NgramHasher h = make_hasher(c);
    for (int trial = 0; trial < 4; ++trial) {
      TestSequence s = testing::random_sequence(rng, 300, c.table.vocab_size(), 0.2);
      // Pass-through negative ids (not DEAD) keep their reference meaning next to DEAD ones.
      for (int k = 0; k < 5; ++k) s.tokens[rng() % s.tokens.size()] = -static_cast<int64_t>(1 + rng() % 50);
      const std::vector<int64_t> e = s.effective();
      const int heads = c.layout.heads();
      for (int li = 0; li < c.layout.n_layers(); ++li) {
        std::vector<int64_t> got(e.size() * heads);
        ASSERT_TRUE(h.hash(e, li, got).is_ok());
        ASSERT_EQ(got, rule_oracle(h, c.table, e, li)) << "layer " << li;

        // Oracle 2: segments between DEAD tokens hash as fresh sequences; a DEAD position as the lone pad.
        std::vector<int64_t> pad_ids(heads);
        const std::vector<int64_t> lone_pad{c.options.pad_id};
        ASSERT_TRUE(h.hash(lone_pad, li, pad_ids).is_ok());
        size_t t = 0;
        while (t < e.size()) {
          if (e[t] == kDeadToken) {
            for (int hd = 0; hd < heads; ++hd) ASSERT_EQ(got[t * heads + hd], pad_ids[hd]) << "DEAD position " << t;
            ++t;
            continue;
          }
          size_t end = t;
          while (end < e.size() && e[end] != kDeadToken) ++end;
          const std::vector<int64_t> seg(e.begin() + static_cast<std::ptrdiff_t>(t), e.begin() + static_cast<std::ptrdiff_t>(end));
          std::vector<int64_t> fresh(seg.size() * heads);
          ASSERT_TRUE(h.hash(seg, li, fresh).is_ok());
          for (size_t i = 0; i < fresh.size(); ++i)
            ASSERT_EQ(got[t * heads + i], fresh[i]) << "segment at " << t << ", entry " << i;
          t = end;
        }
      }
    }
  }
}

TEST(HashBatchDead, SequenceStateKeepsDeadTokensAcrossChunksAndRollback) {
  std::mt19937_64 rng{std::random_device{}()};
  const HashCase c = hash_cases(rng)[0];
  const NgramHasher h = make_hasher(c);
  const TestSequence s = testing::random_sequence(rng, 200, c.table.vocab_size(), 0.25);
  const std::vector<int64_t> e = s.effective();
  const auto whole = testing::whole_sequence_ids(h, s, HashIdKind::kGlobalRow);
  ASSERT_FALSE(whole.empty());
  const size_t heads = static_cast<size_t>(c.layout.heads());
  SequenceState st = h.begin_sequence();
  size_t pos = 0;
  while (pos < e.size()) {
    // A rejected draft of DEAD and real tokens, rolled back, then the real chunk.
    const size_t k = 1 + rng() % 4;
    std::vector<int64_t> draft = testing::random_tokens(rng, k, c.table.vocab_size());
    draft[0] = kDeadToken;
    std::vector<int64_t> junk(c.layout.n_layers() * k * heads);
    ASSERT_TRUE(h.hash_chunk(st, draft, junk).is_ok());
    ASSERT_TRUE(st.rollback(static_cast<int64_t>(k)).is_ok());
    const size_t n = std::min<size_t>(1 + rng() % 9, e.size() - pos);
    std::vector<int64_t> ids(c.layout.n_layers() * n * heads);
    ASSERT_TRUE(h.hash_chunk(st, std::span<const int64_t>(e).subspan(pos, n), ids).is_ok());
    for (int li = 0; li < c.layout.n_layers(); ++li)
      for (size_t i = 0; i < n * heads; ++i)
        ASSERT_EQ(ids[li * n * heads + i], whole[li * e.size() * heads + pos * heads + i]) << "position " << pos;
    pos += n;
    // Snapshot/restore carries DEAD tokens in its tail.
    if (rng() % 4 == 0) {
      auto r = h.restore(st.snapshot());
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      st = std::move(*r);
    }
  }
}

// ---- Batches vs whole sequences ----------------------------------------------------------------------------------

// Runs every step of `fz` through hash_batch_reference and update_lookback_reference and checks ids, poison and
// look-back rows. Returns the number of steps.
int run_fuzz(const NgramHasher& h, StepFuzzer& fz, std::mt19937_64& rng, HashIdKind kind) {
  const EngramLayout& l = h.layout();
  const int heads = l.heads();
  const int w = l.max_ngram - 1;
  std::vector<std::vector<int64_t>> whole;
  for (const auto& s : fz.sequences()) whole.push_back(testing::whole_sequence_ids(h, s, kind));
  std::vector<int64_t> lookback = fz.initial_lookback();
  int steps = 0;
  while (!fz.done()) {
    const FuzzStep st = fz.next();
    const HashBatch b = st.batch(lookback.data(), fz.lookback_rows());
    const int64_t stride = st.max_tokens * heads + static_cast<int64_t>(rng() % 6);
    std::vector<int64_t> out(static_cast<size_t>(stride * l.n_layers()), kPoison);
    const std::vector<int64_t> lookback_before = lookback;
    const Status s = hash_batch_reference(h, b, kind, out.data(), stride);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (!s.is_ok()) return steps;
    EXPECT_EQ(lookback, lookback_before) << "hashing changed a look-back row";
    const std::string mm = testing::first_step_mismatch(st, whole, fz.sequences(), out.data(), stride, l.n_layers(), heads);
    EXPECT_EQ(mm, "") << "step " << steps;
    if (!mm.empty()) return steps;
    // Nothing beyond the step's tokens is written (padding tokens, stride padding).
    for (int li = 0; li < l.n_layers(); ++li)
      for (int64_t i = st.n_tokens() * heads; i < stride; ++i)
        if (out[static_cast<size_t>(li * stride + i)] != kPoison) {
          ADD_FAILURE() << "step " << steps << " wrote beyond its tokens: layer " << li << " entry " << i;
          return steps;
        }
    // Advance the rows: in place, or into a copy (the two must agree, and untouched rows stay).
    if (rng() & 1) {
      EXPECT_TRUE(update_lookback_reference(w, b, st.accepted.data(), lookback.data()).is_ok());
    } else {
      std::vector<int64_t> next = lookback;
      EXPECT_TRUE(update_lookback_reference(w, b, st.accepted.data(), next.data()).is_ok());
      lookback = next;
    }
    for (int32_t r = 0; r < st.n_requests(); ++r) {
      const size_t si = static_cast<size_t>(st.seq[static_cast<size_t>(r)]);
      const auto e = fz.sequences()[si].effective();
      std::vector<int64_t> want(static_cast<size_t>(w));
      lookback_of_prefix(e.data(), st.first_pos[static_cast<size_t>(r)] + st.real[static_cast<size_t>(r)], w, want.data());
      const int64_t slot = st.slots.empty() ? r : st.slots[static_cast<size_t>(r)];
      const std::vector<int64_t> got(lookback.begin() + slot * w, lookback.begin() + (slot + 1) * w);
      EXPECT_EQ(got, want) << "step " << steps << " request " << r << " look-back row after accepting "
                           << st.accepted[static_cast<size_t>(r)];
      if (got != want) return steps;
    }
    ++steps;
  }
  return steps;
}

TEST(HashBatch, FuzzedStepsEqualWholeSequenceHashing) {
  std::mt19937_64 rng{std::random_device{}()};
  for (const HashCase& c : hash_cases(rng)) {
    const NgramHasher h = make_hasher(c);
    for (bool use_slots : {true, false})
      for (HashIdKind kind : {HashIdKind::kGlobalRow, HashIdKind::kHeadLocal}) {
        SCOPED_TRACE(c.what + (use_slots ? ", slots" : ", rows in order") +
                     (kind == HashIdKind::kGlobalRow ? ", global" : ", head-local"));
        std::vector<TestSequence> seqs;
        const int n = 3 + static_cast<int>(rng() % 10);
        for (int i = 0; i < n; ++i)
          seqs.push_back(testing::random_sequence(rng, 1 + rng() % 160, c.table.vocab_size(), 0.08));
        testing::FuzzOptions o;
        o.use_slots = use_slots;
        StepFuzzer fz(std::move(seqs), c.layout.max_ngram - 1, rng, c.table.vocab_size(), o);
        const int steps = run_fuzz(h, fz, rng, kind);
        EXPECT_TRUE(fz.done()) << "stopped after " << steps << " steps";
      }
  }
}

TEST(HashBatch, DefaultTextInChunksAndDecodeStepsEqualsWholeSequenceHashing) {
  testing::TextCase tc = testing::text_case(default_token_file_path(), "default text");
  if (!tc.skip.empty()) GTEST_SKIP() << tc.skip;
  std::mt19937_64 rng{std::random_device{}()};
  testing::FuzzOptions o;
  o.prefix_start_fraction = 0.5;
  StepFuzzer fz(testing::text_sequences(tc.tokens, 24, 600), tc.hasher->layout().max_ngram - 1, rng,
                tc.hasher->vocab_size(), o);
  const int steps = run_fuzz(*tc.hasher, fz, rng, HashIdKind::kGlobalRow);
  EXPECT_TRUE(fz.done()) << "stopped after " << steps << " steps";
}

// ---- Shapes, helpers, errors -----------------------------------------------------------------------------------

TEST(HashBatch, LookbackOfPrefixPadsTheStartWithDeadSlots) {
  const std::vector<int64_t> p = {7, 8, 9, 10};
  std::vector<int64_t> row(3);
  lookback_of_prefix(p.data(), 0, 3, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{kDeadToken, kDeadToken, kDeadToken}));
  lookback_of_prefix(p.data(), 2, 3, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{kDeadToken, 7, 8}));
  lookback_of_prefix(p.data(), 4, 3, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{8, 9, 10}));
}

TEST(HashBatch, ParamsFlattenTheHasher) {
  std::mt19937_64 rng{std::random_device{}()};
  const HashCase c = hash_cases(rng)[1];
  const NgramHasher h = make_hasher(c);
  for (HashIdKind kind : {HashIdKind::kGlobalRow, HashIdKind::kHeadLocal}) {
    const NgramHashParams p = ngram_hash_params(h, kind);
    EXPECT_EQ(p.n_layers, 3);
    EXPECT_EQ(p.max_ngram, 5);
    EXPECT_EQ(p.heads, 8);
    EXPECT_EQ(p.vocab_size, c.table.vocab_size());
    EXPECT_EQ(p.compressed_pad_id, h.compressed_pad_id());
    EXPECT_EQ(p.canonical, c.table.canonical);
    for (int li = 0; li < 3; ++li) {
      EXPECT_EQ(std::vector<int64_t>(p.multipliers.begin() + li * 5, p.multipliers.begin() + (li + 1) * 5), h.multipliers(li));
      EXPECT_EQ(p.layer_rows[li], c.layout.rows(li));
      for (int hd = 0; hd < 8; ++hd) {
        EXPECT_EQ(p.head_rows[li * 8 + hd], c.layout.head_rows[li][hd]);
        EXPECT_EQ(p.head_offsets[li * 8 + hd], kind == HashIdKind::kGlobalRow ? c.layout.head_offsets[li][hd] : 0);
      }
    }
  }
  auto pre = NgramHasher::create_precompressed(c.layout, 1000, NgramHashOptions{.pad_id = 3});
  ASSERT_TRUE(pre.is_ok());
  EXPECT_TRUE(ngram_hash_params(*pre, HashIdKind::kGlobalRow).canonical.empty());
  EXPECT_EQ(ngram_hash_params(*pre, HashIdKind::kGlobalRow).vocab_size, 1000);
}

TEST(HashBatch, BadBatchesFailAndWriteNothing) {
  std::mt19937_64 rng{std::random_device{}()};
  const HashCase c = hash_cases(rng)[2];  // N=2: look-back rows of one id
  const NgramHasher h = make_hasher(c);
  const int heads = c.layout.heads();
  const int64_t vocab = c.table.vocab_size();
  // Two requests of 2 and 1 tokens in slots 1 and 0.
  std::vector<int32_t> qsl = {0, 2, 3};
  std::vector<int64_t> tokens = {1, 2, 3, 4};
  std::vector<int64_t> lookback = {5, kDeadToken};
  std::vector<int32_t> slots = {1, 0};
  std::vector<int32_t> accepted = {2, 1};
  auto batch = [&] {
    HashBatch b;
    b.n_requests = 2;
    b.max_tokens = 4;
    b.query_start_loc = qsl.data();
    b.tokens = tokens.data();
    b.lookback = lookback.data();
    b.lookback_rows = 2;
    b.lookback_slot = slots.data();
    return b;
  };
  std::vector<int64_t> out(4 * heads, kPoison);
  ASSERT_TRUE(hash_batch_reference(h, batch(), HashIdKind::kGlobalRow, out.data()).is_ok());
  const std::vector<int64_t> clean(4 * heads, kPoison);
  auto expect_bad = [&](const HashBatch& b, const std::string& needle, int64_t stride = 0) {
    std::vector<int64_t> o(clean);
    const Status s = hash_batch_reference(h, b, HashIdKind::kGlobalRow, o.data(), stride);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_EQ(o, clean) << needle << ": written on error";
  };
  {
    HashBatch b = batch();
    b.n_requests = -1;
    expect_bad(b, "n_requests -1");
  }
  {
    HashBatch b = batch();
    b.query_start_loc = nullptr;
    expect_bad(b, "query_start_loc is null");
  }
  {
    HashBatch b = batch();
    b.lookback = nullptr;
    expect_bad(b, "look-back rows");
  }
  expect_bad(batch(), "out_layer_stride 3", 3);
  qsl = {1, 2, 3};
  expect_bad(batch(), "query_start_loc[0] = 1");
  qsl = {0, 3, 2};
  expect_bad(batch(), "decreases at request 1");
  qsl = {0, 2, 5};
  expect_bad(batch(), "> max_tokens 4");
  qsl = {0, 2, 3};
  slots = {1, 2};
  expect_bad(batch(), "look-back slot 2, not in [0, 2)");
  slots = {1, 1};
  expect_bad(batch(), "used by two requests");
  slots = {1, 0};
  tokens[2] = vocab;  // request 1's token
  expect_bad(batch(), "request 1");
  tokens[2] = 3;
  lookback[0] = vocab + 5;  // request 1's look-back (slot 0)
  expect_bad(batch(), "look-back row 0");
  lookback[0] = 5;
  // The update: accepted out of range, then a good update in place.
  std::vector<int64_t> rows = lookback;
  accepted = {3, 1};
  EXPECT_EQ(update_lookback_reference(1, batch(), accepted.data(), rows.data()).code(), Code::kInvalidArgument);
  accepted = {2, -1};
  EXPECT_EQ(update_lookback_reference(1, batch(), accepted.data(), rows.data()).code(), Code::kInvalidArgument);
  EXPECT_EQ(rows, lookback);
  accepted = {1, 0};
  ASSERT_TRUE(update_lookback_reference(1, batch(), accepted.data(), rows.data()).is_ok());
  EXPECT_EQ(rows, (std::vector<int64_t>{5, 1}));  // slot 1 advanced past token 1; slot 0 accepted none
  ASSERT_TRUE(update_lookback_reference(1, batch(), nullptr, rows.data()).is_ok());
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 2}));  // all accepted: the last token of each request
}

}  // namespace
}  // namespace engram
