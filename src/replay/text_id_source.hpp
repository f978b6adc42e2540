// Real-text Engram ids: a token file (tools/tokenize) hashed with the reference N-gram hash, served as
// an IdSource for decode replay, plus the N-gram statistics that make such ids unlike synthetic ones
// (repetition, Zipfian skew, locality).
//
// TextIdSource keeps one sequence per batch slot. Slot b of a batch of B starts at token b*N/B of the
// N-token stream (so slots read different text) and each decode step appends that slot's next token to
// its sequence, hashed incrementally (NgramHasher::hash_chunk) exactly as the whole sequence would be.
// A sequence ends, and the slot starts a new one (fresh look-back state: a new request), at a document
// boundary or after `seq_len` tokens; the stream wraps around at its end. Steps must come in order
// 0, 1, 2, ... with a fixed batch (a restart at step 0 rewinds every slot).
//
// Statistics, per Engram layer and head over the ids seen:
//   distinct       number of distinct ids;
//   top-k share    fraction of lookups that hit the k most frequent ids;
//   repeat rate    fraction of lookups whose id already occurred in the same batch (what in-batch
//                  de-duplication saves), for a "batch" of the caller's choice (one decode step of B
//                  sequences, or a prefill of B sequences x T tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "host/token_io.hpp"
#include "replay/id_source.hpp"

namespace engram {

struct NgramHeadStats {
  int64_t lookups = 0;
  int64_t distinct = 0;
  double top_k_share = 0;   // of lookups, in [0, 1]
  double repeat_rate = 0;   // of lookups, in [0, 1]; NaN when no batch was recorded
};

struct NgramStats {
  int top_k = 10;
  int64_t batches = 0;                            // batches recorded
  std::vector<std::vector<NgramHeadStats>> heads; // [layer][head]
};

// Accumulates ids of one layout's layers batch by batch. Not thread-safe.
class NgramStatsAccumulator {
 public:
  explicit NgramStatsAccumulator(const EngramLayout& layout);
  // One batch of one layer: ids[n][heads] (global or head-local: only equality matters).
  void add_batch(int layer_index, std::span<const int64_t> ids);
  NgramStats finish(int top_k = 10) const;

 private:
  int n_layers_;
  int heads_;
  std::vector<int64_t> batches_;                                        // [layer]
  std::vector<std::vector<std::unordered_map<int64_t, int64_t>>> counts_;  // [layer][head] id -> lookups
  std::vector<std::vector<int64_t>> repeats_;                           // [layer][head]
};

// Statistics of a whole token stream as a serving batch would see it: the stream is cut into
// sequences of seq_len tokens (never across a document boundary), each hashed from its start, and
// consecutive groups of `batch` sequences form one batch. `prefill` gets repeat rates within each
// group's batch x seq_len lookups; `decode_step` within each position's `batch` lookups (one decode
// step of the group). kInvalidArgument for batch < 1 or seq_len < 1, or a bad token id.
struct TextNgramStats {
  int64_t tokens = 0;
  int64_t sequences = 0;
  NgramStats prefill;
  NgramStats decode_step;
};
Result<TextNgramStats> compute_text_ngram_stats(const NgramHasher& hasher, const TokenFile& tokens, int batch,
                                                int64_t seq_len, int top_k = 10);

struct TextIdSourceOptions {
  int64_t seq_len = 2048;  // tokens per sequence before its slot starts a new one
};

class TextIdSource final : public IdSource {
 public:
  // kInvalidArgument when the token file's vocabulary does not match the hasher's (vocab_size), the
  // file is empty or seq_len < 1.
  static Result<std::unique_ptr<TextIdSource>> create(NgramHasher hasher, TokenFile tokens,
                                                      const TextIdSourceOptions& options = {});

  // ids[layer] = [batch][heads] global row ids of the step's token of each slot.
  // kInvalidArgument for batch < 1, a batch that changed without a restart at step 0, or a step out of order.
  Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) override;
  std::string describe() const override;

  // Statistics of the ids served so far; each step is one batch.
  NgramStats stats(int top_k = 10) const { return stats_.finish(top_k); }
  const NgramHasher& hasher() const { return hasher_; }
  // The raw token of each slot in the last step, and whether the slot started a new sequence with it: what an
  // engine that hashes on the device (Engine::hash_and_prepare) is given instead of the ids.
  struct StepTokens {
    std::vector<int64_t> tokens;
    std::vector<uint8_t> new_sequence;
  };
  const StepTokens& last_step_tokens() const { return last_; }
  const TokenFile& tokens() const { return tokens_; }

 private:
  TextIdSource(NgramHasher hasher, TokenFile tokens, const TextIdSourceOptions& options);
  void restart(int batch);
  struct Slot {
    int64_t cursor = 0;      // next token index in the stream
    int64_t seq_tokens = 0;  // tokens in the current sequence
    SequenceState state;
  };

  NgramHasher hasher_;
  TokenFile tokens_;
  TextIdSourceOptions options_;
  std::vector<int64_t> doc_starts_;  // first token of each document, ascending
  std::vector<Slot> slots_;
  int64_t next_step_ = 0;
  StepTokens last_;
  NgramStatsAccumulator stats_;
};

// One call for `engram run`: reads the token file (empty path: default_token_file_path()) and the
// compression table (empty path: the committed DeepSeek-V3 table), checks that they match, builds the
// reference hasher for `layout` (seed, pad id 2) and the source. kNotFound names a missing token file
// and how to make it (scripts/tokenize-setup); kInvalidArgument as in read_token_file and create().
Result<std::unique_ptr<IdSource>> make_text_id_source(const EngramLayout& layout, const std::string& token_file,
                                                      const std::string& compression_table, int64_t seed,
                                                      const TextIdSourceOptions& options = {});
// make_text_id_source with the hashing of the model directory `model_dir` (read_model_hashing: its compression
// table, config.json's pad id and V'). The token file must come from the model's tokenizer
// (the same tokenizer.json SHA-256 or tokenizer name, check_token_file_matches_table); kInvalidArgument says
// how to make one otherwise.
Result<std::unique_ptr<IdSource>> make_model_text_id_source(const EngramLayout& layout, const std::string& token_file,
                                                            const std::string& model_dir, const ModelHashing& hashing,
                                                            const TextIdSourceOptions& options = {});

}  // namespace engram
