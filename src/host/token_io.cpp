// Reading token files and compression tables (see token_io.hpp). Files are read whole through
// src/sys/file (the only place that touches descriptors) and checked field by field: a sidecar is
// trusted for nothing that the data can contradict. Paths of the source tree come from CMake's
// ENGRAM_SOURCE_DIR (else __FILE__), so the CLI finds tools/tokenize without an install step.
#include "host/token_io.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "host/json_text.hpp"
#include "sys/file.hpp"

namespace engram {

namespace {

using host::json_field;
using host::json_optional_field;
using nlohmann::json;

Status bad(const std::string& path, const std::string& msg) { return Status(Code::kInvalidArgument, path + ": " + msg); }

// Token files and tables are read whole; 16 GiB bounds a token file of 4 G tokens.
Result<std::string> read_whole(const std::string& path) { return sys::read_small_file(path, int64_t{16} << 30); }

Result<json> parse_sidecar(const std::string& data_path, std::string_view text, const std::string& format) {
  const std::string path = data_path + ".json";
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad(path, "not valid JSON");
  const json* fmt = j.is_object() && j.contains("format") ? &j["format"] : nullptr;
  if (fmt == nullptr || !fmt->is_string() || fmt->get<std::string>() != format)
    return bad(path, "not an '" + format + "' sidecar (format field is " +
                         (fmt ? fmt->dump(-1, ' ', false, json::error_handler_t::replace) : std::string("missing")) + ")");
  auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1)
    return bad(path, "unsupported format_version " +
                         (version == j.end() ? std::string("(missing)")
                                             : version->dump(-1, ' ', false, json::error_handler_t::replace)) +
                         " (expected 1)");
  auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string() || dtype->get<std::string>() != "uint32le")
    return bad(path, "dtype must be \"uint32le\"");
  return j;
}

Result<std::string> read_sidecar_text(const std::string& data_path) {
  auto text = read_whole(data_path + ".json");
  if (!text.is_ok()) return text.status().with_context("sidecar of " + data_path);
  return text;
}

Result<std::vector<uint32_t>> u32_array(const std::string& path, std::string_view bytes) {
  if (bytes.size() % 4 != 0) return bad(path, "size " + std::to_string(bytes.size()) + " B is not a multiple of 4 (uint32 ids)");
  std::vector<uint32_t> v(bytes.size() / 4);
  // Little-endian on disk; the hosts we build for are little-endian too.
  static_assert(std::endian::native == std::endian::little, "token files are little-endian uint32");
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

std::filesystem::path source_root() {
#ifdef ENGRAM_SOURCE_DIR
  // CMake's absolute source directory: __FILE__ is relative when ccache rewrites paths (base_dir).
  return std::filesystem::path(ENGRAM_SOURCE_DIR);
#else
  // this file: <root>/src/host/token_io.cpp
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
#endif
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

Result<TokenFile> read_token_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string sidecar, read_sidecar_text(path));
  ENGRAM_ASSIGN_OR_RETURN(std::string data, read_whole(path));
  return parse_token_file(path, data, sidecar);
}

