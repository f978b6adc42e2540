// Reading a model directory's layout: config.json, the index, the Engram shards' headers (see
// model_io.hpp for the format and the errors).
//
// Only headers are read, never tensor data: the index tells which shard holds each Engram tensor,
// that shard's header gives its dtype, shape and byte range (already checked against the file size
// by the safetensors parser, so a truncated shard is caught here), and the layout's prime walk says
// how many of its rows a table needs. Shard names from the index are file names inside the
// directory: a name with a '/' or a dot name would reach outside it and is refused.
#include <algorithm>
#include <cerrno>
#include <map>
#include <nlohmann/json.hpp>

#include "host/json_text.hpp"
#include "host/model_io.hpp"
#include "host/safetensors.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxConfigBytes = int64_t{64} << 20;
constexpr int64_t kMaxIndexBytes = int64_t{256} << 20;

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

struct Index {
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  std::optional<int64_t> total_size;
};

Result<Index> parse_index(std::string_view text, const std::string& file) {
  if (!json_depth_within(text)) return invalid(file + ": JSON nested too deeply");
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid(file + ": not valid JSON");
  if (!j.is_object()) return invalid(file + ": expected a JSON object, got " + a_type(j));
  Index idx;
  if (const auto meta = j.find("metadata"); meta != j.end() && !meta->is_null()) {
    if (!meta->is_object()) return invalid(file + " metadata: expected an object, got " + a_type(*meta));
    if (const auto ts = meta->find("total_size"); ts != meta->end()) {
      if (!ts->is_number_unsigned() || ts->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return invalid(file + " metadata.total_size: expected a non-negative integer, got " + a_type(*ts));
      idx.total_size = static_cast<int64_t>(ts->get<uint64_t>());
    }
  }
  const auto wm = j.find("weight_map");
  if (wm == j.end()) return invalid(file + ": weight_map is missing");
  if (!wm->is_object()) return invalid(file + " weight_map: expected an object, got " + a_type(*wm));
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return invalid(file + " weight_map['" + printable(name) + "']: expected a shard file name, got " + a_type(shard));
    const std::string s = shard.get<std::string>();
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos)
      return invalid(file + " weight_map['" + printable(name) + "'] = '" + printable(s) +
                     "': not a file name inside the model directory");
    idx.weight_map.emplace(name, s);
  }
  return idx;
}

std::string dtype_shape(const SafetensorsTensor& t) { return t.dtype + " " + list_text(t.shape); }

// Checks one located Engram tensor against what config.json says it must be.
Status check_tensor(const SafetensorsTensor& t, const std::string& shard, const char* dtype,
                    const std::vector<int64_t>& shape, const std::string& why) {
  const std::string what = "tensor " + t.name + " in shard " + shard;
  if (t.dtype != dtype || t.shape != shape) {
    std::string m = what + ": " + dtype_shape(t) + ", expected " + dtype + " " + list_text(shape) + " (" + why + ")";
    if (t.dtype != dtype && t.dtype == "U8" && t.shape.size() == 2 && shape.size() == 2 && t.shape[1] * 2 == shape[1])
      m += "; U8 with half the columns looks like packed FP4, which is not supported (FP8 E4M3 tables only)";
    return invalid(m);
  }
  return Status::ok();
}

