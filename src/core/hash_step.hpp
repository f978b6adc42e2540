// The per-thread work of the CUDA hash kernels (src/cuda/hash_kernel.cu) as ENGRAM_HD functions: the kernels run
// one call per thread, and tests/unit/core/test_hash_step.cpp runs the same calls over every thread index on the
// CPU, so the kernels' arithmetic, indexing, DEAD rule and error handling are checked against the CPU reference
// (core/hash_batch.hpp) on any machine; only the launch itself needs a GPU.
//
// hash_step_thread: thread (layer, x = token * heads + head) of the hash kernel. It finds the token's request by
// binary search over the CSR offsets, walks the head's n-gram from the newest token back — new tokens from the
// batch, older ones from the request's look-back row — compressing each raw id through the table and applying the
// DEAD rule (from the first DEAD token of the walk on, the pad), mixes as NgramHasher does (uint64 products, XOR)
// and writes fast_floor_mod(mix, p_h) + offset_h (core/fast_mod.hpp). Every index it reads is checked against the
// sizes the host gave: malformed contents give kDeadId and an error count, never an out-of-bounds access.
// lookback_step_request / lookback_reset_slot: one request's row update, one slot's reset.
//
// HashStepTables (host) holds the constants laid out as the device hasher uploads them; consts() points a
// HashStepConsts at any copy of them (host memory for the tests, device memory for the kernels).
// C++17, no CUDA API: nvcc compiles src/cuda as C++17 and includes it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fast_mod.hpp"
#include "engram/hash_batch.hpp"
#include "engram/lookup.hpp"
#include "engram/status.hpp"

