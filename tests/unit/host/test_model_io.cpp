// Hugging Face model directories: generator -> read_model_dir -> load_model into fused and split spans
// (bytes against synth_row on fresh seeds, poisoned buffers), the V4.1-Flash layout from its config.json
// (sparse shards with the released tensor shapes: the reference's primes to the row), every malformed
// directory (config, index, shards: dangling and misplaced entries, shapes and dtypes against config,
// packed FP4, truncation, num_embeddings below the primes) as kInvalidArgument / kNotFound naming the
// tensor and shard, the compression-table checks (V', pad id, tokenizer.json SHA-256), and the
// generator's atomicity (nothing left behind on failure, only synthetic directories replaced).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/model_io.hpp"
#include "host/safetensors.hpp"
#include "host/safetensors_write.hpp"
#include "host/token_io.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

uint64_t fresh_seed() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng();
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

void edit_json(const fs::path& p, const std::function<void(json&)>& fn) {
  json j = json::parse(read_text(p));
  fn(j);
  write_text(p, j.dump(2));
}

// Rewrites a shard's header through `fn`, keeping its data section byte for byte.
void edit_shard_header(const fs::path& p, const std::function<void(json&)>& fn) {
  const std::string bytes = read_text(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  json h = json::parse(bytes.substr(8, n));
  fn(h);
  auto head = encode_safetensors_header(h.dump());
  ASSERT_TRUE(head.is_ok()) << head.status().to_string();
  std::string out(head->begin(), head->end());
  out += bytes.substr(8 + n);
  write_text(p, out);
}

// Two Engram layers (1 and 3), orders 2..3 x 2 heads, d = 64: a few hundred rows per layer.
EngramLayout small_layout() {
  EngramLayout l;
  l.name = "test";
  l.layer_ids = {1, 3};
  l.max_ngram = 3;
  l.heads_per_order = 2;
  l.vocab_size_per_order = {97, 97};
  l.d = 64;
  l.format = RowFormat::kSplit;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

class ModelIo : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("engram_model_" + std::to_string(getpid()) + "_" + std::to_string(fresh_seed() % 1000000007));
    fs::create_directories(root_);
    dir_ = (root_ / "model").string();
    seed_ = fresh_seed();
  }
  void TearDown() override { fs::remove_all(root_); }

  SyntheticModelOptions options() const {
    SyntheticModelOptions o;
    o.seed = seed_;
    o.extra_rows = 5;
    o.compression_table = default_compression_table_path();
    o.chunk_bytes = 4096;  // many chunks even at these sizes
    return o;
  }
  void make(const SyntheticModelOptions& o, const EngramLayout& l = small_layout()) {
    const Status s = write_synthetic_model_dir(dir_, l, o);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  void make() { make(options()); }
  std::vector<std::string> root_entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path file(const std::string& name) const { return fs::path(dir_) / name; }
 public:
  const std::string& dir() const { return dir_; }

 protected:
  std::string engram_shard(int layer_index) const {
    auto info = read_model_dir(dir_);
    EXPECT_TRUE(info.is_ok()) << info.status().to_string();
    return info->layers.at(static_cast<size_t>(layer_index)).weight.shard;
  }

  fs::path root_;
  std::string dir_;
  uint64_t seed_ = 0;
};

// Private memory for every layer of `layout`, filled with `poison`, and its spans.
struct Tables {
  Tables(const EngramLayout& layout, uint8_t poison) {
    for (int i = 0; i < layout.n_layers(); ++i) {
      mem.emplace_back(static_cast<size_t>(layout.table_bytes(i)), poison);
      spans.push_back(layer_span(mem.back().data(), layout, i));
    }
  }
  std::vector<std::vector<uint8_t>> mem;
  std::vector<TableSpan> spans;
};

// Loads `info` into freshly poisoned buffers of `format` and checks every row against synth_row.
void expect_loads_synth_rows(const ModelInfo& info, RowFormat format, uint64_t seed, ModelLoadOptions opt = {}) {
  auto layout = model_layout(info, format);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  Tables tables(*layout, 0xA5);
  const std::vector<TableSpan>& spans = tables.spans;
  const Status s = load_model(info, *layout, spans, opt);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const int d = layout->d;
  std::vector<uint8_t> p(static_cast<size_t>(d)), sc(static_cast<size_t>(d / 32));
  for (int i = 0; i < layout->n_layers(); ++i) {
    const TableSpan& sp = spans[static_cast<size_t>(i)];
    for (int64_t r = 0; r < sp.rows; ++r) {
      synth_row(seed, i, r, d, p.data(), sc.data());
      ASSERT_EQ(std::memcmp(sp.payload_of(r), p.data(), p.size()), 0) << "layer " << i << " row " << r;
      ASSERT_EQ(std::memcmp(sp.scales_of(r), sc.data(), sc.size()), 0) << "layer " << i << " row " << r;
      if (format == RowFormat::kFused) {
        for (int64_t b = d + d / 32; b < sp.stride_bytes; ++b) ASSERT_EQ(sp.payload_of(r)[b], 0) << "padding, row " << r;
      }
    }
  }
}

// ---- round trips ---------------------------------------------------------------------------------

TEST_F(ModelIo, GeneratorReadLoadRoundTripFusedAndSplit) {
  make();
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_TRUE(info->has_index);
  EXPECT_EQ(info->shards.size(), 4u);  // 2 of other tensors + one per Engram layer
  ASSERT_EQ(info->layers.size(), 2u);
  const EngramLayout want = small_layout();
  for (int i = 0; i < 2; ++i) {
    const ModelLayer& ml = info->layers[static_cast<size_t>(i)];
    EXPECT_EQ(ml.layer_id, want.layer_ids[static_cast<size_t>(i)]);
    EXPECT_EQ(ml.prime_rows, want.rows(i));
    EXPECT_EQ(ml.unused_rows(), 5);
    EXPECT_EQ(ml.weight.dtype, "F8_E4M3");
    EXPECT_EQ(ml.scale.dtype, "F8_E8M0");
    EXPECT_EQ(ml.weight.shard, ml.scale.shard);
    // Each Engram layer in a last shard of its own.
    EXPECT_EQ(ml.weight.shard, info->shards[static_cast<size_t>(2 + i)].name);
  }
  EXPECT_EQ(info->layout.head_rows, want.head_rows);
  EXPECT_EQ(info->config.synthetic_generator, std::string("synth_row"));
  EXPECT_EQ(info->config.synthetic_seed, seed_);
  EXPECT_EQ(info->config.compressed_vocab_size, 98627);
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
    SCOPED_TRACE(row_format_name(f));
    ModelLoadOptions opt;
    opt.chunk_bytes = 1000 + static_cast<int64_t>(fresh_seed() % 5000);  // odd chunks: rows across items
    opt.threads = 3;
    expect_loads_synth_rows(*info, f, seed_, opt);
  }
}

