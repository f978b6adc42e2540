// Helpers shared by the hashing tests (CPU: tests/unit/core, GPU: tests/cuda): random compression tables and
// tokens, sequences with DEAD tokens and image spans, and a step fuzzer that drives sequences through engine steps
// the way a serving engine does — random batch composition and order, chunked prefill, decode, speculative verify
// steps with rejected drafts (rollback = accepting fewer), prefix-cache starts, padding requests, look-back slots —
// and says which id of each step must equal which position of whole-sequence hashing; real-text cases on the
// V4.1-Flash layout. The checks an implementation of the batch API runs against the CPU reference are
// hash_runner.hpp's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "engram/lookup.hpp"
#include "host/token_io.hpp"

namespace engram::testing {

// A random valid compression table: canonical ids in first-seen order, about `vocab * keep` distinct.
inline CompressionTable random_table(std::mt19937_64& rng, int64_t vocab, double keep) {
  CompressionTable t;
  t.tokenizer = "random-test";
  t.canonical.resize(static_cast<size_t>(vocab));
  std::uniform_real_distribution<double> u(0, 1);
  uint32_t next = 0;
  for (auto& c : t.canonical) {
    if (next == 0 || u(rng) < keep) {
      c = next++;
    } else {
      c = static_cast<uint32_t>(rng() % next);
    }
  }
  t.compressed_vocab = next;
  return t;
}

inline std::vector<int64_t> random_tokens(std::mt19937_64& rng, size_t n, int64_t vocab) {
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  return v;
}

// A finalized custom layout: orders 2..max_ngram, `heads_per_order` heads each starting at `vocab` rows.
// A token file in memory of documents of the given sizes, uniform random ids below `vocab`.
inline TokenFile random_token_file(std::mt19937_64& rng, const std::vector<int64_t>& doc_sizes, int64_t vocab) {
  TokenFile tf;
  tf.path = "mem.tokens";
  tf.tokenizer = "test";
  tf.vocab_size = vocab;
  int64_t at = 0;
  for (int64_t n : doc_sizes) {
    tf.documents.push_back({"doc" + std::to_string(tf.documents.size()), at, n});
    for (int64_t i = 0; i < n; ++i) tf.ids.push_back(static_cast<uint32_t>(rng() % static_cast<uint64_t>(vocab)));
    at += n;
  }
  return tf;
}

inline EngramLayout hash_layout(std::vector<int> layer_ids, int max_ngram, int heads_per_order, int64_t vocab) {
  EngramLayout l;
  l.name = "custom";
  l.layer_ids = std::move(layer_ids);
  l.max_ngram = max_ngram;
  l.heads_per_order = heads_per_order;
  l.vocab_size_per_order.assign(static_cast<size_t>(max_ngram - 1), vocab);
  l.d = 32;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

// Hashers the batch tests run on: the V4.1-Flash head structure, more layers and orders, the smallest N (2) and
// the largest (16), each with a random compression table, seed and pad id.
struct HashCase {
  std::string what;
  EngramLayout layout;
  CompressionTable table;
  NgramHashOptions options;
};

inline std::vector<HashCase> hash_cases(std::mt19937_64& rng) {
  std::vector<HashCase> c;
  auto mini = make_preset_layout("v41-flash-mini");
  EXPECT_TRUE(mini.is_ok());
  c.push_back({"v41-flash-mini", *mini, random_table(rng, 3000, 0.7), {}});
  c.push_back({"N=5 K=2, 3 layers", hash_layout({0, 5, 9}, 5, 2, 700), random_table(rng, 500, 0.5), {}});
  c.push_back({"N=2 K=3", hash_layout({3}, 2, 3, 300), random_table(rng, 200, 0.9), {}});
  c.push_back({"N=16 K=1", hash_layout({2}, 16, 1, 400), random_table(rng, 100, 0.8), {}});
  for (auto& x : c) {
    x.options.seed = static_cast<int64_t>(rng() % 100000);
    x.options.pad_id = static_cast<int64_t>(rng() % static_cast<uint64_t>(x.table.vocab_size()));
  }
  return c;
}

inline NgramHasher make_hasher(const HashCase& c) {
  auto h = NgramHasher::create(c.layout, c.table, c.options);
  EXPECT_TRUE(h.is_ok()) << h.status().to_string();
  return std::move(*h);
}

// A sequence as an engine sees it: raw ids and a DEAD mask. A DEAD position is marked either by the id kDeadToken
// or by its mask byte (then its id is an ordinary token id that must not be hashed).
struct TestSequence {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> dead;
  // The ids with every DEAD position as kDeadToken: what whole-sequence hashing takes.
  std::vector<int64_t> effective() const {
    std::vector<int64_t> e = tokens;
    for (size_t i = 0; i < e.size(); ++i)
      if (dead[i]) e[i] = kDeadToken;
    return e;
  }
};

// Random tokens with isolated DEAD tokens and DEAD spans (image spans of 2..20 positions), about `dead_fraction`
// of the positions in all, half marked by kDeadToken and half by the mask.
inline TestSequence random_sequence(std::mt19937_64& rng, size_t n, int64_t vocab, double dead_fraction) {
  TestSequence s{random_tokens(rng, n, vocab), std::vector<uint8_t>(n, 0)};
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < n; ++i) {
    if (u(rng) >= dead_fraction / 4) continue;
    const size_t span = (rng() & 1) ? 1 : 2 + rng() % 19;
    for (size_t j = i; j < std::min(n, i + span); ++j) {
      if (rng() & 1) s.tokens[j] = kDeadToken;
      else s.dead[j] = 1;
    }
    i += span;
  }
  return s;
}

// Sequences cut from a token file: `count` slices of `length` tokens at spread offsets (fewer if the file is short).
inline std::vector<TestSequence> text_sequences(const TokenFile& f, int count, size_t length) {
  std::vector<TestSequence> out;
  const size_t n = f.ids.size();
  if (n == 0) return out;
  length = std::min(length, n);
  for (int i = 0; i < count; ++i) {
    const size_t start = (n - length) * static_cast<size_t>(i) / static_cast<size_t>(std::max(1, count - 1));
    TestSequence s;
    s.tokens.assign(f.ids.begin() + static_cast<std::ptrdiff_t>(start),
                    f.ids.begin() + static_cast<std::ptrdiff_t>(start + length));
    s.dead.assign(length, 0);
    out.push_back(std::move(s));
  }
  return out;
}

// Whole-sequence ids of every layer: [layers][T][heads] (the reference every step is checked against).
inline std::vector<int64_t> whole_sequence_ids(const NgramHasher& h, const TestSequence& s, HashIdKind kind) {
  const EngramLayout& l = h.layout();
  const std::vector<int64_t> e = s.effective();
  const size_t per_layer = e.size() * static_cast<size_t>(l.heads());
  std::vector<int64_t> ids(per_layer * static_cast<size_t>(l.n_layers()));
  for (int li = 0; li < l.n_layers(); ++li) {
    const Status st = h.hash(e, li, std::span<int64_t>(ids.data() + li * per_layer, per_layer), kind);
    if (!st.is_ok()) ids.clear();
  }
  return ids;
}

// One step's batch in host memory (owning), and what its ids must be.
struct FuzzStep {
  int64_t max_tokens = 0;
  std::vector<int32_t> query_start_loc;
  std::vector<int64_t> tokens;       // [max_tokens]; padding beyond the step's tokens
  std::vector<uint8_t> dead_mask;    // [max_tokens]
  bool use_mask = true;              // pass dead_mask (else the step has no mask-marked DEAD tokens)
  std::vector<int32_t> slots;        // [n_requests], empty = row r
  std::vector<int32_t> accepted;     // [n_requests]
  // Per request: its sequence, the position of its first new token, and how many of its new tokens are the
  // sequence's (the rest are a rejected draft).
  std::vector<int32_t> seq;
  std::vector<int64_t> first_pos;
  std::vector<int32_t> real;