Result<ModelInfo> read_impl(const std::string& dir, const ModelTensorNames& names) {
  ModelInfo info;
  info.dir = dir;
  info.names = names;
  ENGRAM_ASSIGN_OR_RETURN(const bool exists, sys::path_exists(dir));
  if (!exists) return Status(Code::kNotFound, "no such directory");
  if (!sys::is_directory(dir)) return invalid("not a directory (a model directory holds config.json and the shards)");

  ENGRAM_ASSIGN_OR_RETURN(const bool has_config, sys::path_exists(info.path(kModelConfigFile)));
  if (!has_config)
    return Status(Code::kNotFound, std::string("a directory without ") + kModelConfigFile +
                                       ": not a model directory (a checkpoint FILE or a Hugging Face model DIR is expected)");
  ENGRAM_ASSIGN_OR_RETURN(const std::string config_text, sys::read_small_file(info.path(kModelConfigFile), kMaxConfigBytes));
  ENGRAM_ASSIGN_OR_RETURN(info.config, parse_model_config(config_text, kModelConfigFile));
  const ModelEngramConfig& c = info.config;
  const std::string cfg_field = std::string(kModelConfigFile) + " " + (c.section.empty() ? "" : c.section + ".");

  // The layout: the reference's prime walk, the same start for every order.
  EngramLayout& l = info.layout;
  l.name = "hf-model";
  l.layer_ids = c.layer_ids;
  l.max_ngram = c.max_ngram_size;
  l.heads_per_order = c.n_heads;
  l.vocab_size_per_order.assign(static_cast<size_t>(c.max_ngram_size - 1), c.vocab_size);
  l.d = c.head_dim;
  l.format = RowFormat::kSplit;
  if (Status s = l.finalize(); !s.is_ok()) return s.with_context(kModelConfigFile);
  for (int i = 0; i < l.n_layers(); ++i)
    if (c.num_embeddings[static_cast<size_t>(i)] < l.rows(i))
      return invalid(cfg_field + "engram_num_embeddings[" + std::to_string(i) + "] = " +
                     std::to_string(c.num_embeddings[static_cast<size_t>(i)]) + " is below " + std::to_string(l.rows(i)) +
                     ", the sum of Engram layer " + std::to_string(l.layer_ids[static_cast<size_t>(i)]) + "'s " +
                     std::to_string(l.heads()) + " primes from engram_vocab_size " + std::to_string(c.vocab_size) +
                     ": its table would be too small for its own hash ids");

  // The weight map: the index, or the tensors of a single model.safetensors.
  Index idx;
  ENGRAM_ASSIGN_OR_RETURN(const bool has_index, sys::path_exists(info.path(kModelIndexFile)));
  info.has_index = has_index;
  if (has_index) {
    ENGRAM_ASSIGN_OR_RETURN(const std::string text, sys::read_small_file(info.path(kModelIndexFile), kMaxIndexBytes));
    ENGRAM_ASSIGN_OR_RETURN(idx, parse_index(text, kModelIndexFile));
    info.index_total_size = idx.total_size;
  } else {
    ENGRAM_ASSIGN_OR_RETURN(const bool single, sys::path_exists(info.path(kModelSingleShardFile)));
    if (!single)
      return Status(Code::kNotFound, std::string("neither ") + kModelIndexFile + " nor " + kModelSingleShardFile +
                                         " exists: no tensors to load");
    ENGRAM_ASSIGN_OR_RETURN(const sys::File f, sys::open_read(info.path(kModelSingleShardFile)));
    auto h = read_safetensors_header(f);
    if (!h.is_ok()) return h.status().with_context(std::string("shard ") + kModelSingleShardFile);
    for (const SafetensorsTensor& t : h->tensors) idx.weight_map.emplace(t.name, kModelSingleShardFile);
  }
  info.index_entries = static_cast<int64_t>(idx.weight_map.size());

  // Every shard the index names must exist (an entry naming a missing file dangles).
  std::map<std::string, std::pair<int64_t, std::string>> per_shard;  // shard -> (entries, one tensor)
  for (const auto& [tensor, shard] : idx.weight_map) {
    auto& e = per_shard[shard];
    if (e.first++ == 0) e.second = tensor;
  }
  std::map<std::string, sys::File> files;
  for (const auto& [shard, e] : per_shard) {
    // A shard that is not a regular file (a FIFO, a symlink loop, a dangling link) is bad input, refused by the
    // same check as an input path on the command line.
    Status usable = sys::check_input_path(info.path(shard), sys::InputKind::kFile);
    if (usable.sys_error() == ENOENT) usable = Status::ok();  // a missing shard: open_read says kNotFound
    auto f = usable.is_ok() ? sys::open_read(info.path(shard)) : Result<sys::File>(std::move(usable));
    if (!f.is_ok())
      return f.status().with_context(std::string(kModelIndexFile) + " maps " + std::to_string(e.first) +
                                     " tensors (e.g. " + printable(e.second) + ") to shard " + shard);
    ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(*f));
    info.shards.push_back({shard, size, e.first});
    files.emplace(shard, std::move(f).value());
  }

  // The Engram tensors: in the index, in the header of the shard it names, as config.json says.
  std::map<std::string, SafetensorsHeader> headers;
  auto locate = [&](const std::string& name, const char* dtype, const std::vector<int64_t>& shape,
                    const std::string& why) -> Result<ModelTensor> {
    const auto it = idx.weight_map.find(name);
    if (it == idx.weight_map.end())
      return invalid("tensor " + name + " is not in " + (has_index ? kModelIndexFile : kModelSingleShardFile) + " (" +
                     why + "; other exports: --tensor-names WEIGHT,SCALE)");
    const std::string& shard = it->second;
    if (!headers.count(shard)) {
      auto h = read_safetensors_header(files.at(shard));
      if (!h.is_ok()) return h.status().with_context("shard " + shard + " (holding " + name + ")");
      headers.emplace(shard, std::move(h).value());
    }
    const SafetensorsHeader& h = headers.at(shard);
    const SafetensorsTensor* t = h.find(name);
    if (!t) {
      std::string m = "tensor " + name + ": " + kModelIndexFile + " maps it to shard " + shard +
                      ", whose header has no such tensor (a dangling or misplaced weight_map entry)";
      for (const auto& [other, oh] : headers)
        if (other != shard && oh.find(name)) m += "; it is in shard " + other;
      return invalid(m);
    }
    ENGRAM_RETURN_IF_ERROR(check_tensor(*t, shard, dtype, shape, why));
    return ModelTensor{t->name, shard, t->dtype, t->shape, static_cast<int64_t>(h.data_offset + t->begin),
                       static_cast<int64_t>(t->size_bytes())};
  };
  for (int i = 0; i < l.n_layers(); ++i) {
    ModelLayer layer;
    layer.layer_id = l.layer_ids[static_cast<size_t>(i)];
    layer.num_embeddings = c.num_embeddings[static_cast<size_t>(i)];
    layer.prime_rows = l.rows(i);
    const std::string why = "config.json: Engram layer " + std::to_string(layer.layer_id) + ", engram_num_embeddings " +
                            std::to_string(layer.num_embeddings) + ", engram_head_dim " + std::to_string(l.d);
    ENGRAM_ASSIGN_OR_RETURN(layer.weight, locate(names.weight_of(layer.layer_id), "F8_E4M3", {layer.num_embeddings, l.d}, why));
    ENGRAM_ASSIGN_OR_RETURN(layer.scale,
                            locate(names.scale_of(layer.layer_id), "F8_E8M0", {layer.num_embeddings, l.d / 32}, why));
    info.layers.push_back(std::move(layer));
  }
  return info;
}

}  // namespace

std::string ModelInfo::path(const std::string& file) const { return dir + "/" + file; }

int64_t ModelInfo::table_bytes() const { return layout.total_rows() * layout.source_bytes_per_row(); }

Result<ModelInfo> read_model_dir(const std::string& dir, const ModelTensorNames& names) {
  try {
    auto r = read_impl(dir, names);
    if (!r.is_ok()) return r.status().with_context("model " + dir);
    return r;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "model " + dir + ": out of memory reading its headers");
  } catch (const std::exception& e) {
    return invalid("model " + dir + ": " + printable(e.what()));
  }
}

Result<EngramLayout> model_layout(const ModelInfo& info, RowFormat format) {
  EngramLayout l = info.layout;
  l.format = format;
  if (Status s = l.finalize(); !s.is_ok()) return s.with_context("model " + info.dir);
  return l;
}

}  // namespace engram::host
