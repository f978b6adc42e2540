// Checkpoint I/O: round trips through safetensors files (synthetic and from tables, fused and split),
// the file's bytes against the safetensors layout, every malformed-file case (bytes crafted here),
// layout mismatches, progress reports, atomic replacement, page-cache dropping, and `engram table`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engram/layout.hpp"
#include "support/cli.hpp"
#include "engram/table.hpp"
#include "host/checkpoint.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

uint64_t fresh_seed() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng();
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("engram_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(fresh_seed() % 1000000007));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> dir_entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

void write_file(const std::string& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// A file: 8-byte little-endian length, the header text, then data_bytes of random data.
std::vector<uint8_t> craft(const std::string& header_text, uint64_t data_bytes) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header_text.begin(), header_text.end());
  std::mt19937_64 rng(fresh_seed());
  for (uint64_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(rng()));
  return b;
}

std::vector<uint8_t> cut_to(std::vector<uint8_t> b, size_t n) {
  b.resize(std::min(b.size(), n));
  return b;
}

std::vector<uint8_t> with_length(std::vector<uint8_t> b, uint64_t n) {
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  return b;
}

// A well-formed engram header for `l`, built here independently of the writer: metadata as
// JSON-encoded strings, payload then scales per layer, back to back. Returns the data section size.
json engram_header(const EngramLayout& l, uint64_t* data_bytes) {
  json h;
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
                       {"layout_name", json(l.name).dump()},
                       {"layer_ids", json(l.layer_ids).dump()},
                       {"max_ngram", std::to_string(l.max_ngram)},
                       {"heads_per_order", std::to_string(l.heads_per_order)},
                       {"vocab_size_per_order", json(l.vocab_size_per_order).dump()},
                       {"d", std::to_string(l.d)},
                       {"head_rows", json(l.head_rows).dump()}};
  *data_bytes = off;
  return h;
}

EngramLayout tiny_layout(RowFormat f = RowFormat::kSplit) {
  auto l = make_preset_layout("tiny", 0, f);
  EXPECT_TRUE(l.is_ok()) << l.status().to_string();
  return *l;
}

// Two layers, d = 96 (3 scales, fused record 112 B with 13 B of padding), orders 2..3 x 3 heads.
EngramLayout odd_layout(RowFormat f) {
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
void expect_synthetic_rows(const HostTable& t, uint64_t seed) {
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

std::unique_ptr<HostTable> alloc(const EngramLayout& l) {
  auto t = HostTable::allocate(l);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

WriteOptions quiet_write(int64_t chunk = kCheckpointDefaultChunkBytes, int threads = 0) {
  WriteOptions o;
  o.display = ProgressDisplay::kOff;
  o.chunk_bytes = chunk;
  o.threads = threads;
  return o;
}

LoadOptions quiet_load(int64_t chunk = kCheckpointDefaultChunkBytes, int threads = 0) {
  LoadOptions o;
  o.display = ProgressDisplay::kOff;
  o.chunk_bytes = chunk;
  o.threads = threads;
  return o;
}

// ---- round trips ---------------------------------------------------------------------------------

TEST_F(Checkpoint, SyntheticRoundTripIntoFusedAndSplitTables) {
  std::mt19937_64 rng(fresh_seed());
  auto mini = make_preset_layout("v41-flash-mini", 6 << 20, RowFormat::kSplit);
  ASSERT_TRUE(mini.is_ok());
  for (const EngramLayout& base : {tiny_layout(), odd_layout(RowFormat::kSplit), *mini}) {
    const uint64_t seed = rng();
    const std::string p = path(base.name + ".safetensors");
    // Small random chunks and thread counts exercise chunk edges and the parallel paths.
    ASSERT_TRUE(write_synthetic_checkpoint(p, base, seed, quiet_write(1 + rng() % 20000, 1 + rng() % 4)).is_ok());
    for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
      EngramLayout l = base;
      l.format = f;
      auto t = alloc(l);
      const Status s = load_checkpoint(p, *t, quiet_load(1 + rng() % 50000, 1 + rng() % 4));
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synthetic_rows(*t, seed);
    }
  }
}

TEST_F(Checkpoint, TableRoundTripKeepsEveryByte) {
  std::mt19937_64 rng(fresh_seed());
  for (RowFormat src_format : {RowFormat::kFused, RowFormat::kSplit}) {
    const EngramLayout l = odd_layout(src_format);
    auto src = alloc(l);
    src->fill_synthetic(rng(), 2);
    // Overwrite random rows with arbitrary bytes (NaN codes included): the file must carry them as-is.
    for (int li = 0; li < l.n_layers(); ++li) {
      const TableSpan s = src->span(li);
      for (int k = 0; k < 50; ++k) {
        const int64_t r = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.rows));
        for (int i = 0; i < l.d; ++i) s.payload_of(r)[i] = static_cast<uint8_t>(rng());
        for (int i = 0; i < l.d / 32; ++i) s.scales_of(r)[i] = static_cast<uint8_t>(rng());
      }
    }
    const std::string p = path(std::string("from_") + row_format_name(src_format) + ".safetensors");
    ASSERT_TRUE(write_checkpoint(p, *src, quiet_write(4096, 3)).is_ok());
    for (RowFormat dst_format : {RowFormat::kFused, RowFormat::kSplit}) {
      EngramLayout ld = l;
      ld.format = dst_format;
      auto dst = alloc(ld);
      ASSERT_TRUE(load_checkpoint(p, *dst, quiet_load(8192, 2)).is_ok());
      for (int li = 0; li < l.n_layers(); ++li) {
        const TableView a = src->view(li), b = dst->view(li);
        int64_t bad = 0;
        for (int64_t r = 0; r < a.rows; ++r) {
          bad += std::memcmp(a.payload_of(r), b.payload_of(r), static_cast<size_t>(l.d)) != 0;
          bad += std::memcmp(a.scales_of(r), b.scales_of(r), static_cast<size_t>(l.d / 32)) != 0;
        }
        EXPECT_EQ(bad, 0) << row_format_name(src_format) << " -> " << row_format_name(dst_format);
      }
    }
  }
}

