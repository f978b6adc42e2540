// Helpers shared by the hashing tests (CPU: tests/unit/core, GPU: tests/cuda): random compression tables and
// tokens, sequences with DEAD tokens and image spans, and a step fuzzer that drives sequences through engine steps
// the way a serving engine does — random batch composition and order, chunked prefill, decode, speculative verify
// steps with rejected drafts (rollback = accepting fewer), prefix-cache starts, padding requests, look-back slots —
// and says which id of each step must equal which position of whole-sequence hashing. StepRunner abstracts an
// implementation of the batch API (the CUDA kernels, or their per-thread code run on the CPU), and the check_*
// functions run the same scenarios against the CPU reference for each.
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

#include "core/hash_batch.hpp"
#include "core/ngram_hash.hpp"
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


// ---- An implementation of the batch API under test (the CUDA kernels, or their per-thread code on the CPU) -----

// Poison every output element starts as (bytes 0x5A), widened to int64.
inline int64_t id_poison(int id_bytes) { return id_bytes == 4 ? 0x5A5A5A5ALL : 0x5A5A5A5A5A5A5A5ALL; }

struct RunnerIds {
  std::vector<int64_t> ids;       // [layers][stride], widened to int64; id_poison() where nothing was written
  unsigned long long errors = 0;  // the error counter after the launch (it starts at 0)
};

// Every call takes host arrays (HashBatch with host pointers, rows [lookback_rows][window]) and returns host copies.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual int id_bytes() const = 0;  // 8 (int64 ids) or 4 (int32)
  // The hash of `b` into a poisoned [layers][stride] output.
  virtual RunnerIds hash(const HashBatch& b, int64_t stride) = 0;
  // The rows after the look-back update of `b` (in place, or into a second buffer holding a copy of the rows).
  virtual std::vector<int64_t> update(const HashBatch& b, const int32_t* accepted, bool in_place,
                                      unsigned long long* errors) = 0;
  // The rows after resetting slots[0..n) (empty slots: rows 0..n-1).
  virtual std::vector<int64_t> reset(const std::vector<int64_t>& rows, int64_t n_rows, const std::vector<int32_t>& slots,
                                     int32_t n, unsigned long long* errors) = 0;
};

// Every step of `fz` through the CPU reference and `run`: ids bit for bit (every token of the step, drafts
// included), nothing written beyond the step's tokens, no errors, and the rows after the runner's update equal to
// the reference update's. Returns the steps done.
inline int check_steps_against_reference(const NgramHasher& h, StepRunner& run, StepFuzzer& fz, HashIdKind kind,
                                         std::mt19937_64& rng) {
  const int heads = h.layout().heads();
  const int layers = h.layout().n_layers();
  const int w = h.layout().max_ngram - 1;
  const int64_t poison = id_poison(run.id_bytes());
  std::vector<int64_t> lookback = fz.initial_lookback();
  int steps = 0;
  while (!fz.done()) {
    const FuzzStep st = fz.next();
    const HashBatch b = st.batch(lookback.data(), fz.lookback_rows());
    const int64_t stride = st.max_tokens * heads + static_cast<int64_t>(rng() % 5);
    std::vector<int64_t> want(static_cast<size_t>(stride * layers), poison);
    const Status s = hash_batch_reference(h, b, kind, want.data(), stride);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (!s.is_ok()) return steps;
    const RunnerIds got = run.hash(b, stride);
    EXPECT_EQ(got.errors, 0u) << "step " << steps;
    for (size_t k = 0; k < want.size(); ++k)
      if (got.ids[k] != want[k]) {
        const int64_t i = static_cast<int64_t>(k) % stride;
        ADD_FAILURE() << "step " << steps << " layer " << static_cast<int64_t>(k) / stride << " token " << i / heads
                      << " head " << i % heads << ": got " << got.ids[k] << ", CPU reference " << want[k]
                      << (i >= st.n_tokens() * heads ? " (beyond the step's tokens: must stay poison)" : "") << " ("
                      << st.n_requests() << " requests, " << st.n_tokens() << " tokens)";
        return steps;
      }
    unsigned long long errors = 0;
    const std::vector<int64_t> rows = run.update(b, st.accepted.data(), rng() & 1, &errors);
    EXPECT_TRUE(update_lookback_reference(w, b, st.accepted.data(), lookback.data()).is_ok());
    EXPECT_EQ(errors, 0u) << "step " << steps << ": update";
    EXPECT_EQ(rows, lookback) << "step " << steps << ": look-back rows after the update";
    if (rows != lookback) return steps;
    ++steps;
  }
  return steps;
}