Result<TokenFile> parse_token_file(const std::string& path, std::string_view data, std::string_view sidecar) {
  ENGRAM_ASSIGN_OR_RETURN(json j, parse_sidecar(path, sidecar, "engram-tokens"));
  const std::string jpath = path + ".json";
  TokenFile tf;
  tf.path = path;
  ENGRAM_ASSIGN_OR_RETURN(tf.tokenizer, json_field<std::string>(j, jpath, "tokenizer"));
  ENGRAM_ASSIGN_OR_RETURN(tf.tokenizer_version, json_field<std::string>(j, jpath, "tokenizer_version"));
  ENGRAM_ASSIGN_OR_RETURN(tf.tokenizer_package, json_optional_field<std::string>(j, jpath, "tokenizer_package", ""));
  ENGRAM_ASSIGN_OR_RETURN(tf.tokenizer_json_sha256, json_optional_field<std::string>(j, jpath, "tokenizer_json_sha256", ""));
  if (!tf.tokenizer_json_sha256.empty() &&
      (tf.tokenizer_json_sha256.size() != 64 || tf.tokenizer_json_sha256.find_first_not_of("0123456789abcdef") != std::string::npos))
    return bad(jpath, "tokenizer_json_sha256 is not 64 lowercase hex digits");
  ENGRAM_ASSIGN_OR_RETURN(tf.vocab_size, json_field<int64_t>(j, jpath, "vocab_size"));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t count, json_field<int64_t>(j, jpath, "token_count"));
  ENGRAM_ASSIGN_OR_RETURN(tf.add_bos, json_optional_field<bool>(j, jpath, "add_bos", false));
  if (tf.vocab_size < 1 || tf.vocab_size > (int64_t{1} << 32)) return bad(jpath, "vocab_size " + std::to_string(tf.vocab_size) + " not in [1, 2^32]");

  ENGRAM_ASSIGN_OR_RETURN(tf.ids, u32_array(path, data));
  if (static_cast<int64_t>(tf.ids.size()) != count)
    return bad(path, "holds " + std::to_string(tf.ids.size()) + " tokens but its sidecar says token_count " + std::to_string(count));
  if (tf.ids.empty()) return bad(path, "no tokens");
  for (size_t i = 0; i < tf.ids.size(); ++i)
    if (tf.ids[i] >= tf.vocab_size)
      return bad(path, "token id " + std::to_string(tf.ids[i]) + " at position " + std::to_string(i) + " >= vocab size " +
                           std::to_string(tf.vocab_size) + " of " + tf.tokenizer);

  int64_t next = 0;
  if (j.contains("documents")) {
    if (!j["documents"].is_array()) return bad(jpath, "'documents' is not an array");
    for (size_t d = 0; d < j["documents"].size(); ++d) {
      const json& dj = j["documents"][d];
      const std::string where = jpath + " documents[" + std::to_string(d) + "]";
      TokenDocument doc;
      ENGRAM_ASSIGN_OR_RETURN(doc.source, json_optional_field<std::string>(dj, where, "source", ""));
      ENGRAM_ASSIGN_OR_RETURN(doc.first_token, json_field<int64_t>(dj, where, "first_token"));
      ENGRAM_ASSIGN_OR_RETURN(doc.token_count, json_field<int64_t>(dj, where, "token_count"));
      // count - next bounds token_count before the addition (no signed overflow: fuzz finding).
      if (doc.first_token != next || doc.token_count < 0 || doc.token_count > count - next)
        return bad(where, "token range [" + std::to_string(doc.first_token) + ", +" + std::to_string(doc.token_count) +
                              ") does not continue at " + std::to_string(next));
      next += doc.token_count;
      tf.documents.push_back(std::move(doc));
    }
    if (next != count)
      return bad(jpath, "documents cover " + std::to_string(next) + " tokens of " + std::to_string(count));
  } else {
    tf.documents.push_back({path, 0, count});
  }
  return tf;
}

Result<CompressionTable> read_compression_table(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string sidecar, read_sidecar_text(path));
  ENGRAM_ASSIGN_OR_RETURN(std::string data, read_whole(path));
  return parse_compression_table(path, data, sidecar);
}

Result<CompressionTable> parse_compression_table(const std::string& path, std::string_view data,
                                                 std::string_view sidecar) {
  ENGRAM_ASSIGN_OR_RETURN(json j, parse_sidecar(path, sidecar, "engram-compression-table"));
  const std::string jpath = path + ".json";
  CompressionTable t;
  ENGRAM_ASSIGN_OR_RETURN(t.tokenizer, json_field<std::string>(j, jpath, "tokenizer"));
  ENGRAM_ASSIGN_OR_RETURN(t.tokenizer_version, json_field<std::string>(j, jpath, "tokenizer_version"));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t vocab, json_field<int64_t>(j, jpath, "vocab_size"));
  ENGRAM_ASSIGN_OR_RETURN(t.compressed_vocab, json_field<int64_t>(j, jpath, "compressed_vocab_size"));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t pad_id, json_field<int64_t>(j, jpath, "pad_id"));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t pad_compressed, json_field<int64_t>(j, jpath, "pad_compressed_id"));
  ENGRAM_ASSIGN_OR_RETURN(t.canonical, u32_array(path, data));
  if (static_cast<int64_t>(t.canonical.size()) != vocab)
    return bad(path, "holds " + std::to_string(t.canonical.size()) + " entries but its sidecar says vocab_size " + std::to_string(vocab));
  if (Status st = t.validate(); !st.is_ok()) return st.with_context(path);
  if (pad_id < 0 || pad_id >= vocab || t.canonical[static_cast<size_t>(pad_id)] != pad_compressed)
    return bad(path, "pad id " + std::to_string(pad_id) + " does not map to the sidecar's pad_compressed_id " + std::to_string(pad_compressed));
  t.pad_id = pad_id;
  ENGRAM_ASSIGN_OR_RETURN(t.tokenizer_json_sha256,
                          json_optional_field<std::string>(j, jpath, "tokenizer_json_sha256", std::string()));
  if (!t.tokenizer_json_sha256.empty() &&
      (t.tokenizer_json_sha256.size() != 64 ||
       t.tokenizer_json_sha256.find_first_not_of("0123456789abcdef") != std::string::npos))
    return bad(jpath, "tokenizer_json_sha256 is not 64 lowercase hex digits");
  return t;
}

