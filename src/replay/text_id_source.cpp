// TextIdSource and the N-gram statistics (see text_id_source.hpp). Ids always come from
// NgramHasher::hash_chunk or NgramHasher::hash, so replay ids are the reference ids of the text;
// the statistics only count them (hash maps per head, no sampling), which is cheap next to a lookup.
#include "replay/text_id_source.hpp"

#include "host/model_io.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace engram {

namespace {
Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }
}  // namespace

// ---- statistics ---------------------------------------------------------------------------------

NgramStatsAccumulator::NgramStatsAccumulator(const EngramLayout& layout)
    : n_layers_(layout.n_layers()),
      heads_(layout.heads()),
      batches_(static_cast<size_t>(layout.n_layers()), 0),
      counts_(static_cast<size_t>(layout.n_layers()), std::vector<std::unordered_map<int64_t, int64_t>>(static_cast<size_t>(layout.heads()))),
      repeats_(static_cast<size_t>(layout.n_layers()), std::vector<int64_t>(static_cast<size_t>(layout.heads()), 0)) {}

void NgramStatsAccumulator::add_batch(int layer_index, std::span<const int64_t> ids) {
  const size_t heads = static_cast<size_t>(heads_);
  const size_t n = ids.size() / heads;
  std::unordered_set<int64_t> seen;
  seen.reserve(n);
  for (size_t h = 0; h < heads; ++h) {
    seen.clear();
    auto& counts = counts_[layer_index][h];
    int64_t repeats = 0;
    for (size_t t = 0; t < n; ++t) {
      const int64_t id = ids[t * heads + h];
      ++counts[id];
      if (!seen.insert(id).second) ++repeats;
    }
    repeats_[layer_index][h] += repeats;
  }
  ++batches_[layer_index];
}

NgramStats NgramStatsAccumulator::finish(int top_k) const {
  NgramStats s;
  s.top_k = top_k;
  s.batches = n_layers_ > 0 ? batches_[0] : 0;
  s.heads.resize(static_cast<size_t>(n_layers_));
  std::vector<int64_t> freq;
  for (int li = 0; li < n_layers_; ++li) {
    for (int h = 0; h < heads_; ++h) {
      const auto& counts = counts_[li][h];
      NgramHeadStats hs;
      freq.clear();
      for (const auto& [id, c] : counts) {
        freq.push_back(c);
        hs.lookups += c;
      }
      hs.distinct = static_cast<int64_t>(counts.size());
      const size_t k = std::min(freq.size(), static_cast<size_t>(std::max(top_k, 0)));
      std::partial_sort(freq.begin(), freq.begin() + static_cast<std::ptrdiff_t>(k), freq.end(), std::greater<>());
      int64_t top = 0;
      for (size_t i = 0; i < k; ++i) top += freq[i];
      const double nan = std::numeric_limits<double>::quiet_NaN();
      hs.top_k_share = hs.lookups > 0 ? static_cast<double>(top) / static_cast<double>(hs.lookups) : nan;
      hs.repeat_rate = hs.lookups > 0 ? static_cast<double>(repeats_[li][h]) / static_cast<double>(hs.lookups) : nan;
      s.heads[li].push_back(hs);
    }
  }
  return s;
}

