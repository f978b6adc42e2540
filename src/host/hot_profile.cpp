// Hot-row profile files and the counting behind `engram profile` (see hot_profile.hpp). Counting collects one
// layer's ids of every counted document into one vector and sorts it (run lengths are the counts): no hash map of
// tens of millions of entries, and the order is deterministic. Ids always come from NgramHasher::hash, so a profile
// counts exactly the ids a lookup of the same text reads.
#include "host/hot_profile.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string_view>

#include "core/splitmix.hpp"
#include "host/json_text.hpp"
#include "sys/file.hpp"

namespace engram::host {

using json = nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "hot profiles are little-endian int64");

Status bad(const std::string& path, const std::string& m) { return Status(Code::kInvalidArgument, path + ": " + m); }

// The body after the header line: `size` bytes, read in order by `read(dst, n, at)` (at = offset in the body).
struct Body {
  int64_t size = 0;
  std::function<Status(char* dst, size_t n, int64_t at)> read;
};

// The rules of hot_profile.hpp for one layer's records.
Status check_layer(const std::string& where, const HotProfileLayer& l) {
  if (l.rows < 1) return bad(where, "rows " + std::to_string(l.rows) + " must be >= 1");
  if (l.distinct < static_cast<int64_t>(l.id_counts.size()))
    return bad(where, "distinct " + std::to_string(l.distinct) + " < " + std::to_string(l.id_counts.size()) + " records");
  // A profile holds millions of records: the messages are built only for the record that fails.
  auto rec = [](size_t i) { return "record " + std::to_string(i); };
  int64_t sum = 0;
  for (size_t i = 0; i < l.id_counts.size(); ++i) {
    const auto [id, c] = l.id_counts[i];
    if (id < 0 || id >= l.rows) return bad(where, rec(i) + ": id " + std::to_string(id) + " outside [0, " + std::to_string(l.rows) + ")");
    if (c < 1) return bad(where, rec(i) + ": count " + std::to_string(c) + " must be >= 1");
    if (i > 0) {
      const auto [pid, pc] = l.id_counts[i - 1];
      if (c > pc || (c == pc && id <= pid))
        return bad(where, rec(i) + ": not hottest first (count " + std::to_string(c) + " id " + std::to_string(id) +
                              " after count " + std::to_string(pc) + " id " + std::to_string(pid) +
                              "; order is count descending, then id ascending)");
    }
    if (c > std::numeric_limits<int64_t>::max() - sum) return bad(where, rec(i) + ": counts overflow");
    sum += c;
  }
  if (sum > l.lookups)
    return bad(where, "records count " + std::to_string(sum) + " lookups but the header says " + std::to_string(l.lookups));
  // Equal counts are ordered by id, so a duplicate id would sit next to itself only within one count; across
  // counts it needs a set check: one bit per row of the table (ids are in [0, rows) by now) when that is at most
  // 8 bytes per record, else a sorted copy of the ids.
  const size_t n = l.id_counts.size();
  const uint64_t rows = static_cast<uint64_t>(l.rows);
  if (rows / 64 + 1 <= std::max<uint64_t>(n, 1 << 20)) {
    std::vector<uint64_t> seen(static_cast<size_t>(rows / 64 + 1), 0);
    for (const auto& p : l.id_counts) {
      const uint64_t id = static_cast<uint64_t>(p.first), bit = uint64_t{1} << (id % 64);
      uint64_t& word = seen[static_cast<size_t>(id / 64)];
      if (word & bit) return bad(where, "id " + std::to_string(p.first) + " appears twice");
      word |= bit;
    }
    return Status::ok();
  }
  std::vector<int64_t> ids;
  ids.reserve(n);
  for (const auto& p : l.id_counts) ids.push_back(p.first);
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  if (dup != ids.end()) return bad(where, "id " + std::to_string(*dup) + " appears twice");
  return Status::ok();
}

}  // namespace

