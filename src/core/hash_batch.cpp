// The CPU reference of batch hashing (see hash_batch.hpp). Deliberately built from the sequence API and nothing
// else: each request's look-back row is compressed and restored into a SequenceState (a snapshot at position N-1
// whose tail is the row; kDeadToken slots act as the positions before the start), and its chunk goes through
// NgramHasher::hash_chunk. So the batch semantics (CSR, look-back, DEAD, rollback) are checked against
// whole-sequence hashing by the unit tests, and the CUDA kernel is checked against this, bit for bit.
// Everything is validated before anything is written, so a bad batch leaves out / lookback_out untouched.
#include "engram/hash_batch.hpp"

#include <algorithm>
#include <set>
#include <span>
#include <string>

#include "engram/ngram_hash.hpp"

namespace engram {

namespace {

Status bad(const std::string& msg) { return Status(Code::kInvalidArgument, msg); }

int32_t slot_of(const HashBatch& b, int32_t r) { return b.lookback_slot ? b.lookback_slot[r] : r; }

// CSR offsets (host memory): [0] = 0, non-decreasing, last <= max_tokens.
Status check_query_start_loc(const HashBatch& b, const char* what) {
  if (b.query_start_loc[0] != 0)
    return bad(std::string(what) + ": query_start_loc[0] = " + std::to_string(b.query_start_loc[0]) + ", must be 0");
  for (int32_t r = 0; r < b.n_requests; ++r)
    if (b.query_start_loc[r + 1] < b.query_start_loc[r])
      return bad(std::string(what) + ": query_start_loc decreases at request " + std::to_string(r) + " (" +
                 std::to_string(b.query_start_loc[r]) + " -> " + std::to_string(b.query_start_loc[r + 1]) + ")");
  if (b.query_start_loc[b.n_requests] > b.max_tokens)
    return bad(std::string(what) + ": query_start_loc[" + std::to_string(b.n_requests) + "] = " +
               std::to_string(b.query_start_loc[b.n_requests]) + " tokens > max_tokens " + std::to_string(b.max_tokens));
  return Status::ok();
}

// Slots in [0, lookback_rows) and pairwise distinct.
Status check_slots(const HashBatch& b, const char* what) {
  std::set<int32_t> seen;
  for (int32_t r = 0; r < b.n_requests; ++r) {
    const int32_t s = slot_of(b, r);
    if (s < 0 || s >= b.lookback_rows)
      return bad(std::string(what) + ": request " + std::to_string(r) + " has look-back slot " + std::to_string(s) +
                 ", not in [0, " + std::to_string(b.lookback_rows) + ")");
    if (!seen.insert(s).second)
      return bad(std::string(what) + ": look-back slot " + std::to_string(s) + " is used by two requests (request " +
                 std::to_string(r) + ")");
  }
  return Status::ok();
}

// Request r's new tokens with DEAD-masked ones replaced by kDeadToken.
std::vector<int64_t> chunk_of(const HashBatch& b, int32_t r, int64_t n) {
  const int64_t first = b.query_start_loc[r];
  std::vector<int64_t> c(b.tokens + first, b.tokens + first + n);
  if (b.dead_mask)
    for (int64_t i = 0; i < n; ++i)
      if (b.dead_mask[first + i]) c[static_cast<size_t>(i)] = kDeadToken;
  return c;
}

}  // namespace

Status check_hash_batch_shape(const HashBatch& b, int heads, int n_layers, const char* what) {
  const std::string w(what);
  if (b.n_requests < 0) return bad(w + ": n_requests " + std::to_string(b.n_requests) + " < 0");
  if (b.max_tokens < 0) return bad(w + ": max_tokens " + std::to_string(b.max_tokens) + " < 0");
  if (!b.query_start_loc) return bad(w + ": query_start_loc is null (it needs n_requests + 1 entries)");
  if (b.max_tokens > 0 && !b.tokens) return bad(w + ": tokens is null with max_tokens " + std::to_string(b.max_tokens));
  if (b.n_requests > 0 && (!b.lookback || b.lookback_rows < 1))
    return bad(w + ": " + std::to_string(b.n_requests) + " requests need look-back rows (lookback " +
               (b.lookback ? "set" : "null") + ", lookback_rows " + std::to_string(b.lookback_rows) + ")");
  if (heads < 1 || n_layers < 1) return bad(w + ": heads and layers must be positive");
  if (b.max_tokens > std::numeric_limits<int32_t>::max() / heads)
    return bad(w + ": max_tokens " + std::to_string(b.max_tokens) + " x " + std::to_string(heads) +
               " heads exceeds 2^31 ids per layer");
  return Status::ok();
}

NgramHashParams ngram_hash_params(const NgramHasher& hasher, HashIdKind kind) {
  const EngramLayout& l = hasher.layout();
  NgramHashParams p;
  p.n_layers = l.n_layers();
  p.max_ngram = l.max_ngram;
  p.heads_per_order = l.heads_per_order;
  p.heads = l.heads();
  p.vocab_size = hasher.vocab_size();
  p.compressed_pad_id = hasher.compressed_pad_id();
  if (const CompressionTable* t = hasher.compression_table()) p.canonical = t->canonical;
  for (int li = 0; li < p.n_layers; ++li) {
    const auto& m = hasher.multipliers(li);
    p.multipliers.insert(p.multipliers.end(), m.begin(), m.end());
    for (int h = 0; h < p.heads; ++h) {
      p.head_rows.push_back(l.head_rows[li][h]);
      p.head_offsets.push_back(kind == HashIdKind::kGlobalRow ? l.head_offsets[li][h] : 0);
    }
    p.layer_rows.push_back(l.rows(li));
  }
  return p;
}

Status hash_batch_reference(const NgramHasher& hasher, const HashBatch& b, HashIdKind kind, int64_t* out,
                            int64_t out_layer_stride) {
  const char* what = "hash batch (CPU reference)";
  const EngramLayout& l = hasher.layout();
  const int heads = l.heads();
  const int w = l.max_ngram - 1;
  ENGRAM_RETURN_IF_ERROR(check_hash_batch_shape(b, heads, l.n_layers(), what));
  const int64_t stride = out_layer_stride == 0 ? b.max_tokens * heads : out_layer_stride;
  if (stride < b.max_tokens * heads)
    return bad(std::string(what) + ": out_layer_stride " + std::to_string(stride) + " < max_tokens * heads = " +
               std::to_string(b.max_tokens * heads));
  ENGRAM_RETURN_IF_ERROR(check_query_start_loc(b, what));
  ENGRAM_RETURN_IF_ERROR(check_slots(b, what));
  if (b.query_start_loc[b.n_requests] > 0 && !out) return bad(std::string(what) + ": out is null");
  // Hash every request into a scratch copy first, so an error in a later request writes nothing.
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(b.n_requests));
  for (int32_t r = 0; r < b.n_requests; ++r) {
    const std::string req = std::string(what) + ": request " + std::to_string(r);
    const int64_t* row = b.lookback + static_cast<int64_t>(slot_of(b, r)) * w;
    SequenceSnapshot snap{w, std::vector<int64_t>(static_cast<size_t>(w))};
    ENGRAM_RETURN_IF_ERROR(hasher.compress(std::span<const int64_t>(row, static_cast<size_t>(w)), snap.tail)
                               .with_context(req + " look-back row " + std::to_string(slot_of(b, r))));
    ENGRAM_ASSIGN_OR_RETURN(SequenceState state, hasher.restore(snap));
    const int64_t n = b.query_start_loc[r + 1] - b.query_start_loc[r];
    const std::vector<int64_t> chunk = chunk_of(b, r, n);
    ids[static_cast<size_t>(r)].resize(static_cast<size_t>(l.n_layers() * n * heads));
    ENGRAM_RETURN_IF_ERROR(hasher.hash_chunk(state, chunk, ids[static_cast<size_t>(r)], kind)
                               .with_context(req + " (tokens " + std::to_string(b.query_start_loc[r]) + ".." +
                                             std::to_string(b.query_start_loc[r + 1]) + ")"));
  }
  for (int32_t r = 0; r < b.n_requests; ++r) {
    const int64_t first = b.query_start_loc[r];
    const int64_t n = b.query_start_loc[r + 1] - first;
    const int64_t* src = ids[static_cast<size_t>(r)].data();
    for (int li = 0; li < l.n_layers(); ++li)
      std::copy_n(src + li * n * heads, n * heads, out + li * stride + first * heads);
  }
  return Status::ok();
}

