// Checkpoint I/O (see checkpoint.hpp for the file format and the contract).
//
// Reading is in layers, each a pure function of the one below so tests and the fuzzer reach them
// without files: the safetensors header (host/safetensors), then the engram meaning of the header
// (layout metadata, tensor names, dtypes and shapes). Every offset is checked against the file size
// before any read, so a malformed file can cause an error but never a read past the end of a buffer.
// Rows are streamed by host/row_load and written by host/safetensors_write; this file only says which
// tensors hold which layer, and keeps the temporary-name-then-rename protocol. Progress goes to the caller's
// on_progress only; the terminal line is report/progress_line's.
#include "host/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>

#include "host/json_text.hpp"
#include "host/safetensors_write.hpp"
#include "sys/file.hpp"
#include "sys/owner.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

constexpr int kMaxLayers = 4096;
constexpr const char* kGeneratorSynthRow = "synth_row";

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

// ---- engram metadata ---------------------------------------------------------------------------

class MetaReader {
 public:
  explicit MetaReader(const SafetensorsHeader& h) : h_(h) {}

  // The JSON value of __metadata__[key]; a null json when absent and !required.
  Result<json> value(const std::string& key, bool required) const {
    const auto it = h_.metadata.find(key);
    if (it == h_.metadata.end()) {
      if (!required) return json();
      return invalid("__metadata__." + key + " is missing (not an engram-offload checkpoint?)");
    }
    if (!json_depth_within(it->second, kMaxJsonDepth))
      return invalid("__metadata__." + key + ": JSON nested too deeply");
    json v = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded())
      return invalid("__metadata__." + key + ": '" + printable(it->second) + "' is not JSON-encoded");
    return v;
  }

  Result<int64_t> int_field(const std::string& key, int64_t lo, int64_t hi) const {
    ENGRAM_ASSIGN_OR_RETURN(const json v, value(key, true));
    return json_integer(v, "__metadata__." + key, lo, hi);
  }

 private:
  const SafetensorsHeader& h_;
};

Status check_layer_tensor(const SafetensorsHeader& h, const std::string& name, const char* dtype, int64_t rows,
                          int64_t cols) {
  const SafetensorsTensor* t = h.find(name);
  if (!t) return invalid("tensor " + name + " is missing");
  if (t->dtype != dtype) return invalid("tensor " + name + ": dtype " + t->dtype + ", expected " + dtype);
  const std::vector<int64_t> want = {rows, cols};
  if (t->shape != want)
    return invalid("tensor " + name + ": shape " + list_text(t->shape) + ", expected [rows, " +
                   (std::string(dtype) == "U8" ? "d/32" : "d") + "] = " + list_text(want));
  return Status::ok();
}