Result<TextNgramStats> compute_text_ngram_stats(const NgramHasher& hasher, const TokenFile& tokens, int batch,
                                                int64_t seq_len, int top_k) {
  if (batch < 1) return bad("batch " + std::to_string(batch) + " must be >= 1");
  if (seq_len < 1) return bad("sequence length " + std::to_string(seq_len) + " must be >= 1");
  const EngramLayout& layout = hasher.layout();
  const size_t heads = static_cast<size_t>(layout.heads());
  // Sequences as [begin, end) token ranges, cut inside documents.
  std::vector<std::pair<int64_t, int64_t>> seqs;
  for (const auto& d : tokens.documents)
    for (int64_t s = d.first_token; s < d.first_token + d.token_count; s += seq_len)
      seqs.emplace_back(s, std::min(s + seq_len, d.first_token + d.token_count));

  TextNgramStats out;
  out.tokens = static_cast<int64_t>(tokens.ids.size());
  out.sequences = static_cast<int64_t>(seqs.size());
  NgramStatsAccumulator prefill(layout), decode(layout);
  std::vector<std::vector<int64_t>> seq_ids;  // per sequence of the group: [T][heads]
  std::vector<int64_t> raw, all, step;
  for (size_t g = 0; g < seqs.size(); g += static_cast<size_t>(batch)) {
    const size_t g_end = std::min(seqs.size(), g + static_cast<size_t>(batch));
    for (int li = 0; li < layout.n_layers(); ++li) {
      seq_ids.assign(g_end - g, {});
      all.clear();
      size_t t_max = 0;
      for (size_t i = g; i < g_end; ++i) {
        raw.assign(tokens.ids.begin() + seqs[i].first, tokens.ids.begin() + seqs[i].second);
        auto& ids = seq_ids[i - g];
        ids.resize(raw.size() * heads);
        ENGRAM_RETURN_IF_ERROR(hasher.hash(raw, li, ids).with_context(tokens.path));
        all.insert(all.end(), ids.begin(), ids.end());
        t_max = std::max(t_max, raw.size());
      }
      prefill.add_batch(li, all);
      for (size_t t = 0; t < t_max; ++t) {
        step.clear();
        for (const auto& ids : seq_ids)
          if (ids.size() > t * heads) step.insert(step.end(), ids.begin() + static_cast<std::ptrdiff_t>(t * heads),
                                                  ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * heads));
        decode.add_batch(li, step);
      }
    }
  }
  out.prefill = prefill.finish(top_k);
  out.decode_step = decode.finish(top_k);
  return out;
}

// ---- TextIdSource ------------------------------------------------------------------------------

TextIdSource::TextIdSource(NgramHasher hasher, TokenFile tokens, const TextIdSourceOptions& options)
    : hasher_(std::move(hasher)), tokens_(std::move(tokens)), options_(options), stats_(hasher_.layout()) {
  for (const auto& d : tokens_.documents) doc_starts_.push_back(d.first_token);
}

Result<std::unique_ptr<TextIdSource>> TextIdSource::create(NgramHasher hasher, TokenFile tokens, const TextIdSourceOptions& options) {
  if (tokens.ids.empty()) return bad("token file " + tokens.path + " holds no tokens");
  if (tokens.vocab_size != hasher.vocab_size())
    return bad("token file " + tokens.path + " has vocab size " + std::to_string(tokens.vocab_size) +
               " but the hasher's compression table covers " + std::to_string(hasher.vocab_size()) + " ids");
  if (options.seq_len < 1) return bad("sequence length " + std::to_string(options.seq_len) + " must be >= 1");
  if (tokens.documents.empty()) tokens.documents.push_back({tokens.path, 0, static_cast<int64_t>(tokens.ids.size())});
  return std::unique_ptr<TextIdSource>(new TextIdSource(std::move(hasher), std::move(tokens), options));
}

void TextIdSource::restart(int batch) {
  slots_.clear();
  const int64_t n = static_cast<int64_t>(tokens_.ids.size());
  for (int b = 0; b < batch; ++b) {
    const int64_t start = static_cast<int64_t>((static_cast<__int128>(b) * n) / batch);
    slots_.push_back(Slot{start, 0, hasher_.begin_sequence()});
  }
  next_step_ = 0;
}

