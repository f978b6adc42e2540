// `engram table create --format hf-model | info DIR | load DIR` as a user runs them: a synthetic model
// directory is written, described (--json: tensors, shards, rows past the primes, the compression
// table's V'), loaded and verified row by row in both row layouts (prefaulted or first touched by
// the readers) and with the side-by-side sequential read; bad input (existing output, options of the other format, a V' mismatch, a
// truncated shard, a wrong dtype, unknown tensor names, a tokenizer.json that cannot be parsed) exits 2 and leaves
// nothing behind; `table load --verify` refuses what `table info` refuses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/cli.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TableModelCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
    base_ = fs::temp_directory_path() / ("engram-table-model-cli-" + std::to_string(getpid()) + "-" + std::to_string(rng_()));
    root_ = base_ / "out";  // outputs only: the CLI's stderr goes to base_
    fs::create_directories(root_);
    dir_ = (root_ / "model").string();
    seed_ = std::to_string(rng_() % 1000000);
  }
  void TearDown() override {
    if (!base_.empty()) fs::remove_all(base_);
  }

  testing::CliSplitResult cli(const std::string& args) const { return testing::run_engram_split(args, base_); }
  void create(const std::string& extra = "") {
    const auto r = cli("table create --format hf-model --layout v41-flash-mini --table-size 1MiB --extra-rows 3 --seed " +
                       seed_ + " --out " + dir_ + " " + extra);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // `table load DIR --verify` refuses a directory `table info DIR` refused (`info`), with the same message, before
  // any row is loaded.
  void expect_load_verify_refuses_as_info(const testing::CliSplitResult& info) const {
    const std::string prefix = "engram table info: ";
    const size_t at = info.err.find(prefix);
    ASSERT_NE(at, std::string::npos) << info.err;
    const std::string message = info.err.substr(at + prefix.size());
    const auto r = cli("table load " + dir_ + " --verify");
    EXPECT_EQ(r.code, info.code) << r.out << r.err;
    EXPECT_NE(r.err.find("engram table load: " + message), std::string::npos) << r.err << "\nexpected: " << message;
    EXPECT_EQ(r.out.find("loaded"), std::string::npos) << r.out;
  }
  static json parse(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << text;
    return j;
  }

  std::mt19937_64 rng_{std::random_device{}()};
  fs::path base_, root_;
  std::string dir_;
  std::string seed_;
};