TEST_F(ModelIo, V41ShapedTablesLoadWithDefaultOptions) {
  auto mini = make_preset_layout("v41-flash-mini", 1 << 20, RowFormat::kSplit);
  ASSERT_TRUE(mini.is_ok());
  SyntheticModelOptions o = options();
  o.extra_rows = 0;
  o.other_shards = 3;
  make(o, *mini);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->layout.d, 256);
  EXPECT_EQ(info->layout.heads(), 24);
  EXPECT_EQ(info->shards.size(), 5u);
  EXPECT_EQ(info->layers[0].unused_rows(), 0);
  expect_loads_synth_rows(*info, RowFormat::kFused, seed_);
  expect_loads_synth_rows(*info, RowFormat::kSplit, seed_);
}

TEST_F(ModelIo, EveryIndexEntryNamesATensorOfItsShard) {
  make();
  const json index = json::parse(read_text(file(kModelIndexFile)));
  int64_t bytes = 0;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    const std::string path = file(shard.get<std::string>()).string();
    auto f = sys::open_read(path);
    ASSERT_TRUE(f.is_ok());
    auto h = read_safetensors_header(*f);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    const SafetensorsTensor* t = h->find(name);
    ASSERT_NE(t, nullptr) << name << " in " << path;
    bytes += static_cast<int64_t>(t->size_bytes());
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), bytes);
  // Unrelated tensors with the table's own dtypes sit beside it, and the data section interleaves them.
  auto f = sys::open_read(file(engram_shard(0)).string());
  ASSERT_TRUE(f.is_ok());
  auto h = read_safetensors_header(*f);
  ASSERT_TRUE(h.is_ok());
  std::vector<std::string> order;
  for (const auto& t : h->tensors) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"layers.1.engram.wkv.weight", "layers.1.engram.embed.weight",
                                             "layers.1.engram.q_weight", "layers.1.engram.embed.scale",
                                             "layers.1.engram.k_weight", "layers.1.engram.wkv.scale"}));
}