Status TextIdSource::next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) {
  if (batch < 1) return bad("batch " + std::to_string(batch) + " must be >= 1");
  if (step == 0) {
    restart(batch);
  } else if (step != next_step_ || static_cast<size_t>(batch) != slots_.size()) {
    return bad("text id source: step " + std::to_string(step) + " with batch " + std::to_string(batch) +
               " out of order (expected step " + std::to_string(next_step_) + " with batch " +
               std::to_string(slots_.size()) + ", or step 0 to restart)");
  }
  const EngramLayout& layout = hasher_.layout();
  const size_t heads = static_cast<size_t>(layout.heads());
  const int64_t n = static_cast<int64_t>(tokens_.ids.size());
  ids.resize(static_cast<size_t>(layout.n_layers()));
  for (auto& v : ids) v.resize(static_cast<size_t>(batch) * heads);
  std::vector<int64_t> one(static_cast<size_t>(layout.n_layers()) * heads);
  last_.tokens.resize(slots_.size());
  last_.new_sequence.assign(slots_.size(), 0);
  for (size_t b = 0; b < slots_.size(); ++b) {
    Slot& s = slots_[b];
    bool new_sequence = s.seq_tokens >= options_.seq_len;
    if (s.cursor >= n) {
      s.cursor = 0;
      new_sequence = true;
    }
    if (s.seq_tokens > 0 && std::binary_search(doc_starts_.begin(), doc_starts_.end(), s.cursor)) new_sequence = true;
    if (new_sequence) {
      s.state = hasher_.begin_sequence();
      s.seq_tokens = 0;
    }
    const int64_t token = tokens_.ids[static_cast<size_t>(s.cursor)];
    last_.tokens[b] = token;
    last_.new_sequence[b] = s.seq_tokens == 0 ? 1 : 0;
    ENGRAM_RETURN_IF_ERROR(hasher_.hash_chunk(s.state, std::span<const int64_t>(&token, 1), one)
                               .with_context(tokens_.path + " token " + std::to_string(s.cursor)));
    for (int li = 0; li < layout.n_layers(); ++li)
      std::copy_n(one.begin() + static_cast<std::ptrdiff_t>(li * heads), heads,
                  ids[static_cast<size_t>(li)].begin() + static_cast<std::ptrdiff_t>(b * heads));
    ++s.cursor;
    ++s.seq_tokens;
  }
  for (int li = 0; li < layout.n_layers(); ++li) stats_.add_batch(li, ids[static_cast<size_t>(li)]);
  next_step_ = step + 1;
  return Status::ok();
}

std::string TextIdSource::describe() const {
  return "text(" + tokens_.path + ": " + std::to_string(tokens_.ids.size()) + " tokens, " +
         std::to_string(tokens_.documents.size()) + " documents, " + tokens_.tokenizer + ", V'=" +
         std::to_string(hasher_.compressed_vocab()) + ", seq_len=" + std::to_string(options_.seq_len) + ")";
}

namespace {

Result<TokenFile> read_tokens(const std::string& token_file) {
  auto tokens = read_token_file(token_file.empty() ? default_token_file_path() : token_file);
  if (!tokens.is_ok() && tokens.status().code() == Code::kNotFound && token_file.empty())
    return Status(Code::kNotFound, tokens.status().message() +
                                       " (the default text's tokens come from scripts/setup, or run scripts/tokenize-setup DIR "
                                       "and set ENGRAM_DATA_DIR=DIR)");
  return tokens;
}

Result<std::unique_ptr<IdSource>> text_source(const EngramLayout& layout, TokenFile tokens, CompressionTable table,
                                              const std::string& table_path, const NgramHashOptions& hash,
                                              const TextIdSourceOptions& options) {
  ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(tokens, table, table_path));
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(layout, std::move(table), hash));
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<TextIdSource> src, TextIdSource::create(std::move(hasher), std::move(tokens), options));
  return std::unique_ptr<IdSource>(std::move(src));
}

}  // namespace

Result<std::unique_ptr<IdSource>> make_text_id_source(const EngramLayout& layout, const std::string& token_file,
                                                      const std::string& compression_table, int64_t seed,
                                                      const TextIdSourceOptions& options) {
  const std::string table_path = compression_table.empty() ? default_compression_table_path() : compression_table;
  ENGRAM_ASSIGN_OR_RETURN(TokenFile tokens, read_tokens(token_file));
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(table_path));
  NgramHashOptions opt;
  opt.seed = seed;
  return text_source(layout, std::move(tokens), std::move(table), table_path, opt, options);
}

Result<std::unique_ptr<IdSource>> make_model_text_id_source(const EngramLayout& layout, const std::string& token_file,
                                                            const std::string& model_dir, const ModelHashing& hashing,
                                                            const TextIdSourceOptions& options) {
  ENGRAM_ASSIGN_OR_RETURN(TokenFile tokens, read_tokens(token_file));
  const std::string table_name =
      hashing.table_path.empty() ? model_dir + "/" + host::kModelTokenizerFile + " (built, not cached)" : hashing.table_path;
  if (Status st = check_token_file_matches_table(tokens, hashing.table, table_name); !st.is_ok())
    return Status(st.code(), st.message() + " (text ids need a token file of the model's own tokenizer; tools/tokenize writes one: " +
                                 "node " + shell_quote(tokenize_script_path()) + " tokens --tokenizer-json " +
                                 shell_quote(model_dir + "/" + host::kModelTokenizerFile) + " --add-bos --out FILE TEXT...)");
  return text_source(layout, std::move(tokens), hashing.table, table_name, hashing.hash, options);
}

}  // namespace engram
