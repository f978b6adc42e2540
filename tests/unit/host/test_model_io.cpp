// Hugging Face model directories: generator -> read_model_dir -> load_model into fused and split spans
// (bytes against synth_row on fresh seeds, poisoned buffers), the V4.1-Flash layout from its config.json
// (sparse shards with the released tensor shapes: the reference's primes to the row), the compression-table
// checks (V', pad id, tokenizer.json SHA-256), and the generator's atomicity (nothing left behind on
// failure, only synthetic directories replaced). Malformed input is test_model_io_malformed.cpp.
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
#include "support/model_io_support.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

using namespace model_io_test;  // with its fs (std::filesystem) and json

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
  expect_table_refused(*this, o, {"SHA-256", "remove it"});
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