TEST_F(ModelIo, CustomTensorNames) {
  auto names = parse_model_tensor_names("model.layers.{L}.engram.table.w,model.layers.{L}.engram.table.s");
  ASSERT_TRUE(names.is_ok()) << names.status().to_string();
  SyntheticModelOptions o = options();
  o.names = *names;
  make(o);
  auto plain = read_model_dir(dir_);
  ASSERT_FALSE(plain.is_ok());
  EXPECT_EQ(plain.status().code(), Code::kInvalidArgument);
  EXPECT_NE(plain.status().message().find("layers.1.engram.embed.weight is not in"), std::string::npos)
      << plain.status().to_string();
  EXPECT_NE(plain.status().message().find("--tensor-names"), std::string::npos);
  auto info = read_model_dir(dir_, *names);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->layers[1].scale.name, "model.layers.3.engram.table.s");
  expect_loads_synth_rows(*info, RowFormat::kFused, seed_);
}

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

TEST_F(ModelIo, SingleSafetensorsFileWithoutIndex) {
  make();
  // A one-file model: the two tables of both layers in model.safetensors, no index.
  const fs::path single = fs::path(root_) / "single";
  fs::create_directories(single);
  fs::copy_file(file(kModelConfigFile), single / kModelConfigFile);
  const EngramLayout l = small_layout();
  std::vector<TensorGroup> groups;
  for (int li = 0; li < l.n_layers(); ++li) {
    const int64_t rows = l.rows(li) + 5;
    const std::string p = "layers." + std::to_string(l.layer_ids[static_cast<size_t>(li)]) + ".engram.embed.";
    groups.push_back({rows,
                      {{p + "weight", "F8_E4M3", {rows, l.d}}, {p + "scale", "F8_E8M0", {rows, l.d / 32}}},
                      [this, li, &l](int64_t lo, int64_t hi, std::span<uint8_t* const> out) {
                        for (int64_t r = lo; r < hi; ++r)
                          synth_row(seed_, li, r, l.d, out[0] + (r - lo) * l.d, out[1] + (r - lo) * (l.d / 32));
                      }});
  }
  ASSERT_TRUE(write_safetensors_file((single / kModelSingleShardFile).string(), groups, {}, {}, {}).is_ok());
  auto info = read_model_dir(single.string());
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_FALSE(info->has_index);
  EXPECT_EQ(info->shards.size(), 1u);
  expect_loads_synth_rows(*info, RowFormat::kSplit, seed_);
}

