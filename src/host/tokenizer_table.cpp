// The compression table from a tokenizer.json (see tokenizer_table.hpp): byte-level decode, the normalizer
// chain on ICU, first-seen canonical ids.
#include "host/tokenizer_table.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/uversion.h>

#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "core/sha256.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

Status bad(const std::string& path, const std::string& m) { return Status(Code::kInvalidArgument, path + ": " + m); }

// GPT-2's bytes_to_unicode, inverted: code point -> byte for the 256 code points of the byte-level alphabet.
struct ByteDecoder {
  std::unordered_map<uint32_t, uint8_t> byte_of;
  ByteDecoder() {
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[static_cast<size_t>(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<size_t>(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<size_t>(b)] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b)
      byte_of[printable[static_cast<size_t>(b)] ? static_cast<uint32_t>(b) : next++] = static_cast<uint8_t>(b);
  }
};

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates, at most
// U+10FFFF), or 0 when there is none.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b = at(i);
  if (b < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) len = 2;
  else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return len;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Code point of the well-formed sequence of `len` bytes at s[i].
uint32_t decode_at(std::string_view s, size_t i, size_t len) {
  const auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[k])); };
  if (len == 1) return at(i);
  uint32_t c = at(i) & (0xFFu >> (len + 1));
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (at(i + k) & 0x3Fu);
  return c;
}

// The bytes a byte-level BPE token stands for (`token` is valid UTF-8: it came from JSON).
std::string byte_level_decode(const ByteDecoder& d, std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t n = utf8_sequence(token, i);
    if (n == 0) n = 1;
    const uint32_t c = decode_at(token, i, n);
    if (auto it = d.byte_of.find(c); it != d.byte_of.end()) out.push_back(static_cast<char>(it->second));
    else out.append(token.substr(i, n));
    i += n;
  }
  return out;
}

bool is_collapsed_space(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::string normalize_compression_key(std::string_view utf8) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) return std::string(utf8);  // ICU data missing: cannot happen with a linked libicudata
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  s = nfkc->normalize(s, err);
  s = nfd->normalize(s, err);

  // StripAccents, then Lowercase code point by code point (each alone: no final-sigma context).
  std::u16string lowered;
  lowered.reserve(static_cast<size_t>(s.length()));
  UChar one[2];
  UChar buf[16];
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if ((U_GET_GC_MASK(c) & U_GC_M_MASK) != 0) continue;
    if (c < 0x80) {
      lowered.push_back(static_cast<char16_t>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      continue;
    }
    int32_t len = 0;
    U16_APPEND_UNSAFE(one, len, c);
    UErrorCode e = U_ZERO_ERROR;
    const int32_t n = u_strToLower(buf, 16, one, len, "", &e);
    if (U_FAILURE(e) || n > 16) {
      lowered.append(reinterpret_cast<const char16_t*>(one), static_cast<size_t>(len));
      continue;
    }
    lowered.append(reinterpret_cast<const char16_t*>(buf), static_cast<size_t>(n));
  }

  // [ \t\r\n]+ -> " " (all four are single UTF-16 units).
  std::u16string collapsed;
  collapsed.reserve(lowered.size());
  for (size_t i = 0; i < lowered.size();) {
    if (is_collapsed_space(lowered[i])) {
      collapsed.push_back(u' ');
      while (i < lowered.size() && is_collapsed_space(lowered[i])) ++i;
    } else {
      collapsed.push_back(lowered[i++]);
    }
  }
  if (collapsed == u" ") return " ";

  // Strip: White_Space at both ends (code points, so surrogate pairs stay whole).
  icu::UnicodeString t(false, reinterpret_cast<const UChar*>(collapsed.data()), static_cast<int32_t>(collapsed.size()));
  int32_t begin = 0, end = t.length();
  while (begin < end) {
    const UChar32 c = t.char32At(begin);
    if (!u_isUWhiteSpace(c)) break;
    begin += U16_LENGTH(c);
  }
  while (end > begin) {
    const UChar32 c = t.char32At(end - 1);
    if (!u_isUWhiteSpace(c)) break;
    end -= U16_LENGTH(c);
  }
  icu::UnicodeString stripped = t.tempSubStringBetween(begin, end);
  stripped.findAndReplace(icu::UnicodeString(static_cast<UChar32>(0xE000)), icu::UnicodeString(u' '));
  std::string out;
  stripped.toUTF8String(out);
  return out;
}