Result<CheckpointInfo> decode_impl(const SafetensorsHeader& h) {
  MetaReader meta(h);
  CheckpointInfo info;
  info.header = h;
  ENGRAM_ASSIGN_OR_RETURN(const int64_t version, meta.int_field("format_version", 1, 1 << 30));
  if (version != kCheckpointFormatVersion)
    return invalid("__metadata__.format_version = " + std::to_string(version) + " is not supported (this build reads " +
                   std::to_string(kCheckpointFormatVersion) + ")");
  info.format_version = static_cast<int>(version);

  EngramLayout l;
  l.format = RowFormat::kSplit;
  ENGRAM_ASSIGN_OR_RETURN(const json name, meta.value("layout_name", false));
  if (name.is_string()) l.name = name.get<std::string>();
  else if (name.is_null()) l.name = "custom";
  else return invalid("__metadata__.layout_name: expected a string, got " + a_type(name));

  ENGRAM_ASSIGN_OR_RETURN(const json ids, meta.value("layer_ids", true));
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<int64_t> layer_ids,
                          json_integer_list(ids, "__metadata__.layer_ids", 0, 1 << 20, kMaxLayers));
  if (layer_ids.empty()) return invalid("__metadata__.layer_ids is empty");
  for (int64_t id : layer_ids) l.layer_ids.push_back(static_cast<int>(id));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t max_ngram, meta.int_field("max_ngram", 2, 16));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t heads_per_order, meta.int_field("heads_per_order", 1, 1024));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t d, meta.int_field("d", 32, 65536));
  if (d % 32 != 0) return invalid("__metadata__.d = " + std::to_string(d) + " is not a multiple of 32");
  l.max_ngram = static_cast<int>(max_ngram);
  l.heads_per_order = static_cast<int>(heads_per_order);
  l.d = static_cast<int>(d);
  ENGRAM_ASSIGN_OR_RETURN(const json vocab, meta.value("vocab_size_per_order", true));
  ENGRAM_ASSIGN_OR_RETURN(l.vocab_size_per_order,
                          json_integer_list(vocab, "__metadata__.vocab_size_per_order", 2, int64_t{1} << 40, 15));
  if (static_cast<int64_t>(l.vocab_size_per_order.size()) != max_ngram - 1)
    return invalid("__metadata__.vocab_size_per_order has " + std::to_string(l.vocab_size_per_order.size()) +
                   " entries, expected max_ngram - 1 = " + std::to_string(max_ngram - 1));

  // head_rows: [layers][heads]; their sums must match the tensor shapes before the (costlier) prime
  // walk is run to confirm them.
  ENGRAM_ASSIGN_OR_RETURN(const json hr, meta.value("head_rows", true));
  if (!hr.is_array() || hr.size() != l.layer_ids.size())
    return invalid("__metadata__.head_rows: expected an array of " + std::to_string(l.layer_ids.size()) +
                   " arrays (one per Engram layer)");
  std::vector<std::vector<int64_t>> head_rows;
  for (size_t li = 0; li < hr.size(); ++li) {
    const std::string field = "__metadata__.head_rows[" + std::to_string(li) + "]";
    ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> rows_of_layer,
                            json_integer_list(hr[li], field, 2, int64_t{1} << 41, 15 * 1024));
    if (static_cast<int>(rows_of_layer.size()) != l.heads())
      return invalid(field + " has " + std::to_string(rows_of_layer.size()) + " entries, expected " +
                     std::to_string(l.heads()) + " heads");
    int64_t rows = 0;
    for (int64_t r : rows_of_layer) rows += r;  // <= 15360 * 2^41: no overflow
    const int id = l.layer_ids[li];
    ENGRAM_RETURN_IF_ERROR(check_layer_tensor(h, checkpoint_payload_name(id), "F8_E4M3", rows, d));
    ENGRAM_RETURN_IF_ERROR(check_layer_tensor(h, checkpoint_scales_name(id), "U8", rows, d / 32));
    head_rows.push_back(std::move(rows_of_layer));
  }

  ENGRAM_ASSIGN_OR_RETURN(const json generator, meta.value("generator", false));
  if (generator.is_string()) info.generator = generator.get<std::string>();
  else if (!generator.is_null()) return invalid("__metadata__.generator: expected a string");
  ENGRAM_ASSIGN_OR_RETURN(const json seed, meta.value("seed", false));
  if (seed.is_number_unsigned()) info.seed = seed.get<uint64_t>();
  else if (!seed.is_null()) return invalid("__metadata__.seed: expected a non-negative integer");

  {
    const Status s = l.finalize();
    if (!s.is_ok()) return s.with_context("__metadata__");
  }
  for (size_t li = 0; li < head_rows.size(); ++li)
    for (size_t hh = 0; hh < head_rows[li].size(); ++hh)
      if (head_rows[li][hh] != l.head_rows[li][hh])
        return invalid("__metadata__.head_rows[" + std::to_string(li) + "][" + std::to_string(hh) + "] = " +
                       std::to_string(head_rows[li][hh]) + " but the prime walk from vocab_size_per_order gives " +
                       std::to_string(l.head_rows[li][hh]));
  info.layout = std::move(l);
  return info;
}