  int32_t n_requests() const { return static_cast<int32_t>(seq.size()); }
  int64_t n_tokens() const { return query_start_loc.back(); }
  HashBatch batch(const int64_t* lookback, int64_t lookback_rows) const {
    HashBatch b;
    b.n_requests = n_requests();
    b.max_tokens = max_tokens;
    b.query_start_loc = query_start_loc.data();
    b.tokens = tokens.data();
    b.dead_mask = use_mask ? dead_mask.data() : nullptr;
    b.lookback = lookback;
    b.lookback_rows = lookback_rows;
    b.lookback_slot = slots.empty() ? nullptr : slots.data();
    return b;
  }
};

struct FuzzOptions {
  bool use_slots = true;        // false: every step holds every sequence in order (row r), finished ones empty
  int max_prefill_chunk = 48;
  int max_draft = 4;
  double prefix_start_fraction = 0.3;  // sequences that start mid-way (a prefix-cache hit)
  int max_padding_tokens = 7;
};

// Drives `seqs` through steps until every sequence is consumed. Look-back rows live in `lookback`
// ([rows][window], rows >= seqs.size()); the caller runs each step and then advances the rows (update_lookback with
// step.accepted); the fuzzer only tracks positions.
class StepFuzzer {
 public:
  StepFuzzer(std::vector<TestSequence> seqs, int window, std::mt19937_64& rng, int64_t vocab, FuzzOptions o = {})
      : seqs_(std::move(seqs)), window_(window), rng_(rng), vocab_(vocab), o_(o) {
    const size_t n = seqs_.size();
    rows_ = static_cast<int64_t>(n) + (o_.use_slots ? 3 : 0);
    slot_.resize(n);
    std::iota(slot_.begin(), slot_.end(), 0);
    if (o_.use_slots) {
      std::vector<int32_t> all(static_cast<size_t>(rows_));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng_);
      std::copy_n(all.begin(), n, slot_.begin());
    }
    pos_.assign(n, 0);
    // Rows of unused slots hold random ids: never read.
    lookback_ = random_tokens(rng_, static_cast<size_t>(rows_ * window_), vocab_);
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t i = 0; i < n; ++i) {
      const auto e = seqs_[i].effective();
      if (u(rng_) < o_.prefix_start_fraction && e.size() > 1) pos_[i] = static_cast<int64_t>(rng_() % e.size());
      start_.push_back(pos_[i]);
      lookback_of_prefix(e.data(), pos_[i], window_, lookback_.data() + static_cast<int64_t>(slot_[i]) * window_);
    }
  }

  // Initial look-back rows ([rows][window]): the prefix of each sequence's start, random ids in unused rows.
  const std::vector<int64_t>& initial_lookback() const { return lookback_; }
  int64_t lookback_rows() const { return rows_; }
  // Position where sequence i's hashing starts (ids before it are not produced).
  int64_t start(size_t i) const { return start_[i]; }
  const std::vector<TestSequence>& sequences() const { return seqs_; }
  bool done() const {
    for (size_t i = 0; i < seqs_.size(); ++i)
      if (pos_[i] < static_cast<int64_t>(seqs_[i].tokens.size())) return false;
    return true;
  }

  // The next step; positions advance by the accepted tokens.
  FuzzStep next() {
    FuzzStep st;
    std::vector<int32_t> order;
    for (size_t i = 0; i < seqs_.size(); ++i) {
      const bool active = pos_[i] < static_cast<int64_t>(seqs_[i].tokens.size());
      if (!o_.use_slots || (active && rng_() % 4 != 0)) order.push_back(static_cast<int32_t>(i));
    }
    if (o_.use_slots) std::shuffle(order.begin(), order.end(), rng_);
    st.use_mask = rng_() % 8 != 0;
    st.query_start_loc.push_back(0);
    for (int32_t i : order) {
      const TestSequence& s = seqs_[static_cast<size_t>(i)];
      const int64_t left = static_cast<int64_t>(s.tokens.size()) - pos_[static_cast<size_t>(i)];
      int64_t real = 0, draft = 0;
      if (left > 0) {
        switch (rng_() % 3) {
          case 0: real = 1 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(o_.max_prefill_chunk)); break;
          case 1: real = 1; break;
          default:
            real = 1 + static_cast<int64_t>(rng_() % 3);
            draft = static_cast<int64_t>(rng_() % static_cast<uint64_t>(o_.max_draft + 1));
        }
        real = std::min(real, left);
      }
      const int64_t p = pos_[static_cast<size_t>(i)];
      for (int64_t j = 0; j < real; ++j) {
        // Without a mask in this step, mask-marked DEAD tokens travel as kDeadToken.
        const bool masked = s.dead[static_cast<size_t>(p + j)] != 0;
        st.tokens.push_back(masked && !st.use_mask ? kDeadToken : s.tokens[static_cast<size_t>(p + j)]);
        st.dead_mask.push_back(masked && st.use_mask ? 1 : 0);
      }
      for (int64_t j = 0; j < draft; ++j) {
        st.tokens.push_back(rng_() % 10 == 0 ? kDeadToken : static_cast<int64_t>(rng_() % static_cast<uint64_t>(vocab_)));
        st.dead_mask.push_back(st.use_mask && rng_() % 10 == 0 ? 1 : 0);
      }
      st.query_start_loc.push_back(static_cast<int32_t>(st.tokens.size()));
      st.seq.push_back(i);
      st.first_pos.push_back(p);
      st.real.push_back(static_cast<int32_t>(real));
      st.accepted.push_back(static_cast<int32_t>(real));
      if (o_.use_slots) st.slots.push_back(slot_[static_cast<size_t>(i)]);
      pos_[static_cast<size_t>(i)] += real;
    }
    const int64_t pad = static_cast<int64_t>(rng_() % static_cast<uint64_t>(o_.max_padding_tokens + 1));
    st.max_tokens = static_cast<int64_t>(st.tokens.size()) + pad;
    for (int64_t j = 0; j < pad; ++j) {
      st.tokens.push_back(static_cast<int64_t>(rng_() % static_cast<uint64_t>(vocab_)));
      st.dead_mask.push_back(0);
    }
    return st;
  }

 private:
  std::vector<TestSequence> seqs_;
  int window_;
  std::mt19937_64& rng_;
  int64_t vocab_;
  FuzzOptions o_;
  int64_t rows_ = 0;
  std::vector<int32_t> slot_;
  std::vector<int64_t> pos_;
  std::vector<int64_t> start_;
  std::vector<int64_t> lookback_;
};