Result<CompressionBuild> build_compression_table(std::string_view tokenizer_json, const std::string& path,
                                                 int64_t pad_id) {
  json j = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded()) return bad(path, "not valid JSON");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("vocab") ||
      !j["model"]["vocab"].is_object())
    return bad(path, "not a Hugging Face tokenizer.json (no \"model\": {\"vocab\": {...}} object)");
  if (j["model"].contains("type") && j["model"]["type"] != "BPE")
    return bad(path, "model type " + j["model"]["type"].dump() + ": only a byte-level BPE tokenizer is supported");
  const json& vocab = j["model"]["vocab"];

  // Every id's token string; added tokens take their content (and decode to it).
  std::vector<std::string> token;
  std::vector<uint8_t> given, added;
  const auto place = [&](int64_t id, const std::string& text, bool is_added, const std::string& where) -> Status {
    if (id < 0 || id >= (int64_t{1} << 31)) return bad(path, where + ": id " + std::to_string(id) + " out of range");
    const size_t i = static_cast<size_t>(id);
    if (i >= token.size()) {
      token.resize(i + 1);
      given.resize(i + 1, 0);
      added.resize(i + 1, 0);
    }
    if (given[i] && !is_added && !added[i])
      return bad(path, where + ": id " + std::to_string(id) + " names both " + json(token[i]).dump() + " and " +
                           json(text).dump());
    token[i] = text;
    given[i] = 1;
    if (is_added) added[i] = 1;
    return Status::ok();
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) return bad(path, "model.vocab[" + json(it.key()).dump() + "] is not an integer id");
    ENGRAM_RETURN_IF_ERROR(place(it.value().get<int64_t>(), it.key(), false, "model.vocab"));
  }
  if (j.contains("added_tokens")) {
    if (!j["added_tokens"].is_array()) return bad(path, "added_tokens is not an array");
    for (size_t k = 0; k < j["added_tokens"].size(); ++k) {
      const json& a = j["added_tokens"][k];
      const std::string where = "added_tokens[" + std::to_string(k) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return bad(path, where + ": expected {\"id\": integer, \"content\": string}");
      ENGRAM_RETURN_IF_ERROR(place(a["id"].get<int64_t>(), a["content"].get<std::string>(), true, where));
    }
  }
  if (token.empty()) return bad(path, "model.vocab is empty");
  for (size_t i = 0; i < token.size(); ++i)
    if (!given[i])
      return bad(path, "no token has id " + std::to_string(i) + " (ids must cover 0.." + std::to_string(token.size() - 1) +
                           ": the table is indexed by id)");
  const int64_t n = static_cast<int64_t>(token.size());
  if (pad_id < 0 || pad_id >= n)
    return bad(path, "pad id " + std::to_string(pad_id) + " is not a token id (vocabulary of " + std::to_string(n) + ")");

  static const ByteDecoder decoder;
  CompressionBuild b;
  CompressionTable& t = b.table;
  t.canonical.resize(token.size());
  std::unordered_map<std::string, uint32_t> id_of_key;
  id_of_key.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    std::string key;
    const std::string text = added[i] ? token[i] : byte_level_decode(decoder, token[i]);
    b.added_tokens += added[i];
    if (!valid_utf8(text) || text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = token[i];
      ++b.raw_keys;
    } else {
      key = normalize_compression_key(text);
      if (key.empty()) key = text;
    }
    const auto [it, fresh] = id_of_key.emplace(std::move(key), static_cast<uint32_t>(id_of_key.size()));
    t.canonical[i] = it->second;
  }
  const std::string sha = sha256_hex({reinterpret_cast<const uint8_t*>(tokenizer_json.data()), tokenizer_json.size()});
  t.tokenizer = "tokenizer.json@" + sha.substr(0, 12);
  t.tokenizer_version = "engram ICU " + icu_version();
  t.compressed_vocab = static_cast<int64_t>(id_of_key.size());
  t.pad_id = pad_id;
  t.tokenizer_json_sha256 = sha;
  return b;
}

namespace {
// ICU's dotted text of a version that `read` fills ("15.0", "72.1").
std::string icu_version_text(void (*read)(UVersionInfo)) {
  char text[U_MAX_VERSION_STRING_LENGTH];
  UVersionInfo v;
  read(v);
  u_versionToString(v, text);
  return text;
}
}  // namespace

std::string unicode_version() { return icu_version_text(&u_getUnicodeVersion); }
std::string icu_version() { return icu_version_text(&u_getVersion); }

}  // namespace engram::host
