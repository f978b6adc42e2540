// `engram hash` as a user runs it: ids printed with --json and saved with --out equal NgramHasher's on
// the same token file; bad input (an id >= vocab, a compression table of another tokenizer, a V'
// mismatch, non-UTF-8 text) exits 2 naming the file or value and writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "support/cli.hpp"
#include "engram/layout.hpp"
#include "host/token_io.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Out = testing::CliSplitResult;
Out run_cli(const std::string& args, const fs::path& dir) { return testing::run_engram_split(args, dir); }

class EngramHash : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("engram-hash-cli-" + std::to_string(getpid()) + "-" + std::to_string(rng_()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A DeepSeek-V3 token file of random ids in two documents; returns its path.
  std::string write_tokens(std::vector<uint32_t> ids, int64_t first_doc) {
    const fs::path p = dir_ / "in.tokens";
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    const int64_t n = static_cast<int64_t>(ids.size());
    json j = {{"format", "engram-tokens"}, {"format_version", 1}, {"tokenizer", "deepseek-ai/DeepSeek-V3"},
              {"tokenizer_version", "3.7.2"}, {"vocab_size", 128815}, {"dtype", "uint32le"}, {"token_count", n},
              {"documents", json::array({{{"first_token", 0}, {"token_count", first_doc}},
                                         {{"first_token", first_doc}, {"token_count", n - first_doc}}})}};
    std::ofstream(p.string() + ".json") << j.dump();
    return p.string();
  }

  std::mt19937_64 rng_{std::random_device{}()};
  fs::path dir_;
};

TEST_F(EngramHash, JsonAndOutFileEqualTheLibrary) {
  std::vector<uint32_t> ids(40);
  for (auto& x : ids) x = static_cast<uint32_t>(rng_() % 128815);
  const std::string tokens = write_tokens(ids, 15);
  const std::string out = (dir_ / "ids.bin").string();
  const int64_t seed = static_cast<int64_t>(rng_() % 1000);
  Out o = run_cli("hash --tokens " + tokens + " --layout tiny --seed " + std::to_string(seed) + " --json --limit 0 --out " + out, dir_);
  ASSERT_EQ(o.code, 0) << o.err;
  const json j = json::parse(o.out);
  EXPECT_EQ(j["compressed_vocab_size"], 98627);
  EXPECT_EQ(j["tokens"], 40);

  auto layout = make_preset_layout("tiny");
  auto table = read_compression_table(default_compression_table_path());
  ASSERT_TRUE(layout.is_ok() && table.is_ok());
  auto h = NgramHasher::create(*layout, *table, NgramHashOptions{.seed = seed});
  ASSERT_TRUE(h.is_ok());
  const int heads = layout->heads();
  // Each document is its own sequence, hashed from its start.
  std::vector<int64_t> want;
  for (auto [b, e] : {std::pair{0, 15}, std::pair{15, 40}}) {
    std::vector<int64_t> seq(ids.begin() + b, ids.begin() + e), part(seq.size() * heads);
    ASSERT_TRUE(h->hash(seq, 0, part).is_ok());
    want.insert(want.end(), part.begin(), part.end());
  }
  std::vector<int64_t> got;
  for (const auto& row : j["ids"]["1"]) for (const auto& v : row) got.push_back(v.get<int64_t>());
  EXPECT_EQ(got, want);

  std::ifstream f(out, std::ios::binary);
  std::vector<int64_t> file_ids(want.size());
  f.read(reinterpret_cast<char*>(file_ids.data()), static_cast<std::streamsize>(file_ids.size() * 8));
  EXPECT_EQ(f.gcount(), static_cast<std::streamsize>(want.size() * 8));
  EXPECT_EQ(file_ids, want);
  const json meta = json::parse(std::ifstream(out + ".json"));
  EXPECT_EQ(meta["shape"], json({1, 40, heads}));
}

TEST_F(EngramHash, BadInputExitsTwoAndNamesTheProblem) {
  std::vector<uint32_t> ids = {0, 5, 128815, 7};
  std::string tokens = write_tokens(ids, 2);
  Out o = run_cli("hash --tokens " + tokens + " --layout tiny", dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("token id 128815 at position 2"), std::string::npos) << o.err;

  ids[2] = 9;
  tokens = write_tokens(ids, 2);
  o = run_cli("hash --tokens " + tokens + " --layout tiny --expect-vocab 99000", dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("V' = 99000"), std::string::npos) << o.err;

  // A compression table of another tokenizer.
  const fs::path table = dir_ / "other.bin";
  std::vector<uint32_t> canon = {0, 1, 2, 1};
  std::ofstream(table, std::ios::binary).write(reinterpret_cast<const char*>(canon.data()), 16);
  std::ofstream(table.string() + ".json")
      << json({{"format", "engram-compression-table"}, {"format_version", 1}, {"tokenizer", "other/Tok"}, {"tokenizer_version", "1"},
               {"vocab_size", 4}, {"dtype", "uint32le"}, {"compressed_vocab_size", 3}, {"pad_id", 2}, {"pad_compressed_id", 2}})
             .dump();
  const std::string out = (dir_ / "never.bin").string();
  o = run_cli("hash --tokens " + tokens + " --layout tiny --compression-table " + table.string() + " --out " + out, dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("other/Tok"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(out));

  o = run_cli("hash --tokens " + tokens + " --text /etc/hostname", dir_);
  EXPECT_EQ(o.code, 2);
  o = run_cli("hash --tokens " + tokens + " --layout nope", dir_);
  EXPECT_EQ(o.code, 2);
}

TEST_F(EngramHash, NonUtf8TextIsRejected) {
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node not installed";
  if (!fs::exists(fs::path(tokenize_script_path()).parent_path() / "node_modules"))
    GTEST_SKIP() << "tools/tokenize/node_modules missing: run scripts/tokenize-setup";
  const fs::path bad = dir_ / "latin1.txt";
  std::ofstream(bad) << "na\xefve\n";
  Out o = run_cli("hash --text " + bad.string() + " --layout tiny", dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("latin1.txt: not valid UTF-8 at byte offset 2"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace engram