// The released V4.1-Flash shapes: config.json as published, shards with the published tensor shapes
// (sparse files: nothing is written but the headers). The prime walk must give engram_num_embeddings.
TEST_F(ModelIo, V41FlashConfigGivesTheReferencePrimes) {
  fs::create_directories(dir_);
  const json config = {{"model_type", "deepseek_v41"},
                       {"text_config",
                        {{"engram_layer_ids", {1, 14}},
                         {"engram_num_embeddings", {384006168, 384016682}},
                         {"engram_max_ngram_size", 4},
                         {"engram_vocab_size", 16000000},
                         {"engram_n_heads", 8},
                         {"engram_head_dim", 256},
                         {"engram_pad_token_id", 2},
                         {"engram_compressed_vocab_size", 99092}}}};
  write_text(file(kModelConfigFile), config.dump());
  json weight_map = json::object();
  for (auto [layer, rows, shard] : {std::tuple{1, int64_t{384006168}, 47}, std::tuple{14, int64_t{384016682}, 48}}) {
    const std::string name = "model-000" + std::to_string(shard) + "-of-00048.safetensors";
    const std::string p = "layers." + std::to_string(layer) + ".engram.";
    const int64_t wkv = 25600LL * 6144, wb = rows * 256, sb = rows * 8;
    json h = {{p + "wkv.weight", {{"dtype", "F8_E4M3"}, {"shape", {25600, 6144}}, {"data_offsets", {0, wkv}}}},
              {p + "embed.weight", {{"dtype", "F8_E4M3"}, {"shape", {rows, 256}}, {"data_offsets", {wkv, wkv + wb}}}},
              {p + "embed.scale", {{"dtype", "F8_E8M0"}, {"shape", {rows, 8}}, {"data_offsets", {wkv + wb, wkv + wb + sb}}}}};
    for (const auto& [k, v] : h.items()) weight_map[k] = name;
    auto head = encode_safetensors_header(h.dump());
    ASSERT_TRUE(head.is_ok());
    write_text(file(name), std::string(head->begin(), head->end()));
    fs::resize_file(file(name), head->size() + static_cast<uint64_t>(wkv + wb + sb));  // sparse
  }
  write_text(file(kModelIndexFile), json{{"weight_map", weight_map}}.dump());
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->config.section, "text_config");
  EXPECT_EQ(info->layout.rows(0), 384006168);
  EXPECT_EQ(info->layout.rows(1), 384016682);
  EXPECT_EQ(info->layers[0].unused_rows(), 0);
  EXPECT_EQ(info->layers[1].unused_rows(), 0);
  EXPECT_EQ(info->layout.head_rows[0].front(), 16000057);  // first prime >= 16,000,000
  EXPECT_EQ(info->layout.head_rows[0][1], 16000079);
  EXPECT_EQ(info->layers[1].weight.shard, "model-00048-of-00048.safetensors");
  EXPECT_EQ(info->table_bytes(), (384006168LL + 384016682LL) * 264);
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

// ---- loading -----------------------------------------------------------------------------------------

TEST_F(ModelIo, LoadRejectsMismatchedLayoutSpansAndChangedShards) {
  make();
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto layout = model_layout(*info, RowFormat::kSplit);
  ASSERT_TRUE(layout.is_ok());
  Tables tables(*layout, 0);
  const std::vector<TableSpan>& spans = tables.spans;
  EngramLayout other = *layout;
  other.d = 32;
  ASSERT_TRUE(other.finalize().is_ok());
  Status s = load_model(*info, other, spans);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("layout mismatch: d"), std::string::npos) << s.to_string();
  s = load_model(*info, *layout, std::span<const TableSpan>(spans.data(), 1));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("1 table spans for 2 Engram layers"), std::string::npos) << s.to_string();
  // The shard shrinks after read_model_dir: refused before any read.
  const fs::path shard = file(info->layers[1].weight.shard);
  fs::resize_file(shard, static_cast<uint64_t>(info->layers[1].weight.file_offset + 10));
  s = load_model(*info, *layout, spans);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("layers.3.engram.embed.weight"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("changed since"), std::string::npos) << s.to_string();
  fs::remove(shard);
  s = load_model(*info, *layout, spans);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
}