int HotProfile::layer_index(int layer_id) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].layer_id == layer_id) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> HotProfile::hot_ids(int li) const {
  std::vector<int64_t> out;
  if (li < 0 || li >= static_cast<int>(layers.size())) return out;
  out.reserve(layers[static_cast<size_t>(li)].id_counts.size());
  for (const auto& p : layers[static_cast<size_t>(li)].id_counts) out.push_back(p.first);
  return out;
}

double HotProfile::coverage_of_top(int li, int64_t top) const {
  if (li < 0 || li >= static_cast<int>(layers.size())) return std::numeric_limits<double>::quiet_NaN();
  const auto& l = layers[static_cast<size_t>(li)];
  if (l.lookups <= 0) return std::numeric_limits<double>::quiet_NaN();
  int64_t sum = 0;
  const size_t n = std::min(l.id_counts.size(), static_cast<size_t>(std::max<int64_t>(top, 0)));
  for (size_t i = 0; i < n; ++i) sum += l.id_counts[i].second;
  return static_cast<double>(sum) / static_cast<double>(l.lookups);
}

Status check_hot_profile_layout(const HotProfile& p, const EngramLayout& layout) {
  std::string mine, theirs;
  bool same = static_cast<int>(p.layers.size()) == layout.n_layers() && p.heads == layout.heads();
  for (int i = 0; same && i < layout.n_layers(); ++i)
    same = p.layers[static_cast<size_t>(i)].layer_id == layout.layer_ids[static_cast<size_t>(i)] &&
           p.layers[static_cast<size_t>(i)].rows == layout.rows(i);
  if (same) return Status::ok();
  for (const auto& l : p.layers) mine += " " + std::to_string(l.layer_id) + ":" + std::to_string(l.rows);
  for (int i = 0; i < layout.n_layers(); ++i)
    theirs += " " + std::to_string(layout.layer_ids[static_cast<size_t>(i)]) + ":" + std::to_string(layout.rows(i));
  return Status(Code::kInvalidArgument, "hot profile of layout '" + p.layout_name + "' (" + std::to_string(p.heads) +
                                            " heads, layer:rows" + mine + ") does not match layout '" + layout.name +
                                            "' (" + std::to_string(layout.heads()) + " heads, layer:rows" + theirs + ")");
}

namespace {
Result<HotProfile> parse_profile(const std::string& path, std::string_view header, const Body& body);
}  // namespace

// The file is read straight into the records (no copy of the whole file): the header line first, in growing
// pieces, then the body in the order parse_profile asks for it.
Result<HotProfile> read_hot_profile(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(sys::File f, sys::open_read(path));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(f));
  std::string head;
  size_t nl = std::string::npos;
  for (int64_t at = 0; nl == std::string::npos && at < size;) {
    const int64_t n = std::min<int64_t>(size - at, std::max<int64_t>(int64_t{64} << 10, at));
    head.resize(static_cast<size_t>(at + n));
    ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, head.data() + at, static_cast<size_t>(n), at));
    nl = head.find('\n', static_cast<size_t>(at));
    at += n;
  }
  if (nl == std::string::npos) return bad(path, "no header line (not an engram-hot-profile file, or truncated)");
  const int64_t body_at = static_cast<int64_t>(nl) + 1;
  Body body;
  body.size = size - body_at;
  body.read = [&f, body_at](char* dst, size_t n, int64_t at) { return sys::pread_full(f, dst, n, body_at + at); };
  return parse_profile(path, std::string_view(head).substr(0, nl), body);
}

Result<HotProfile> parse_hot_profile(const std::string& path, std::string_view bytes) {
  const size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos) return bad(path, "no header line (not an engram-hot-profile file, or truncated)");
  const std::string_view rest = bytes.substr(nl + 1);
  Body body;
  body.size = static_cast<int64_t>(rest.size());
  body.read = [rest](char* dst, size_t n, int64_t at) {
    std::memcpy(dst, rest.data() + at, n);
    return Status::ok();
  };
  return parse_profile(path, bytes.substr(0, nl), body);
}

