// Malformed model input: every malformed directory (config, index, shards: dangling and misplaced entries,
// shapes and dtypes against config, packed FP4, truncation, num_embeddings below the primes) as
// kInvalidArgument / kNotFound naming the tensor and shard, and the parsers of config.json and of the
// tensor-name patterns on bad text. The well-formed paths are test_model_io.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engram/layout.hpp"
#include "host/model_io.hpp"
#include "support/model_io_support.hpp"

namespace engram::host {
namespace {

using namespace model_io_test;  // with its fs (std::filesystem) and json

TEST(ModelTensorNamesParse, RejectsMalformedText) {
  for (const char* bad : {"", "a", "a{L},b{L},c{L}", "a,b{L}", "a{L}{L},b{L}", "x{L},x{L}"}) {
    auto r = parse_model_tensor_names(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
  const ModelTensorNames n;
  EXPECT_EQ(n.weight_of(14), "layers.14.engram.embed.weight");
  EXPECT_EQ(n.scale_of(1), "layers.1.engram.embed.scale");
}

// ---- malformed directories -------------------------------------------------------------------------

class ModelIoMalformed : public ModelIo {
 public:
  using ModelIo::dir_;
  using ModelIo::engram_shard;
  using ModelIo::file;
};

TEST_F(ModelIoMalformed, EachIsAnErrorNamingTheFault) {
  const EngramLayout l = small_layout();
  const int64_t rows1 = l.rows(0) + 5;
  auto engram_header = [](ModelIoMalformed& t, int layer_index, const std::function<void(json&)>& fn) {
    edit_shard_header(t.file(t.engram_shard(layer_index)), fn);
  };
  struct Case {
    const char* what;
    std::function<void(ModelIoMalformed&)> apply;
    Code code;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"no config.json", [](ModelIoMalformed& t) { fs::remove(t.file(kModelConfigFile)); }, Code::kNotFound,
       {"config.json"}},
      {"no index", [](ModelIoMalformed& t) { fs::remove(t.file(kModelIndexFile)); }, Code::kNotFound,
       {"model.safetensors.index.json", "model.safetensors"}},
      {"config not JSON", [](ModelIoMalformed& t) { write_text(t.file(kModelConfigFile), "{\"text_config\": "); },
       Code::kInvalidArgument, {"config.json", "not valid JSON"}},
      {"index not JSON", [](ModelIoMalformed& t) { write_text(t.file(kModelIndexFile), "[1, 2"); },
       Code::kInvalidArgument, {"model.safetensors.index.json", "not valid JSON"}},
      {"index without weight_map", [](ModelIoMalformed& t) { write_text(t.file(kModelIndexFile), "{\"metadata\": {}}"); },
       Code::kInvalidArgument, {"weight_map is missing"}},
      {"config field of the wrong type",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelConfigFile), [](json& j) { j["text_config"]["engram_head_dim"] = "64"; }); },
       Code::kInvalidArgument, {"text_config.engram_head_dim", "expected an integer"}},
      {"config without the Engram fields",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelConfigFile), [](json& j) { j.erase("text_config"); }); },
       Code::kInvalidArgument, {"no engram_layer_ids"}},
      {"num_embeddings below the sum of the primes",
       [&](ModelIoMalformed& t) {
         edit_json(t.file(kModelConfigFile), [&](json& j) { j["text_config"]["engram_num_embeddings"][0] = l.rows(0) - 1; });
       },
       Code::kInvalidArgument, {"engram_num_embeddings[0] = " + std::to_string(l.rows(0) - 1), "is below", std::to_string(l.rows(0))}},
      {"tensor shape disagreeing with config.json (rows)",
       [&](ModelIoMalformed& t) {
         edit_json(t.file(kModelConfigFile), [&](json& j) { j["text_config"]["engram_num_embeddings"][0] = rows1 + 1; });
       },
       Code::kInvalidArgument,
       {"tensor layers.1.engram.embed.weight in shard model-00003-of-00004.safetensors", "F8_E4M3 [" + std::to_string(rows1) + ", 64]",
        "expected F8_E4M3 [" + std::to_string(rows1 + 1) + ", 64]"}},
      {"tensor shape disagreeing with config.json (head_dim)",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelConfigFile), [](json& j) { j["text_config"]["engram_head_dim"] = 128; }); },
       Code::kInvalidArgument, {"layers.1.engram.embed.weight", "expected F8_E4M3"}},
      {"dangling weight_map entry (shard without the tensor)",
       [](ModelIoMalformed& t) {
         edit_json(t.file(kModelIndexFile),
                   [](json& j) { j["weight_map"]["layers.1.engram.embed.scale"] = "model-00001-of-00004.safetensors"; });
       },
       Code::kInvalidArgument,
       {"tensor layers.1.engram.embed.scale", "maps it to shard model-00001-of-00004.safetensors", "no such tensor"}},
      {"misplaced weight_map entry (the other Engram shard)",
       [](ModelIoMalformed& t) {
         edit_json(t.file(kModelIndexFile),
                   [](json& j) { j["weight_map"]["layers.3.engram.embed.weight"] = "model-00003-of-00004.safetensors"; });
       },
       Code::kInvalidArgument, {"layers.3.engram.embed.weight", "model-00003-of-00004.safetensors", "no such tensor"}},
      {"weight_map entry naming a missing shard",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelIndexFile), [](json& j) { j["weight_map"]["norm.weight"] = "model-00009-of-00009.safetensors"; }); },
       Code::kNotFound, {"model-00009-of-00009.safetensors", "norm.weight"}},
      {"weight_map entry outside the directory",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelIndexFile), [](json& j) { j["weight_map"]["norm.weight"] = "../x.safetensors"; }); },
       Code::kInvalidArgument, {"not a file name inside the model directory"}},
      {"Engram tensor missing from the index",
       [](ModelIoMalformed& t) { edit_json(t.file(kModelIndexFile), [](json& j) { j["weight_map"].erase("layers.3.engram.embed.scale"); }); },
       Code::kInvalidArgument, {"layers.3.engram.embed.scale is not in model.safetensors.index.json"}},
      {"Engram tensor missing from its shard",
       [&](ModelIoMalformed& t) { engram_header(t, 1, [](json& h) { h.erase("layers.3.engram.embed.weight"); }); },
       Code::kInvalidArgument, {"layers.3.engram.embed.weight", "no such tensor"}},
      {"packed FP4 weight (U8 [N, d/2])",
       [&](ModelIoMalformed& t) {
         engram_header(t, 0, [&](json& h) {
           json& w = h["layers.1.engram.embed.weight"];
           const int64_t b = w["data_offsets"][0].get<int64_t>();
           w = {{"dtype", "U8"}, {"shape", {rows1, 32}}, {"data_offsets", {b, b + rows1 * 32}}};
         });
       },
       Code::kInvalidArgument, {"layers.1.engram.embed.weight", "U8 [" + std::to_string(rows1) + ", 32]", "packed FP4"}},
      {"scale dtype U8 instead of F8_E8M0",
       [&](ModelIoMalformed& t) { engram_header(t, 0, [](json& h) { h["layers.1.engram.embed.scale"]["dtype"] = "U8"; }); },
       Code::kInvalidArgument, {"layers.1.engram.embed.scale", "expected F8_E8M0"}},
      {"truncated Engram shard",
       [](ModelIoMalformed& t) {
         const fs::path p = t.file(t.engram_shard(1));
         fs::resize_file(p, fs::file_size(p) - 100);
       },
       Code::kInvalidArgument, {"shard model-00004-of-00004.safetensors", "truncated"}},
      {"Engram shard not a safetensors file",
       [](ModelIoMalformed& t) { write_text(t.file(t.engram_shard(0)), "not safetensors"); }, Code::kInvalidArgument,
       {"shard model-00003-of-00004.safetensors", "header length"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir_);
    make();
    c.apply(*this);
    auto r = read_model_dir(dir_);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().to_string();
    EXPECT_EQ(r.status().message().rfind("model " + dir_ + ": ", 0), 0u) << r.status().to_string();
    for (const std::string& m : c.message) EXPECT_NE(r.status().message().find(m), std::string::npos) << r.status().to_string();
  }
}