TEST_F(ModelIo, ProgressAndPinnedReaders) {
  make();
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  std::vector<TransferProgress> reports;
  ModelLoadOptions opt;
  opt.chunk_bytes = 2048;
  opt.on_progress = [&](const TransferProgress& p) { reports.push_back(p); };
  auto cpus = sys::thread_affinity();
  ASSERT_TRUE(cpus.is_ok());
  opt.reader_cpus = {cpus->front()};
  expect_loads_synth_rows(*info, RowFormat::kFused, seed_, opt);
  ASSERT_FALSE(reports.empty());
  int finals = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].total_bytes, info->table_bytes());
    EXPECT_STREQ(reports[i].phase, "load");
    if (i > 0) {
      EXPECT_GE(reports[i].done_bytes, reports[i - 1].done_bytes);
    }
    finals += reports[i].final;
  }
  EXPECT_EQ(finals, 1);
  EXPECT_TRUE(reports.back().final);
  EXPECT_EQ(reports.back().done_bytes, info->table_bytes());
  // A node that does not exist.
  ModelLoadOptions bad;
  bad.reader_node = 4095;
  auto layout = model_layout(*info, RowFormat::kSplit);
  ASSERT_TRUE(layout.is_ok());
  Tables tables(*layout, 0);
  EXPECT_EQ(load_model(*info, *layout, tables.spans, bad).code(), Code::kNotFound);
}

TEST_F(ModelIo, LoadDropsTheTableFromThePageCache) {
  make();
  auto magic = sys::filesystem_magic(dir_);
  if (magic.is_ok() && *magic == sys::kTmpfsMagic) GTEST_SKIP() << "tmpfs keeps file pages: DONTNEED cannot drop them";
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  expect_loads_synth_rows(*info, RowFormat::kFused, seed_);
  for (const ModelLayer& ml : info->layers) {
    auto f = sys::open_read(file(ml.weight.shard).string());
    ASSERT_TRUE(f.is_ok());
    auto resident = sys::page_cache_resident_bytes(*f, fs::file_size(file(ml.weight.shard)));
    ASSERT_TRUE(resident.is_ok());
    // Whatever stays is outside the table's rows or in pages at the tensors' edges.
    EXPECT_LT(*resident, ml.weight.file_offset + 4 * 4096) << ml.weight.shard;
  }
}

// ---- the compression table ---------------------------------------------------------------------------

TEST_F(ModelIo, CompressionTableMatchesConfig) {
  make();
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto t = read_model_compression_table(*info);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->compressed_vocab, 98627);
  const std::string cmd = model_compression_table_command(*info);
  EXPECT_NE(cmd.find("table --tokenizer-json '" + dir_ + "/tokenizer.json' --pad-id 2 --out '" + dir_ + "/engram.compress.bin'"),
            std::string::npos)
      << cmd;
}

// Writes a fresh directory with `o` and expects its compression table refused with all of `message`.
void expect_table_refused(ModelIo& t, const SyntheticModelOptions& o, const std::vector<std::string>& message) {
  fs::remove_all(t.dir());
  ASSERT_TRUE(write_synthetic_model_dir(t.dir(), small_layout(), o).is_ok());
  auto info = read_model_dir(t.dir());
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  auto table = read_model_compression_table(*info);
  ASSERT_FALSE(table.is_ok());
  EXPECT_EQ(table.status().code(), Code::kInvalidArgument);
  for (const std::string& m : message)
    EXPECT_NE(table.status().message().find(m), std::string::npos) << table.status().to_string();
}

