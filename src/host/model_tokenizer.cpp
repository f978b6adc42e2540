// A model directory's tokenizer compression table (see model_io.hpp): the one the directory carries, the
// one cached for its tokenizer.json, or one built from that file in C++ (host/tokenizer_table.hpp) and
// cached; and the checks that tie a table to the model: V' against engram_compressed_vocab_size, the pad
// id, and the SHA-256 of the tokenizer.json the table was built from against the directory's own file.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>

#include "core/sha256.hpp"
#include "host/model_io.hpp"
#include "host/token_io.hpp"
#include "host/tokenizer_table.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

constexpr int64_t kHashChunkBytes = int64_t{4} << 20;
constexpr int64_t kMaxTokenizerJsonBytes = int64_t{1} << 30;

// mkdir -p of an absolute path.
Status make_directories(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (sys::is_directory(prefix)) continue;
    if (Status st = sys::make_directory(prefix, 0755); !st.is_ok() && !sys::is_directory(prefix)) return st;
  }
  return Status::ok();
}

// Writes `data` to `path` through a temporary sibling renamed over it, so a reader sees the old file or
// the whole new one.
Status write_atomic(const std::string& path, std::string_view data) {
  std::random_device rd;
  const std::string tmp = path + ".tmp-" + std::to_string(rd()) + std::to_string(rd());
  ENGRAM_RETURN_IF_ERROR(sys::write_new_file(tmp, data));
  if (Status st = sys::rename_path(tmp, path, /*replace=*/true); !st.is_ok()) {
    (void)sys::unlink_path(tmp);
    return st;
  }
  return Status::ok();
}

// The cached table <dir>/<sha>.bin when it is whole and was built from that tokenizer.json.
Result<CompressionTable> read_cached_table(const std::string& path, const std::string& sha) {
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable t, read_compression_table(path));
  if (t.tokenizer_json_sha256 != sha) return invalid(path + ": built from another tokenizer.json (SHA-256 " + t.tokenizer_json_sha256 + ")");
  return t;
}

}  // namespace

const char* compression_source_name(ModelCompressionTable::Source s) {
  switch (s) {
    case ModelCompressionTable::Source::kDirectory: return "directory";
    case ModelCompressionTable::Source::kCache: return "cache";
    case ModelCompressionTable::Source::kBuilt: return "built";
  }
  return "?";
}

std::string compression_cache_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr && v[0] == '/' ? std::string(v) : std::string();
  };
  if (std::string d = env("ENGRAM_CACHE_DIR"); !d.empty()) return d + "/compress";
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/engram/compress";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/engram/compress";
  return "";
}

Result<ModelCompressionTable> model_compression_table(const ModelInfo& info) {
  ModelCompressionTable out;
  const std::string config_path = info.path(kModelConfigFile);
  const std::string in_dir = model_compression_table_path(info);
  ENGRAM_ASSIGN_OR_RETURN(const bool has_dir_table, sys::path_exists(in_dir));
  if (has_dir_table) {
    ENGRAM_ASSIGN_OR_RETURN(out.table, read_model_compression_table(info, in_dir));
    out.source = ModelCompressionTable::Source::kDirectory;
    out.path = in_dir;
    return out;
  }
  const std::string tokenizer = info.path(kModelTokenizerFile);
  ENGRAM_ASSIGN_OR_RETURN(const bool has_tokenizer, sys::path_exists(tokenizer));
  if (!has_tokenizer)
    return Status(Code::kNotFound, "model " + info.dir + ": no " + kModelTokenizerFile + " (and no " +
                                       kModelCompressionTableFile + "): the compression table needs the model's tokenizer");
  ENGRAM_ASSIGN_OR_RETURN(const std::string text, sys::read_small_file(tokenizer, kMaxTokenizerJsonBytes));
  const std::string sha = sha256_hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  const std::string cache_dir = compression_cache_dir();
  const std::string cached = cache_dir.empty() ? std::string() : cache_dir + "/" + sha + ".bin";
  bool have = false;
  if (!cached.empty()) {
    if (auto t = read_cached_table(cached, sha); t.is_ok()) {
      out.table = std::move(t).value();
      out.source = ModelCompressionTable::Source::kCache;
      out.path = cached;
      have = true;
    }
  }
  if (!have) {
    const auto t0 = std::chrono::steady_clock::now();
    ENGRAM_ASSIGN_OR_RETURN(CompressionBuild b, build_compression_table(text, tokenizer, info.config.pad_token_id));
    out.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.table = std::move(b.table);
    out.source = ModelCompressionTable::Source::kBuilt;
    if (cached.empty()) {
      out.cache_note = "no cache directory (set XDG_CACHE_HOME or HOME)";
    } else {
      const CompressionTableFiles files = compression_table_files(out.table, sha + ".bin", "engram (C++, ICU " + icu_version() + ")",
                                                                  kCompressionNormalizerText, unicode_version());
      Status st = make_directories(cache_dir);
      if (st.is_ok()) st = write_atomic(cached + ".json", files.sidecar);
      if (st.is_ok()) st = write_atomic(cached, files.data);
      if (st.is_ok()) out.path = cached;
      else out.cache_note = "not cached: " + st.to_string();
    }
  }
  // The cache is keyed by the tokenizer alone; the pad id is the model's.
  out.table.pad_id = info.config.pad_token_id;
  if (out.table.pad_id < 0 || out.table.pad_id >= out.table.vocab_size())
    return invalid(config_path + " engram_pad_token_id = " + std::to_string(out.table.pad_id) +
                   " is not a token id of " + tokenizer + " (vocabulary of " + std::to_string(out.table.vocab_size()) + ")");
  ENGRAM_RETURN_IF_ERROR(check_compressed_vocab_size(out.table.compressed_vocab,
                                                     out.path.empty() ? tokenizer : out.path,
                                                     info.config.compressed_vocab_size, config_path));
  return out;
}

