// Checkpoint I/O (see checkpoint.hpp for the file format and the contract).
//
// Reading is in three layers, each a pure function of the one below so tests and the fuzzer reach
// them without files: the 8-byte header length (checked against the file size and the 100 MB cap
// before anything is allocated), the safetensors header (JSON parsed by nlohmann-json inside a
// try/catch: no exception leaves this file), then the engram meaning of the header (layout metadata,
// tensor names, dtypes and shapes). Every offset is checked against the file size before any read,
// so a malformed file can cause an error but never a read past the end of a buffer.
//
// Transfers are split into row-aligned chunks handed to a few threads through an atomic counter;
// the calling thread only waits and reports progress, so the progress callback always runs on the
// caller's thread. Loading preads straight into split arrays; for fused records it reads payload and
// scales of the same rows into a 1 MiB per-thread bounce buffer (cache-resident) and writes each
// record once, whole. Each chunk is dropped from the page cache after it is read.
// Writing generates rows per chunk (synth_row or a copy out of a table), writes the payload and the
// scales ranges, and pushes them out of the page cache too (sync_file_range then DONTNEED) so that
// creating a 190 GB table does not flush everything else out of memory.
#include "host/checkpoint.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/units.hpp"
#include "sys/file.hpp"
#include "sys/owner.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxTextInMessage = 80;
constexpr int kMaxLayers = 4096;
constexpr const char* kGeneratorSynthRow = "synth_row";

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

// Untrusted text made safe for a one-line message: control and non-ASCII bytes become '?', long text
// is cut.
std::string printable(std::string_view s) {
  std::string out;
  const size_t n = std::min(s.size(), kMaxTextInMessage);
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.push_back(c >= 0x20 && c < 0x7F ? static_cast<char>(c) : '?');
  }
  if (s.size() > n) out += "...";
  return out;
}

// "an array", "a number", ... for messages.
std::string a_type(const json& j) {
  switch (j.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return std::string("a ") + j.type_name();
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <typename T>
std::string list_text(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 8 && v.size() > 10) {
      s += ", ... (" + std::to_string(v.size()) + " entries)";
      break;
    }
    s += (i ? ", " : "") + std::to_string(v[i]);
  }
  return s + "]";
}

// Depth of [ and { nesting outside strings, checked before parsing so that no parser or destructor
// recursion depends on the input. For a prefix of valid JSON this is the parser's depth exactly; the
// parser stops at the first invalid byte, so the bound holds for invalid input too.
bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- safetensors tensor entries ----------------------------------------------------------------

Result<SafetensorsTensor> parse_tensor_entry(const std::string& name, const json& entry, uint64_t data_bytes) {
  const std::string what = "tensor '" + printable(name) + "'";
  if (name.empty()) return invalid("a tensor has an empty name");
  if (!entry.is_object())
    return invalid(what + ": expected an object with dtype, shape and data_offsets, got " + a_type(entry));
  SafetensorsTensor t;
  t.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return invalid(what + ": field dtype is missing");
  if (!dtype_it->is_string())
    return invalid(what + ": field dtype is " + a_type(*dtype_it) + ", expected a string");
  t.dtype = dtype_it->get<std::string>();
  const int elem_bytes = safetensors_dtype_bytes(t.dtype);
  if (elem_bytes == 0) return invalid(what + ": dtype '" + printable(t.dtype) + "' is not a safetensors dtype");

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return invalid(what + ": field shape is missing");
  if (!shape_it->is_array())
    return invalid(what + ": field shape is " + a_type(*shape_it) + ", expected an array");
  unsigned __int128 elements = 1;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& dim = (*shape_it)[i];
    if (!dim.is_number_unsigned())
      return invalid(what + ": shape[" + std::to_string(i) + "] is not a non-negative integer");
    const uint64_t v = dim.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid(what + ": shape[" + std::to_string(i) + "] = " + std::to_string(v) + " is too large");
    t.shape.push_back(static_cast<int64_t>(v));
    elements *= v;
    if (elements > std::numeric_limits<uint64_t>::max())  // saturate: the byte check below fails
      elements = static_cast<unsigned __int128>(std::numeric_limits<uint64_t>::max()) + 1;
  }

  const auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) return invalid(what + ": field data_offsets is missing");
  if (!off_it->is_array() || off_it->size() != 2)
    return invalid(what + ": field data_offsets must be an array [begin, end]");
  for (int i = 0; i < 2; ++i)
    if (!(*off_it)[static_cast<size_t>(i)].is_number_unsigned())
      return invalid(what + ": data_offsets[" + std::to_string(i) + "] is not a non-negative integer");
  t.begin = (*off_it)[size_t{0}].get<uint64_t>();
  t.end = (*off_it)[size_t{1}].get<uint64_t>();
  if (t.begin > t.end)
    return invalid(what + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                   "] has begin > end");
  if (t.end > data_bytes)
    return invalid(what + ": data_offsets end " + std::to_string(t.end) + " is past the end of the data section (" +
                   std::to_string(data_bytes) + " bytes; truncated file?)");
  const unsigned __int128 want = elements * static_cast<unsigned>(elem_bytes);
  if (want != t.end - t.begin)
    return invalid(what + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " +
                   std::to_string(t.end - t.begin) + " bytes but dtype " + t.dtype + " shape " +
                   shape_text(t.shape) + " needs " +
                   (want > std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64")
                                                                : std::to_string(static_cast<uint64_t>(want))));
  return t;
}