TEST_F(ModelIo, CompressedVocabMismatchNamesBothNumbers) {
  SyntheticModelOptions o = options();
  o.compressed_vocab_size = 99092;
  expect_table_refused(*this, o, {"V' = 98627", "engram_compressed_vocab_size = 99092"});
  const Status s = check_compressed_vocab_size(10, "a.bin", 11, "config.json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(check_compressed_vocab_size(11, "a.bin", 11, "config.json").is_ok());
}

TEST_F(ModelIo, CompressionTableOfAnotherPadIdOrTokenizerIsRefused) {
  SyntheticModelOptions o = options();
  o.pad_token_id = 3;
  expect_table_refused(*this, o, {"pad id 2", "engram_pad_token_id = 3"});
  // A tokenizer.json other than the one the table was built from (its sidecar names the bundled file's SHA-256).
  const fs::path other = root_ / "tokenizer.json";
  write_text(other, "{\"model\": {}}");
  o = options();
  o.tokenizer_json = other.string();
  expect_table_refused(*this, o, {"SHA-256", "--tokenizer-json"});
}

TEST_F(ModelIo, CompressionTableBuiltFromTheDirectorysTokenizer) {
  const std::string bundled = bundled_tokenizer_json_path();
  if (!fs::exists(bundled)) GTEST_SKIP() << "no " << bundled << " (npm ci in tools/tokenize installs it)";
  SyntheticModelOptions o = options();
  o.tokenizer_json = bundled;
  make(o);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  auto sha = file_sha256(file(kModelTokenizerFile).string());
  ASSERT_TRUE(sha.is_ok());
  auto t = read_model_compression_table(*info);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->tokenizer_json_sha256, *sha);
}

// ---- the generator -----------------------------------------------------------------------------------

TEST_F(ModelIo, GeneratorFailuresLeaveNothingBehind) {
  SyntheticModelOptions o = options();
  o.compression_table = (root_ / "missing.bin").string();
  Status s = write_synthetic_model_dir(dir_, small_layout(), o);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  EXPECT_TRUE(root_entries().empty());
  // Fails after the shards are written (a directory is no tokenizer.json to copy): the temporary
  // directory goes too.
  o = options();
  o.tokenizer_json = root_.string();
  s = write_synthetic_model_dir(dir_, small_layout(), o);
  EXPECT_FALSE(s.is_ok());
  EXPECT_TRUE(root_entries().empty()) << root_entries().front();
  EngramLayout uneven = small_layout();
  uneven.vocab_size_per_order = {97, 101};
  ASSERT_TRUE(uneven.finalize().is_ok());
  s = write_synthetic_model_dir(dir_, uneven, options());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("one engram_vocab_size"), std::string::npos) << s.to_string();
  o = options();
  o.compression_table.clear();
  s = write_synthetic_model_dir(dir_, small_layout(), o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("no compressed vocabulary size"), std::string::npos) << s.to_string();
  s = write_synthetic_model_dir((root_ / "no" / "model").string(), small_layout(), options());
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  EXPECT_TRUE(root_entries().empty());
}

TEST_F(ModelIo, GeneratorReplacesOnlySyntheticDirectories) {
  make();
  Status s = write_synthetic_model_dir(dir_, small_layout(), options());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.to_string();
  SyntheticModelOptions o = options();
  o.overwrite = true;
  o.seed = seed_ + 1;
  make(o);
  auto info = read_model_dir(dir_);
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->config.synthetic_seed, seed_ + 1);
  EXPECT_EQ(root_entries(), std::vector<std::string>{"model"});
  // Not a synthetic model directory: never replaced.
  const fs::path precious = root_ / "precious";
  fs::create_directories(precious);
  write_text(precious / "data.txt", "keep me");
  s = write_synthetic_model_dir(precious.string(), small_layout(), o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a synthetic model directory"), std::string::npos) << s.to_string();
  EXPECT_EQ(read_text(precious / "data.txt"), "keep me");
  EXPECT_EQ(root_entries(), (std::vector<std::string>{"model", "precious"}));
}

}  // namespace
}  // namespace engram::host
