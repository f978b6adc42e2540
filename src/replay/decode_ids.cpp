// make_decode_id_source: the one place that turns the id options of a decode replay into an IdSource.
#include "replay/decode_ids.hpp"

#include <cstdio>
#include <optional>

#include "host/token_io.hpp"
#include "replay/switching_id_source.hpp"

namespace engram {

namespace {

Result<std::unique_ptr<IdSource>> text_source(const EngramLayout& layout, const DecodeIdsSpec& spec,
                                              const ModelHashing* model, const std::string& tokens) {
  return model == nullptr ? make_text_id_source(layout, tokens, "", 0, spec.text)
                          : make_model_text_id_source(layout, tokens, spec.model_dir, *model, spec.text);
}

Result<std::unique_ptr<IdSource>> plain_source(const EngramLayout& layout, const DecodeIdsSpec& spec,
                                               const ModelHashing* model, std::string* note) {
  if (spec.ids == "text" || spec.ids == "auto") {
    const std::string tok = spec.tokens.empty() ? default_token_file_path() : spec.tokens;
    Result<std::unique_ptr<IdSource>> t = text_source(layout, spec, model, tok);
    if (t.is_ok()) return t;
    if (spec.ids == "text" || !spec.tokens.empty()) return t.status().with_context("ids text");
    if (note) {
      char alpha[32];
      std::snprintf(alpha, sizeof alpha, "%.2f", spec.zipf_alpha);
      *note = "real text unavailable (" + t.status().message() + "); using zipf(alpha=" + alpha + ")";
    }
  }
  if (spec.ids == "uniform") return make_uniform_id_source(layout, spec.seed);
  auto z = make_zipf_id_source(layout, spec.zipf_alpha, spec.seed);
  if (!z.is_ok()) return z.status().with_context("zipf_alpha");
  return z;
}

}  // namespace

Result<std::unique_ptr<IdSource>> make_decode_id_source(const EngramLayout& layout, const DecodeIdsSpec& spec,
                                                        std::string* note) {
  if (spec.ids != "auto" && spec.ids != "text" && spec.ids != "zipf" && spec.ids != "uniform")
    return Status(Code::kInvalidArgument, "ids '" + spec.ids + "': expected auto, text, zipf or uniform");
  // A model directory's hashing is needed for text ids; a directory whose table cannot be had (no tokenizer,
  // V' disagreeing with config.json) is an error, never a reason to fall back to synthetic ids.
  std::optional<ModelHashing> model;
  if (!spec.model_dir.empty() && (spec.ids == "auto" || spec.ids == "text")) {
    auto h = read_model_hashing(spec.model_dir, layout.format, spec.tensor_names);
    if (!h.is_ok()) return h.status().with_context("model compression table");
    model = std::move(h).value();
  }
  const ModelHashing* m = model ? &*model : nullptr;
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<IdSource> first, plain_source(layout, spec, m, note));
  if (spec.switch_tokens.empty()) return first;
  if (dynamic_cast<TextIdSource*>(first.get()) == nullptr)
    return Status(Code::kInvalidArgument, "switch tokens need text ids (ids text), not " + first->describe());
  auto second = text_source(layout, spec, m, spec.switch_tokens);
  if (!second.is_ok()) return second.status().with_context("switch tokens");
  auto sw = SwitchingIdSource::create(std::move(first), std::move(*second), spec.switch_at);
  if (!sw.is_ok()) return sw.status().with_context("switch at");
  return std::unique_ptr<IdSource>(std::move(*sw));
}

}  // namespace engram
