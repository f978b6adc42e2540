// make_decode_id_source: the one place that turns the id options of a decode replay into an IdSource.
#include "replay/decode_ids.hpp"

#include <cstdio>

#include "host/token_io.hpp"

namespace engram {

Result<std::unique_ptr<IdSource>> make_decode_id_source(const EngramLayout& layout, const DecodeIdsSpec& spec,
                                                        std::string* note) {
  if (spec.ids != "auto" && spec.ids != "text" && spec.ids != "zipf" && spec.ids != "uniform")
    return Status(Code::kInvalidArgument, "ids '" + spec.ids + "': expected auto, text, zipf or uniform");
  if (spec.ids == "text" || spec.ids == "auto") {
    const std::string tok = spec.tokens.empty() ? default_token_file_path() : spec.tokens;
    Result<std::unique_ptr<IdSource>> t =
        spec.model.empty() ? make_text_id_source(layout, tok, "", 0, spec.text)
                           : make_model_text_id_source(layout, tok, spec.model, spec.tensor_names, spec.text);
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

}  // namespace engram