TEST_F(Checkpoint, FileBytesFollowTheSafetensorsLayout) {
  // Reads the written file with no help from the reader: length, JSON, offsets, then row bytes.
  const EngramLayout l = odd_layout(RowFormat::kFused);
  const uint64_t seed = fresh_seed();
  const std::string p = path("raw.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, seed, quiet_write(5000, 2)).is_ok());
  const std::vector<uint8_t> b = read_file(p);
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[static_cast<size_t>(i)];
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 4096, 0u) << "data section is page aligned";
  const json h = json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  const uint8_t* data = b.data() + 8 + n;
  uint64_t expect_off = 0;
  std::vector<uint8_t> pay(static_cast<size_t>(l.d)), sc(static_cast<size_t>(l.d / 32));
  for (int li = 0; li < l.n_layers(); ++li) {
    const std::string base = "engram.layer" + std::to_string(l.layer_ids[li]);
    const json& tp = h.at(base + ".payload");
    const json& ts = h.at(base + ".scales");
    EXPECT_EQ(tp["dtype"], "F8_E4M3");
    EXPECT_EQ(ts["dtype"], "U8");
    EXPECT_EQ(tp["shape"], json({l.rows(li), l.d}));
    EXPECT_EQ(ts["shape"], json({l.rows(li), l.d / 32}));
    const uint64_t pb = tp["data_offsets"][0], sb = ts["data_offsets"][0];
    EXPECT_EQ(pb, expect_off);
    EXPECT_EQ(sb, pb + static_cast<uint64_t>(l.rows(li) * l.d));
    expect_off = ts["data_offsets"][1];
    for (int k = 0; k < 200; ++k) {
      const int64_t r = static_cast<int64_t>(fresh_seed() % static_cast<uint64_t>(l.rows(li)));
      synth_row(seed, li, r, l.d, pay.data(), sc.data());
      EXPECT_EQ(std::memcmp(data + pb + r * l.d, pay.data(), pay.size()), 0) << "row " << r;
      EXPECT_EQ(std::memcmp(data + sb + r * (l.d / 32), sc.data(), sc.size()), 0) << "row " << r;
    }
  }
  EXPECT_EQ(8 + n + expect_off, b.size()) << "no bytes after the last tensor";
  const json& m = h.at("__metadata__");
  EXPECT_EQ(json::parse(m["layer_ids"].get<std::string>()), json(l.layer_ids));
  EXPECT_EQ(json::parse(m["head_rows"].get<std::string>()), json(l.head_rows));
  EXPECT_EQ(json::parse(m["seed"].get<std::string>()).get<uint64_t>(), seed);
  EXPECT_EQ(json::parse(m["d"].get<std::string>()), l.d);
}

TEST_F(Checkpoint, LayoutFromCheckpoint) {
  auto preset = make_preset_layout("v41-flash-mini", 3 << 20, RowFormat::kSplit);
  ASSERT_TRUE(preset.is_ok());
  const uint64_t seed = fresh_seed();
  const std::string p = path("mini.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, *preset, seed, quiet_write()).is_ok());
  auto info = read_checkpoint_info(p);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->format_version, kCheckpointFormatVersion);
  ASSERT_TRUE(info->seed.has_value());
  EXPECT_EQ(*info->seed, seed);
  EXPECT_EQ(info->generator.value_or(""), "synth_row");
  EXPECT_EQ(info->layout.name, "v41-flash-mini");
  EXPECT_EQ(info->header.tensors.size(), 4u);
  EXPECT_EQ(info->file_bytes, static_cast<int64_t>(fs::file_size(p)));
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
    auto l = read_checkpoint_layout(p, f);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_EQ(l->format, f);
    EXPECT_EQ(l->layer_ids, preset->layer_ids);
    EXPECT_EQ(l->head_rows, preset->head_rows);
    EXPECT_EQ(l->head_offsets, preset->head_offsets);
    EXPECT_EQ(l->d, 256);
    EXPECT_TRUE(check_layout_matches(*l, *preset).is_ok());
  }
}

