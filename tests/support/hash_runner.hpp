// An implementation of the batch hashing API under test (StepRunner: the CUDA kernels, or their per-thread code
// run on the CPU) and the scenarios every implementation runs against the CPU reference: fuzzed steps, the
// benchmark's shapes, invalid contents, real text. Inputs and the step fuzzer are hash_support.hpp's; this header
// is for the tests of an implementation (tests/unit/core/test_hash_step.cpp, tests/cuda/test_hash_kernel.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "support/hash_support.hpp"

namespace engram::testing {

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

}  // namespace engram::testing