Status check_token_file_matches_table(const TokenFile& tokens, const CompressionTable& table, const std::string& table_path) {
  const bool same_file = !tokens.tokenizer_json_sha256.empty() && tokens.tokenizer_json_sha256 == table.tokenizer_json_sha256;
  const bool same_name = tokens.tokenizer == table.tokenizer;
  if (!(same_file || same_name) || tokens.vocab_size != table.vocab_size())
    return Status(Code::kInvalidArgument,
                  "token file " + tokens.path + " (" + tokens.tokenizer + ", vocab " + std::to_string(tokens.vocab_size) +
                      ") does not match compression table " + table_path + " (" + table.tokenizer + ", vocab " +
                      std::to_string(table.vocab_size()) + ")");
  return Status::ok();
}

CompressionTableFiles compression_table_files(const CompressionTable& table, const std::string& file_name,
                                              const std::string& package, const std::string& normalizer,
                                              const std::string& unicode_version) {
  CompressionTableFiles f;
  f.data.resize(table.canonical.size() * sizeof(uint32_t));
  if (!f.data.empty()) std::memcpy(f.data.data(), table.canonical.data(), f.data.size());
  const size_t pad = static_cast<size_t>(table.pad_id);
  const json meta = {{"format", "engram-compression-table"},
                     {"format_version", 1},
                     {"tokenizer", table.tokenizer},
                     {"tokenizer_package", package},
                     {"tokenizer_version", table.tokenizer_version},
                     {"vocab_size", table.vocab_size()},
                     {"tokenizer_json_sha256", table.tokenizer_json_sha256},
                     {"dtype", "uint32le"},
                     {"file", file_name},
                     {"compressed_vocab_size", table.compressed_vocab},
                     {"pad_id", table.pad_id},
                     {"pad_compressed_id", pad < table.canonical.size() ? json(table.canonical[pad]) : json(nullptr)},
                     {"normalizer", normalizer},
                     {"unicode_version", unicode_version}};
  f.sidecar = meta.dump(2) + "\n";
  return f;
}

std::string tokenize_script_path() { return (source_root() / "tools" / "tokenize" / "tokenize.mjs").string(); }

std::string default_compression_table_path() {
  return (source_root() / "tools" / "tokenize" / "data" / "deepseek_v3.compress.bin").string();
}

std::string bundled_tokenizer_json_path() {
  return (source_root() / "tools" / "tokenize" / "node_modules" / "@lenml" / "tokenizer-deepseek_v3" / "models" /
          "tokenizer.json")
      .string();
}

std::string default_token_file_path() {
  if (const char* dir = std::getenv("ENGRAM_DATA_DIR"); dir != nullptr && *dir != '\0')
    return (std::filesystem::path(dir) / "common-licenses.tokens").string();
  return (source_root() / "build" / "data" / "common-licenses.tokens").string();
}

std::vector<std::string> default_text_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses", ec)) {
    if (e.is_symlink(ec) || !e.is_regular_file(ec) || e.file_size(ec) == 0) continue;
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string tokenize_command(const std::vector<std::string>& texts, const std::string& out_path, bool add_bos) {
  std::string cmd = "node " + shell_quote(tokenize_script_path()) + " tokens" + (add_bos ? " --add-bos" : "") + " --out " + shell_quote(out_path);
  for (const auto& t : texts) cmd += " " + shell_quote(t);
  return cmd;
}

}  // namespace engram