std::string metadata_json(const json& v) { return v.dump(); }

std::map<std::string, std::string> layout_metadata(const EngramLayout& l) {
  std::map<std::string, std::string> m;
  m["format_version"] = metadata_json(kCheckpointFormatVersion);
  m["layout_name"] = metadata_json(l.name);
  m["layer_ids"] = metadata_json(l.layer_ids);
  m["max_ngram"] = metadata_json(l.max_ngram);
  m["heads_per_order"] = metadata_json(l.heads_per_order);
  m["vocab_size_per_order"] = metadata_json(l.vocab_size_per_order);
  m["d"] = metadata_json(l.d);
  m["head_rows"] = metadata_json(l.head_rows);
  return m;
}

// ---- load --------------------------------------------------------------------------------------

Result<CheckpointInfo> read_info_from(const sys::File& f) {
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(f));
  ENGRAM_ASSIGN_OR_RETURN(const SafetensorsHeader h, read_safetensors_header(f));
  ENGRAM_ASSIGN_OR_RETURN(CheckpointInfo info, decode_checkpoint_header(h));
  info.path = f.path();
  info.file_bytes = size;
  return info;
}

Status load_impl(const std::string& path, const EngramLayout& layout, std::span<const TableSpan> spans,
                 const LoadOptions& opt) {
  if (layout.head_offsets.size() != layout.layer_ids.size()) return invalid("the requested layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_table_spans(layout, spans));
  ENGRAM_ASSIGN_OR_RETURN(const sys::File f, sys::open_read(path));
  ENGRAM_ASSIGN_OR_RETURN(const CheckpointInfo info, read_info_from(f));
  ENGRAM_RETURN_IF_ERROR(check_layout_matches(info.layout, layout));
  std::vector<RowSource> sources;
  for (int id : layout.layer_ids) {
    const int64_t base = static_cast<int64_t>(info.header.data_offset);
    sources.push_back({&f, base + static_cast<int64_t>(info.header.find(checkpoint_payload_name(id))->begin), &f,
                       base + static_cast<int64_t>(info.header.find(checkpoint_scales_name(id))->begin)});
  }
  RowLoadOptions ro;
  ro.threads = opt.threads;
  ro.chunk_bytes = opt.chunk_bytes;
  ro.drop_page_cache = opt.drop_page_cache;
  ro.on_progress = opt.on_progress;
  return load_rows(layout, sources, spans, ro);
}

// ---- write -------------------------------------------------------------------------------------

using RowFiller = std::function<void(int layer, int64_t row_lo, int64_t row_hi, uint8_t* payload, uint8_t* scales)>;

Status write_impl(const std::string& path, const EngramLayout& layout, std::map<std::string, std::string> metadata,
                  const RowFiller& fill, const WriteOptions& opt) {
  if (layout.head_offsets.size() != layout.layer_ids.size() || layout.layer_ids.empty())
    return invalid("the layout is not finalized");
  const std::filesystem::path target(path);
  if (path.empty() || !target.has_filename()) return invalid("'" + path + "' does not name a file");
  if (!opt.overwrite) {
    ENGRAM_ASSIGN_OR_RETURN(const bool exists, sys::path_exists(path));
    if (exists) return invalid(path + " already exists (pass --force / WriteOptions::overwrite to replace it)");
  }

  // Tensors back to back, payload then scales per layer (no holes, as strict readers expect).
  const int d = layout.d;
  std::vector<TensorGroup> groups;
  for (int li = 0; li < layout.n_layers(); ++li) {
    const int64_t rows = layout.rows(li);
    const int id = layout.layer_ids[li];
    groups.push_back({rows,
                      {{checkpoint_payload_name(id), "F8_E4M3", {rows, d}}, {checkpoint_scales_name(id), "U8", {rows, d / 32}}},
                      [li, &fill](int64_t lo, int64_t hi, std::span<uint8_t* const> out) { fill(li, lo, hi, out[0], out[1]); }});
  }
  SafetensorsWriteOptions wo;
  wo.threads = opt.threads;
  wo.chunk_bytes = opt.chunk_bytes;
  wo.drop_page_cache = opt.drop_page_cache;
  wo.on_progress = opt.on_progress;

  wo.cancelled = opt.cancelled;

  // Temp file next to the target; write_safetensors_file removes it on its own errors (a cancel included).
  // Its owner record (sys/owner.hpp) comes first, so that a writer killed by SIGKILL leaves a temp file the
  // next sweep of this directory (host/sweep.hpp) can tell from a live writer's.
  std::string tmp;
  for (int attempt = 0;; ++attempt) {
    tmp = temp_sibling_name(path);
    if (Status rec = sys::write_owner_record(tmp); !rec.is_ok()) {
      if (rec.sys_error() == EEXIST && attempt < 8) continue;
      return rec;
    }
    const Status s = write_safetensors_file(tmp, groups, metadata, {}, wo);
    if (s.is_ok()) break;
    (void)sys::remove_owner_record(tmp);
    if (s.sys_error() != EEXIST || attempt >= 8) return s;
  }
  const Status renamed = sys::rename_path(tmp, path, opt.overwrite);
  if (!renamed.is_ok()) (void)sys::unlink_path(tmp);
  (void)sys::remove_owner_record(tmp);
  if (!renamed.is_ok()) return renamed;
  // The data is durable (fsync'ed by the writer); this makes the new name durable too. A failure here
  // is not an error of the checkpoint, which is complete under its name.
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  if (auto df = sys::open_directory(dir.string()); df.is_ok()) (void)sys::fsync(*df);
  return Status::ok();
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

std::string checkpoint_payload_name(int layer_id) { return "engram.layer" + std::to_string(layer_id) + ".payload"; }
std::string checkpoint_scales_name(int layer_id) { return "engram.layer" + std::to_string(layer_id) + ".scales"; }

Result<CheckpointInfo> decode_checkpoint_header(const SafetensorsHeader& header) {
  try {
    return decode_impl(header);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "decoding the checkpoint header");
  } catch (const std::exception& e) {
    return invalid("header: " + printable(e.what()));
  }
}

Result<CheckpointInfo> read_checkpoint_info(const std::string& path) {
  auto r = [&]() -> Result<CheckpointInfo> {
    ENGRAM_ASSIGN_OR_RETURN(const sys::File f, sys::open_read(path));
    return read_info_from(f);
  }();
  if (!r.is_ok()) return r.status().with_context("checkpoint " + path);
  return r;
}

Result<EngramLayout> read_checkpoint_layout(const std::string& path, RowFormat format) {
  ENGRAM_ASSIGN_OR_RETURN(CheckpointInfo info, read_checkpoint_info(path));
  EngramLayout l = std::move(info.layout);
  l.format = format;
  // Re-run the checks for the in-memory layout (fused records are wider than split rows).
  const Status s = l.finalize();
  if (!s.is_ok()) return s.with_context("checkpoint " + path);
  return l;
}

Status check_layout_matches(const EngramLayout& file, const EngramLayout& wanted) {
  auto mismatch = [](const std::string& field, const std::string& in_file, const std::string& in_wanted) {
    return invalid("layout mismatch: " + field + " is " + in_file + " in the file, " + in_wanted +
                   " in the requested layout");
  };
  if (wanted.head_offsets.size() != wanted.layer_ids.size()) return invalid("the requested layout is not finalized");
  if (file.layer_ids != wanted.layer_ids)
    return mismatch("layer_ids", list_text(file.layer_ids), list_text(wanted.layer_ids));
  if (file.max_ngram != wanted.max_ngram)
    return mismatch("max_ngram", std::to_string(file.max_ngram), std::to_string(wanted.max_ngram));
  if (file.heads_per_order != wanted.heads_per_order)
    return mismatch("heads_per_order", std::to_string(file.heads_per_order), std::to_string(wanted.heads_per_order));
  if (file.vocab_size_per_order != wanted.vocab_size_per_order)
    return mismatch("vocab_size_per_order", list_text(file.vocab_size_per_order), list_text(wanted.vocab_size_per_order));
  if (file.d != wanted.d) return mismatch("d", std::to_string(file.d), std::to_string(wanted.d));
  for (size_t li = 0; li < file.head_rows.size() && li < wanted.head_rows.size(); ++li)
    if (file.head_rows[li] != wanted.head_rows[li])
      return mismatch("head_rows[" + std::to_string(li) + "]", list_text(file.head_rows[li]),
                      list_text(wanted.head_rows[li]));
  if (file.head_rows.size() != wanted.head_rows.size())
    return mismatch("head_rows size", std::to_string(file.head_rows.size()), std::to_string(wanted.head_rows.size()));
  return Status::ok();
}

Status load_checkpoint(const std::string& path, const EngramLayout& layout, std::span<const TableSpan> spans,
                       const LoadOptions& options) {
  try {
    const Status s = load_impl(path, layout, spans, options);
    return s.is_ok() ? s : s.with_context("checkpoint " + path);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "checkpoint " + path + ": out of memory while loading");
  }
}