TEST_F(Checkpoint, LayoutMismatchNamesTheField) {
  const EngramLayout base = tiny_layout();
  const std::string p = path("tiny.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, base, fresh_seed(), quiet_write()).is_ok());
  struct Case {
    std::function<void(EngramLayout&)> change;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {[](EngramLayout& l) { l.d = 96; }, "d is 64 in the file, 96 in the requested layout"},
      {[](EngramLayout& l) { l.layer_ids = {2}; }, "layer_ids is [1] in the file, [2]"},
      {[](EngramLayout& l) { l.vocab_size_per_order = {1000, 1200}; }, "vocab_size_per_order"},
      {[](EngramLayout& l) { l.heads_per_order = 3; }, "heads_per_order is 2 in the file, 3"},
      {[](EngramLayout& l) {
         l.max_ngram = 4;
         l.vocab_size_per_order = {1000, 1000, 1000};
       },
       "max_ngram is 3 in the file, 4"},
  };
  for (const Case& c : cases) {
    EngramLayout l = base;
    c.change(l);
    ASSERT_TRUE(l.finalize().is_ok());
    auto t = alloc(l);
    const Status s = load_checkpoint(p, *t, quiet_load());
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("layout mismatch"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.fragment), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  }
}

TEST_F(Checkpoint, ProgressCallbackReportsEveryByte) {
  const EngramLayout l = odd_layout(RowFormat::kFused);
  const int64_t total = l.total_rows() * (l.d + l.d / 32);
  std::vector<CheckpointProgress> seen;
  WriteOptions wo = quiet_write(3000, 2);
  wo.on_progress = [&](const CheckpointProgress& pr) { seen.push_back(pr); };
  const std::string p = path("progress.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, 9, wo).is_ok());
  ASSERT_FALSE(seen.empty());
  EXPECT_STREQ(seen.back().phase, "write");
  EXPECT_EQ(seen.back().done_bytes, total);
  EXPECT_EQ(seen.back().total_bytes, total);

  seen.clear();
  LoadOptions lo = quiet_load(3000, 3);
  lo.on_progress = [&](const CheckpointProgress& pr) { seen.push_back(pr); };
  auto t = alloc(l);
  ASSERT_TRUE(load_checkpoint(p, *t, lo).is_ok());
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].done_bytes, seen[i - 1].done_bytes);
    EXPECT_GE(seen[i].elapsed_s, seen[i - 1].elapsed_s);
  }
  EXPECT_STREQ(seen.back().phase, "load");
  EXPECT_EQ(seen.back().done_bytes, total);
  EXPECT_EQ(seen.back().total_bytes, total);
  expect_synthetic_rows(*t, 9);
}

TEST_F(Checkpoint, ProgressLineOnlyWhenAsked) {
  // kOn draws the terminal line (rewritten with \r, ended by a newline); kOff and kAuto with stderr
  // not a terminal (as under ctest) print nothing.
  const EngramLayout l = tiny_layout();
  const std::string p = path("line.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, 4, quiet_write()).is_ok());
  for (ProgressDisplay mode : {ProgressDisplay::kOn, ProgressDisplay::kOff, ProgressDisplay::kAuto}) {
    LoadOptions o = quiet_load();
    o.display = mode;
    auto t = alloc(l);
    ::testing::internal::CaptureStderr();
    const Status s = load_checkpoint(p, *t, o);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(s.is_ok());
    if (mode == ProgressDisplay::kOn) {
      EXPECT_EQ(err.rfind("\rload " + p + ": ", 0), 0u) << err;
      EXPECT_NE(err.find("GB/s"), std::string::npos) << err;
      EXPECT_NE(err.find("(100%)"), std::string::npos) << err;
      EXPECT_EQ(err.back(), '\n');
    } else if (mode == ProgressDisplay::kOff || !sys::is_terminal(2)) {
      EXPECT_EQ(err, "");
    }
  }
}

TEST_F(Checkpoint, ExistingFileNeedsOverwrite) {
  const EngramLayout l = tiny_layout();
  const std::string p = path("t.safetensors");
  write_file(p, {'k', 'e', 'e', 'p'});
  const Status s = write_synthetic_checkpoint(p, l, 1, quiet_write());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.message();
  EXPECT_EQ(read_file(p), (std::vector<uint8_t>{'k', 'e', 'e', 'p'}));
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"t.safetensors"});

  WriteOptions o = quiet_write();
  o.overwrite = true;
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, 2, o).is_ok());
  auto info = read_checkpoint_info(p);
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->seed.value_or(0), 2u);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"t.safetensors"});
}

