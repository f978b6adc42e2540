// The Engram tokenizer compression table built from a Hugging Face tokenizer.json, in C++ (no Node): the
// reference's CompressedTokenizer._build_lookup_table (deepseek-ai/Engram), as tools/tokenize/lib.mjs
// documents and implements it.
//
// Every token id 0..len(tokenizer)-1 is decoded alone: an added token (tokenizer.json "added_tokens") to its
// content, any other token through the byte-level BPE alphabet (the GPT-2 byte<->unicode map; a character
// outside the map stands for its own UTF-8 bytes). A decoded byte string that is not valid UTF-8, or whose
// text holds U+FFFD, keys on the raw vocabulary string (the added token's content for an added id); any other
// text keys on its normalized form, and an empty normalized form falls back to the decoded text. Canonical
// ids are numbered in order of first appearance.
//
// The normalizer is the reference's Hugging Face `tokenizers` chain with the semantics of that Rust code:
//   NFKC, NFD; StripAccents drops every General_Category=Mark code point (Mn, Mc, Me); Lowercase maps each
//   code point on its own (char::to_lowercase: full mapping, no final-sigma context); [ \t\r\n]+ -> " ";
//   a text that is exactly " " then stays " "; Strip removes White_Space at both ends; a U+E000 in the text
//   becomes " " at the end (the reference's sentinel trick).
// Normalization, categories, case mapping and White_Space come from ICU (unicode_version() says which).
// Pure computation: the caller reads the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engram/ngram_hash.hpp"
#include "engram/status.hpp"

namespace engram::host {

// The normalizer chain above on one valid UTF-8 string (UTF-8 out).
std::string normalize_compression_key(std::string_view utf8);

// The decoded text of each id and its key, for a tokenizer.json already parsed (see build_compression_table).
struct CompressionBuild {
  CompressionTable table;   // canonical ids, V', pad id, tokenizer name "tokenizer.json@<sha12>", the SHA-256
  int64_t added_tokens = 0; // ids decoded as added tokens
  int64_t raw_keys = 0;     // ids keyed on the raw vocabulary string (not valid UTF-8 / U+FFFD)
};

// Builds the table from the bytes of a tokenizer.json (`path` only names it in messages). pad_id must be a
// token id (it is recorded with the table). kInvalidArgument for JSON that is not a byte-level BPE
// tokenizer.json (no model.vocab object, an id below 0 or duplicated by two different tokens, ids that do not
// cover 0..n-1, a pad id out of range), naming the file and the field.
Result<CompressionBuild> build_compression_table(std::string_view tokenizer_json, const std::string& path,
                                                 int64_t pad_id);

// The Unicode version of the ICU this library uses (e.g. "15.0"), and ICU's own version (e.g. "72.1").
std::string unicode_version();
std::string icu_version();

// What a sidecar's "normalizer" field says about the rule above.
inline constexpr const char* kCompressionNormalizerText =
    "NFKC, NFD, strip General_Category=Mark, lowercase per code point, [ \\t\\r\\n]+ -> ' ', keep a lone ' ', "
    "strip White_Space; U+FFFD in decoded text -> raw token; empty -> decoded text";

}  // namespace engram::host