// One step of `requests` requests with `tokens_each` new tokens each (random ids, no DEAD), rows r.
inline FuzzStep uniform_step(std::mt19937_64& rng, int32_t requests, int32_t tokens_each, int64_t vocab) {
  FuzzStep st;
  st.query_start_loc.push_back(0);
  for (int32_t r = 0; r < requests; ++r) {
    const auto t = random_tokens(rng, static_cast<size_t>(tokens_each), vocab);
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

// The benchmark's shapes (decode 64 and 512 x 1 token, one 8192-token prefill) on the V4.1-Flash layout with a
// DeepSeek-sized random table, look-back rows of random prefixes (some shorter than N-1): `run` (int64 ids)
// against the CPU reference.
inline void check_benchmark_shapes(StepRunner& run, const NgramHasher& h, std::mt19937_64& rng) {
  const int w = h.layout().max_ngram - 1;
  const int heads = h.layout().heads();
  for (auto [requests, each] : {std::pair{64, 1}, std::pair{512, 1}, std::pair{1, 8192}}) {
    SCOPED_TRACE(std::to_string(requests) + " x " + std::to_string(each) + " tokens");
    const FuzzStep st = uniform_step(rng, requests, each, h.vocab_size());
    std::vector<int64_t> lookback(static_cast<size_t>(requests * w));
    for (int r = 0; r < requests; ++r) {
      const auto prefix = random_tokens(rng, rng() % 6, h.vocab_size());
      lookback_of_prefix(prefix.data(), static_cast<int64_t>(prefix.size()), w, lookback.data() + r * w);
    }
    const HashBatch b = st.batch(lookback.data(), requests);
    const int64_t stride = st.max_tokens * heads;
    std::vector<int64_t> want(static_cast<size_t>(stride * h.layout().n_layers()));
    ASSERT_TRUE(hash_batch_reference(h, b, HashIdKind::kGlobalRow, want.data()).is_ok());
    const RunnerIds got = run.hash(b, stride);
    EXPECT_EQ(got.errors, 0u);
    EXPECT_EQ(got.ids, want);
  }
}

// Invalid contents on a hasher of N = 5 (any N >= 3 works) with global int64 ids from `run`: three requests of 10
// tokens in rows 0..2; request 0 gets a token id >= vocab at chunk index 3, request 1 an id >= vocab at index 1 of
// its look-back row, request 2 a slot out of range. Ids whose walk reaches the bad id, and every id of request 2,
// must be kDeadId, counted exactly; then offsets claiming more tokens than max_tokens, the update with a bad slot
// and a bad accept count, resets with an out-of-range slot, and offsets that do not start at 0.
inline void check_invalid_contents(StepRunner& run, const NgramHasher& h, std::mt19937_64& rng) {
  const EngramLayout& l = h.layout();
  const int heads = l.heads();
  const int layers = l.n_layers();
  const int w = l.max_ngram - 1;
  const int64_t vocab = h.vocab_size();
  ASSERT_GE(w, 2);
  FuzzStep st = uniform_step(rng, 3, 10, vocab);
  std::vector<int64_t> lookback = random_tokens(rng, static_cast<size_t>(3 * w), vocab);
  std::vector<int64_t> want(static_cast<size_t>(30 * heads * layers));
  ASSERT_TRUE(hash_batch_reference(h, st.batch(lookback.data(), 3), HashIdKind::kGlobalRow, want.data()).is_ok());
  st.slots = {0, 1, 7};
  st.tokens[3] = vocab + 11;
  lookback[static_cast<size_t>(w + 1)] = vocab;
  // Position i's id of order n walks [i - n + 1, i]; the bad id sits at q (chunk index, or look-back index - w).
  unsigned long long dead = 0;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 10; ++i)
      for (int hd = 0; hd < heads; ++hd) {
        const int n = hd / l.heads_per_order + 2;
        const int q = r == 0 ? 3 : 1 - w;
        if (r != 2 && !(i - n + 1 <= q && q <= i)) continue;
        for (int li = 0; li < layers; ++li) want[static_cast<size_t>(li * 30 * heads + (r * 10 + i) * heads + hd)] = kDeadId;
        dead += static_cast<unsigned long long>(layers);
      }
  HashBatch b = st.batch(lookback.data(), 3);
  RunnerIds got = run.hash(b, 30 * heads);
  EXPECT_EQ(got.ids, want);
  EXPECT_EQ(got.errors, dead);

  // Offsets claiming 5 tokens beyond max_tokens = 25: not written (the stride keeps room for them: still poison),
  // and counted.
  b.max_tokens = 25;
  got = run.hash(b, 30 * heads);
  unsigned long long dead25 = 0;
  for (int li = 0; li < layers; ++li)
    for (int i = 0; i < 30 * heads; ++i) {
      const size_t k = static_cast<size_t>(li * 30 * heads + i);
      EXPECT_EQ(got.ids[k], i < 25 * heads ? want[k] : id_poison(run.id_bytes())) << "layer " << li << " entry " << i;
      dead25 += i < 25 * heads && want[k] == kDeadId;
    }
  EXPECT_EQ(got.errors, dead25 + static_cast<unsigned long long>(5 * heads * layers));

  // The update: request 0 accepts 11 of 10 tokens and request 2's slot is out of range; only row 1 advances.
  b.max_tokens = 30;
  const std::vector<int32_t> acc = {11, 4, 2};
  unsigned long long errors = 0;
  std::vector<int64_t> rows = run.update(b, acc.data(), true, &errors);
  EXPECT_EQ(errors, 2u);
  std::vector<int64_t> want_rows = lookback;
  std::vector<int64_t> seq(lookback.begin() + w, lookback.begin() + 2 * w);
  seq.insert(seq.end(), st.tokens.begin() + 10, st.tokens.begin() + 14);
  std::copy(seq.end() - w, seq.end(), want_rows.begin() + w);
  EXPECT_EQ(rows, want_rows);

  // Resets: rows 2 and 0 become DEAD, slot 9 is out of range and counted; then rows 0..2 by index.
  errors = 0;
  rows = run.reset(rows, 3, {2, 9, 0}, 3, &errors);
  EXPECT_EQ(errors, 1u);
  for (int j = 0; j < w; ++j) want_rows[static_cast<size_t>(j)] = want_rows[static_cast<size_t>(2 * w + j)] = kDeadToken;
  EXPECT_EQ(rows, want_rows);
  errors = 0;
  rows = run.reset(rows, 3, {}, 3, &errors);
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(rows, std::vector<int64_t>(rows.size(), kDeadToken));

  // Offsets that do not start at 0: tokens 0..2 belong to no request (kDeadId, counted); the others hash as the
  // same requests of a well-formed batch whose extra first request holds tokens 0..2.
  FuzzStep ok = uniform_step(rng, 4, 1, vocab);
  ok.tokens = random_tokens(rng, 30, vocab);
  ok.dead_mask.assign(30, 0);
  ok.max_tokens = 30;
  ok.query_start_loc = {0, 3, 10, 20, 30};
  ok.slots = {3, 0, 1, 2};
  const std::vector<int64_t> rows4 = random_tokens(rng, static_cast<size_t>(4 * w), vocab);
  std::vector<int64_t> want4(static_cast<size_t>(30 * heads * layers));
  ASSERT_TRUE(hash_batch_reference(h, ok.batch(rows4.data(), 4), HashIdKind::kGlobalRow, want4.data()).is_ok());
  for (int li = 0; li < layers; ++li)
    std::fill_n(want4.begin() + li * 30 * heads, 3 * heads, kDeadId);
  FuzzStep shifted = ok;
  shifted.query_start_loc = {3, 10, 20, 30};
  shifted.slots = {0, 1, 2};
  shifted.seq.pop_back();
  got = run.hash(shifted.batch(rows4.data(), 4), 30 * heads);
  EXPECT_EQ(got.ids, want4);
  EXPECT_EQ(got.errors, static_cast<unsigned long long>(3 * heads * layers));
}


// Makes the implementation under test for a hasher's params (int32 or int64 ids); null when it cannot be made.
using MakeRunner = std::function<std::unique_ptr<StepRunner>(const NgramHashParams& params, bool int32_ids)>;

// Fuzzed steps on every hash_cases() hasher x int64/int32 ids x global/head-local ids x look-back slots/rows in
// order, against the CPU reference.
inline void check_fuzzed_steps(const MakeRunner& make, std::mt19937_64& rng) {
  for (const HashCase& c : hash_cases(rng)) {
    const NgramHasher h = make_hasher(c);
    for (bool int32_ids : {false, true})
      for (HashIdKind kind : {HashIdKind::kGlobalRow, HashIdKind::kHeadLocal})
        for (bool use_slots : {true, false}) {
          SCOPED_TRACE(c.what + (int32_ids ? ", int32" : ", int64") +
                       (kind == HashIdKind::kGlobalRow ? ", global" : ", head-local") +
                       (use_slots ? ", slots" : ", rows in order"));
          std::unique_ptr<StepRunner> run = make(ngram_hash_params(h, kind), int32_ids);
          ASSERT_TRUE(run);
          std::vector<TestSequence> seqs;
          const int n = 3 + static_cast<int>(rng() % 12);
          for (int i = 0; i < n; ++i) seqs.push_back(random_sequence(rng, 1 + rng() % 200, c.table.vocab_size(), 0.08));
          seqs[0].tokens[0] = -3;  // a negative pass-through id (not DEAD) hashes as the reference does
          FuzzOptions o;
          o.use_slots = use_slots;
          StepFuzzer fz(std::move(seqs), c.layout.max_ngram - 1, rng, c.table.vocab_size(), o);
          const int steps = check_steps_against_reference(h, *run, fz, kind, rng);
          EXPECT_TRUE(fz.done()) << "stopped after " << steps << " steps";
        }
  }
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

// Real text through fuzzed steps (64 sequences of 400 tokens), int64 and int32 ids, against the CPU reference.
// Skips (with the reason) when the token file cannot be read.
inline void check_text_steps(const MakeRunner& make, const std::string& path, const std::string& what,
                             std::mt19937_64& rng) {
  TextCase tc = text_case(path, what);
  if (!tc.skip.empty()) GTEST_SKIP() << tc.skip;
  const NgramHasher& h = *tc.hasher;
  for (bool int32_ids : {false, true}) {
    SCOPED_TRACE(what + (int32_ids ? ", int32" : ", int64"));
    std::unique_ptr<StepRunner> run = make(ngram_hash_params(h, HashIdKind::kGlobalRow), int32_ids);
    ASSERT_TRUE(run);
    FuzzOptions o;
    o.prefix_start_fraction = 0.5;
    StepFuzzer fz(text_sequences(tc.tokens, 64, 400), h.layout().max_ngram - 1, rng, h.vocab_size(), o);
    check_steps_against_reference(h, *run, fz, HashIdKind::kGlobalRow, rng);
    EXPECT_TRUE(fz.done());
  }
}

// The corpus of scripts/tokenize-corpus: $ENGRAM_CORPUS_DIR/corpus-test.tokens, else build/data/corpus.
inline std::string corpus_test_tokens_path() {
  const char* dir = std::getenv("ENGRAM_CORPUS_DIR");
  return std::string(dir && *dir ? dir : ENGRAM_SOURCE_DIR "/build/data/corpus") + "/corpus-test.tokens";
}

}  // namespace engram::testing