TEST_F(Checkpoint, FailedWriteLeavesNothingBehind) {
  const EngramLayout l = tiny_layout();
  // Missing directory: nothing can be created.
  const Status s1 = write_synthetic_checkpoint(path("no/such/dir/x.safetensors"), l, 1, quiet_write());
  ASSERT_FALSE(s1.is_ok());
  EXPECT_EQ(s1.code(), Code::kNotFound) << s1.to_string();
  // The target is a non-empty directory: every row is written to the temp file, then the rename
  // fails; the temp file must be gone and the directory untouched.
  fs::create_directories(dir_ / "target" / "inside");
  WriteOptions o = quiet_write();
  o.overwrite = true;
  const Status s2 = write_synthetic_checkpoint(path("target"), l, 1, o);
  ASSERT_FALSE(s2.is_ok());
  EXPECT_NE(s2.message().find("rename"), std::string::npos) << s2.to_string();
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_directory(dir_ / "target" / "inside"));
}

TEST_F(Checkpoint, LoadDropsTheFileFromThePageCache) {
  auto magic = sys::filesystem_magic(dir_.string());
  ASSERT_TRUE(magic.is_ok());
  if (*magic == sys::kTmpfsMagic) GTEST_SKIP() << "temp dir is on tmpfs: its pages are the file, nothing to drop";
  auto l = make_preset_layout("v41-flash-mini", 32 << 20, RowFormat::kFused);
  ASSERT_TRUE(l.is_ok());
  const std::string p = path("cache.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, *l, 5, quiet_write()).is_ok());
  const int64_t size = static_cast<int64_t>(fs::file_size(p));
  // Pull the whole file into the page cache with an ordinary read.
  (void)read_file(p);
  auto f = sys::open_read(p);
  ASSERT_TRUE(f.is_ok());
  auto before = sys::page_cache_resident_bytes(*f, size);
  ASSERT_TRUE(before.is_ok()) << before.status().to_string();
  if (*before < size / 2) GTEST_SKIP() << "the page cache did not keep the file (" << *before << " of " << size << " B)";
  auto t = alloc(*l);
  ASSERT_TRUE(load_checkpoint(p, *t, quiet_load()).is_ok());
  auto after = sys::page_cache_resident_bytes(*f, size);
  ASSERT_TRUE(after.is_ok());
  EXPECT_LE(*after, size / 50) << "resident after load: " << *after << " of " << size << " B";
  expect_synthetic_rows(*t, 5);
}

// ---- malformed files -------------------------------------------------------------------------------

struct BadFile {
  std::string what;
  std::vector<uint8_t> bytes;
  std::string fragment;  // the message must contain it (names the field)
};

// Checks a malformed file at every level: the pure parser/decoder, read_checkpoint_info on disk
// (message names the file), and load_checkpoint (same error, no crash, nothing read out of bounds).
void expect_rejected_everywhere(const BadFile& c, const std::string& p, const EngramLayout& l) {
  SCOPED_TRACE(c.what);
  Status pure;
  auto h = parse_safetensors_header(c.bytes, c.bytes.size());
  if (!h.is_ok()) pure = h.status();
  else {
    auto info = decode_checkpoint_header(*h);
    ASSERT_FALSE(info.is_ok()) << "accepted";
    pure = info.status();
  }
  EXPECT_EQ(pure.code(), Code::kInvalidArgument) << pure.to_string();
  EXPECT_NE(pure.message().find(c.fragment), std::string::npos) << pure.message();

  write_file(p, c.bytes);
  auto info = read_checkpoint_info(p);
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), Code::kInvalidArgument) << info.status().to_string();
  EXPECT_NE(info.status().message().find("checkpoint " + p), std::string::npos) << info.status().message();
  EXPECT_NE(info.status().message().find(c.fragment), std::string::npos) << info.status().message();

  auto t = HostTable::allocate(l);
  ASSERT_TRUE(t.is_ok());
  const Status s = load_checkpoint(p, **t, quiet_load());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(c.fragment), std::string::npos) << s.message();
}

std::string tensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

