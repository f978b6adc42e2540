// Model-directory test helpers shared by test_model_io.cpp and test_model_io_malformed.cpp: a fixture that
// writes a synthetic Hugging Face model directory into a private temporary directory, edits of its JSON files
// and shard headers (the data section kept byte for byte), a small two-layer layout, poisoned table buffers and
// the check that a load gives synth_row's bytes.
#pragma once

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

namespace engram::host::model_io_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline uint64_t fresh_seed() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng();
}

inline std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

inline void edit_json(const fs::path& p, const std::function<void(json&)>& fn) {
  json j = json::parse(read_text(p));
  fn(j);
  write_text(p, j.dump(2));
}

// Rewrites a shard's header through `fn`, keeping its data section byte for byte.
inline void edit_shard_header(const fs::path& p, const std::function<void(json&)>& fn) {
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
inline EngramLayout small_layout() {
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
inline void expect_loads_synth_rows(const ModelInfo& info, RowFormat format, uint64_t seed, ModelLoadOptions opt = {}) {
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

}  // namespace engram::host::model_io_test
