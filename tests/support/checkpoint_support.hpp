// Checkpoint test helpers: a fixture with a private temporary directory, files crafted byte by byte (the
// safetensors length prefix, a header written independently of the library's writer), small layouts with
// odd shapes, and the check that a table holds the synthetic rows of a seed.
#pragma once

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

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/checkpoint.hpp"

namespace engram::host::ckpt_test {


inline uint64_t fresh_seed() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng();
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("engram_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(fresh_seed() % 1000000007));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> dir_entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path dir_;
};

inline void write_file(const std::string& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// A file: 8-byte little-endian length, the header text, then data_bytes of random data.
inline std::vector<uint8_t> craft(const std::string& header_text, uint64_t data_bytes) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header_text.begin(), header_text.end());
  std::mt19937_64 rng(fresh_seed());
  for (uint64_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(rng()));
  return b;
}

inline std::vector<uint8_t> cut_to(std::vector<uint8_t> b, size_t n) {
  b.resize(std::min(b.size(), n));
  return b;
}

inline std::vector<uint8_t> with_length(std::vector<uint8_t> b, uint64_t n) {
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  return b;
}

// A well-formed engram header for `l`, built here independently of the writer: metadata as
// JSON-encoded strings, payload then scales per layer, back to back. Returns the data section size.
inline nlohmann::json engram_header(const EngramLayout& l, uint64_t* data_bytes) {
  nlohmann::json h;
  uint64_t off = 0;
  for (int i = 0; i < l.n_layers(); ++i) {
    const uint64_t rows = static_cast<uint64_t>(l.rows(i));
    const std::string base = "engram.layer" + std::to_string(l.layer_ids[i]);
    h[base + ".payload"] = {{"dtype", "F8_E4M3"}, {"shape", {rows, l.d}}, {"data_offsets", {off, off + rows * l.d}}};
    off += rows * l.d;
    h[base + ".scales"] = {{"dtype", "U8"}, {"shape", {rows, l.d / 32}}, {"data_offsets", {off, off + rows * (l.d / 32)}}};
    off += rows * (l.d / 32);
  }
  h["__metadata__"] = {{"format_version", "1"},
                       {"layout_name", nlohmann::json(l.name).dump()},
                       {"layer_ids", nlohmann::json(l.layer_ids).dump()},
                       {"max_ngram", std::to_string(l.max_ngram)},
                       {"heads_per_order", std::to_string(l.heads_per_order)},
                       {"vocab_size_per_order", nlohmann::json(l.vocab_size_per_order).dump()},
                       {"d", std::to_string(l.d)},
                       {"head_rows", nlohmann::json(l.head_rows).dump()}};
  *data_bytes = off;
  return h;
}

inline EngramLayout tiny_layout(RowFormat f = RowFormat::kSplit) {
  auto l = make_preset_layout("tiny", 0, f);
  EXPECT_TRUE(l.is_ok()) << l.status().to_string();
  return *l;
}

// Two layers, d = 96 (3 scales, fused record 112 B with 13 B of padding), orders 2..3 x 3 heads.
inline EngramLayout odd_layout(RowFormat f) {
  EngramLayout l;
  l.name = "custom";
  l.layer_ids = {3, 7};
  l.max_ngram = 3;
  l.heads_per_order = 3;
  l.vocab_size_per_order = {500 + static_cast<int64_t>(fresh_seed() % 300), 900};
  l.d = 96;
  l.format = f;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

// Every row of every layer equals synth_row(seed, ...); fused padding is zero.
inline void expect_synthetic_rows(const HostTable& t, uint64_t seed) {
  const int d = t.layout().d;
  std::vector<uint8_t> p(static_cast<size_t>(d)), s(static_cast<size_t>(d / 32));
  for (int li = 0; li < t.n_layers(); ++li) {
    const TableView v = t.view(li);
    int64_t bad = 0;
    for (int64_t r = 0; r < v.rows; ++r) {
      synth_row(seed, li, r, d, p.data(), s.data());
      bad += std::memcmp(v.payload_of(r), p.data(), p.size()) != 0;
      bad += std::memcmp(v.scales_of(r), s.data(), s.size()) != 0;
      if (v.format == RowFormat::kFused)
        for (int64_t k = d + d / 32; k < v.stride_bytes; ++k) bad += v.payload_of(r)[k] != 0;
    }
    EXPECT_EQ(bad, 0) << "layer index " << li << " (" << row_format_name(v.format) << ")";
  }
}

inline std::unique_ptr<HostTable> alloc(const EngramLayout& l) {
  auto t = HostTable::allocate(l);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

inline WriteOptions quiet_write(int64_t chunk = kCheckpointDefaultChunkBytes, int threads = 0) {
  WriteOptions o;
  o.chunk_bytes = chunk;
  o.threads = threads;
  return o;
}

inline LoadOptions quiet_load(int64_t chunk = kCheckpointDefaultChunkBytes, int threads = 0) {
  LoadOptions o;
  o.chunk_bytes = chunk;
  o.threads = threads;
  return o;
}

}  // namespace engram::host::ckpt_test