// Index of the first id of `step` (ids [layers][stride]) that differs from whole-sequence hashing, or a message.
// Only the sequences' own tokens are compared (a rejected draft's ids have no whole-sequence counterpart).
inline std::string first_step_mismatch(const FuzzStep& st, const std::vector<std::vector<int64_t>>& whole,
                                       const std::vector<TestSequence>& seqs, const int64_t* ids, int64_t stride,
                                       int n_layers, int heads) {
  for (int32_t r = 0; r < st.n_requests(); ++r) {
    const size_t si = static_cast<size_t>(st.seq[static_cast<size_t>(r)]);
    const int64_t T = static_cast<int64_t>(seqs[si].tokens.size());
    for (int32_t j = 0; j < st.real[static_cast<size_t>(r)]; ++j) {
      const int64_t t = st.query_start_loc[static_cast<size_t>(r)] + j;
      const int64_t pos = st.first_pos[static_cast<size_t>(r)] + j;
      for (int l = 0; l < n_layers; ++l)
        for (int h = 0; h < heads; ++h) {
          const int64_t got = ids[l * stride + t * heads + h];
          const int64_t want = whole[si][static_cast<size_t>((l * T + pos) * heads + h)];
          if (got != want)
            return "request " + std::to_string(r) + " (sequence " + std::to_string(si) + ", position " +
                   std::to_string(pos) + ") layer " + std::to_string(l) + " head " + std::to_string(h) + ": " +
                   std::to_string(got) + " != whole-sequence " + std::to_string(want);
        }
    }
  }
  return "";
}


