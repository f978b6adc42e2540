// config.json of a model directory and the Engram tensor names (see model_io.hpp).
//
// The Engram fields sit in "text_config" in the released multimodal config and at the top level in
// flat ones; whichever object holds engram_layer_ids is read, and only that one, so that two
// disagreeing copies cannot be mixed. Every field is type- and range-checked before use: the ranges
// are those EngramLayout::finalize accepts, so a config that parses also gives a layout or a precise
// error.
#include <nlohmann/json.hpp>

#include "host/json_text.hpp"
#include "host/model_io.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

std::string replace_layer(const std::string& pattern, int layer_id) {
  std::string s = pattern;
  const size_t at = s.find("{L}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer_id));
  return s;
}

// Reads the fields of one JSON object with messages "<path> <section.>field: ...".
class Fields {
 public:
  Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  const json* find(const char* name) const {
    const auto it = obj_.find(name);
    return it == obj_.end() ? nullptr : &*it;
  }

  Result<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = find(name);
    if (!v) return invalid(prefix_ + name + " is missing");
    return json_integer(*v, prefix_ + name, lo, hi);
  }

  // A non-empty array of at most max_len integers in [lo, hi].
  Result<std::vector<int64_t>> integers(const char* name, int64_t lo, int64_t hi, size_t max_len) const {
    const json* v = find(name);
    if (!v) return invalid(prefix_ + name + " is missing");
    ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> out, json_integer_list(*v, prefix_ + name, lo, hi, max_len));
    if (out.empty()) return invalid(prefix_ + name + " is empty");
    return out;
  }

 private:
  const json& obj_;
  std::string prefix_;
};

constexpr size_t kMaxEngramLayers = 4096;

}  // namespace

std::string ModelTensorNames::weight_of(int layer_id) const { return replace_layer(weight, layer_id); }
std::string ModelTensorNames::scale_of(int layer_id) const { return replace_layer(scale, layer_id); }

Result<ModelTensorNames> parse_model_tensor_names(const std::string& text) {
  const std::string what = "--tensor-names '" + printable(text) + "'";
  const size_t comma = text.find(',');
  if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos)
    return invalid(what + ": expected WEIGHT,SCALE (two tensor names with {L} for the layer id)");
  ModelTensorNames n{text.substr(0, comma), text.substr(comma + 1)};
  for (const std::string* s : {&n.weight, &n.scale}) {
    const size_t at = s->find("{L}");
    if (at == std::string::npos || s->find("{L}", at + 1) != std::string::npos)
      return invalid(what + ": '" + printable(*s) + "' must hold {L} (the layer id) exactly once");
  }
  if (n.weight == n.scale) return invalid(what + ": the weight and scale names are the same");
  return n;
}

Result<ModelEngramConfig> parse_model_config(std::string_view text, const std::string& path) {
  if (!json_depth_within(text)) return invalid(path + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid(path + ": not valid JSON");
  if (!root.is_object()) return invalid(path + ": expected a JSON object, got " + a_type(root));
  ModelEngramConfig c;
  const json* obj = &root;
  const auto tc = root.find("text_config");
  if (tc != root.end() && tc->is_object() && tc->contains("engram_layer_ids")) {
    obj = &*tc;
    c.section = "text_config";
  } else if (!root.contains("engram_layer_ids")) {
    return invalid(path + ": no engram_layer_ids (neither at the top level nor in text_config): not a model with Engram layers");
  }
  const Fields f(*obj, path + " " + (c.section.empty() ? "" : c.section + "."));
  try {
    ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> ids, f.integers("engram_layer_ids", 0, 1 << 20, kMaxEngramLayers));
    for (int64_t id : ids) c.layer_ids.push_back(static_cast<int>(id));
    ENGRAM_ASSIGN_OR_RETURN(c.num_embeddings,
                            f.integers("engram_num_embeddings", 1, int64_t{1} << 42, kMaxEngramLayers));
    if (c.num_embeddings.size() != c.layer_ids.size())
      return invalid(path + " " + (c.section.empty() ? "" : c.section + ".") + "engram_num_embeddings has " +
                     std::to_string(c.num_embeddings.size()) + " entries for " + std::to_string(c.layer_ids.size()) +
                     " engram_layer_ids");
    ENGRAM_ASSIGN_OR_RETURN(c.vocab_size, f.integer("engram_vocab_size", 2, int64_t{1} << 40));
    ENGRAM_ASSIGN_OR_RETURN(const int64_t n, f.integer("engram_max_ngram_size", 2, 16));
    ENGRAM_ASSIGN_OR_RETURN(const int64_t heads, f.integer("engram_n_heads", 1, 1024));
    ENGRAM_ASSIGN_OR_RETURN(const int64_t d, f.integer("engram_head_dim", 32, 65536));
    if (d % 32 != 0)
      return invalid(path + " " + (c.section.empty() ? "" : c.section + ".") + "engram_head_dim = " +
                     std::to_string(d) + " is not a multiple of 32 (one ue8m0 scale per 32 values)");
    c.max_ngram_size = static_cast<int>(n);
    c.n_heads = static_cast<int>(heads);
    c.head_dim = static_cast<int>(d);
    ENGRAM_ASSIGN_OR_RETURN(c.compressed_vocab_size, f.integer("engram_compressed_vocab_size", 1, int64_t{1} << 32));
    for (const char* pad : {"engram_pad_token_id", "engram_pad_id"}) {
      if (!f.find(pad)) continue;
      ENGRAM_ASSIGN_OR_RETURN(c.pad_token_id, f.integer(pad, 0, int64_t{1} << 32));
      c.pad_token_id_given = true;
      break;
    }
    if (const auto syn = root.find("engram_offload_synthetic"); syn != root.end()) {
      const std::string field = path + " engram_offload_synthetic";
      if (!syn->is_object()) return invalid(field + ": expected an object, got " + a_type(*syn));
      const auto gen = syn->find("generator");
      const auto seed = syn->find("seed");
      if (gen == syn->end() || !gen->is_string()) return invalid(field + ".generator: expected a string");
      if (seed == syn->end() || !seed->is_number_unsigned()) return invalid(field + ".seed: expected a non-negative integer");
      c.synthetic_generator = gen->get<std::string>();
      c.synthetic_seed = seed->get<uint64_t>();
    }
  } catch (const std::exception& e) {
    return invalid(path + ": " + printable(e.what()));
  }
  return c;
}

}  // namespace engram::host