Result<SafetensorsHeader> parse_header_impl(std::span<const uint8_t> bytes, uint64_t file_size) {
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t n, parse_safetensors_header_length(bytes, file_size));
  if (bytes.size() - 8 < n)
    return invalid("header truncated: " + std::to_string(bytes.size() - 8) + " of its " + std::to_string(n) +
                   " bytes are present");
  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_offset = 8 + n;
  h.data_bytes = file_size - h.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (!json_depth_within(text, kMaxJsonDepth))
    return invalid("header: JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");

  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return invalid("header is not valid JSON (error at byte " + std::to_string(e.byte) + " of " + std::to_string(n) +
                   "): " + printable(e.what()));
  }
  if (!j.is_object()) return invalid("header is " + a_type(j) + ", expected a JSON object");

  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return invalid("__metadata__ is " + a_type(value) + ", expected an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return invalid("__metadata__." + printable(mk) + " is " + a_type(mv) + ", expected a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    ENGRAM_ASSIGN_OR_RETURN(SafetensorsTensor t, parse_tensor_entry(key, value, h.data_bytes));
    h.tensors.push_back(std::move(t));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  // Sorted by begin, a non-empty range overlaps an earlier one exactly when it starts before the
  // largest end seen so far. Empty tensors occupy no bytes and overlap nothing.
  const SafetensorsTensor* reach = nullptr;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (reach && t.begin < reach->end)
      return invalid("tensor '" + printable(t.name) + "': data_offsets [" + std::to_string(t.begin) + ", " +
                     std::to_string(t.end) + "] overlap those of tensor '" + printable(reach->name) + "' [" +
                     std::to_string(reach->begin) + ", " + std::to_string(reach->end) + "]");
    if (!reach || t.end > reach->end) reach = &t;
  }
  return h;
}

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

  static Result<int64_t> as_int(const json& v, const std::string& field, int64_t lo, int64_t hi) {
    int64_t x;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return out_of_range(field, std::to_string(u), lo, hi);
      x = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else {
      return invalid(field + ": expected an integer, got " + a_type(v));
    }
    if (x < lo || x > hi) return out_of_range(field, std::to_string(x), lo, hi);
    return x;
  }

  static Result<std::vector<int64_t>> as_int_list(const json& v, const std::string& field, int64_t lo, int64_t hi,
                                                  size_t max_len) {
    if (!v.is_array()) return invalid(field + ": expected an array of integers, got " + a_type(v));
    if (v.size() > max_len)
      return invalid(field + ": " + std::to_string(v.size()) + " entries, at most " + std::to_string(max_len));
    std::vector<int64_t> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      ENGRAM_ASSIGN_OR_RETURN(const int64_t x, as_int(v[i], field + "[" + std::to_string(i) + "]", lo, hi));
      out.push_back(x);
    }
    return out;
  }

  Result<int64_t> int_field(const std::string& key, int64_t lo, int64_t hi) const {
    ENGRAM_ASSIGN_OR_RETURN(const json v, value(key, true));
    return as_int(v, "__metadata__." + key, lo, hi);
  }

 private:
  static Status out_of_range(const std::string& field, const std::string& v, int64_t lo, int64_t hi) {
    return invalid(field + " = " + v + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const SafetensorsHeader& h_;
};

Status check_layer_tensor(const SafetensorsHeader& h, const std::string& name, const char* dtype, int64_t rows,
                          int64_t cols) {
  const SafetensorsTensor* t = h.find(name);
  if (!t) return invalid("tensor " + name + " is missing");
  if (t->dtype != dtype) return invalid("tensor " + name + ": dtype " + t->dtype + ", expected " + dtype);
  const std::vector<int64_t> want = {rows, cols};
  if (t->shape != want)
    return invalid("tensor " + name + ": shape " + shape_text(t->shape) + ", expected [rows, " +
                   (std::string(dtype) == "U8" ? "d/32" : "d") + "] = " + shape_text(want));
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
                          MetaReader::as_int_list(ids, "__metadata__.layer_ids", 0, 1 << 20, kMaxLayers));
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
                          MetaReader::as_int_list(vocab, "__metadata__.vocab_size_per_order", 2, int64_t{1} << 40, 15));
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
                            MetaReader::as_int_list(hr[li], field, 2, int64_t{1} << 41, 15 * 1024));
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