TEST(ModelConfigParse, FieldsAliasesAndRanges) {
  const std::string flat =
      R"({"engram_layer_ids":[2],"engram_num_embeddings":[500],"engram_vocab_size":50,"engram_max_ngram_size":2,)"
      R"("engram_n_heads":3,"engram_head_dim":32,"engram_compressed_vocab_size":9,"engram_pad_id":4})";
  auto c = parse_model_config(flat, "config.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->section, "");
  EXPECT_EQ(c->pad_token_id, 4);
  EXPECT_TRUE(c->pad_token_id_given);
  EXPECT_FALSE(c->synthetic_seed);
  json j = json::parse(flat);
  j.erase("engram_pad_id");
  c = parse_model_config(j.dump(), "config.json");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->pad_token_id, kDefaultPadId);
  EXPECT_FALSE(c->pad_token_id_given);
  const std::vector<std::pair<std::function<void(json&)>, std::string>> bad = {
      {[](json& x) { x["engram_num_embeddings"] = {500, 600}; }, "has 2 entries for 1 engram_layer_ids"},
      {[](json& x) { x["engram_head_dim"] = 48; }, "not a multiple of 32"},
      {[](json& x) { x["engram_max_ngram_size"] = 1; }, "engram_max_ngram_size = 1 is not in [2, 16]"},
      {[](json& x) { x["engram_layer_ids"] = json::array(); }, "engram_layer_ids is empty"},
      {[](json& x) { x.erase("engram_vocab_size"); }, "engram_vocab_size is missing"},
      {[](json& x) { x["engram_num_embeddings"] = {-1}; }, "engram_num_embeddings[0] = -1"},
      {[](json& x) { x["engram_offload_synthetic"] = {{"generator", "synth_row"}}; }, "engram_offload_synthetic.seed"},
  };
  for (const auto& [fn, msg] : bad) {
    json x = json::parse(flat);
    fn(x);
    auto r = parse_model_config(x.dump(), "config.json");
    ASSERT_FALSE(r.is_ok()) << msg;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(msg), std::string::npos) << r.status().to_string();
  }
  EXPECT_FALSE(parse_model_config(std::string(100, '[') + std::string(100, ']'), "config.json").is_ok());
}

}  // namespace
}  // namespace engram::host
