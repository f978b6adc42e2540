// The compression table built in C++ from a tokenizer.json (host/tokenizer_table.hpp): each normalizer step with
// the Rust semantics lib.mjs documents, the decode rules on a small tokenizer.json written here, the DeepSeek-V3
// tokenizer against the committed table on every id, and a model directory's table (model_compression_table):
// built once, cached outside the directory, reused, the directory's own table preferred, V' checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "host/model_io.hpp"
#include "host/token_io.hpp"
#include "host/tokenizer_table.hpp"
#include "support/model_io_support.hpp"

namespace engram::host {
namespace {

using namespace model_io_test;  // fs, json, ModelIo, read_text, write_text

TEST(CompressionKey, EachNormalizerStep) {
  EXPECT_EQ(normalize_compression_key("Hello"), "hello");
  EXPECT_EQ(normalize_compression_key("\xEF\xBC\xA1"), "a");          // NFKC: fullwidth A
  EXPECT_EQ(normalize_compression_key("e\xCC\x81t\xC3\xA9"), "ete");   // NFD + strip Mn
  EXPECT_EQ(normalize_compression_key("\xE0\xA4\x95\xE0\xA4\xBE"), "\xE0\xA4\x95");  // Devanagari vowel sign AA is Mc
  // Lowercase per code point: a final capital sigma becomes sigma, not final sigma.
  EXPECT_EQ(normalize_compression_key("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");
  EXPECT_EQ(normalize_compression_key("\xC4\xB0"), "i");               // U+0130: I + U+0307, the mark stripped
  EXPECT_EQ(normalize_compression_key(" "), " ");                      // a lone space stays
  EXPECT_EQ(normalize_compression_key("\t\r\n "), " ");                // a whitespace run is one space, kept
  EXPECT_EQ(normalize_compression_key("  a \t b\n"), "a b");
  EXPECT_EQ(normalize_compression_key("\xC2\x85x\xC2\x85"), "x");      // U+0085 is White_Space: stripped
  EXPECT_EQ(normalize_compression_key("\xEF\xBB\xBFx"), "\xEF\xBB\xBFx");  // U+FEFF is not
  EXPECT_EQ(normalize_compression_key("\xE3\x80\x80"), " ");           // U+3000: NFKC makes it a lone space, kept
  EXPECT_EQ(normalize_compression_key("\xE3\x80\x80x"), "x");
  EXPECT_EQ(normalize_compression_key("a\xEE\x80\x80" "b"), "a b");    // U+E000 becomes a space at the end
  EXPECT_EQ(normalize_compression_key(""), "");
}

// vocab strings are byte-level BPE: "\u0120" is the space byte, "\u00e2\u0122" the bytes E2 80, two of a 3-byte sequence.
constexpr const char* kSmallTokenizer = R"({
  "added_tokens": [{"id": 6, "content": "<pad>", "special": true}, {"id": 0, "content": "a", "special": false}],
  "model": {"type": "BPE", "vocab": {"a": 0, "A": 1, "\u0120a": 2, "\u00e2\u0122": 3, "\u0120": 4, "\u0120\u0120": 5,
                                     "\u00c3\u00a9": 7, "E": 8, "\u00cc\u0123": 9}}
})";

TEST(CompressionTableBuild, DecodeRulesOnASmallTokenizer) {
  auto b = build_compression_table(kSmallTokenizer, "small.json", 6);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  const CompressionTable& t = b->table;
  // a, A and " a" share a key; the partial sequence keys on its raw string; " " and "  " both normalize to " ";
  // <pad> decodes to its content; "é" (bytes C3 A9) -> "e", which E shares; a lone U+0301 (bytes CC 81)
  // normalizes to nothing and keys on its decoded text.
  EXPECT_EQ(t.canonical, (std::vector<uint32_t>{0, 0, 0, 1, 2, 2, 3, 4, 4, 5}));
  EXPECT_EQ(t.compressed_vocab, 6);
  EXPECT_EQ(t.pad_id, 6);
  EXPECT_EQ(b->raw_keys, 1);
  EXPECT_EQ(b->added_tokens, 2);
  EXPECT_EQ(t.tokenizer_json_sha256.size(), 64u);
  EXPECT_EQ(t.tokenizer, "tokenizer.json@" + t.tokenizer_json_sha256.substr(0, 12));
  EXPECT_TRUE(t.validate().is_ok());
}

TEST(CompressionTableBuild, MalformedTokenizersAreInvalidArgument) {
  for (const char* text : {"not json", "{}", R"({"model": {"vocab": []}})", R"({"model": {"vocab": {"a": 1}}})",
                           R"({"model": {"vocab": {"a": 0, "b": 0}}})", R"({"model": {"vocab": {"a": -1}}})",
                           R"({"model": {"type": "Unigram", "vocab": {"a": 0}}})",
                           R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": "x"}]})"}) {
    auto b = build_compression_table(text, "t.json", 0);
    ASSERT_FALSE(b.is_ok()) << text;
    EXPECT_EQ(b.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(b.status().message().find("t.json"), std::string::npos) << b.status().to_string();
  }
  auto pad = build_compression_table(R"({"model": {"vocab": {"a": 0}}})", "t.json", 1);
  ASSERT_FALSE(pad.is_ok());
  EXPECT_NE(pad.status().message().find("pad id 1"), std::string::npos) << pad.status().to_string();
}

// Every id of the DeepSeek-V3 tokenizer against the committed table (built by tools/tokenize in Node).
TEST(CompressionTableBuild, DeepSeekV3EqualsTheCommittedTableOnEveryId) {
  const std::string bundled = bundled_tokenizer_json_path();
  if (!fs::exists(bundled)) GTEST_SKIP() << "no " << bundled << " (scripts/setup runs npm ci in tools/tokenize)";
  auto committed = read_compression_table(default_compression_table_path());
  ASSERT_TRUE(committed.is_ok()) << committed.status().to_string();
  const auto t0 = std::chrono::steady_clock::now();
  auto b = build_compression_table(read_text(bundled), bundled, 2);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  const CompressionTable& t = b->table;
  ASSERT_EQ(t.vocab_size(), 128815);
  ASSERT_EQ(t.vocab_size(), committed->vocab_size());
  EXPECT_EQ(t.compressed_vocab, 98627);
  EXPECT_EQ(t.tokenizer_json_sha256, committed->tokenizer_json_sha256);
  int64_t differ = 0;
  for (size_t i = 0; i < t.canonical.size(); ++i)
    if (t.canonical[i] != committed->canonical[i]) {
      if (++differ <= 10) ADD_FAILURE() << "id " << i << ": C++ " << t.canonical[i] << ", committed " << committed->canonical[i];
    }
  EXPECT_EQ(differ, 0) << "of " << t.vocab_size() << " ids (ICU " << icu_version() << ", Unicode " << unicode_version() << ")";
  std::printf("built the DeepSeek-V3 table (%lld ids, V' %lld) in %.3f s with ICU %s (Unicode %s)\n",
              static_cast<long long>(t.vocab_size()), static_cast<long long>(t.compressed_vocab), secs,
              icu_version().c_str(), unicode_version().c_str());
}

// model_compression_table on a directory with the bundled tokenizer.json and no table of its own.
class ModelCompressionTableTest : public ModelIo {
 protected:
  void SetUp() override {
    ModelIo::SetUp();
    bundled_ = bundled_tokenizer_json_path();
    if (!fs::exists(bundled_)) GTEST_SKIP() << "no " << bundled_ << " (scripts/setup runs npm ci in tools/tokenize)";
    cache_ = root_ / "cache";
    const char* old = std::getenv("ENGRAM_CACHE_DIR");
    if (old != nullptr) old_cache_ = old;
    had_cache_ = old != nullptr;
    ::setenv("ENGRAM_CACHE_DIR", cache_.c_str(), 1);
  }
  void TearDown() override {
    if (had_cache_) ::setenv("ENGRAM_CACHE_DIR", old_cache_.c_str(), 1);
    else ::unsetenv("ENGRAM_CACHE_DIR");
    ModelIo::TearDown();
  }
  SyntheticModelOptions released() const {
    SyntheticModelOptions o = options();
    o.compression_table.clear();
    o.compressed_vocab_size = 98627;
    o.tokenizer_json = bundled_;
    return o;
  }
  std::vector<std::string> dir_entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string bundled_;
  fs::path cache_;
  std::string old_cache_;
  bool had_cache_ = false;
};

TEST_F(ModelCompressionTableTest, BuiltOnceCachedOutsideTheDirectoryThenReused) {
  make(released());
  const std::vector<std::string> before = dir_entries();
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  auto sha = file_sha256(file(kModelTokenizerFile).string());
  ASSERT_TRUE(sha.is_ok());

  auto first = model_compression_table(*info);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->source, ModelCompressionTable::Source::kBuilt);
  EXPECT_EQ(first->path, (cache_ / "compress" / (*sha + ".bin")).string());
  EXPECT_TRUE(first->cache_note.empty()) << first->cache_note;
  EXPECT_EQ(first->table.compressed_vocab, 98627);
  EXPECT_EQ(dir_entries(), before);  // nothing written into the directory
  // The cached file is the committed table's data, byte for byte.
  EXPECT_EQ(read_text(first->path), read_text(default_compression_table_path()));
  std::vector<std::string> cached;
  for (const auto& e : fs::directory_iterator(cache_ / "compress")) cached.push_back(e.path().filename().string());
  std::sort(cached.begin(), cached.end());
  EXPECT_EQ(cached, (std::vector<std::string>{*sha + ".bin", *sha + ".bin.json"}));  // no temporary left

  auto second = model_compression_table(*info);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(second->source, ModelCompressionTable::Source::kCache);
  EXPECT_EQ(second->table.canonical, first->table.canonical);

  // A damaged cache entry is rebuilt.
  write_text(first->path, "xx");
  auto third = model_compression_table(*info);
  ASSERT_TRUE(third.is_ok()) << third.status().to_string();
  EXPECT_EQ(third->source, ModelCompressionTable::Source::kBuilt);
  EXPECT_EQ(third->table.canonical, first->table.canonical);
}

TEST_F(ModelCompressionTableTest, TheDirectorysOwnTableIsUsed) {
  SyntheticModelOptions o = released();
  o.compression_table = default_compression_table_path();
  make(o);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto t = model_compression_table(*info);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->source, ModelCompressionTable::Source::kDirectory);
  EXPECT_EQ(t->path, file(kModelCompressionTableFile).string());
  EXPECT_FALSE(fs::exists(cache_));
}

TEST_F(ModelCompressionTableTest, VPrimeOtherThanConfigNamesBothNumbers) {
  SyntheticModelOptions o = released();
  o.compressed_vocab_size = 99092;
  make(o);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto t = model_compression_table(*info);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("V' = 98627"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find("engram_compressed_vocab_size = 99092"), std::string::npos) << t.status().to_string();
}

TEST_F(ModelCompressionTableTest, NoTokenizerIsNotFound) {
  SyntheticModelOptions o = released();
  o.tokenizer_json.clear();
  make(o);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto t = model_compression_table(*info);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kNotFound) << t.status().to_string();
}

}  // namespace
}  // namespace engram::host