// ---- progress ----------------------------------------------------------------------------------

std::string duration_text(double s) {
  char buf[32];
  if (!(s >= 0) || s > 1e7) return "n/a";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

class ProgressReporter {
 public:
  ProgressReporter(const char* phase, std::string label, int64_t total_bytes, ProgressDisplay display,
                   const CheckpointProgressFn& fn)
      : phase_(phase),
        label_(std::move(label)),
        total_(total_bytes),
        fn_(fn),
        terminal_(display == ProgressDisplay::kOn ||
                  (display == ProgressDisplay::kAuto && sys::is_terminal(2))),
        start_(Clock::now()),
        last_print_(start_) {}

  void update(int64_t done, bool final) {
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (fn_) fn_(CheckpointProgress{phase_, done, total_, elapsed});
    if (!terminal_) return;
    if (!final && now - last_print_ < std::chrono::milliseconds(200)) return;
    last_print_ = now;
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
    std::string line = std::string("\r") + phase_ + " " + label_ + ": " + format_bytes(done) + " / " +
                       format_bytes(total_) + " (" +
                       std::to_string(total_ > 0 ? static_cast<int>(100.0 * static_cast<double>(done) /
                                                                     static_cast<double>(total_))
                                                 : 100) +
                       "%), " + format_gbps(static_cast<double>(done), elapsed);
    if (final) line += ", " + duration_text(elapsed) + "\x1b[K\n";
    else line += ", ETA " + (rate > 0 ? duration_text(static_cast<double>(total_ - done) / rate) : "n/a") + "\x1b[K";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  const char* phase_;
  std::string label_;
  int64_t total_;
  const CheckpointProgressFn& fn_;
  bool terminal_;
  Clock::time_point start_, last_print_;
};

// ---- chunked parallel transfer -----------------------------------------------------------------

int resolve_threads(int requested, size_t items) {
  int t = requested > 0 ? requested : static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(t), items)));
}

// Runs work(i, scratch) for every item i on `threads` threads (each with its own scratch buffer of
// scratch_bytes), reporting progress from the calling thread; stops at the first error and returns it.
Status run_chunked(size_t n_items, int threads, size_t scratch_bytes, const std::vector<int64_t>& item_bytes,
                   ProgressReporter& progress, const std::function<Status(size_t, uint8_t*)>& work) {
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  Status first_error;
  auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lk(mu);
    if (first_error.is_ok()) first_error = std::move(s);
    failed = true;
  };
  auto worker = [&] {
    std::unique_ptr<uint8_t[]> scratch;
    if (scratch_bytes > 0) {
      scratch.reset(new (std::nothrow) uint8_t[scratch_bytes]);
      if (!scratch) fail(Status(Code::kOutOfMemory, "checkpoint chunk buffer of " +
                                                        format_bytes(static_cast<int64_t>(scratch_bytes))));
    }
    while (!failed.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= n_items) break;
      Status s = work(i, scratch.get());
      if (!s.is_ok()) {
        fail(std::move(s));
        break;
      }
      done.fetch_add(item_bytes[i], std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lk(mu);
    --running;
    cv.notify_all();
  };

  std::vector<std::thread> pool;
  try {
    for (int t = 0; t < threads; ++t) {
      {
        std::lock_guard<std::mutex> lk(mu);
        ++running;
      }
      try {
        pool.emplace_back(worker);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        --running;
        throw;
      }
    }
  } catch (const std::exception& e) {
    fail(Status(Code::kOutOfMemory, std::string("starting checkpoint threads: ") + e.what()));
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    while (running > 0) {
      cv.wait_for(lk, std::chrono::milliseconds(100));
      lk.unlock();
      progress.update(done.load(), false);
      lk.lock();
    }
  }
  for (auto& th : pool) th.join();
  if (first_error.is_ok()) progress.update(done.load(), true);
  return first_error;
}