namespace {

Result<HotProfile> parse_profile(const std::string& path, std::string_view header, const Body& body) {
  json h = json::parse(header.begin(), header.end(), nullptr, false);
  if (h.is_discarded() || !h.is_object()) return bad(path, "header line is not a JSON object");
  const auto fmt = h.find("format");
  if (fmt == h.end() || !fmt->is_string() || fmt->get<std::string>() != kHotProfileFormat)
    return bad(path, std::string("not an '") + kHotProfileFormat + "' file (format field is " +
                         (fmt == h.end() ? std::string("missing") : fmt->dump(-1, ' ', false, json::error_handler_t::replace)) + ")");
  ENGRAM_ASSIGN_OR_RETURN(const int64_t version, json_field<int64_t>(h, path, "format_version"));
  if (version != kHotProfileVersion)
    return bad(path, "unsupported format_version " + std::to_string(version) + " (expected " + std::to_string(kHotProfileVersion) + ")");
  HotProfile p;
  ENGRAM_ASSIGN_OR_RETURN(const json lj, json_field<json>(h, path, "layout"));
  ENGRAM_ASSIGN_OR_RETURN(p.layout_name, json_field<std::string>(lj, path + " layout", "name"));
  ENGRAM_ASSIGN_OR_RETURN(p.heads, json_field<int>(lj, path + " layout", "heads"));
  ENGRAM_ASSIGN_OR_RETURN(p.seed, json_field<int64_t>(h, path, "seed"));
  ENGRAM_ASSIGN_OR_RETURN(p.seq_len, json_field<int64_t>(h, path, "seq_len"));
  ENGRAM_ASSIGN_OR_RETURN(p.tokens, json_field<int64_t>(h, path, "tokens"));
  if (h.contains("info")) p.info = h["info"];
  ENGRAM_ASSIGN_OR_RETURN(const json sj, json_field<json>(h, path, "sources"));
  if (!sj.is_array()) return bad(path, "'sources' is not an array");
  for (size_t i = 0; i < sj.size(); ++i) {
    const std::string w = path + " sources[" + std::to_string(i) + "]";
    HotProfileSource s;
    ENGRAM_ASSIGN_OR_RETURN(s.path, json_field<std::string>(sj[i], w, "path"));
    ENGRAM_ASSIGN_OR_RETURN(s.tokens, json_field<int64_t>(sj[i], w, "tokens"));
    ENGRAM_ASSIGN_OR_RETURN(s.documents, json_field<int64_t>(sj[i], w, "documents"));
    p.sources.push_back(std::move(s));
  }
  ENGRAM_ASSIGN_OR_RETURN(const json layers, json_field<json>(h, path, "layers"));
  ENGRAM_ASSIGN_OR_RETURN(const json rows, json_field<json>(lj, path + " layout", "rows"));
  if (!layers.is_array() || !rows.is_array() || layers.size() != rows.size())
    return bad(path, "'layers' and 'layout.rows' must be arrays of the same length");
  // Body size first, so that a truncated file is reported as such before any record is read.
  std::vector<int64_t> entries;
  int64_t want = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string w = path + " layers[" + std::to_string(i) + "]";
    ENGRAM_ASSIGN_OR_RETURN(const int64_t e, json_field<int64_t>(layers[i], w, "entries"));
    if (e < 0 || e > (int64_t{1} << 40)) return bad(w, "entries " + std::to_string(e) + " out of range");
    entries.push_back(e);
    want += e * 16;
    // Each layer adds at most 2^44 B: stopping past 2^62 keeps the sum in range for any number of layers.
    if (want > (int64_t{1} << 62)) return bad(path, "the header announces " + std::to_string(want) + " B of records or more");
  }
  const int64_t have = body.size;
  if (have < want)
    return bad(path, "truncated: the header announces " + std::to_string(want) + " B of records, the file holds " +
                         std::to_string(have) + " B after it");
  if (have > want)
    return bad(path, std::to_string(have - want) + " B after the last record (the header announces " +
                         std::to_string(want) + " B)");
  std::vector<char> chunk;
  int64_t at = 0;  // body offset of the next record
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string w = path + " layers[" + std::to_string(i) + "]";
    HotProfileLayer l;
    ENGRAM_ASSIGN_OR_RETURN(l.layer_id, json_field<int>(layers[i], w, "layer_id"));
    ENGRAM_ASSIGN_OR_RETURN(l.lookups, json_field<int64_t>(layers[i], w, "lookups"));
    ENGRAM_ASSIGN_OR_RETURN(l.distinct, json_field<int64_t>(layers[i], w, "distinct"));
    auto layer_rows = json_integer(rows[i], "layout.rows[" + std::to_string(i) + "]", INT64_MIN, INT64_MAX);
    if (!layer_rows.is_ok()) return bad(path, layer_rows.status().message());
    l.rows = *layer_rows;
    l.id_counts.resize(static_cast<size_t>(entries[i]));
    constexpr size_t kChunkRecords = size_t{1} << 16;  // 1 MiB per read
    for (size_t k = 0; k < l.id_counts.size(); k += kChunkRecords) {
      const size_t m = std::min(kChunkRecords, l.id_counts.size() - k);
      chunk.resize(16 * m);
      ENGRAM_RETURN_IF_ERROR(body.read(chunk.data(), chunk.size(), at));
      at += static_cast<int64_t>(chunk.size());
      for (size_t r = 0; r < m; ++r) {
        std::memcpy(&l.id_counts[k + r].first, chunk.data() + 16 * r, 8);
        std::memcpy(&l.id_counts[k + r].second, chunk.data() + 16 * r + 8, 8);
      }
    }
    ENGRAM_RETURN_IF_ERROR(check_layer(w + " (layer " + std::to_string(l.layer_id) + ")", l));
    p.layers.push_back(std::move(l));
  }
  return p;
}

}  // namespace