Status load_checkpoint(const std::string& path, HostTable& table, const LoadOptions& options) {
  for (int r = 0; r < table.n_replicas(); ++r) {  // replica-per-node: every copy holds the rows
    std::vector<TableSpan> spans;
    for (int i = 0; i < table.n_layers(); ++i) spans.push_back(table.span(i, r));
    ENGRAM_RETURN_IF_ERROR(load_checkpoint(path, table.layout(), spans, options));
  }
  return Status::ok();
}

Status write_synthetic_checkpoint(const std::string& path, const EngramLayout& layout, uint64_t seed,
                                  const WriteOptions& options) {
  try {
    std::map<std::string, std::string> meta = layout_metadata(layout);
    meta["generator"] = metadata_json(kGeneratorSynthRow);
    meta["seed"] = metadata_json(seed);
    const int d = layout.d;
    const Status s = write_impl(
        path, layout, std::move(meta),
        [&](int li, int64_t lo, int64_t hi, uint8_t* payload, uint8_t* scales) {
          for (int64_t r = lo; r < hi; ++r)
            synth_row(seed, li, r, d, payload + (r - lo) * d, scales + (r - lo) * (d / 32));
        },
        options);
    return s.is_ok() ? s : s.with_context("writing checkpoint " + path);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "writing checkpoint " + path + ": out of memory");
  }
}