// ---- load --------------------------------------------------------------------------------------

Result<CheckpointInfo> read_info_from(const sys::File& f) {
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(f));
  const uint64_t file_size = static_cast<uint64_t>(size);
  uint8_t first[8] = {};
  const size_t first_len = static_cast<size_t>(std::min<uint64_t>(8, file_size));
  ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, first, first_len, 0));
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t n, parse_safetensors_header_length({first, first_len}, file_size));
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(8 + n);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "header buffer of " + std::to_string(n) + " bytes");
  }
  ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, bytes.data(), bytes.size(), 0));
  ENGRAM_ASSIGN_OR_RETURN(const SafetensorsHeader h, parse_safetensors_header(bytes, file_size));
  ENGRAM_ASSIGN_OR_RETURN(CheckpointInfo info, decode_checkpoint_header(h));
  info.path = f.path();
  info.file_bytes = size;
  return info;
}

Status check_spans(const EngramLayout& layout, std::span<const TableSpan> spans) {
  if (static_cast<int>(spans.size()) != layout.n_layers())
    return invalid(std::to_string(spans.size()) + " table spans for " + std::to_string(layout.n_layers()) +
                   " Engram layers");
  for (int i = 0; i < layout.n_layers(); ++i) {
    const TableSpan& s = spans[static_cast<size_t>(i)];
    const std::string what = "table span of Engram layer " + std::to_string(layout.layer_ids[i]);
    if (s.rows != layout.rows(i) || s.d != layout.d || s.format != layout.format)
      return invalid(what + ": " + std::to_string(s.rows) + " rows, d " + std::to_string(s.d) + ", " +
                     row_format_name(s.format) + "; the layout needs " + std::to_string(layout.rows(i)) + " rows, d " +
                     std::to_string(layout.d) + ", " + row_format_name(layout.format));
    if (!s.data || (s.format == RowFormat::kSplit && !s.scales))
      return invalid(what + ": null base pointer");
    const int64_t want_stride = s.format == RowFormat::kFused ? EngramLayout::fused_record_bytes(s.d) : s.d;
    if (s.stride_bytes != want_stride)
      return invalid(what + ": stride " + std::to_string(s.stride_bytes) + " bytes, expected " +
                     std::to_string(want_stride));
  }
  return Status::ok();
}

// Split tables: one item per chunk of one tensor, read straight into the table. Fused tables: one item
// per chunk of rows, covering both tensors, so each record is written once, whole (payload, scales,
// zero padding), from a small bounce buffer that stays in the core's cache (kFusedBounceBytes).
struct LoadItem {
  int layer;
  enum Kind { kPayload, kScales, kRows } kind;
  int64_t row_lo, row_hi;
};

constexpr int64_t kFusedBounceBytes = int64_t{1} << 20;

