// Checkpoint I/O round trips: synthetic rows and whole tables through safetensors files (fused and split),
// the file's bytes against the safetensors layout, layouts read back, layout mismatches, progress reports,
// atomic replacement, page-cache dropping, and the sys::file wrappers the loader reads with.
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
#include "report/progress_line.hpp"
#include "support/checkpoint_support.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ckpt_test;

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
  // kOn draws the line: on a terminal rewritten with \r, elsewhere (as under ctest) as plain lines without
  // carriage returns; always ended by a newline. kOff, and kAuto with stderr not a terminal, print nothing.
  const EngramLayout l = tiny_layout();
  const std::string p = path("line.safetensors");
  ASSERT_TRUE(write_synthetic_checkpoint(p, l, 4, quiet_write()).is_ok());
  using report::ProgressDisplay;
  for (ProgressDisplay mode : {ProgressDisplay::kOn, ProgressDisplay::kOff, ProgressDisplay::kAuto}) {
    LoadOptions o = quiet_load();
    o.on_progress = report::with_progress_line(p, mode, nullptr);
    auto t = alloc(l);
    ::testing::internal::CaptureStderr();
    const Status s = load_checkpoint(p, *t, o);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(s.is_ok());
    if (mode == ProgressDisplay::kOn) {
      if (sys::is_terminal(2)) {
        EXPECT_EQ(err.rfind("\rload " + p + ": ", 0), 0u) << err;
      } else {
        EXPECT_EQ(err.rfind("load " + p + ": ", 0), 0u) << err;
        EXPECT_EQ(err.find('\r'), std::string::npos) << err;
      }
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

}  // namespace
}  // namespace engram::host
