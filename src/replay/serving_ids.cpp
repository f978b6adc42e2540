// Serving replay's id sources (serving.hpp): a request's scheduled positions hashed from real text with the
// reference N-gram hasher (the request reads the token stream from its text offset, wrapping), or Zipf ids that
// are a pure function of (seed, request, position, head).
#include "replay/serving.hpp"

#include <cstdio>
#include <unordered_map>

#include "core/splitmix.hpp"
#include "replay/id_source.hpp"

namespace engram {

Status ServingIdSource::raw_tokens(const ServingRequest&, int64_t, int64_t, std::vector<int64_t>&) const {
  return Status(Code::kUnsupported, "serving ids: " + describe() + " are not hashed from tokens");
}

namespace {

class TextServingIds final : public ServingIdSource {
 public:
  TextServingIds(NgramHasher h, TokenFile t) : hasher_(std::move(h)), tokens_(std::move(t)) {}
  Status append(const ServingRequest& r, int64_t pos, int64_t n, std::vector<std::vector<int64_t>>& out) override {
    const EngramLayout& L = hasher_.layout();
    auto it = states_.find(r.id);
    if (it == states_.end()) it = states_.emplace(r.id, hasher_.begin_sequence()).first;
    if (it->second.position() != pos)
      return Status(Code::kInvalidArgument, "serving ids: request " + std::to_string(r.id) + " chunk at position " +
                                                std::to_string(pos) + " but its sequence is at " +
                                                std::to_string(it->second.position()) + " (chunks out of order)");
    ENGRAM_RETURN_IF_ERROR(raw_tokens(r, pos, n, tok_));
    const size_t heads = static_cast<size_t>(L.heads());
    buf_.resize(static_cast<size_t>(L.n_layers()) * static_cast<size_t>(n) * heads);
    ENGRAM_RETURN_IF_ERROR(hasher_.hash_chunk(it->second, tok_, buf_));
    out.resize(static_cast<size_t>(L.n_layers()));
    const size_t per_layer = static_cast<size_t>(n) * heads;
    for (size_t li = 0; li < out.size(); ++li)
      out[li].insert(out[li].end(), buf_.begin() + static_cast<std::ptrdiff_t>(li * per_layer),
                     buf_.begin() + static_cast<std::ptrdiff_t>((li + 1) * per_layer));
    return Status::ok();
  }
  void reset() override { states_.clear(); }
  int64_t text_tokens() const override { return static_cast<int64_t>(tokens_.ids.size()); }
  const NgramHasher* hasher() const override { return &hasher_; }
  Status raw_tokens(const ServingRequest& r, int64_t pos, int64_t n, std::vector<int64_t>& out) const override {
    if (pos < 0 || n < 0) return Status(Code::kInvalidArgument, "serving ids: negative position or count");
    const auto N = static_cast<int64_t>(tokens_.ids.size());
    out.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = tokens_.ids[static_cast<size_t>((r.text_offset + pos + i) % N)];
    return Status::ok();
  }
  std::string describe() const override {
    return "text(" + tokens_.path + ": " + std::to_string(tokens_.ids.size()) + " tokens, " + tokens_.tokenizer +
           ", V'=" + std::to_string(hasher_.compressed_vocab()) + ")";
  }

 private:
  NgramHasher hasher_;
  TokenFile tokens_;
  std::unordered_map<int64_t, SequenceState> states_;
  std::vector<int64_t> tok_, buf_;
};

class ZipfServingIds final : public ServingIdSource {
 public:
  ZipfServingIds(const EngramLayout& L, double alpha, uint64_t seed) : layout_(L), alpha_(alpha), seed_(seed) {
    for (int li = 0; li < L.n_layers(); ++li)
      for (int h = 0; h < L.heads(); ++h) samplers_.emplace_back(L.head_rows[li][h], alpha);
  }
  Status append(const ServingRequest& r, int64_t pos, int64_t n, std::vector<std::vector<int64_t>>& out) override {
    const int heads = layout_.heads();
    out.resize(static_cast<size_t>(layout_.n_layers()));
    for (int li = 0; li < layout_.n_layers(); ++li)
      for (int64_t i = 0; i < n; ++i)
        for (int h = 0; h < heads; ++h) {
          uint64_t s = mix_seed(seed_, static_cast<uint64_t>(r.id) << 24 ^ static_cast<uint64_t>(pos + i),
                                static_cast<uint64_t>(li) * static_cast<uint64_t>(heads) + static_cast<uint64_t>(h));
          const int64_t p = layout_.head_rows[li][h];
          const int64_t rank = samplers_[static_cast<size_t>(li) * static_cast<size_t>(heads) + static_cast<size_t>(h)].sample(s);
          out[static_cast<size_t>(li)].push_back(layout_.head_offsets[li][h] + zipf_rank_row(rank, p));
        }
    return Status::ok();
  }
  void reset() override {}
  std::string describe() const override {
    char b[96];
    std::snprintf(b, sizeof b, "zipf(alpha=%.2f, seed=%llu)", alpha_, static_cast<unsigned long long>(seed_));
    return b;
  }

 private:
  EngramLayout layout_;
  double alpha_;
  uint64_t seed_;
  std::vector<ZipfSampler> samplers_;
};

}  // namespace

Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(NgramHasher hasher, TokenFile tokens) {
  if (tokens.ids.empty()) return Status(Code::kInvalidArgument, "serving ids: token file '" + tokens.path + "' is empty");
  if (tokens.vocab_size != hasher.vocab_size())
    return Status(Code::kInvalidArgument, "serving ids: token file vocabulary " + std::to_string(tokens.vocab_size) +
                                              " != hasher vocabulary " + std::to_string(hasher.vocab_size()));
  return std::unique_ptr<ServingIdSource>(new TextServingIds(std::move(hasher), std::move(tokens)));
}

Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(const EngramLayout& layout, const std::string& token_file) {
  const std::string path = token_file.empty() ? default_token_file_path() : token_file;
  auto tokens = read_token_file(path);
  if (!tokens.is_ok()) {
    if (tokens.status().code() == Code::kNotFound)
      return Status(Code::kNotFound, tokens.status().message() + " (make it with scripts/tokenize-setup DIR and set ENGRAM_DATA_DIR=DIR)");
    return tokens.status();
  }
  const std::string table_path = default_compression_table_path();
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(table_path));
  ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(*tokens, table, table_path));
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(layout, std::move(table), NgramHashOptions{}));
  return make_text_serving_ids(std::move(hasher), std::move(*tokens));
}

Result<std::unique_ptr<ServingIdSource>> make_zipf_serving_ids(const EngramLayout& layout, double alpha, uint64_t seed) {
  if (!(alpha > 0)) return Status(Code::kInvalidArgument, "serving ids: zipf alpha must be > 0");
  return std::unique_ptr<ServingIdSource>(new ZipfServingIds(layout, alpha, seed));
}

}  // namespace engram