Status load_impl(const std::string& path, const EngramLayout& layout, std::span<const TableSpan> spans,
                 const LoadOptions& opt) {
  if (layout.head_offsets.size() != layout.layer_ids.size()) return invalid("the requested layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_spans(layout, spans));
  ENGRAM_ASSIGN_OR_RETURN(const sys::File f, sys::open_read(path));
  ENGRAM_ASSIGN_OR_RETURN(const CheckpointInfo info, read_info_from(f));
  ENGRAM_RETURN_IF_ERROR(check_layout_matches(info.layout, layout));

  const int d = layout.d;
  const int64_t sd = d / 32;
  const bool fused = layout.format == RowFormat::kFused;
  const int64_t chunk = std::max<int64_t>(opt.chunk_bytes, 1);
  // File offsets of each layer's payload and scales tensors.
  std::vector<int64_t> payload_off, scales_off;
  for (int id : layout.layer_ids) {
    payload_off.push_back(static_cast<int64_t>(info.header.data_offset + info.header.find(checkpoint_payload_name(id))->begin));
    scales_off.push_back(static_cast<int64_t>(info.header.data_offset + info.header.find(checkpoint_scales_name(id))->begin));
  }
  std::vector<LoadItem> items;
  std::vector<int64_t> item_bytes;
  int64_t total = 0;
  auto add_items = [&](int li, LoadItem::Kind kind, int64_t row_bytes) {
    const int64_t rows_per = std::max<int64_t>(1, chunk / row_bytes);
    for (int64_t lo = 0; lo < layout.rows(li); lo += rows_per) {
      const int64_t hi = std::min(layout.rows(li), lo + rows_per);
      items.push_back({li, kind, lo, hi});
      item_bytes.push_back((hi - lo) * row_bytes);
      total += (hi - lo) * row_bytes;
    }
  };
  for (int li = 0; li < layout.n_layers(); ++li) {
    if (fused) {
      add_items(li, LoadItem::kRows, d + sd);
    } else {
      add_items(li, LoadItem::kPayload, d);
      add_items(li, LoadItem::kScales, sd);
    }
  }
  const int64_t bounce_rows = std::max<int64_t>(1, kFusedBounceBytes / (d + sd));
  const int threads = resolve_threads(opt.threads, items.size());
  if (opt.drop_page_cache) (void)sys::fadvise(f, 0, 0, sys::Advice::kSequential);
  ProgressReporter progress("load", path, total, opt.display, opt.on_progress);

  const Status s = run_chunked(
      items.size(), threads, fused ? static_cast<size_t>(bounce_rows * (d + sd)) : 0, item_bytes, progress,
      [&](size_t i, uint8_t* bounce) -> Status {
        const LoadItem& it = items[i];
        const TableSpan& sp = spans[static_cast<size_t>(it.layer)];
        const int64_t n = it.row_hi - it.row_lo;
        const int64_t p_off = payload_off[static_cast<size_t>(it.layer)] + it.row_lo * d;
        const int64_t s_off = scales_off[static_cast<size_t>(it.layer)] + it.row_lo * sd;
        if (it.kind == LoadItem::kPayload) {
          ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, sp.data + it.row_lo * d, static_cast<size_t>(n * d), p_off));
        } else if (it.kind == LoadItem::kScales) {
          ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, sp.scales + it.row_lo * sd, static_cast<size_t>(n * sd), s_off));
        } else {
          const size_t pad = static_cast<size_t>(sp.stride_bytes - d - sd);
          for (int64_t lo = it.row_lo; lo < it.row_hi; lo += bounce_rows) {
            const int64_t m = std::min(bounce_rows, it.row_hi - lo);
            uint8_t* bp = bounce;
            uint8_t* bs = bounce + m * d;
            ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, bp, static_cast<size_t>(m * d), p_off + (lo - it.row_lo) * d));
            ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, bs, static_cast<size_t>(m * sd), s_off + (lo - it.row_lo) * sd));
            for (int64_t r = 0; r < m; ++r) {
              uint8_t* rec = sp.payload_of(lo + r);
              std::memcpy(rec, bp + r * d, static_cast<size_t>(d));
              std::memcpy(rec + d, bs + r * sd, static_cast<size_t>(sd));
              if (pad) std::memset(rec + d + sd, 0, pad);
            }
          }
        }
        // Advisory: a failure only leaves pages cached, the data is already correct.
        if (opt.drop_page_cache) {
          if (it.kind != LoadItem::kScales) (void)sys::fadvise(f, p_off, n * d, sys::Advice::kDontNeed);
          if (it.kind != LoadItem::kPayload) (void)sys::fadvise(f, s_off, n * sd, sys::Advice::kDontNeed);
        }
        return Status::ok();
      });
  // Chunk edges leave partial pages behind; one last pass drops them too.
  if (opt.drop_page_cache) (void)sys::fadvise(f, 0, 0, sys::Advice::kDontNeed);
  return s;
}