TEST_F(Checkpoint, MalformedSafetensorsAreRejected) {
  const EngramLayout l = tiny_layout();
  const std::string ok2 = R"({"a":)" + tensor("F32", "[2,2]", "[0,16]") + "}";
  std::vector<BadFile> cases = {
      {"empty file", {}, "shorter than the 8-byte header length"},
      {"5-byte file", {1, 0, 0, 0, 0}, "shorter than the 8-byte header length"},
      {"header length 0", with_length(craft(ok2, 16), 0), "header length is 0"},
      {"header length past the end", with_length(craft(ok2, 16), 5000), "runs past the end of the file"},
      {"header length over 100 MB", with_length(craft(ok2, 16), 100'000'001), "exceeds the limit"},
      {"header length 2^64-1", with_length(craft(ok2, 16), ~uint64_t{0}), "exceeds the limit"},
      {"truncated inside the header", cut_to(craft(ok2, 16), 20), "runs past the end of the file"},
      {"not JSON", craft("{\"a\": nope}", 0), "not valid JSON"},
      {"binary garbage", craft(std::string("\xff\xfe\x00\x01", 4), 0), "not valid JSON"},
      {"JSON array", craft("[1,2,3]", 0), "header is an array, expected a JSON object"},
      {"JSON string", craft("\"abc\"", 0), "header is a string, expected a JSON object"},
      {"deep nesting", craft(std::string(5000, '[') + std::string(5000, ']'), 0), "nested deeper"},
      {"__metadata__ not an object", craft(R"({"__metadata__":[1]})", 0), "__metadata__ is an array"},
      {"__metadata__ value not a string", craft(R"({"__metadata__":{"d":256}})", 0), "__metadata__.d is a number"},
      {"tensor not an object", craft(R"({"a":[0,1]})", 0), "tensor 'a': expected an object with dtype, shape and data_offsets, got an array"},
      {"dtype missing", craft(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1), "field dtype is missing"},
      {"dtype not a string", craft(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1),
       "field dtype is a number"},
      {"unknown dtype", craft(R"({"a":)" + tensor("F7", "[1]", "[0,1]") + "}", 1), "dtype 'F7' is not a safetensors"},
      {"shape missing", craft(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1), "field shape is missing"},
      {"shape not an array", craft(R"({"a":)" + tensor("U8", "4", "[0,4]") + "}", 4), "field shape is a number"},
      {"negative dimension", craft(R"({"a":)" + tensor("U8", "[-4]", "[0,4]") + "}", 4),
       "shape[0] is not a non-negative integer"},
      {"fractional dimension", craft(R"({"a":)" + tensor("U8", "[2,1.5]", "[0,3]") + "}", 3),
       "shape[1] is not a non-negative integer"},
      {"offsets missing", craft(R"({"a":{"dtype":"U8","shape":[1]}})", 1), "field data_offsets is missing"},
      {"offsets of length 3", craft(R"({"a":)" + tensor("U8", "[1]", "[0,1,2]") + "}", 2), "[begin, end]"},
      {"negative offset", craft(R"({"a":)" + tensor("U8", "[1]", "[-1,0]") + "}", 2), "data_offsets[0] is not"},
      {"begin > end", craft(R"({"a":)" + tensor("U8", "[0]", "[5,4]") + "}", 8), "begin > end"},
      {"offsets out of range", craft(R"({"a":)" + tensor("U8", "[4]", "[10,14]") + "}", 12),
       "past the end of the data section (12 bytes"},
      {"data section shorter than declared", craft(ok2, 15), "past the end of the data section (15 bytes"},
      {"size disagrees with shape", craft(R"({"a":)" + tensor("F32", "[2,2]", "[0,15]") + "}", 16),
       "hold 15 bytes but dtype F32 shape [2, 2] needs 16"},
      {"shape product overflows", craft(R"({"a":)" + tensor("U8", "[4294967296,4294967296,16]", "[0,16]") + "}", 16),
       "needs more than 2^64"},
      {"huge dimension", craft(R"({"a":)" + tensor("U8", "[18446744073709551615]", "[0,1]") + "}", 1), "too large"},
      {"overlapping tensors",
       craft(R"({"a":)" + tensor("U8", "[8]", "[0,8]") + R"(,"b":)" + tensor("U8", "[8]", "[4,12]") + "}", 12),
       "overlap those of tensor 'a' [0, 8]"},
      {"tensor inside another",
       craft(R"({"a":)" + tensor("U8", "[16]", "[0,16]") + R"(,"b":)" + tensor("U8", "[2]", "[8,10]") + "}", 16),
       "'b': data_offsets [8, 10] overlap"},
      {"empty tensor name", craft(R"({"":)" + tensor("U8", "[1]", "[0,1]") + "}", 1), "empty name"},
  };
  for (const BadFile& c : cases) expect_rejected_everywhere(c, path("bad.safetensors"), l);
}

TEST_F(Checkpoint, UnusualButValidSafetensorsAreAccepted) {
  // Holes between tensors, bytes after the last one, empty tensors, trailing header blanks, extra
  // keys in an entry: all within the format, all accepted by the header parser.
  const std::string text = R"({"z":)" + tensor("U8", "[0]", "[3,3]") + R"(,"b":)" + tensor("BF16", "[2]", "[8,12]") +
                           R"(,"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":[1,{"x":2}]})" +
                           R"(,"__metadata__":{"k":"v"}}   )";
  const std::vector<uint8_t> b = craft(text, 40);
  auto h = parse_safetensors_header(b, b.size());
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");  // sorted by begin
  EXPECT_EQ(h->tensors[1].name, "z");
  EXPECT_EQ(h->tensors[2].name, "b");
  EXPECT_EQ(h->find("b")->size_bytes(), 4u);
  EXPECT_EQ(h->find("missing"), nullptr);
  EXPECT_EQ(h->metadata.at("k"), "v");
  EXPECT_EQ(h->data_offset, 8 + text.size());
  EXPECT_EQ(h->data_bytes, 40u);
  // Not an engram checkpoint, though: decoding names the first missing metadata field.
  auto info = decode_checkpoint_header(*h);
  ASSERT_FALSE(info.is_ok());
  EXPECT_NE(info.status().message().find("__metadata__.format_version is missing"), std::string::npos);
}

