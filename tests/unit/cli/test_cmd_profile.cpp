// `engram profile` as a user runs it: the written profile equals compute_hot_profile on the same token file and
// hasher; --holdout leaves a deterministic set of documents out of the counts, lists them in the header and
// --holdout-out writes exactly them as a token file; bad input (no --tokens, a token id >= vocab) exits 2 and
// writes no profile.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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
#include "host/hot_profile.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Out = testing::CliSplitResult;
Out run_cli(const std::string& args, const fs::path& dir) { return testing::run_engram_split(args, dir); }

class EngramProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("engram-profile-cli-" + std::to_string(getpid()) + "-" + std::to_string(rng_()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A DeepSeek-V3 token file of `docs` documents of `per_doc` ids drawn from a few token ids (so N-grams repeat).
  std::string write_tokens(int docs, int64_t per_doc, uint32_t bad_id = 0) {
    const fs::path p = dir_ / "in.tokens";
    std::vector<uint32_t> ids;
    json jd = json::array();
    for (int d = 0; d < docs; ++d) {
      jd.push_back({{"source", "/doc/" + std::to_string(d) + ".txt"}, {"first_token", static_cast<int64_t>(ids.size())},
                    {"token_count", per_doc}});
      for (int64_t i = 0; i < per_doc; ++i) ids.push_back(static_cast<uint32_t>(100 + rng_() % 6));
    }
    if (bad_id) ids[3] = bad_id;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    json j = {{"format", "engram-tokens"}, {"format_version", 1}, {"tokenizer", "deepseek-ai/DeepSeek-V3"},
              {"tokenizer_version", "3.7.2"}, {"vocab_size", 128815}, {"dtype", "uint32le"},
              {"token_count", ids.size()}, {"documents", jd}};
    std::ofstream(p.string() + ".json") << j.dump();
    return p.string();
  }

  std::mt19937_64 rng_{std::random_device{}()};
  fs::path dir_;
};

TEST_F(EngramProfile, ProfileEqualsTheLibrary) {
  const std::string tokens = write_tokens(5, 30);
  const std::string out = (dir_ / "p.profile").string();
  Out o = run_cli("profile --tokens " + tokens + " --layout tiny --seed 11 --seq-len 8 --json --out " + out, dir_);
  ASSERT_EQ(o.code, 0) << o.err;
  const json j = json::parse(o.out);
  EXPECT_EQ(j["schema"], "engram.profile/1");  // every --json document names its schema (docs/json.md)
  EXPECT_EQ(j["tokens"], 150);
  auto p = host::read_hot_profile(out);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->seed, 11);
  EXPECT_EQ(p->seq_len, 8);

  auto tf = read_token_file(tokens);
  ASSERT_TRUE(tf.is_ok());
  auto table = read_compression_table(default_compression_table_path());
  ASSERT_TRUE(table.is_ok()) << table.status().to_string();
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  EXPECT_TRUE(host::check_hot_profile_layout(*p, *layout).is_ok());
  auto h = NgramHasher::create(*layout, std::move(*table), NgramHashOptions{.seed = 11});
  ASSERT_TRUE(h.is_ok());
  host::HotProfileOptions po;
  po.seq_len = 8;
  auto want = host::compute_hot_profile(*h, {{&*tf, {}}}, po);
  ASSERT_TRUE(want.is_ok());
  ASSERT_EQ(p->layers.size(), want->layers.size());
  for (size_t i = 0; i < want->layers.size(); ++i) {
    EXPECT_EQ(p->layers[i].id_counts, want->layers[i].id_counts);
    EXPECT_EQ(p->layers[i].lookups, 150 * layout->heads());
    EXPECT_GT(p->layers[i].id_counts.front().second, 1);  // ids repeat
  }
}

TEST_F(EngramProfile, HoldoutIsDisjointAndWritten) {
  const std::string tokens = write_tokens(40, 10);
  const std::string out = (dir_ / "train.profile").string(), held = (dir_ / "held.tokens").string();
  Out o = run_cli("profile --tokens " + tokens + " --layout tiny --holdout 0.5 --holdout-out " + held + " --out " + out, dir_);
  ASSERT_EQ(o.code, 0) << o.err;
  auto p = host::read_hot_profile(out);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  auto h = read_token_file(held);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  const json& hj = p->info["holdout"];
  ASSERT_TRUE(hj.is_object()) << p->info.dump();
  const auto docs = hj["files"][0]["documents"].get<std::vector<int64_t>>();
  EXPECT_EQ(static_cast<int64_t>(docs.size()), static_cast<int64_t>(h->documents.size()));
  EXPECT_GT(docs.size(), 5u);
  EXPECT_LT(docs.size(), 35u);
  EXPECT_EQ(p->tokens + static_cast<int64_t>(h->ids.size()), 400);
  EXPECT_EQ(p->sources[0].documents + static_cast<int64_t>(docs.size()), 40);
  for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(h->documents[i].source, "/doc/" + std::to_string(docs[i]) + ".txt");
  // Deterministic: the same command gives the same split.
  const std::string out2 = (dir_ / "train2.profile").string();
  ASSERT_EQ(run_cli("profile --tokens " + tokens + " --layout tiny --holdout 0.5 --out " + out2, dir_).code, 0);
  auto p2 = host::read_hot_profile(out2);
  ASSERT_TRUE(p2.is_ok());
  EXPECT_EQ(p2->info["holdout"]["files"][0]["documents"], hj["files"][0]["documents"]);
  EXPECT_EQ(p2->layers[0].id_counts, p->layers[0].id_counts);
}

TEST_F(EngramProfile, BadInputExitsTwoAndWritesNothing) {
  const std::string out = (dir_ / "x.profile").string();
  Out o = run_cli("profile --layout tiny --out " + out, dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--tokens"), std::string::npos) << o.err;
  const std::string tokens = write_tokens(2, 10, 200000);
  o = run_cli("profile --tokens " + tokens + " --layout tiny --out " + out, dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("200000"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace engram
