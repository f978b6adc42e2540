// The Engram N-gram hash, bit-compatible with the reference (deepseek-ai/Engram, NgramHashMapping).
//
// Token ids first go through the tokenizer compression table (CompressedTokenizer): id -> canonical id
// in [0, V'). Per Engram layer l the reference draws multipliers
//   m_k = 2 r_k + 1,  r = numpy.random.default_rng(seed + 10007 * layer_id)
//                           .integers(0, half_bound, size=max_ngram, dtype=int64),
//   half_bound = max(1, (INT64_MAX // V') // 2),
// so that every product token * m_k stays below INT64_MAX. At position t and order n = 2..N,
//   mix = x[t]*m_0 XOR x[t-1]*m_1 XOR ... XOR x[t-n+1]*m_{n-1}      (int64, wrapping as numpy does),
// where positions before the sequence start hold the compressed pad id; head j of order n gives
// mix mod p_{n,j} with Python's sign rule (a result in [0, p) even for a negative mix). Heads are ordered
// by n then j, as EngramLayout orders head_rows; a global row id adds head_offsets[h].
// A whole engine step of many requests at once (ragged chunks, look-back rows, DEAD masks, rollback of a rejected
// draft by accepting fewer tokens) is engram/hash_batch.hpp's reference; the engine's GPU hashing of the same step is
// Engine::hash_chunks_and_prepare.
//
// Incremental hashing: position t only needs the N-1 compressed tokens before it, so a SequenceState
// keeps the last N-1 (plus a rollback reserve) of one sequence. Prefill chunks and decode steps fed
// through hash_chunk() give exactly the ids that hashing the whole sequence at once gives; a
// prefix-cache hit starts from resume_sequence() (or a saved SequenceSnapshot) in the middle of a
// sequence; rollback(k) drops the last k tokens after a rejected speculative draft.
//
// DEAD tokens (kDeadToken, engram/hash_batch.hpp: image-span positions) take part in no n-gram: walking an n-gram
// from its newest token back, the first DEAD token and every older one count as the compressed pad id, as the
// positions before the sequence start do. A DEAD position thus hashes the all-pad n-grams; a SequenceState keeps
// DEAD tokens as kDeadToken. Inputs without kDeadToken hash exactly as the reference does.
// Other negative token ids pass through the compression unchanged, as in the reference (its _compress keeps
// ids < 0); ids >= the tokenizer vocabulary are errors, never silently re-hashed.
// An NgramHasher is immutable after create() and may be shared by threads; a SequenceState is not.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "engram/export.hpp"
#include "engram/hash_batch.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

inline constexpr int64_t kEngramLayerSeedStride = 10007;  // PRIME_1 of the reference
inline constexpr int64_t kDefaultPadId = 2;               // EngramConfig.pad_id of the reference

// The tokenizer compression table (reference CompressedTokenizer.lookup_table), as tools/tokenize
// writes it (ngram_hasher_from_table_file, model_ngram_hasher below read it).
struct CompressionTable {
  std::string tokenizer;               // e.g. "deepseek-ai/DeepSeek-V3"
  std::string tokenizer_version;       // version of the package that built the table
  std::vector<uint32_t> canonical;     // [vocab_size] canonical id of each token id
  int64_t compressed_vocab = 0;        // V': number of distinct canonical ids
  int64_t pad_id = kDefaultPadId;      // the pad token id the sidecar names
  std::string tokenizer_json_sha256;   // SHA-256 (hex) of the tokenizer.json it was built from; "" = not recorded

  int64_t vocab_size() const { return static_cast<int64_t>(canonical.size()); }
  // kInvalidArgument unless the table is non-empty and canonical ids are numbered in first-seen order
  // (each id is at most one above every id before it), which also makes V' = max id + 1.
  Status validate() const;
};

// Which ids the hash yields: per-head ids in [0, p_h) (what the reference's hash() returns) or global
// row ids head_offsets[h] + that (what the lookup reads).
enum class HashIdKind { kHeadLocal, kGlobalRow };

