// libFuzzer target: a model directory's config.json (parse_model_config) and the --tensor-names text
// (parse_model_tensor_names) on untrusted bytes.
//
// Input: one mode byte, then the text. Mode bit 0 clear: the text is a config.json; an accepted one
// keeps the parser's promises (one num_embeddings entry per layer id, every field in the range the
// layout accepts, d a multiple of 32). Bit 0 set: the text is a --tensor-names value; accepted names
// differ and each expands {L}. Errors must be kInvalidArgument; nothing may throw or read out of bounds.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "host/model_io.hpp"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    auto c = engram::host::parse_model_config(text, "config.json");
    if (!c.is_ok()) {
      check(c.status().code() == engram::Code::kInvalidArgument);
      return 0;
    }
    check(!c->layer_ids.empty() && c->layer_ids.size() == c->num_embeddings.size());
    for (int64_t n : c->num_embeddings) check(n >= 1);
    check(c->max_ngram_size >= 2 && c->max_ngram_size <= 16);
    check(c->n_heads >= 1 && c->n_heads <= 1024);
    check(c->head_dim >= 32 && c->head_dim % 32 == 0);
    check(c->vocab_size >= 2 && c->compressed_vocab_size >= 1 && c->pad_token_id >= 0);
    check(c->section.empty() || c->section == "text_config");
  } else {
    auto n = engram::host::parse_model_tensor_names(std::string(text));
    if (!n.is_ok()) {
      check(n.status().code() == engram::Code::kInvalidArgument);
      return 0;
    }
    check(n->weight != n->scale);
    check(n->weight_of(7).find("{L}") == std::string::npos && n->scale_of(7).find("{L}") == std::string::npos);
  }
  return 0;
}