// Real text hashed as the engine hashes it: the V4.1-Flash layout with the committed DeepSeek-V3 compression table.
// `skip` says why there is no case (the token file cannot be read); failures to build the hasher are test failures.
struct TextCase {
  std::optional<NgramHasher> hasher;
  TokenFile tokens;
  std::string skip;
};
inline TextCase text_case(const std::string& path, const std::string& what) {
  TextCase c;
  auto tokens = read_token_file(path);
  if (!tokens.is_ok()) {
    c.skip = what + " tokens not available (" + tokens.status().message() +
             "): scripts/setup writes build/data/common-licenses.tokens (ENGRAM_DATA_DIR), scripts/tokenize-corpus the corpus";
    return c;
  }
  auto table = read_compression_table(default_compression_table_path());
  auto layout = make_preset_layout("v41-flash");
  if (!table.is_ok() || !layout.is_ok()) {
    ADD_FAILURE() << (table.is_ok() ? layout.status().to_string() : table.status().to_string());
    c.skip = "no hasher";
    return c;
  }
  EXPECT_TRUE(check_token_file_matches_table(*tokens, *table, default_compression_table_path()).is_ok());
  auto h = NgramHasher::create(*layout, std::move(*table));
  EXPECT_TRUE(h.is_ok()) << h.status().to_string();
  if (!h.is_ok()) {
    c.skip = "no hasher";
    return c;
  }
  c.hasher.emplace(std::move(*h));
  c.tokens = std::move(*tokens);
  return c;
}