TEST_F(Checkpoint, HeaderPrefixShorterThanDeclaredIsAnErrorNotAnOverread) {
  // The span holds fewer bytes than the header length says, although the file is big enough.
  const std::vector<uint8_t> b = craft(R"({"a":)" + tensor("U8", "[1]", "[0,1]") + "}", 1);
  for (size_t cut = 0; cut < b.size() - 1; ++cut) {
    auto h = parse_safetensors_header(std::span<const uint8_t>(b.data(), cut), b.size());
    ASSERT_FALSE(h.is_ok()) << cut;
    EXPECT_EQ(h.status().code(), Code::kInvalidArgument);
  }
}

TEST_F(Checkpoint, MalformedEngramHeadersAreRejected) {
  const EngramLayout l = tiny_layout();
  uint64_t data_bytes = 0;
  const json good = engram_header(l, &data_bytes);
  {  // The crafted header is accepted as it is: the cases below differ from it in one field each.
    const std::vector<uint8_t> b = craft(good.dump(), data_bytes);
    auto h = parse_safetensors_header(b, b.size());
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    auto info = decode_checkpoint_header(*h);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->layout.head_rows, l.head_rows);
    EXPECT_FALSE(info->seed.has_value());
  }
  const int64_t rows = l.rows(0);
  struct Case {
    std::string what;
    std::function<void(json&)> change;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"missing scales tensor", [](json& h) { h.erase("engram.layer1.scales"); }, "tensor engram.layer1.scales is missing"},
      {"missing payload tensor", [](json& h) { h.erase("engram.layer1.payload"); },
       "tensor engram.layer1.payload is missing"},
      {"payload dtype", [](json& h) { h["engram.layer1.payload"]["dtype"] = "U8"; },
       "tensor engram.layer1.payload: dtype U8, expected F8_E4M3"},
      {"scales dtype", [](json& h) { h["engram.layer1.scales"]["dtype"] = "I8"; }, "dtype I8, expected U8"},
      {"payload shape transposed",
       [&](json& h) { h["engram.layer1.payload"]["shape"] = {64, rows}; },
       "tensor engram.layer1.payload: shape [64, " + std::to_string(rows) + "], expected [rows, d]"},
      {"scales shape flattened",
       [&](json& h) { h["engram.layer1.scales"]["shape"] = {rows * 2}; },
       "tensor engram.layer1.scales: shape [" + std::to_string(rows * 2) + "], expected [rows, d/32]"},
      {"no metadata", [](json& h) { h.erase("__metadata__"); }, "__metadata__.format_version is missing"},
      {"metadata d missing", [](json& h) { h["__metadata__"].erase("d"); }, "__metadata__.d is missing"},
      {"metadata d not JSON", [](json& h) { h["__metadata__"]["d"] = "sixty-four"; },
       "__metadata__.d: 'sixty-four' is not JSON-encoded"},
      {"metadata d not a multiple of 32", [](json& h) { h["__metadata__"]["d"] = "48"; }, "not a multiple of 32"},
      {"metadata d fractional", [](json& h) { h["__metadata__"]["d"] = "64.0"; }, "__metadata__.d: expected an integer"},
      {"layer_ids not an array", [](json& h) { h["__metadata__"]["layer_ids"] = "1"; },
       "__metadata__.layer_ids: expected an array"},
      {"layer_ids empty", [](json& h) { h["__metadata__"]["layer_ids"] = "[]"; }, "layer_ids is empty"},
      {"layer id negative", [](json& h) { h["__metadata__"]["layer_ids"] = "[-1]"; }, "layer_ids[0] = -1 is not in"},
      {"max_ngram out of range", [](json& h) { h["__metadata__"]["max_ngram"] = "99"; }, "max_ngram = 99 is not in [2, 16]"},
      {"vocab sizes count", [](json& h) { h["__metadata__"]["vocab_size_per_order"] = "[1000]"; },
       "vocab_size_per_order has 1 entries, expected max_ngram - 1 = 2"},
      {"head_rows shape", [](json& h) { h["__metadata__"]["head_rows"] = "[[1009, 1013]]"; },
       "head_rows[0] has 2 entries, expected 4 heads"},
      {"head_rows not the prime walk",
       [&](json& h) {
         // Same sum (the tensor shapes still agree), different heads.
         auto hr = l.head_rows;
         hr[0][0] += 2;
         hr[0][1] -= 2;
         h["__metadata__"]["head_rows"] = json(hr).dump();
       },
       "but the prime walk from vocab_size_per_order gives"},
      {"format_version from the future", [](json& h) { h["__metadata__"]["format_version"] = "2"; },
       "format_version = 2 is not supported"},
      {"layout_name not a string", [](json& h) { h["__metadata__"]["layout_name"] = "[1]"; },
       "__metadata__.layout_name: expected a string"},
      {"seed negative", [](json& h) { h["__metadata__"]["seed"] = "-3"; }, "__metadata__.seed: expected a non-negative"},
  };
  for (const Case& c : cases) {
    json h = good;
    c.change(h);
    expect_rejected_everywhere({c.what, craft(h.dump(), data_bytes), c.fragment}, path("bad_engram.safetensors"), l);
  }
}