// ---- write -------------------------------------------------------------------------------------

using RowFiller = std::function<void(int layer, int64_t row_lo, int64_t row_hi, uint8_t* payload, uint8_t* scales)>;

struct WriteItem {
  int layer;
  int64_t row_lo, row_hi;
};

std::string temp_name_for(const std::filesystem::path& target) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  return (dir / ("." + target.filename().string() + ".tmp-" + hex)).string();
}

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

  // Header: tensors laid out back to back, payload then scales per layer (no holes, as strict readers
  // expect); the JSON is padded with spaces so the data section starts on a 4 KiB boundary.
  const int d = layout.d;
  json header = json::object();
  std::vector<uint64_t> payload_begin, scales_begin;
  uint64_t offset = 0;
  for (int li = 0; li < layout.n_layers(); ++li) {
    const int64_t rows = layout.rows(li);
    const int id = layout.layer_ids[li];
    payload_begin.push_back(offset);
    header[checkpoint_payload_name(id)] = {{"dtype", "F8_E4M3"},
                                           {"shape", {rows, d}},
                                           {"data_offsets", {offset, offset + static_cast<uint64_t>(rows * d)}}};
    offset += static_cast<uint64_t>(rows * d);
    scales_begin.push_back(offset);
    header[checkpoint_scales_name(id)] = {{"dtype", "U8"},
                                          {"shape", {rows, d / 32}},
                                          {"data_offsets", {offset, offset + static_cast<uint64_t>(rows * (d / 32))}}};
    offset += static_cast<uint64_t>(rows * (d / 32));
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  const size_t kAlign = 4096;
  text.append((kAlign - (8 + text.size()) % kAlign) % kAlign, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes)
    return invalid("header of " + std::to_string(text.size()) + " bytes exceeds the safetensors limit");
  std::vector<uint8_t> head(8 + text.size());
  for (int i = 0; i < 8; ++i) head[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::memcpy(head.data() + 8, text.data(), text.size());
  const int64_t data_offset = static_cast<int64_t>(head.size());
  const int64_t total = static_cast<int64_t>(offset);

  // Temp file next to the target, removed on every error path (and on a cancel: SIGINT / SIGTERM).
  // Its owner record (sys/owner.hpp) comes first, so that a writer killed by SIGKILL leaves a temp
  // file the next sweep of this directory (host/sweep.hpp) can tell from a live writer's.
  std::string tmp;
  sys::File f;
  for (int attempt = 0;; ++attempt) {
    tmp = temp_name_for(target);
    Status rec = sys::write_owner_record(tmp);
    if (!rec.is_ok()) {
      if (rec.sys_error() == EEXIST && attempt < 8) continue;
      return rec;
    }
    auto r = sys::create_new(tmp);
    if (r.is_ok()) {
      f = std::move(r).value();
      break;
    }
    (void)sys::remove_owner_record(tmp);
    if (r.status().sys_error() != EEXIST || attempt >= 8) return r.status();
  }
  bool committed = false;
  struct Cleanup {
    sys::File& f;
    const std::string& tmp;
    bool& committed;
    ~Cleanup() {
      if (!committed) {
        (void)f.close();
        (void)sys::unlink_path(tmp);
      }
      (void)sys::remove_owner_record(tmp);
    }
  } cleanup{f, tmp, committed};

  {
    const Status s = sys::allocate_file(f, data_offset + total);
    if (!s.is_ok() && s.code() != Code::kUnsupported) return s;  // ENOSPC now rather than midway
  }
  ENGRAM_RETURN_IF_ERROR(sys::pwrite_full(f, head.data(), head.size(), 0));

  const int64_t row_bytes = d + d / 32;
  const int64_t rows_per = std::max<int64_t>(1, std::max<int64_t>(opt.chunk_bytes, 1) / row_bytes);
  std::vector<WriteItem> items;
  std::vector<int64_t> item_bytes;
  for (int li = 0; li < layout.n_layers(); ++li)
    for (int64_t lo = 0; lo < layout.rows(li); lo += rows_per) {
      const int64_t hi = std::min(layout.rows(li), lo + rows_per);
      items.push_back({li, lo, hi});
      item_bytes.push_back((hi - lo) * row_bytes);
    }
  const int64_t max_rows = std::min<int64_t>(rows_per, [&] {
    int64_t m = 0;
    for (int li = 0; li < layout.n_layers(); ++li) m = std::max(m, layout.rows(li));
    return m;
  }());
  const int threads = resolve_threads(opt.threads, items.size());
  ProgressReporter progress("write", path, total, opt.display, opt.on_progress);

  const Status written = run_chunked(
      items.size(), threads, static_cast<size_t>(max_rows * row_bytes), item_bytes, progress,
      [&](size_t i, uint8_t* scratch) -> Status {
        if (opt.cancelled && opt.cancelled())
          return Status(Code::kIo, "write of " + path + " cancelled after " + std::to_string(i) + " of " +
                                       std::to_string(items.size()) + " chunks; the partial temp file is removed",
                        4 /* EINTR */);
        const WriteItem& it = items[i];
        const int64_t n = it.row_hi - it.row_lo;
        uint8_t* payload = scratch;
        uint8_t* scales = scratch + n * d;
        fill(it.layer, it.row_lo, it.row_hi, payload, scales);
        const int64_t p_off = data_offset + static_cast<int64_t>(payload_begin[static_cast<size_t>(it.layer)]) + it.row_lo * d;
        const int64_t s_off =
            data_offset + static_cast<int64_t>(scales_begin[static_cast<size_t>(it.layer)]) + it.row_lo * (d / 32);
        ENGRAM_RETURN_IF_ERROR(sys::pwrite_full(f, payload, static_cast<size_t>(n * d), p_off));
        ENGRAM_RETURN_IF_ERROR(sys::pwrite_full(f, scales, static_cast<size_t>(n * (d / 32)), s_off));
        if (opt.drop_page_cache) {
          // Advisory: written pages are dirty until written back, and DONTNEED skips dirty pages.
          (void)sys::sync_range(f, p_off, n * d, true);
          (void)sys::sync_range(f, s_off, n * (d / 32), true);
          (void)sys::fadvise(f, p_off, n * d, sys::Advice::kDontNeed);
          (void)sys::fadvise(f, s_off, n * (d / 32), sys::Advice::kDontNeed);
        }
        return Status::ok();
      });
  if (!written.is_ok()) return written;
  ENGRAM_RETURN_IF_ERROR(sys::fsync(f));
  ENGRAM_RETURN_IF_ERROR(f.close());
  ENGRAM_RETURN_IF_ERROR(sys::rename_path(tmp, path, opt.overwrite));
  committed = true;
  // The data is durable (fsync above); this makes the new name durable too. A failure here is not an
  // error of the checkpoint, which is complete under its name.
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  if (auto df = sys::open_directory(dir.string()); df.is_ok()) (void)sys::fsync(*df);
  return Status::ok();
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

int safetensors_dtype_bytes(std::string_view dtype) {
  static constexpr std::pair<std::string_view, int> kTypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8}, {"I64", 8},
      {"U64", 8}};
  for (const auto& [name, bytes] : kTypes)
    if (name == dtype) return bytes;
  return 0;
}

const SafetensorsTensor* SafetensorsHeader::find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<uint64_t> parse_safetensors_header_length(std::span<const uint8_t> first_bytes, uint64_t file_size) {
  if (file_size < 8)
    return invalid("file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length (truncated)");
  if (first_bytes.size() < 8)
    return invalid("header length: only " + std::to_string(first_bytes.size()) + " of its 8 bytes are present");
  const uint64_t n = load_le64(first_bytes.data());
  if (n == 0) return invalid("header length is 0 (expected the byte length of the JSON header)");
  if (n > kSafetensorsMaxHeaderBytes)
    return invalid("header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (100 MB)");
  if (n > file_size - 8)
    return invalid("header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes; truncated, or not a safetensors file)");
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size) {
  try {
    return parse_header_impl(bytes, file_size);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "parsing a safetensors header of " + std::to_string(bytes.size()) + " bytes");
  } catch (const std::exception& e) {
    return invalid("header: " + printable(e.what()));
  }
}

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
  std::vector<TableSpan> spans;
  for (int i = 0; i < table.n_layers(); ++i) spans.push_back(table.span(i));
  return load_checkpoint(path, table.layout(), spans, options);
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
