// Hashing one engine step: the batch description shared by the CPU reference (hash_batch.cpp) and the CUDA kernel
// (src/cuda/hash_kernel.cuh), the DEAD-token rule of both, and the hasher's constants as flat arrays.
//
// A step hashes the new tokens of a batch of requests, ragged as CSR: request r's new tokens are
// tokens[query_start_loc[r] .. query_start_loc[r + 1]) — a prefill chunk, one decode token, or the tokens of a
// speculative verify step. Position i of a chunk needs the N-1 tokens before it; those before the chunk come from the
// request's look-back row: the last N-1 RAW token ids before the chunk (before compression, so an engine can fill a
// row from its own token history: prefix-cache hits, KV loaded from elsewhere), oldest first, kDeadToken in the
// slots before the sequence start. Rows live in one array [lookback_rows][N-1]; request r reads row
// lookback_slot[r] (row r when lookback_slot is null), so an engine keeps one row per request slot on the device.
//
// DEAD tokens (image spans; the rule vLLM's Engram hash kernel applies, restated here): a DEAD token takes part in
// no n-gram. For the n-gram of order n ending at position t, walk its tokens from t back to t-n+1; from the first
// DEAD one on (it included), every token of the walk counts as the compressed pad id. A position before the
// sequence start counts as DEAD, which is exactly the reference's "pad before the start". So:
//  - a DEAD position itself hashes the all-pad n-gram of every order: valid row ids (the pad n-grams' rows),
//    not kDeadId — as vLLM does; an engine that wants no embedding there masks the position itself;
//  - a position whose window reaches back over a DEAD token hashes its newer tokens followed by pads;
//  - inputs without DEAD tokens hash exactly as before (the reference ids, bit for bit).
// A token is DEAD when its id is kDeadToken or its dead_mask byte is non-zero. Any other negative id is a
// pass-through id of the reference (hashed as it is), and an id >= the vocabulary is an error: the CPU reference
// returns kInvalidArgument, the kernel writes kDeadId for the ids whose n-gram reaches it and counts them.
//
// After the step, once acceptance is known, the look-back rows advance past the first accepted[r] new tokens of
// each request (DEAD ones stored as kDeadToken): rollback of a rejected speculative draft is accepting fewer.
// Hashing never changes a look-back row, so hashing the same step twice gives the same ids.
//
// This header is C++17 without std::span: nvcc compiles src/cuda as C++17 and includes it.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

class NgramHasher;
enum class HashIdKind;  // engram/ngram_hash.hpp

// Raw token id of a DEAD position (an image-span token), and of a look-back slot before the sequence start.
inline constexpr int64_t kDeadToken = std::numeric_limits<int64_t>::min();

// One step's batch. Every pointer addresses host memory for the CPU reference and device memory for the kernel.
struct HashBatch {
  int32_t n_requests = 0;
  // Capacity in tokens of `tokens`, `dead_mask` and of each layer of the output; the step's token count is
  // query_start_loc[n_requests] <= max_tokens. A captured CUDA graph keeps max_tokens and n_requests fixed and
  // replays steps of fewer tokens (padding requests are empty: repeated query_start_loc entries).
  int64_t max_tokens = 0;
  const int32_t* query_start_loc = nullptr;  // [n_requests + 1]: [0] = 0, non-decreasing
  const int64_t* tokens = nullptr;           // [max_tokens] raw ids of the new tokens, requests back to back
  const uint8_t* dead_mask = nullptr;        // [max_tokens] optional: non-zero marks the token DEAD
  const int64_t* lookback = nullptr;         // [lookback_rows][N-1] raw ids, oldest first
  int64_t lookback_rows = 0;
  const int32_t* lookback_slot = nullptr;    // [n_requests] optional: row of request r (distinct); null = row r
};

// kInvalidArgument unless the scalar shape is usable: n_requests >= 0, max_tokens >= 0, query_start_loc present,
// tokens present when max_tokens > 0, lookback present with lookback_rows >= 1 when n_requests > 0, and
// max_tokens * heads * n_layers ids addressable. `what` names the caller in the message. Contents (offsets, slots,
// ids) are not read: on the device they cannot be without a synchronisation.
Status check_hash_batch_shape(const HashBatch& b, int heads, int n_layers, const char* what);

// The hasher's constants as flat arrays: what a device hasher uploads.
struct NgramHashParams {
  int n_layers = 0;
  int max_ngram = 0;                    // N: orders 2..N, look-back rows of N-1 ids
  int heads_per_order = 0;              // K
  int heads = 0;                        // (N-1) K per layer, ordered by order then head
  int64_t vocab_size = 0;               // raw ids accepted: [0, vocab_size), negatives pass through
  int64_t compressed_pad_id = 0;
  std::vector<uint32_t> canonical;      // [vocab_size] compression table; empty = ids are already compressed
  std::vector<int64_t> multipliers;     // [n_layers][N]
  std::vector<int64_t> head_rows;       // [n_layers][heads] p_h
  std::vector<int64_t> head_offsets;    // [n_layers][heads] added to each id (global row ids), or 0 (head-local)
  std::vector<int64_t> layer_rows;      // [n_layers] rows of each layer's table
};
NgramHashParams ngram_hash_params(const NgramHasher& hasher, HashIdKind kind);

// The step's ids by the reference hasher (NgramHasher::hash_chunk from each request's look-back row):
// out[l * out_layer_stride + t * heads + h] for every layer l, token t < query_start_loc[n_requests] and head h
// (int64); nothing else is written. out_layer_stride 0 means max_tokens * heads.
// kInvalidArgument, naming the request and position, for a bad shape (above), a stride below max_tokens * heads,
// query_start_loc not starting at 0, decreasing or beyond max_tokens, a slot outside [0, lookback_rows), or a token
// id (new or look-back) >= the hasher's vocabulary. Nothing is written on error.
Status hash_batch_reference(const NgramHasher& hasher, const HashBatch& b, HashIdKind kind, int64_t* out,
                            int64_t out_layer_stride = 0);

// The look-back rows after the step: row slot(r) of lookback_out becomes the last `window` ids of
// (row slot(r) of b.lookback ++ the first accepted[r] new tokens of request r, DEAD ones as kDeadToken);
// accepted == nullptr accepts every new token. lookback_out may be b.lookback (in place) or another
// [lookback_rows][window] array; rows of slots not in the batch are not written.
// kInvalidArgument for a bad shape or query_start_loc (as above), accepted[r] outside [0, n_r], a slot outside
// [0, lookback_rows) or a slot used twice; nothing is written then.
Status update_lookback_reference(int window, const HashBatch& b, const int32_t* accepted, int64_t* lookback_out);

// row[window] of a request whose sequence so far is prefix[0, n): its last `window` ids, oldest first,
// kDeadToken for the slots before the sequence start.
void lookback_of_prefix(const int64_t* prefix, int64_t n, int window, int64_t* row);

ENGRAM_API_END
}  // namespace engram