namespace engram {

inline constexpr int kHashMaxWindow = 15;  // look-back ids per row: EngramLayout allows max_ngram <= 16

// Pointers to the constants (host or device memory) and the shape.
struct HashStepConsts {
  const uint32_t* canonical = nullptr;  // [vocab] or null (ids already compressed)
  int64_t vocab = 0;
  int64_t pad = 0;                      // compressed pad id
  const uint64_t* mult = nullptr;       // [n_layers][max_ngram]
  const uint64_t* rows = nullptr;       // [n_layers][heads] p_h
  const uint64_t* magic = nullptr;      // [n_layers][heads] make_fast_mod(p_h)
  const int64_t* offs = nullptr;        // [n_layers][heads]
  int max_ngram = 0;
  int heads = 0;
  int heads_per_order = 0;
  int n_layers = 0;
};

// The constants of NgramHashParams in upload order: words = [multipliers | head rows | Barrett constants | offsets].
struct HashStepTables {
  std::vector<uint64_t> words;
  std::vector<uint32_t> canonical;
  int max_ngram = 0;
  int heads = 0;
  int heads_per_order = 0;
  int n_layers = 0;
  int64_t vocab = 0;
  int64_t pad = 0;
  // HashStepConsts over a copy of `words` at words_base and of `canonical` at canonical_base (null when empty).
  HashStepConsts consts(const uint64_t* words_base, const uint32_t* canonical_base) const;
};

// kInvalidArgument for inconsistent params (shape, array sizes, a head size outside [1, 2^63], N outside
// [2, kHashMaxWindow + 1]) or, with int32_ids, a layer of more than 2^31 rows (its ids would not fit int32).
Result<HashStepTables> make_hash_step_tables(const NgramHashParams& params, bool int32_ids);

// Request r of token t (r = the first request with query_start_loc[r + 1] > t) and its first token, or -1 when the
// offsets do not place t in [query_start_loc[r], query_start_loc[r + 1]) with a non-negative start.
ENGRAM_HD int32_t hash_step_request(const HashBatch& b, int32_t t, int32_t* first) {
  int32_t lo = 0, hi = b.n_requests;
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (b.query_start_loc[mid + 1] <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo >= b.n_requests) return -1;
  *first = b.query_start_loc[lo];
  if (*first < 0 || *first > t || b.query_start_loc[lo + 1] <= t) return -1;
  return lo;
}

// Thread (layer, x) of the hash kernel, x in [0, max_tokens * heads): writes out[layer * stride + x] when token
// x / heads is one of the step's, and returns the errors it adds (1 for an id written as kDeadId; thread (0, 0)
// also adds the ids the offsets claim beyond max_tokens, which nobody writes).
template <typename OutT>
ENGRAM_HD unsigned long long hash_step_thread(const HashBatch& b, const HashStepConsts& c, OutT* out, int64_t stride,
                                              int layer, int64_t x) {
  unsigned long long errors = 0;
  const int32_t claimed = b.query_start_loc[b.n_requests];
  if (layer == 0 && x == 0 && claimed > b.max_tokens)
    errors += static_cast<unsigned long long>(claimed - b.max_tokens) * static_cast<unsigned long long>(c.n_layers) *
              static_cast<unsigned long long>(c.heads);
  if (x >= b.max_tokens * c.heads) return errors;
  const int32_t xi = static_cast<int32_t>(x);  // < 2^31 (check_hash_batch_shape)
  const int32_t t = xi / c.heads;
  const int h = xi - t * c.heads;
  if (t >= claimed) return errors;  // beyond the step's tokens: not written
  OutT* o = out + layer * stride + x;

  int32_t first = 0;
  const int32_t r = hash_step_request(b, t, &first);
  const int64_t slot = r < 0 ? -1 : (b.lookback_slot ? b.lookback_slot[r] : r);
  if (slot < 0 || slot >= b.lookback_rows) {
    *o = static_cast<OutT>(kDeadId);
    return errors + 1;
  }
  const int w = c.max_ngram - 1;
  const int64_t* row = b.lookback + slot * w;
  const uint64_t* m = c.mult + static_cast<int64_t>(layer) * c.max_ngram;
  const int n = h / c.heads_per_order + 2;  // the order of head h
  const int32_t i = t - first;              // position within the request's chunk
  uint64_t mix = 0;
  bool dead = false;
  for (int s = 0; s < n; ++s) {
    int64_t v = c.pad;
    if (!dead) {
      int64_t raw;
      bool masked = false;
      if (i - s >= 0) {  // a new token of this step (t - s >= first >= 0)
        raw = b.tokens[t - s];
        masked = b.dead_mask && b.dead_mask[t - s];
      } else {           // the look-back row: entry w - 1 is the token just before the chunk; i - s >= -w
        raw = row[w + (i - s)];
      }
      if (masked || raw == kDeadToken) {
        dead = true;
      } else if (raw >= c.vocab) {
        *o = static_cast<OutT>(kDeadId);
        return errors + 1;
      } else {
        v = (raw < 0 || !c.canonical) ? raw : static_cast<int64_t>(c.canonical[raw]);
      }
    }
    mix ^= static_cast<uint64_t>(v) * m[s];
  }
  const int64_t hh = static_cast<int64_t>(layer) * c.heads + h;
  *o = static_cast<OutT>(fast_floor_mod(static_cast<int64_t>(mix), c.rows[hh], c.magic[hh]) + c.offs[hh]);
  return errors;
}

// Request r's look-back row after the step (update_lookback_reference): row slot(r) of `out` := the last w ids of
// (row slot(r) of b.lookback ++ the first accepted[r] new tokens, DEAD ones as kDeadToken); accepted null = all.
// The whole old row is read before any write, so out may be b.lookback. False (nothing written) for a slot
// outside [0, lookback_rows), offsets outside [0, max_tokens] or accepted[r] outside [0, n_r].
ENGRAM_HD bool lookback_step_request(const HashBatch& b, int w, const int32_t* accepted, int64_t* out, int32_t r) {
  const int64_t first = b.query_start_loc[r];
  const int64_t n = static_cast<int64_t>(b.query_start_loc[r + 1]) - first;
  const int64_t slot = b.lookback_slot ? b.lookback_slot[r] : r;
  const int64_t k = accepted ? accepted[r] : n;
  if (slot < 0 || slot >= b.lookback_rows || first < 0 || n < 0 || first + n > b.max_tokens || k < 0 || k > n)
    return false;
  int64_t old[kHashMaxWindow];
  const int64_t* in = b.lookback + slot * w;
  for (int j = 0; j < w; ++j) old[j] = in[j];
  int64_t* dst = out + slot * w;
  for (int j = 0; j < w; ++j) {
    const int64_t idx = k + j;  // element of (old row ++ the k accepted tokens)
    if (idx < w) {
      dst[j] = old[idx];
    } else {
      const int64_t pos = first + (idx - w);
      dst[j] = (b.dead_mask && b.dead_mask[pos]) ? kDeadToken : b.tokens[pos];
    }
  }
  return true;
}

// Slot i of a reset (slots null = slot i): its row := kDeadToken. False (nothing written) when out of range.
ENGRAM_HD bool lookback_reset_slot(int64_t* lookback, int64_t rows, int w, const int32_t* slots, int32_t i) {
  const int64_t slot = slots ? slots[i] : i;
  if (slot < 0 || slot >= rows) return false;
  for (int j = 0; j < w; ++j) lookback[slot * w + j] = kDeadToken;
  return true;
}

}  // namespace engram