Status write_hot_profile(const std::string& path, const HotProfile& p) {
  json rows = json::array(), layer_ids = json::array(), layers = json::array(), sources = json::array();
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    ENGRAM_RETURN_IF_ERROR(check_layer("hot profile for " + path + " layer " + std::to_string(l.layer_id), l));
    rows.push_back(l.rows);
    layer_ids.push_back(l.layer_id);
    layers.push_back({{"layer_id", l.layer_id}, {"lookups", l.lookups}, {"distinct", l.distinct},
                      {"entries", l.id_counts.size()}});
  }
  for (const auto& s : p.sources) sources.push_back({{"path", s.path}, {"tokens", s.tokens}, {"documents", s.documents}});
  const json h = {{"format", kHotProfileFormat},
                  {"format_version", kHotProfileVersion},
                  {"layout", {{"name", p.layout_name}, {"layer_ids", layer_ids}, {"heads", p.heads}, {"rows", rows}}},
                  {"seed", p.seed},
                  {"seq_len", p.seq_len},
                  {"tokens", p.tokens},
                  {"sources", sources},
                  {"layers", layers},
                  {"info", p.info.is_null() ? json::object() : p.info}};
  // dump() escapes control characters, so the header holds no raw '\n'.
  const std::string head = h.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status(Code::kIo, "cannot create " + tmp + ": " + std::strerror(errno));
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    std::vector<int64_t> buf;
    for (const auto& l : p.layers) {
      buf.resize(2 * l.id_counts.size());
      for (size_t i = 0; i < l.id_counts.size(); ++i) {
        buf[2 * i] = l.id_counts[i].first;
        buf[2 * i + 1] = l.id_counts[i].second;
      }
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 8));
    }
    f.flush();
    if (!f) {
      std::error_code rm;
      std::filesystem::remove(tmp, rm);
      return Status(Code::kIo, "write to " + tmp + " failed");
    }
  }
  // A failed rename (the path names a directory, the directory went away) leaves nothing behind.
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code rm;
    std::filesystem::remove(tmp, rm);
    return Status(Code::kIo, "rename " + tmp + " -> " + path + ": " + ec.message());
  }
  return Status::ok();
}