TEST_F(TableModelCli, CreateInfoLoadVerify) {
  create();
  auto r = cli("table info " + dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json info = parse(r.out);
  EXPECT_EQ(info["format"], "hf-model");
  EXPECT_EQ(info["config"]["engram_layer_ids"], json({1, 14}));
  EXPECT_EQ(info["config"]["engram_head_dim"], 256);
  EXPECT_EQ(info["seed"].get<uint64_t>(), std::stoull(seed_));
  ASSERT_EQ(info["layers"].size(), 2u);
  for (const json& l : info["layers"]) {
    EXPECT_EQ(l["unused_rows"], 3);
    EXPECT_EQ(l["num_embeddings"].get<int64_t>(), l["prime_rows"].get<int64_t>() + 3);
    EXPECT_EQ(l["weight"]["dtype"], "F8_E4M3");
    EXPECT_EQ(l["scale"]["dtype"], "F8_E8M0");
  }
  EXPECT_EQ(info["shards"].size(), 4u);
  EXPECT_EQ(info["compression_table"]["compressed_vocab_size"], 98627);
  EXPECT_EQ(info["compression_table"]["matches_config"], true);
  EXPECT_TRUE(info["compression_table"]["error"].is_null());

  r = cli("table info " + dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("+ 3 past them (not loaded)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("V' 98627 = engram_compressed_vocab_size"), std::string::npos) << r.out;

  for (const char* layout : {"fused", "split"}) {
    const bool prefault = std::string(layout) == "fused";
    r = cli("table load " + dir_ + " --verify --json --row-layout " + layout + " --cache cold --compare-sequential" +
            (prefault ? "" : " --no-prefault"));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const json load = parse(r.out);
    EXPECT_EQ(load["prefault"], prefault);
    EXPECT_EQ(load["mismatched_rows"], 0);
    EXPECT_EQ(load["row_layout"], layout);
    EXPECT_EQ(load["unused_rows"], json({3, 3}));
    EXPECT_EQ(load["bytes"].get<int64_t>(), load["rows"].get<int64_t>() * 264);
    EXPECT_FALSE(load["sequential_seconds"].is_null());
    EXPECT_FALSE(load["load_vs_sequential"].is_null());
  }
  r = cli("table load " + dir_ + " --verify");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("verify: 0 of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 past the primes not loaded"), std::string::npos) << r.out;
}

TEST_F(TableModelCli, BadCreateExitsTwoAndLeavesNothing) {
  auto r = cli("table create --format hf-model --layout v41-flash-mini --table-size 1MiB --out " + dir_ +
               " --compression-table " + (root_ / "missing.bin").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(entries().empty());
  r = cli("table create --format hf-model --layout v41-flash-mini --table-size 1MiB --out " + (root_ / "no" / "m").string());
  EXPECT_EQ(r.code, 2) << r.err;
  r = cli("table create --layout tiny --extra-rows 3 --out " + (root_ / "x.safetensors").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--extra-rows applies to --format hf-model only"), std::string::npos) << r.err;
  r = cli("table create --format hf-model --layout v41-flash-mini --tensor-names bad --out " + dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(entries().empty());
  create();
  r = cli("table create --format hf-model --layout tiny --out " + dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  create("--force");
  EXPECT_EQ(entries(), std::vector<std::string>{"model"});
}

TEST_F(TableModelCli, MalformedDirectoriesExitTwo) {
  // A config.json whose V' disagrees with the compression table it carries (table create refuses to write one).
  create();
  {
    const fs::path cfg = fs::path(dir_) / "config.json";
    std::ifstream in(cfg);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "\"engram_compressed_vocab_size\": 98627";
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, from.size(), "\"engram_compressed_vocab_size\": 99092");
    std::ofstream(cfg, std::ios::trunc) << text;
  }
  auto r = cli("table info " + dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("98627"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("99092"), std::string::npos) << r.err;
  expect_load_verify_refuses_as_info(r);
  r = cli("table load " + dir_ + " --tensor-names 'a.{L}.w,a.{L}.s'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("a.1.w is not in"), std::string::npos) << r.err;
  r = cli("table load " + dir_ + " --tensor-names nonsense");
  EXPECT_EQ(r.code, 2);
  r = cli("table load " + dir_ + " --cache lukewarm");
  EXPECT_EQ(r.code, 2);

  // A shard cut short.
  const fs::path last = fs::path(dir_) / "model-00004-of-00004.safetensors";
  fs::resize_file(last, fs::file_size(last) - 1000);
  r = cli("table info " + dir_ + " --json");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("model-00004-of-00004.safetensors"), std::string::npos) << r.err;
  r = cli("table load " + dir_ + " --verify");
  EXPECT_EQ(r.code, 2);

  // Options of a model directory given with a checkpoint file (one that exists: a missing input is refused first).
  { std::ofstream touch(root_ / "x.safetensors"); }
  r = cli("table info " + (root_ / "x.safetensors").string() + " --tensor-names 'a{L},b{L}'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("applies to a model directory only"), std::string::npos) << r.err;
}

// A tokenizer.json the compression table cannot be built from: info and load --verify exit 2 naming it.
TEST_F(TableModelCli, UnreadableTokenizerJsonExitsTwo) {
  create("--compression-table none --tokenizer-json none --compressed-vocab-size 98627");
  { std::ofstream(fs::path(dir_) / "tokenizer.json") << "{\"model\": [1, 2"; }
  const auto r = cli("table info " + dir_);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  expect_load_verify_refuses_as_info(r);
  // Without --verify the rows are loaded as before: the tokenizer is not what a load reads.
  EXPECT_EQ(cli("table load " + dir_).code, 0);
}

// `engram run --model DIR` takes the layout from config.json and hashes the default text with the directory's
// compression table; with --ranks the peers get the same content through the group's job.
TEST_F(TableModelCli, RunTakesTheModelDirectory) {
  create();
  for (const std::string ranks : {"2", "1"}) {
    SCOPED_TRACE("ranks " + ranks);
    auto r = cli("run --model " + dir_ + " --ranks " + ranks + " --batch 8 --steps 3 --warmup 1 --layer-us 5 --json --timeline none");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    if (ranks != "1") continue;  // the ranks report is another document
    const json j = parse(r.out);
    EXPECT_EQ(j["table"]["content"], "model " + dir_);
    EXPECT_EQ(j["table"]["engram_layers"], json({1, 14}));
    EXPECT_GT(j["lookup"]["rows"].get<int64_t>(), 0);
    EXPECT_EQ(entries(), std::vector<std::string>{"model"});
    if (j["workload"]["ids_note"].is_string())
      GTEST_SKIP() << "the text ids need the default token file (scripts/setup): " << j["workload"]["ids_note"];
    EXPECT_NE(j["workload"]["ids"].get<std::string>().find("text"), std::string::npos) << j["workload"].dump();
  }
}

TEST_F(TableModelCli, RunModelOptionsThatCannotApplyExitTwo) {
  create();
  EXPECT_EQ(cli("run --model " + dir_ + " --layout tiny --steps 1").code, 2);
  EXPECT_EQ(cli("run --model " + dir_ + " --table-size 1GiB --steps 1").code, 2);
  EXPECT_EQ(cli("run --model " + dir_ + " --checkpoint x.safetensors --steps 1").code, 2);
  EXPECT_EQ(cli("run --tensor-names 'a.{L}.w,a.{L}.s' --steps 1").code, 2);
  const auto bad = cli("run --model " + dir_ + " --tensor-names 'a.{L}.w,a.{L}.s' --steps 1");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("a.1.w"), std::string::npos) << bad.err;
  EXPECT_EQ(cli("run --model " + (root_ / "absent").string() + " --steps 1").code, 2);
  EXPECT_EQ(entries(), std::vector<std::string>{"model"});
}

}  // namespace
}  // namespace engram