// The corpus of scripts/tokenize-corpus: $ENGRAM_CORPUS_DIR/corpus-test.tokens, else build/data/corpus.
inline std::string corpus_test_tokens_path() {
  const char* dir = std::getenv("ENGRAM_CORPUS_DIR");
  return std::string(dir && *dir ? dir : ENGRAM_SOURCE_DIR "/build/data/corpus") + "/corpus-test.tokens";
}

// The reference ids of one step of chunks, as a device hasher with look-back slots makes them: chunk c holds the
// tokens [qsl[c], qsl[c+1]) and reads look-back row slots[c] of `lookback` ([rows][N-1], DEAD rows for new
// sequences already written by the caller). out[layer] gets the step's tokens x heads global row ids; `lookback`
// then advances past every chunk. A failure of the reference fails the test.
inline void reference_chunk_step(const NgramHasher& h, const std::vector<int32_t>& qsl, const std::vector<int64_t>& tokens,
                                 const std::vector<int32_t>& slots, int64_t rows, std::vector<int64_t>& lookback,
                                 std::vector<std::vector<int64_t>>& out) {
  const int heads = h.layout().heads();
  const int64_t total = qsl.back();
  HashBatch b;
  b.n_requests = static_cast<int32_t>(slots.size());
  b.max_tokens = std::max<int64_t>(total, 1);
  b.query_start_loc = qsl.data();
  b.tokens = tokens.data();
  b.lookback = lookback.data();
  b.lookback_rows = rows;
  b.lookback_slot = slots.data();
  std::vector<int64_t> ids(static_cast<size_t>(h.layout().n_layers() * b.max_tokens * heads), -7);
  ASSERT_TRUE(hash_batch_reference(h, b, HashIdKind::kGlobalRow, ids.data()).is_ok());
  out.assign(static_cast<size_t>(h.layout().n_layers()), {});
  for (int l = 0; l < h.layout().n_layers(); ++l)
    out[static_cast<size_t>(l)].assign(ids.begin() + l * b.max_tokens * heads, ids.begin() + l * b.max_tokens * heads + total * heads);
  ASSERT_TRUE(update_lookback_reference(h.layout().max_ngram - 1, b, nullptr, lookback.data()).is_ok());
}

}  // namespace engram::testing