struct NgramHashOptions {
  int64_t seed = 0;                        // EngramConfig.seed
  int64_t pad_id = kDefaultPadId;          // pad token id before compression (EngramConfig.pad_id)
  int64_t expected_compressed_vocab = 0;   // V' recorded with the tables; 0 = not recorded, not checked
  int64_t max_rollback = 64;               // tokens a SequenceState keeps beyond the N-1 window
};

// What a prefix cache stores to resume a sequence: its length and its last min(position, N-1)
// compressed tokens, oldest first (kDeadToken for DEAD ones).
struct SequenceSnapshot {
  int64_t position = 0;
  std::vector<int64_t> tail;
};

// Look-back state of one sequence: tokens consumed so far and the last compressed tokens (N-1 needed
// for the next position, plus up to `max_rollback` more so rollback can restore earlier states).
class SequenceState {
 public:
  int64_t position() const { return position_; }
  // Tokens rollback() can drop now.
  int64_t rollback_limit() const;
  // Drops the last k tokens: the state becomes the one after position() - k tokens.
  // kInvalidArgument if k < 0, k > position(), or k > rollback_limit() (history already discarded).
  Status rollback(int64_t k);
  SequenceSnapshot snapshot() const;

 private:
  friend class NgramHasher;
  SequenceState(int window, int64_t max_rollback) : window_(window), max_rollback_(max_rollback) {}
  void append(std::span<const int64_t> compressed);

  int window_ = 0;                // N-1
  int64_t max_rollback_ = 0;
  int64_t position_ = 0;
  std::deque<int64_t> history_;   // last min(position, window + max_rollback) compressed tokens
};

class NgramHasher {
 public:
  // Hasher for raw token ids compressed through `table`. kInvalidArgument when the table is invalid,
  // options.pad_id is not a token id of the table, V' differs from options.expected_compressed_vocab,
  // or the layout is not finalized.
  static Result<NgramHasher> create(const EngramLayout& layout, CompressionTable table,
                                    const NgramHashOptions& options = {});
  // Hasher for ids that are already compressed, in [0, compressed_vocab) (synthetic streams, tests,
  // vocabularies larger than a table can hold): `options.pad_id` is then the compressed pad id.
  // kInvalidArgument when compressed_vocab < 1, when it is so large that the multiplier bound collapses
  // ((INT64_MAX // V') // 2 == 0: the reference would silently use m = 1 everywhere), or as above.
  static Result<NgramHasher> create_precompressed(const EngramLayout& layout, int64_t compressed_vocab,
                                                  const NgramHashOptions& options = {});

  const EngramLayout& layout() const { return layout_; }
  int64_t compressed_vocab() const { return compressed_vocab_; }
  // Raw vocabulary size (token ids accepted): the table's size, or V' for a precompressed hasher.
  int64_t vocab_size() const { return identity_ ? compressed_vocab_ : table_.vocab_size(); }
  int64_t compressed_pad_id() const { return compressed_pad_id_; }
  // The compression table, or nullptr for a precompressed hasher (ids are their own canonical ids).
  const CompressionTable* compression_table() const { return identity_ ? nullptr : &table_; }
  int64_t half_bound() const { return half_bound_; }
  // m[max_ngram] of Engram layer `layer_index` (index into layout().layer_ids).
  const std::vector<int64_t>& multipliers(int layer_index) const { return multipliers_.at(layer_index); }

  // out[i] = compressed id of tokens[i]. kInvalidArgument naming the position for an id >= vocab_size().
  Status compress(std::span<const int64_t> tokens, std::span<int64_t> out) const;

  // Ids of a whole sequence (it starts at tokens[0]) for one Engram layer: out[T][heads] int64,
  // row-major, T = tokens.size(). kInvalidArgument for a bad layer index, a wrong out size or a bad id.
  Status hash(std::span<const int64_t> tokens, int layer_index, std::span<int64_t> out,
              HashIdKind kind = HashIdKind::kGlobalRow) const;

  // A fresh sequence (position 0).
  SequenceState begin_sequence() const;
  // The state after the whole `prefix` (raw token ids) was consumed: a prefix-cache hit.
  Result<SequenceState> resume_sequence(std::span<const int64_t> prefix) const;
  // The state saved by SequenceState::snapshot(). kInvalidArgument if the tail does not have
  // min(position, N-1) entries or holds an id outside [0, V') (negative pass-through ids excepted).
  Result<SequenceState> restore(const SequenceSnapshot& snapshot) const;

