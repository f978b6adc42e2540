// The reference Engram N-gram hash (see ngram_hash.hpp). One code path serves whole sequences, prefill
// chunks and decode steps: every call hashes a span of new compressed tokens behind a window of exactly
// N-1 earlier compressed tokens (pad ids before the sequence start), so "whole sequence" is just a
// chunk behind an all-pad window and chunked hashing cannot drift from it.
// Products and XORs run on uint64 (the wrap-around of numpy's int64 multiply, without C++'s signed
// overflow UB); the final modulo follows Python's sign rule, which only matters for negative ids.
// DEAD tokens (kDeadToken) pass through compress() like other negative ids and are replaced, with every older
// token of the walk, by the pad while mixing; without them the loop computes exactly the reference's mix.
#include "engram/ngram_hash.hpp"

#include <algorithm>
#include <limits>

#include "core/numpy_rng.hpp"

namespace engram {

namespace {

Status bad(const std::string& msg) { return Status(Code::kInvalidArgument, msg); }

// Python's a % p for p > 0.
inline int64_t floor_mod(int64_t a, int64_t p) {
  const int64_t r = a % p;
  return r < 0 ? r + p : r;
}

}  // namespace

Status CompressionTable::validate() const {
  const std::string what = "compression table" + (tokenizer.empty() ? std::string() : " (" + tokenizer + ")");
  if (canonical.empty()) return bad(what + ": empty");
  int64_t next = 0;  // the next new canonical id allowed
  for (size_t i = 0; i < canonical.size(); ++i) {
    const int64_t c = canonical[i];
    if (c > next)
      return bad(what + ": token " + std::to_string(i) + " maps to " + std::to_string(c) +
                 ", but canonical ids must appear in first-seen order (next new id is " + std::to_string(next) + ")");
    if (c == next) ++next;
  }
  if (compressed_vocab != next)
    return bad(what + ": records V' = " + std::to_string(compressed_vocab) + " but its map has " +
               std::to_string(next) + " distinct canonical ids");
  return Status::ok();
}

int64_t ngram_multiplier_half_bound(int64_t compressed_vocab) {
  const int64_t m_max = std::numeric_limits<int64_t>::max() / compressed_vocab;
  return std::max<int64_t>(1, m_max / 2);
}

Result<std::vector<int64_t>> ngram_layer_multipliers(int64_t seed, int layer_id, int64_t compressed_vocab, int max_ngram) {
  if (compressed_vocab < 1) return bad("V' = " + std::to_string(compressed_vocab) + " must be at least 1");
  const __int128 base = static_cast<__int128>(seed) + static_cast<__int128>(kEngramLayerSeedStride) * layer_id;
  if (base < 0 || base > static_cast<__int128>(std::numeric_limits<int64_t>::max()))
    return bad("multiplier seed " + std::to_string(seed) + " + 10007 * " + std::to_string(layer_id) +
               " is outside [0, 2^63): numpy's SeedSequence takes a non-negative entropy");
  ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> r,
                          numpy_rng::default_rng_integers_int64(static_cast<uint64_t>(base), 0,
                                                                ngram_multiplier_half_bound(compressed_vocab), max_ngram));
  for (auto& v : r) v = v * 2 + 1;
  return r;
}

int64_t SequenceState::rollback_limit() const {
  const int64_t kept = static_cast<int64_t>(history_.size());
  // All tokens since the start are kept: any k <= position works (the window then fills with pads).
  if (kept >= position_) return position_;
  return std::max<int64_t>(0, kept - window_);
}

Status SequenceState::rollback(int64_t k) {
  if (k < 0) return bad("rollback of " + std::to_string(k) + " tokens: must be >= 0");
  if (k > position_)
    return bad("rollback of " + std::to_string(k) + " tokens: the sequence has only " + std::to_string(position_));
  if (k > rollback_limit())
    return bad("rollback of " + std::to_string(k) + " tokens: only " + std::to_string(rollback_limit()) +
               " can be undone (the state keeps " + std::to_string(max_rollback_) +
               " tokens beyond the N-1 window; raise NgramHashOptions.max_rollback)");
  for (int64_t i = 0; i < k; ++i) history_.pop_back();
  position_ -= k;
  return Status::ok();
}

SequenceSnapshot SequenceState::snapshot() const {
  SequenceSnapshot s;
  s.position = position_;
  const size_t n = std::min<size_t>(history_.size(), static_cast<size_t>(window_));
  s.tail.assign(history_.end() - static_cast<std::ptrdiff_t>(n), history_.end());
  return s;
}

void SequenceState::append(std::span<const int64_t> compressed) {
  const size_t cap = static_cast<size_t>(window_ + max_rollback_);
  for (int64_t c : compressed) {
    history_.push_back(c);
    if (history_.size() > cap) history_.pop_front();
  }
  position_ += static_cast<int64_t>(compressed.size());
}