Status write_checkpoint(const std::string& path, const HostTable& table, const WriteOptions& options) {
  if (!table.tp().whole())
    return invalid("writing checkpoint " + path + ": the table holds " + table.tp().to_string() +
                   "'s rows only; a checkpoint holds whole layers");
  try {
    const EngramLayout& layout = table.layout();
    const int d = layout.d;
    const Status s = write_impl(
        path, layout, layout_metadata(layout),
        [&](int li, int64_t lo, int64_t hi, uint8_t* payload, uint8_t* scales) {
          const TableSpan sp = table.span(li);
          if (sp.format == RowFormat::kSplit) {
            std::memcpy(payload, sp.payload_of(lo), static_cast<size_t>((hi - lo) * d));
            std::memcpy(scales, sp.scales_of(lo), static_cast<size_t>((hi - lo) * (d / 32)));
            return;
          }
          for (int64_t r = lo; r < hi; ++r) {
            std::memcpy(payload + (r - lo) * d, sp.payload_of(r), static_cast<size_t>(d));
            std::memcpy(scales + (r - lo) * (d / 32), sp.scales_of(r), static_cast<size_t>(d / 32));
          }
        },
        options);
    return s.is_ok() ? s : s.with_context("writing checkpoint " + path);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "writing checkpoint " + path + ": out of memory");
  }
}

}  // namespace engram::host
