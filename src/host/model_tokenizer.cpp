// A model directory's tokenizer compression table (see model_io.hpp): where it is cached, how it is
// built (a Node command the C++ side prints but never runs), and the checks that tie a table to the
// model: V' against engram_compressed_vocab_size, the pad id, and the SHA-256 of the tokenizer.json
// the table was built from against the directory's own file.
#include <algorithm>

#include "core/sha256.hpp"
#include "host/model_io.hpp"
#include "host/token_io.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

constexpr int64_t kHashChunkBytes = int64_t{4} << 20;

}  // namespace

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
                     " (rebuild it: " + model_compression_table_command(info, table_path) + ")");
  }
  return t;
}

std::string model_compression_table_command(const ModelInfo& info, const std::string& out_path) {
  return "node " + shell_quote(tokenize_script_path()) + " table --tokenizer-json " +
         shell_quote(info.path(kModelTokenizerFile)) + " --pad-id " + std::to_string(info.config.pad_token_id) +
         " --out " + shell_quote(out_path.empty() ? model_compression_table_path(info) : out_path);
}

}  // namespace engram::host