Status NgramHasher::init(const EngramLayout& layout, const NgramHashOptions& options) {
  if (static_cast<int>(layout.head_offsets.size()) != layout.n_layers() || layout.n_layers() == 0)
    return bad("layout '" + layout.name + "' is not finalized (call EngramLayout::finalize)");
  for (const auto& off : layout.head_offsets)
    if (static_cast<int>(off.size()) != layout.heads() + 1) return bad("layout '" + layout.name + "': head_offsets malformed");
  if (options.max_rollback < 0) return bad("max_rollback " + std::to_string(options.max_rollback) + " < 0");
  if (options.expected_compressed_vocab != 0 && options.expected_compressed_vocab != compressed_vocab_)
    return bad("compressed vocabulary mismatch: the tables were built for V' = " +
               std::to_string(options.expected_compressed_vocab) + ", this tokenizer compression gives V' = " +
               std::to_string(compressed_vocab_) + " (hashing with it would address other rows)");
  if (std::numeric_limits<int64_t>::max() / compressed_vocab_ / 2 == 0)
    return bad("V' = " + std::to_string(compressed_vocab_) +
               " overflows the multiplier bound: (INT64_MAX // V') // 2 is 0, every multiplier would be 1");
  layout_ = layout;
  half_bound_ = ngram_multiplier_half_bound(compressed_vocab_);
  max_rollback_ = options.max_rollback;
  multipliers_.clear();
  for (int li = 0; li < layout.n_layers(); ++li) {
    ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> m,
                            ngram_layer_multipliers(options.seed, layout.layer_ids[li], compressed_vocab_, layout.max_ngram));
    multipliers_.push_back(std::move(m));
  }
  return Status::ok();
}

Result<NgramHasher> NgramHasher::create(const EngramLayout& layout, CompressionTable table, const NgramHashOptions& options) {
  ENGRAM_RETURN_IF_ERROR(table.validate());
  if (options.pad_id < 0 || options.pad_id >= table.vocab_size())
    return bad("pad id " + std::to_string(options.pad_id) + " is not a token id of the compression table (vocab " +
               std::to_string(table.vocab_size()) + ")");
  NgramHasher h;
  h.compressed_vocab_ = table.compressed_vocab;
  h.compressed_pad_id_ = table.canonical[static_cast<size_t>(options.pad_id)];
  h.table_ = std::move(table);
  ENGRAM_RETURN_IF_ERROR(h.init(layout, options));
  return h;
}

Result<NgramHasher> NgramHasher::create_precompressed(const EngramLayout& layout, int64_t compressed_vocab,
                                                      const NgramHashOptions& options) {
  if (compressed_vocab < 1) return bad("V' = " + std::to_string(compressed_vocab) + " must be at least 1");
  if (options.pad_id < 0 || options.pad_id >= compressed_vocab)
    return bad("compressed pad id " + std::to_string(options.pad_id) + " not in [0, V' = " + std::to_string(compressed_vocab) + ")");
  NgramHasher h;
  h.identity_ = true;
  h.compressed_vocab_ = compressed_vocab;
  h.compressed_pad_id_ = options.pad_id;
  ENGRAM_RETURN_IF_ERROR(h.init(layout, options));
  return h;
}

Status NgramHasher::compress(std::span<const int64_t> tokens, std::span<int64_t> out) const {
  if (out.size() != tokens.size())
    return bad("compress: out has " + std::to_string(out.size()) + " entries for " + std::to_string(tokens.size()) + " tokens");
  const int64_t vocab = vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    if (t >= vocab)
      return bad("token id " + std::to_string(t) + " at position " + std::to_string(i) + " >= vocab size " +
                 std::to_string(vocab) + (identity_ ? " (V')" : " of " + table_.tokenizer));
    out[i] = (t < 0 || identity_) ? t : static_cast<int64_t>(table_.canonical[static_cast<size_t>(t)]);
  }
  return Status::ok();
}

void NgramHasher::hash_compressed(const std::vector<int64_t>& window, std::span<const int64_t> compressed, int layer_index,
                                  int64_t* out, HashIdKind kind) const {
  const int n_max = layout_.max_ngram;
  const int w = n_max - 1;
  const int k_heads = layout_.heads_per_order;
  const int heads = layout_.heads();
  const std::vector<int64_t>& rows = layout_.head_rows[layer_index];
  const std::vector<int64_t>& offsets = layout_.head_offsets[layer_index];
  const std::vector<int64_t>& m = multipliers_[layer_index];
  // ext = window ++ compressed, so the token k positions before t is ext[w + t - k].
  std::vector<int64_t> ext(window);
  ext.insert(ext.end(), compressed.begin(), compressed.end());
  const bool global = kind == HashIdKind::kGlobalRow;
  const int64_t pad = compressed_pad_id_;
  for (size_t t = 0; t < compressed.size(); ++t) {
    const int64_t* cur = ext.data() + w + t;
    // From the first DEAD token of the walk back on, every token counts as the pad.
    bool dead = cur[0] == kDeadToken;
    uint64_t mix = static_cast<uint64_t>(dead ? pad : cur[0]) * static_cast<uint64_t>(m[0]);
    int64_t* o = out + t * static_cast<size_t>(heads);
    for (int n = 2; n <= n_max; ++n) {
      const int64_t x = cur[-(n - 1)];
      dead = dead || x == kDeadToken;
      mix ^= static_cast<uint64_t>(dead ? pad : x) * static_cast<uint64_t>(m[n - 1]);
      const int64_t smix = static_cast<int64_t>(mix);
      const int h0 = (n - 2) * k_heads;
      for (int j = 0; j < k_heads; ++j) {
        const int h = h0 + j;
        const int64_t local = floor_mod(smix, rows[h]);
        o[h] = global ? offsets[h] + local : local;
      }
    }
  }
}

