// A model directory in the released format (config.json, the index, the shards, tokenizer.json; no compression
// table), read-only, with no `node` on PATH: `table info`, `table load --verify`, `run --model` (text ids) and
// `hash --model` all work, the compression table is built from tokenizer.json in C++ and cached outside the
// directory (equal to the committed DeepSeek-V3 table byte for byte), nothing is written into the directory, and
// a V' other than config.json's exits 2 naming both numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "host/model_io.hpp"
#include "host/token_io.hpp"
#include "support/cli.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class ReleasedModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
    bundled_ = bundled_tokenizer_json_path();
    if (!fs::exists(bundled_)) GTEST_SKIP() << "no " << bundled_ << " (scripts/setup runs npm ci in tools/tokenize)";
    base_ = fs::temp_directory_path() / ("engram-released-" + std::to_string(getpid()) + "-" + std::to_string(rng_()));
    fs::create_directories(base_ / "home");
    fs::create_directories(base_ / "nodata");
    fs::create_directories(base_ / "bin");  // the only PATH entry: empty, so no node (nor anything else)
  }
  void TearDown() override {
    if (base_.empty()) return;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(base_, ec))
      fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add, ec);
    fs::remove_all(base_, ec);
  }

  // The CLI in an environment with no node: PATH holds one empty directory; the cache and the default token file
  // live under base_.
  std::string env() const {
    return "env -i PATH=" + (base_ / "bin").string() + " HOME=" + (base_ / "home").string() +
           " XDG_CACHE_HOME=" + (base_ / "cache").string() + " ENGRAM_DATA_DIR=" + (base_ / "nodata").string() + " ";
  }
  testing::CliSplitResult cli(const std::string& args) const { return testing::run_engram_split(args, base_, env()); }

  // `table create --format hf-model` without a compression table, then only the released files kept, read-only.
  std::string create(const std::string& name, int64_t compressed_vocab) {
    const std::string dir = (base_ / name).string();
    const auto r = testing::run_engram_split("table create --format hf-model --layout v41-flash-mini --table-size 1MiB --seed 7 "
                                             "--compression-table none --compressed-vocab-size " +
                                                 std::to_string(compressed_vocab) + " --tokenizer-json " + bundled_ +
                                                 " --out " + dir,
                                             base_);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    std::error_code ec;
    fs::remove(fs::path(dir) / "tokenizer_config.json", ec);
    for (const auto& e : fs::recursive_directory_iterator(dir))
      fs::permissions(e.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
    fs::permissions(dir, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write, fs::perm_options::remove);
    return dir;
  }
  // Every entry under `dir` with its size and modification time.
  static std::vector<std::string> listing(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      std::error_code ec;
      const auto size = e.is_regular_file() ? e.file_size() : 0;
      out.push_back(e.path().string() + " " + std::to_string(size) + " " +
                    std::to_string(fs::last_write_time(e.path(), ec).time_since_epoch().count()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // A token file of the bundled tokenizer (its SHA-256 recorded, as tools/tokenize records it).
  std::string token_file() {
    const fs::path path = base_ / "text.tokens";
    std::vector<uint32_t> ids;
    for (uint32_t i = 0; i < 600; ++i) ids.push_back(i == 0 ? 0 : (i * 7919u + i * i * 31u) % 128815u);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()),
                                                static_cast<std::streamsize>(ids.size() * sizeof(uint32_t)));
    auto sha = host::file_sha256(bundled_);
    EXPECT_TRUE(sha.is_ok());
    const json meta = {{"format", "engram-tokens"}, {"format_version", 1}, {"tokenizer", "deepseek-ai/DeepSeek-V3"},
                       {"tokenizer_version", "3.7.2"}, {"vocab_size", 128815}, {"tokenizer_json_sha256", *sha},
                       {"dtype", "uint32le"}, {"token_count", ids.size()}, {"add_bos", true},
                       {"documents", json::array({{{"source", "a"}, {"first_token", 0}, {"token_count", 400}},
                                                  {{"source", "b"}, {"first_token", 400}, {"token_count", 200}}})}};
    std::ofstream(path.string() + ".json") << meta.dump(2);
    return path.string();
  }
  static json parse(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << text;
    return j;
  }

  std::mt19937_64 rng_{std::random_device{}()};
  std::string bundled_;
  fs::path base_;
};

TEST_F(ReleasedModelDir, WorksReadOnlyWithoutNode) {
  const std::string dir = create("model", 98627);
  EXPECT_FALSE(fs::exists(fs::path(dir) / host::kModelCompressionTableFile));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  EXPECT_NE(std::find(files.begin(), files.end(), "tokenizer.json"), files.end());
  EXPECT_EQ(std::count_if(files.begin(), files.end(), [](const std::string& f) { return f.find("compress") != std::string::npos; }), 0);
  const std::vector<std::string> before = listing(dir);
  EXPECT_NE(cli("table info " + dir).code, -1);
  EXPECT_NE(testing::run_shell(env() + "/bin/sh -c 'command -v node' 2>/dev/null").code, 0) << "node is reachable";

  // table info builds the table (first call) and then finds it in the cache.
  auto r = cli("table info " + dir + " --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  json j = parse(r.out);
  const fs::path cache = base_ / "cache" / "engram" / "compress";
  EXPECT_EQ(j["compression_table"]["compressed_vocab_size"], 98627);
  EXPECT_EQ(j["compression_table"]["matches_config"], true);
  EXPECT_EQ(j["compression_table"]["source"], "cache");  // the plain `table info` above built it
  EXPECT_EQ(j["compression_table"]["path"], (cache / (j["tokenizer"]["sha256"].get<std::string>() + ".bin")).string());
  EXPECT_EQ(read_file(j["compression_table"]["path"].get<std::string>()), read_file(default_compression_table_path()))
      << "the C++ table differs from the committed one";
  r = cli("table info " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("V' 98627 = engram_compressed_vocab_size"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("node"), std::string::npos) << r.out;

  r = cli("table load " + dir + " --verify");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: 0 of"), std::string::npos) << r.out;

  // run: text ids from a token file of the model's tokenizer, hashed with the directory's table.
  const std::string tokens = token_file();
  r = cli("run --model " + dir + " --tokens " + tokens + " --steps 2 --warmup 0 --batch 4 --layer-us 5 --json --timeline none");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  j = parse(r.out);
  EXPECT_EQ(j["workload"]["ids"].get<std::string>().rfind("text(", 0), 0u) << j["workload"].dump();
  EXPECT_EQ(j["workload"]["ids"].get<std::string>().find("zipf"), std::string::npos) << j["workload"].dump();
  EXPECT_TRUE(j["workload"]["ids_note"].is_null()) << j["workload"].dump();
  // Without a token file (no default text tokens here), the run says why the ids are not text.
  r = cli("run --model " + dir + " --steps 2 --warmup 0 --batch 4 --layer-us 5 --json --timeline none");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  j = parse(r.out);
  ASSERT_TRUE(j["workload"]["ids_note"].is_string()) << j["workload"].dump();
  EXPECT_NE(j["workload"]["ids_note"].get<std::string>().find("real text unavailable"), std::string::npos);
  r = cli("run --model " + dir + " --steps 2 --warmup 0 --batch 4 --layer-us 5 --timeline none");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("real text unavailable"), std::string::npos) << r.err;
  EXPECT_EQ(cli("run --model " + dir + " --ids text --steps 2 --warmup 0 --batch 4 --layer-us 5 --timeline none").code, 2);

  // hash --model: the directory's configuration and table give the ids of the same layout with the committed table.
  r = cli("hash --model " + dir + " --tokens " + tokens + " --json --limit 5");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json by_model = parse(r.out);
  EXPECT_EQ(by_model["compressed_vocab_size"], 98627);
  EXPECT_EQ(by_model["model"], dir);
  r = cli("hash --layout v41-flash-mini --table-size 1MiB --expect-vocab 98627 --compression-table " +
          default_compression_table_path() + " --tokens " + tokens + " --json --limit 5");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json by_preset = parse(r.out);
  EXPECT_EQ(by_model["ids"], by_preset["ids"]);
  EXPECT_EQ(by_model["head_rows"], by_preset["head_rows"]);
  EXPECT_EQ(cli("hash --model " + dir + " --layout tiny --tokens " + tokens).code, 2);

  EXPECT_EQ(listing(dir), before) << "something was written into the model directory";
}

TEST_F(ReleasedModelDir, CompressedVocabOtherThanConfigExitsTwo) {
  const std::string dir = create("model", 99092);
  const std::vector<std::string> before = listing(dir);
  const std::string tokens = token_file();
  for (const std::string& args : {"table info " + dir, "table load " + dir + " --verify",
                                 "run --model " + dir + " --steps 1 --timeline none",
                                 "hash --model " + dir + " --tokens " + tokens}) {
    SCOPED_TRACE(args);
    const auto r = cli(args);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("V' = 98627"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("engram_compressed_vocab_size = 99092"), std::string::npos) << r.err;
  }
  EXPECT_EQ(listing(dir), before);
}

}  // namespace
}  // namespace engram
