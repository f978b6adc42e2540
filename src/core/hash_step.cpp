// Host side of the hash kernels' constants (see hash_step.hpp): validation of NgramHashParams and their layout as
// one array of 8-byte words plus the compression table, the form the device hasher uploads in two copies.
#include "core/hash_step.hpp"

#include <string>

namespace engram {

namespace {
Status bad(const std::string& m) { return Status(Code::kInvalidArgument, "hash step tables: " + m); }
}  // namespace

HashStepConsts HashStepTables::consts(const uint64_t* words_base, const uint32_t* canonical_base) const {
  const size_t lh = static_cast<size_t>(n_layers) * static_cast<size_t>(heads);
  HashStepConsts c;
  c.canonical = canonical.empty() ? nullptr : canonical_base;
  c.vocab = vocab;
  c.pad = pad;
  c.mult = words_base;
  c.rows = words_base + static_cast<size_t>(n_layers) * static_cast<size_t>(max_ngram);
  c.magic = c.rows + lh;
  c.offs = reinterpret_cast<const int64_t*>(c.magic + lh);
  c.max_ngram = max_ngram;
  c.heads = heads;
  c.heads_per_order = heads_per_order;
  c.n_layers = n_layers;
  return c;
}

Result<HashStepTables> make_hash_step_tables(const NgramHashParams& p, bool int32_ids) {
  if (p.n_layers < 1 || p.max_ngram < 2 || p.max_ngram - 1 > kHashMaxWindow || p.heads_per_order < 1 ||
      p.heads != (p.max_ngram - 1) * p.heads_per_order)
    return bad("inconsistent shape (layers " + std::to_string(p.n_layers) + ", N " + std::to_string(p.max_ngram) +
               ", heads " + std::to_string(p.heads) + " for " + std::to_string(p.heads_per_order) +
               " per order); N must be in [2, " + std::to_string(kHashMaxWindow + 1) + "]");
  if (p.n_layers > 65535) return bad(std::to_string(p.n_layers) + " Engram layers: the kernels' grid has one row each (<= 65535)");
  const size_t lh = static_cast<size_t>(p.n_layers) * static_cast<size_t>(p.heads);
  if (p.multipliers.size() != static_cast<size_t>(p.n_layers) * static_cast<size_t>(p.max_ngram) ||
      p.head_rows.size() != lh || p.head_offsets.size() != lh || p.layer_rows.size() != static_cast<size_t>(p.n_layers))
    return bad("parameter arrays do not match the shape");
  if (p.vocab_size < 1 || (!p.canonical.empty() && static_cast<int64_t>(p.canonical.size()) != p.vocab_size))
    return bad("vocabulary " + std::to_string(p.vocab_size) + " vs a compression table of " +
               std::to_string(p.canonical.size()) + " entries");
  for (int64_t rows : p.head_rows)
    if (rows < 1 || static_cast<uint64_t>(rows) > kFastModMaxDivisor)
      return bad("head size " + std::to_string(rows) + " not in [1, 2^63]");
  if (int32_ids)
    for (int li = 0; li < p.n_layers; ++li)
      if (p.layer_rows[static_cast<size_t>(li)] > (int64_t{1} << 31))
        return bad("int32 ids requested, but Engram layer index " + std::to_string(li) + " has " +
                   std::to_string(p.layer_rows[static_cast<size_t>(li)]) + " rows (> 2^31: its ids need int64)");
  HashStepTables t;
  t.max_ngram = p.max_ngram;
  t.heads = p.heads;
  t.heads_per_order = p.heads_per_order;
  t.n_layers = p.n_layers;
  t.vocab = p.vocab_size;
  t.pad = p.compressed_pad_id;
  t.canonical = p.canonical;
  t.words.reserve(p.multipliers.size() + 3 * lh);
  for (int64_t v : p.multipliers) t.words.push_back(static_cast<uint64_t>(v));
  for (int64_t v : p.head_rows) t.words.push_back(static_cast<uint64_t>(v));
  for (int64_t v : p.head_rows) t.words.push_back(make_fast_mod(static_cast<uint64_t>(v)));
  for (int64_t v : p.head_offsets) t.words.push_back(static_cast<uint64_t>(v));
  return t;
}

}  // namespace engram