TEST_F(Checkpoint, EveryTruncationOfAValidFileIsRejected) {
  const EngramLayout l = tiny_layout();
  const std::string p = path("full.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, fresh_seed(), quiet_write()).is_ok());
  const std::vector<uint8_t> full = read_file(p);
  std::mt19937_64 rng(fresh_seed());
  std::vector<size_t> cuts;
  for (size_t c = 0; c < 4200 && c < full.size(); ++c) cuts.push_back(c);  // all of the header
  for (int i = 0; i < 200; ++i) cuts.push_back(rng() % full.size());       // random ones in the data
  cuts.push_back(full.size() - 1);
  for (size_t cut : cuts) {
    const std::vector<uint8_t> b(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    auto h = parse_safetensors_header(b, b.size());
    if (h.is_ok()) {
      auto info = decode_checkpoint_header(*h);
      ASSERT_FALSE(info.is_ok()) << "truncated to " << cut << " bytes but accepted";
    }
  }
  write_file(p, std::vector<uint8_t>(full.begin(), full.end() - 1));
  auto t = alloc(l);
  const Status s = load_checkpoint(p, *t, quiet_load());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("past the end of the data section"), std::string::npos) << s.message();
}

TEST_F(Checkpoint, RandomHeaderCorruptionNeverCrashes) {
  // Random byte flips in a valid header: each parse either succeeds or fails with kInvalidArgument.
  const EngramLayout l = tiny_layout();
  uint64_t data_bytes = 0;
  const std::vector<uint8_t> good = craft(engram_header(l, &data_bytes).dump(), data_bytes);
  std::mt19937_64 rng(fresh_seed());
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % std::min<size_t>(b.size(), 600)] = static_cast<uint8_t>(rng());
    auto h = parse_safetensors_header(b, b.size());
    if (!h.is_ok()) {
      EXPECT_EQ(h.status().code(), Code::kInvalidArgument) << h.status().to_string();
      continue;
    }
    auto info = decode_checkpoint_header(*h);
    if (!info.is_ok()) {
      EXPECT_EQ(info.status().code(), Code::kInvalidArgument) << info.status().to_string();
    }
  }
}

// The fuzzer's seed corpus doubles as a regression corpus: valid_* headers parse (valid_engram_* also
// decode), bad_* ones are refused with kInvalidArgument; crash reproducers found by scripts/fuzz-smoke
// are added there as bad_* / valid_* files. The first byte is the fuzzer's mode (bit 0: the bytes are
// only the start of a 1 TiB file).
TEST(FuzzCorpus, SeedsBehaveAsNamed) {
  const fs::path dir = fs::path(ENGRAM_SOURCE_DIR) / "fuzz" / "corpus" / "safetensors_header";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is missing";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::vector<uint8_t> raw = read_file(e.path().string());
    ASSERT_FALSE(raw.empty()) << name;
    const std::span<const uint8_t> bytes(raw.data() + 1, raw.size() - 1);
    const uint64_t file_size = (raw[0] & 1) ? bytes.size() + (uint64_t{1} << 40) : bytes.size();
    auto h = parse_safetensors_header(bytes, file_size);
    Status st = h.status();
    if (h.is_ok() && name.rfind("valid_engram", 0) == 0) st = decode_checkpoint_header(*h).status();
    if (h.is_ok() && name.rfind("bad_", 0) == 0) st = decode_checkpoint_header(*h).status();
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(st.is_ok()) << name << ": " << st.to_string();
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << name << ": " << st.to_string();
    }
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST_F(Checkpoint, MissingFileIsNotFound) {
  auto info = read_checkpoint_info(path("absent.safetensors"));
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), Code::kNotFound);
  EXPECT_NE(info.status().message().find("absent.safetensors"), std::string::npos);
}

// ---- sys::file wrappers ------------------------------------------------------------------------------

TEST_F(Checkpoint, FileWrappersReportShortReadsAndKeepErrno) {
  const std::string p = path("short.bin");
  write_file(p, std::vector<uint8_t>(100, 7));
  auto f = sys::open_read(p);
  ASSERT_TRUE(f.is_ok());
  std::vector<uint8_t> buf(200);
  errno = 1234;
  const Status s = sys::pread_full(*f, buf.data(), 200, 0);
  EXPECT_EQ(errno, 1234) << "wrappers leave errno alone";
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_NE(s.message().find("short read (got 100 of 200"), std::string::npos) << s.message();
  EXPECT_TRUE(sys::pread_full(*f, buf.data(), 50, 50).is_ok());
  auto g = sys::open_read(path("nope"));
  EXPECT_EQ(errno, 1234);
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), Code::kNotFound);
  EXPECT_EQ(g.status().sys_error(), ENOENT);
  auto c = sys::create_new(p);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().sys_error(), EEXIST);
}