Status NgramHasher::hash(std::span<const int64_t> tokens, int layer_index, std::span<int64_t> out, HashIdKind kind) const {
  if (layer_index < 0 || layer_index >= layout_.n_layers())
    return bad("layer index " + std::to_string(layer_index) + " not in [0, " + std::to_string(layout_.n_layers()) + ")");
  const size_t need = tokens.size() * static_cast<size_t>(layout_.heads());
  if (out.size() != need)
    return bad("hash: out has " + std::to_string(out.size()) + " entries, expected tokens*heads = " + std::to_string(need));
  std::vector<int64_t> compressed(tokens.size());
  ENGRAM_RETURN_IF_ERROR(compress(tokens, compressed));
  const std::vector<int64_t> window(static_cast<size_t>(layout_.max_ngram - 1), compressed_pad_id_);
  hash_compressed(window, compressed, layer_index, out.data(), kind);
  return Status::ok();
}

SequenceState NgramHasher::begin_sequence() const { return SequenceState(layout_.max_ngram - 1, max_rollback_); }

Result<SequenceState> NgramHasher::resume_sequence(std::span<const int64_t> prefix) const {
  SequenceState s = begin_sequence();
  const size_t keep = std::min(prefix.size(), static_cast<size_t>(s.window_ + s.max_rollback_));
  const std::span<const int64_t> tail = prefix.subspan(prefix.size() - keep);
  std::vector<int64_t> compressed(keep);
  ENGRAM_RETURN_IF_ERROR(compress(tail, compressed));
  s.append(compressed);
  s.position_ = static_cast<int64_t>(prefix.size());
  return s;
}

Result<SequenceState> NgramHasher::restore(const SequenceSnapshot& snapshot) const {
  SequenceState s = begin_sequence();
  if (snapshot.position < 0) return bad("snapshot position " + std::to_string(snapshot.position) + " < 0");
  const int64_t want = std::min<int64_t>(snapshot.position, s.window_);
  if (static_cast<int64_t>(snapshot.tail.size()) != want)
    return bad("snapshot at position " + std::to_string(snapshot.position) + " has " + std::to_string(snapshot.tail.size()) +
               " tail tokens, expected " + std::to_string(want) + " (min(position, N-1))");
  for (size_t i = 0; i < snapshot.tail.size(); ++i)
    if (snapshot.tail[i] >= compressed_vocab_)
      return bad("snapshot tail token " + std::to_string(i) + " = " + std::to_string(snapshot.tail[i]) +
                 " is not a compressed id (V' = " + std::to_string(compressed_vocab_) + ")");
  s.append(snapshot.tail);
  s.position_ = snapshot.position;
  return s;
}

std::vector<int64_t> NgramHasher::window_of(const SequenceState& state) const {
  const size_t w = static_cast<size_t>(layout_.max_ngram - 1);
  std::vector<int64_t> window(w, compressed_pad_id_);
  // The last min(position, w) tokens are real; earlier slots stay pad (before the sequence start).
  const size_t real = static_cast<size_t>(std::min<int64_t>(state.position_, static_cast<int64_t>(w)));
  for (size_t i = 0; i < real; ++i) window[w - 1 - i] = state.history_[state.history_.size() - 1 - i];
  return window;
}

Status NgramHasher::hash_chunk(SequenceState& state, std::span<const int64_t> tokens, std::span<int64_t> out,
                               HashIdKind kind) const {
  if (state.window_ != layout_.max_ngram - 1)
    return bad("sequence state was made for N = " + std::to_string(state.window_ + 1) + ", layout has N = " +
               std::to_string(layout_.max_ngram));
  const size_t per_layer = tokens.size() * static_cast<size_t>(layout_.heads());
  const size_t need = per_layer * static_cast<size_t>(layout_.n_layers());
  if (out.size() != need)
    return bad("hash_chunk: out has " + std::to_string(out.size()) + " entries, expected layers*tokens*heads = " +
               std::to_string(need));
  std::vector<int64_t> compressed(tokens.size());
  ENGRAM_RETURN_IF_ERROR(compress(tokens, compressed));
  const std::vector<int64_t> window = window_of(state);
  for (int li = 0; li < layout_.n_layers(); ++li) hash_compressed(window, compressed, li, out.data() + li * per_layer, kind);
  state.append(compressed);
  return Status::ok();
}

}  // namespace engram