Result<HotProfile> compute_hot_profile(const NgramHasher& hasher, const std::vector<HotProfileInput>& inputs,
                                       const HotProfileOptions& o) {
  if (o.seq_len < 0) return Status(Code::kInvalidArgument, "seq_len " + std::to_string(o.seq_len) + " must be >= 0");
  if (o.top < 0) return Status(Code::kInvalidArgument, "top " + std::to_string(o.top) + " must be >= 0");
  if (o.min_count < 1) return Status(Code::kInvalidArgument, "min_count " + std::to_string(o.min_count) + " must be >= 1");
  const EngramLayout& layout = hasher.layout();
  const size_t heads = static_cast<size_t>(layout.heads());
  HotProfile p;
  p.layout_name = layout.name;
  p.heads = layout.heads();
  p.seq_len = o.seq_len;
  p.seed = o.seed;
  // Sequences [begin, end) of every input, as raw ids (int64 for the hasher).
  std::vector<std::pair<const TokenFile*, std::pair<int64_t, int64_t>>> seqs;
  for (const auto& in : inputs) {
    if (in.tokens == nullptr) return Status(Code::kInvalidArgument, "hot profile input without a token file");
    const TokenFile& tf = *in.tokens;
    if (tf.vocab_size != hasher.vocab_size())
      return Status(Code::kInvalidArgument, "token file " + tf.path + " has vocab size " + std::to_string(tf.vocab_size) +
                                                " but the hasher's compression table covers " + std::to_string(hasher.vocab_size()) + " ids");
    std::vector<int64_t> docs = in.documents;
    if (docs.empty())
      for (int64_t d = 0; d < static_cast<int64_t>(tf.documents.size()); ++d) docs.push_back(d);
    HotProfileSource src{tf.path, 0, 0};
    for (int64_t d : docs) {
      if (d < 0 || d >= static_cast<int64_t>(tf.documents.size()))
        return Status(Code::kInvalidArgument, tf.path + ": document " + std::to_string(d) + " out of range (" +
                                                  std::to_string(tf.documents.size()) + " documents)");
      const auto& doc = tf.documents[static_cast<size_t>(d)];
      const int64_t end = doc.first_token + doc.token_count;
      const int64_t step = o.seq_len > 0 ? o.seq_len : std::max<int64_t>(doc.token_count, 1);
      for (int64_t s = doc.first_token; s < end; s += step) seqs.push_back({&tf, {s, std::min(s + step, end)}});
      src.tokens += doc.token_count;
      ++src.documents;
    }
    p.tokens += src.tokens;
    p.sources.push_back(src);
  }
  std::vector<int64_t> all, raw, out;
  for (int li = 0; li < layout.n_layers(); ++li) {
    all.clear();
    all.reserve(static_cast<size_t>(p.tokens) * heads);
    for (const auto& [tf, r] : seqs) {
      raw.assign(tf->ids.begin() + r.first, tf->ids.begin() + r.second);
      out.resize(raw.size() * heads);
      ENGRAM_RETURN_IF_ERROR(hasher.hash(raw, li, out).with_context(tf->path));
      all.insert(all.end(), out.begin(), out.end());
    }
    std::sort(all.begin(), all.end());
    HotProfileLayer l;
    l.layer_id = layout.layer_ids[static_cast<size_t>(li)];
    l.rows = layout.rows(li);
    l.lookups = static_cast<int64_t>(all.size());
    for (size_t i = 0; i < all.size();) {
      size_t j = i;
      while (j < all.size() && all[j] == all[i]) ++j;
      ++l.distinct;
      const int64_t c = static_cast<int64_t>(j - i);
      if (c >= o.min_count) l.id_counts.emplace_back(all[i], c);
      i = j;
    }
    // Ids ascending already: a stable sort by count keeps ties by id ascending.
    std::stable_sort(l.id_counts.begin(), l.id_counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (o.top > 0 && static_cast<int64_t>(l.id_counts.size()) > o.top) l.id_counts.resize(static_cast<size_t>(o.top));
    p.layers.push_back(std::move(l));
  }
  return p;
}

std::vector<int64_t> holdout_documents(const TokenFile& tokens, double fraction, uint64_t seed) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < tokens.documents.size(); ++d) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + d;
    for (unsigned char ch : tokens.documents[d].source) s = (s ^ ch) * 0x100000001B3ull;  // FNV-1a-style mix
    const uint64_t z = splitmix64(s);
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
    if (u < fraction) out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

}  // namespace engram::host