// ---- `engram table` ----------------------------------------------------------------------------------

using CliOut = engram::testing::CliResult;
CliOut cli(const std::string& args) { return engram::testing::run_engram(args, engram::testing::CliStderr::kMerge); }

class TableCli : public Checkpoint {
 protected:
  void SetUp() override {
    if (!fs::exists(ENGRAM_CLI_PATH)) GTEST_SKIP() << "the engram CLI is not built (" << ENGRAM_CLI_PATH << ")";
    Checkpoint::SetUp();
  }
};

TEST_F(TableCli, CreateThenInfo) {
  const std::string p = path("mini.safetensors");
  auto o = cli("table create --layout v41-flash-mini --table-size 4MiB --seed 77 --out " + p);
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = cli("table info --json " + p);
  ASSERT_EQ(j.code, 0) << j.out;
  const json info = json::parse(j.out);
  EXPECT_EQ(info["layout"]["name"], "v41-flash-mini");
  EXPECT_EQ(info["layout"]["layer_ids"], json({1, 14}));
  EXPECT_EQ(info["layout"]["d"], 256);
  EXPECT_EQ(info["seed"], 77);
  EXPECT_EQ(info["file_bytes"], fs::file_size(p));
  EXPECT_EQ(info["tensors"].size(), 4u);
  // The table holds exactly what synth_row(77, ...) gives.
  auto l = read_checkpoint_layout(p, RowFormat::kFused);
  ASSERT_TRUE(l.is_ok());
  auto t = alloc(*l);
  ASSERT_TRUE(load_checkpoint(p, *t, quiet_load()).is_ok());
  expect_synthetic_rows(*t, 77);
  auto text = cli("table info " + p);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("engram.layer14.scales"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("F8_E4M3"), std::string::npos) << text.out;
}

TEST_F(TableCli, LoadVerifiesSyntheticRows) {
  const std::string p = path("v.safetensors");
  ASSERT_EQ(cli("table create --layout tiny --seed 5 --out " + p).code, 0);
  for (const char* layout : {"fused", "split"}) {
    auto o = cli(std::string("table load --verify --json --threads 2 --row-layout ") + layout + " " + p);
    ASSERT_EQ(o.code, 0) << o.out;
    const json j = json::parse(o.out);
    EXPECT_EQ(j["row_layout"], layout);
    EXPECT_EQ(j["mismatched_rows"], 0);
    EXPECT_EQ(j["bytes"], tiny_layout().total_rows() * 66);
  }
  // Flip one payload byte in the data section: --verify finds exactly one row and exits 1.
  std::vector<uint8_t> b = read_file(p);
  auto h = parse_safetensors_header(b, b.size());
  ASSERT_TRUE(h.is_ok());
  b[h->data_offset + 64 * 17 + 3] ^= 0x10;
  write_file(p, b);
  auto o = cli("table load --verify --json " + p);
  EXPECT_EQ(o.code, 1) << o.out;
  EXPECT_EQ(json::parse(o.out)["mismatched_rows"], 1);
  // A checkpoint written from a table has no seed: --verify is refused (exit 2).
  auto t = alloc(tiny_layout());
  t->fill_synthetic(3);
  ASSERT_TRUE(write_checkpoint(path("noseed.safetensors"), *t, quiet_write()).is_ok());
  EXPECT_EQ(cli("table load --verify " + path("noseed.safetensors")).code, 2);
  EXPECT_EQ(cli("table load --row-layout diagonal " + p).code, 2);
}

TEST_F(TableCli, BadArgumentsExitTwoAndWriteNothing) {
  const std::string p = path("x.safetensors");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"table create --layout nope --out " + p, "unknown layout preset"},
      {"table create --layout v41-flash-mini --table-size 2G --out " + p, "ambiguous unit"},
      {"table create --layout v41-flash-mini --table-size 1KiB --out " + p, "too small"},
      {"table create --layout tiny --table-size 1MiB --out " + p, "--table-size"},
      {"table create --layout tiny --seed -4 --out " + p, "seed"},
      {"table create --layout tiny --out " + path("missing/dir/x"), "directory"},
      {"table create --layout tiny", "--out"},
  };
  for (const auto& [args, fragment] : cases) {
    auto o = cli(args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.out;
    EXPECT_NE(o.out.find(fragment), std::string::npos) << args << "\n" << o.out;
  }
  EXPECT_TRUE(dir_entries().empty());
  // Existing file: refused without --force, replaced with it.
  write_file(p, {1, 2, 3});
  auto o = cli("table create --layout tiny --out " + p);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--force"), std::string::npos) << o.out;
  EXPECT_EQ(fs::file_size(p), 3u);
  o = cli("table create --layout tiny --force --out " + p);
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_TRUE(read_checkpoint_info(p).is_ok());
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"x.safetensors"});
  // info on a malformed file: exit 2, the message names the file and the field.
  write_file(p, with_length(craft("{}", 0), 0));
  o = cli("table info " + p);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find(p), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("header length is 0"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace engram::host