Status update_lookback_reference(int window, const HashBatch& b, const int32_t* accepted, int64_t* lookback_out) {
  const char* what = "update look-back (CPU reference)";
  if (window < 1) return bad(std::string(what) + ": window " + std::to_string(window) + " < 1");
  ENGRAM_RETURN_IF_ERROR(check_hash_batch_shape(b, 1, 1, what));
  ENGRAM_RETURN_IF_ERROR(check_query_start_loc(b, what));
  ENGRAM_RETURN_IF_ERROR(check_slots(b, what));
  if (b.n_requests > 0 && !lookback_out) return bad(std::string(what) + ": lookback_out is null");
  for (int32_t r = 0; r < b.n_requests; ++r) {
    const int64_t n = b.query_start_loc[r + 1] - b.query_start_loc[r];
    if (accepted && (accepted[r] < 0 || accepted[r] > n))
      return bad(std::string(what) + ": request " + std::to_string(r) + " accepts " + std::to_string(accepted[r]) +
                 " of its " + std::to_string(n) + " new tokens");
  }
  const size_t w = static_cast<size_t>(window);
  for (int32_t r = 0; r < b.n_requests; ++r) {
    const int64_t slot = slot_of(b, r);
    const int64_t n = b.query_start_loc[r + 1] - b.query_start_loc[r];
    const int64_t k = accepted ? accepted[r] : n;
    // Slots are distinct, so reading the whole old row before writing it is safe in place.
    std::vector<int64_t> seq(b.lookback + slot * window, b.lookback + (slot + 1) * window);
    const std::vector<int64_t> chunk = chunk_of(b, r, k);
    seq.insert(seq.end(), chunk.begin(), chunk.end());
    std::copy(seq.end() - static_cast<std::ptrdiff_t>(w), seq.end(), lookback_out + slot * window);
  }
  return Status::ok();
}

void lookback_of_prefix(const int64_t* prefix, int64_t n, int window, int64_t* row) {
  for (int j = 0; j < window; ++j) {
    const int64_t pos = n - window + j;  // sequence position held by slot j
    row[j] = pos >= 0 ? prefix[pos] : kDeadToken;
  }
}

}  // namespace engram