std::string model_compression_table_path(const ModelInfo& info) { return info.path(kModelCompressionTableFile); }

Status check_compressed_vocab_size(int64_t table_compressed_vocab, const std::string& table_path,
                                   int64_t config_compressed_vocab, const std::string& config_path) {
  if (table_compressed_vocab == config_compressed_vocab) return Status::ok();
  return invalid("compressed vocabulary mismatch: the compression table " + table_path + " has V' = " +
                 std::to_string(table_compressed_vocab) + " but " + config_path + " engram_compressed_vocab_size = " +
                 std::to_string(config_compressed_vocab) +
                 " (every hash multiplier derives from V': hashing with this table would address other rows)");
}

Result<std::string> file_sha256(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(const sys::File f, sys::open_read(path));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(f));
  Sha256 h;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(size, kHashChunkBytes)));
  for (int64_t off = 0; off < size; off += kHashChunkBytes) {
    const size_t n = static_cast<size_t>(std::min(kHashChunkBytes, size - off));
    ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, buf.data(), n, off));
    h.update({buf.data(), n});
  }
  return h.hex_digest();
}

Result<CompressionTable> read_model_compression_table(const ModelInfo& info, const std::string& path) {
  const std::string table_path = path.empty() ? model_compression_table_path(info) : path;
  const std::string config_path = info.path(kModelConfigFile);
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable t, read_compression_table(table_path));
  ENGRAM_RETURN_IF_ERROR(check_compressed_vocab_size(t.compressed_vocab, table_path, info.config.compressed_vocab_size, config_path));
  if (t.pad_id != info.config.pad_token_id)
    return invalid("compression table " + table_path + " was built for pad id " + std::to_string(t.pad_id) + " but " +
                   config_path + " engram_pad_token_id = " + std::to_string(info.config.pad_token_id));
  const std::string tokenizer = info.path(kModelTokenizerFile);
  ENGRAM_ASSIGN_OR_RETURN(const bool has_tokenizer, sys::path_exists(tokenizer));
  if (has_tokenizer && !t.tokenizer_json_sha256.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(const std::string sha, file_sha256(tokenizer));
    if (sha != t.tokenizer_json_sha256)
      return invalid("compression table " + table_path + " was built from a tokenizer.json with SHA-256 " +
                     t.tokenizer_json_sha256 + ", but " + tokenizer + " has SHA-256 " + sha +
                     " (remove it, and the table is built from " + tokenizer + " and cached)");
  }
  return t;
}

std::string model_compression_table_command(const ModelInfo& info, const std::string& out_path) {
  return "node " + shell_quote(tokenize_script_path()) + " table --tokenizer-json " +
         shell_quote(info.path(kModelTokenizerFile)) + " --pad-id " + std::to_string(info.config.pad_token_id) +
         " --out " + shell_quote(out_path.empty() ? model_compression_table_path(info) : out_path);
}

}  // namespace engram::host