  // Hashes the next tokens of a sequence (a prefill chunk or a decode step) for every Engram layer and
  // advances `state` past them: out[n_layers][T][heads] int64, row-major. On error nothing is written
  // to `state`.
  Status hash_chunk(SequenceState& state, std::span<const int64_t> tokens, std::span<int64_t> out,
                    HashIdKind kind = HashIdKind::kGlobalRow) const;

 private:
  NgramHasher() = default;
  Status init(const EngramLayout& layout, const NgramHashOptions& options);
  // ids for `compressed` preceded by `window` (exactly N-1 compressed tokens, oldest first).
  void hash_compressed(const std::vector<int64_t>& window, std::span<const int64_t> compressed, int layer_index,
                       int64_t* out, HashIdKind kind) const;
  std::vector<int64_t> window_of(const SequenceState& state) const;

  EngramLayout layout_;
  CompressionTable table_;
  bool identity_ = false;
  int64_t compressed_vocab_ = 0;
  int64_t compressed_pad_id_ = 0;
  int64_t half_bound_ = 0;
  int64_t max_rollback_ = 0;
  std::vector<std::vector<int64_t>> multipliers_;  // [layer][max_ngram]
};

// ---- Hashers from files -----------------------------------------------------------------------------------------

// The hasher of raw token ids compressed through the table at `path` (tools/tokenize's output: the uint32 map and
// its `path`.json sidecar; docs/format.md). Errors of the file (kNotFound, kInvalidArgument naming the file and what
// is wrong) or of create().
Result<NgramHasher> ngram_hasher_from_table_file(const EngramLayout& layout, const std::string& path,
                                                 const NgramHashOptions& options = {});

// The hasher of a Hugging Face model directory as released (config.json's Engram fields: layout, pad id, V'): its
// layout is the model's with rows of `format` (what content_layout(TableContent::model(dir), format) gives, so
// Engine::enable_device_hashing accepts it), its compression table the directory's own (DIR/engram.compress.bin), a
// cached one, or one built from DIR/tokenizer.json -- or the file `compression_table` when given -- checked against
// config.json (V', pad id). kNotFound when the directory has neither tokenizer.json nor a table; the readers' and
// the table builder's errors otherwise.
Result<NgramHasher> model_ngram_hasher(const std::string& model_dir, RowFormat format = RowFormat::kFused,
                                       const std::string& compression_table = "");

// A Hugging Face model directory's hashing as released, with where each part came from: its layout (rows of
// `format`), its compression table (the directory's own DIR/engram.compress.bin, a cached one, or one built from
// DIR/tokenizer.json, checked against config.json's V') and config.json's pad id and V' as hash options (seed and
// max_rollback at their defaults, for the caller to set before NgramHasher::create). `tensor_names`: "WEIGHT,SCALE"
// with {L} for the layer id ("" = the released names). Errors as model_ngram_hasher's.
struct ModelHashing {
  EngramLayout layout;
  CompressionTable table;
  std::string table_path;    // the file the table was read from or cached at ("" = built, not cached)
  std::string table_source;  // "directory", "cache" or "built"
  NgramHashOptions hash;
};
Result<ModelHashing> read_model_hashing(const std::string& model_dir, RowFormat format = RowFormat::kFused,
                                        const std::string& tensor_names = "");

// half_bound of the reference for a compressed vocabulary V' >= 1: max(1, (INT64_MAX // V') // 2).
int64_t ngram_multiplier_half_bound(int64_t compressed_vocab);

// The reference multipliers of one Engram layer: 2 * default_rng(seed + 10007 * layer_id).integers(0,
// half_bound, max_ngram, int64) + 1. kInvalidArgument for a negative seed + 10007 * layer_id.
Result<std::vector<int64_t>> ngram_layer_multipliers(int64_t seed, int layer_id, int64_t compressed_vocab, int max_ngram);

ENGRAM_API_END
}  // namespace engram
