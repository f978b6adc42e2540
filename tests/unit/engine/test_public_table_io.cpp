// The table I/O a consumer reaches through the public headers alone: a table saved with write_table_checkpoint reads
// back (content_layout, fill_table) into the same bytes and refuses to overwrite unasked; backing_info describes a
// created table's backings and is empty for private memory and out-of-range indices; parse_size_bytes and
// format_bytes are the public size text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "engram/backing_info.hpp"
#include "engram/checkpoint.hpp"
#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "engram/units.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;

bool same_rows(const HostTable& a, const HostTable& b) {
  for (int i = 0; i < a.n_layers(); ++i) {
    const TableView x = a.view(i), y = b.view(i);
    if (x.rows != y.rows || x.stride_bytes != y.stride_bytes) return false;
    if (std::memcmp(x.data, y.data, static_cast<size_t>(x.rows * x.stride_bytes)) != 0) return false;
    if (x.format == RowFormat::kSplit &&
        std::memcmp(x.scales, y.scales, static_cast<size_t>(x.rows * (x.d / 32))) != 0)
      return false;
  }
  return true;
}

TEST(PublicTableIo, ACheckpointWrittenReadsBackIntoTheSameRows) {
  std::mt19937_64 rng{std::random_device{}()};
  const uint64_t seed = rng();
  const fs::path dir = fs::temp_directory_path() / ("engram_public_io_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "t.safetensors").string();
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
    SCOPED_TRACE(row_format_name(f));
    auto layout = make_preset_layout("tiny", int64_t{512} << 20, f);
    ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
    auto src = HostTable::allocate(*layout);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    (*src)->fill_synthetic(seed, 2);

    int64_t last_done = -1, last_total = 0;
    CheckpointWriteOptions wo;
    wo.overwrite = true;
    wo.threads = 2;
    wo.on_progress = [&](int64_t done, int64_t total, double) { last_done = done, last_total = total; };
    const Status w = write_table_checkpoint(path, **src, wo);
    ASSERT_TRUE(w.is_ok()) << w.to_string();
    EXPECT_GT(last_total, 0);
    EXPECT_EQ(last_done, last_total);

    TableContent c;
    c.kind = TableContent::Kind::kCheckpoint;
    c.path = path;
    auto stored = content_layout(c, f);
    ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
    EXPECT_EQ(stored->head_rows, layout->head_rows);
    EXPECT_EQ(stored->d, layout->d);

    auto back = HostTable::allocate(*stored);
    ASSERT_TRUE(back.is_ok());
    (*back)->fill_synthetic(seed + 1, 1);  // other rows, so that the load has to write every byte
    ASSERT_FALSE(same_rows(**src, **back));
    const Status r = fill_table(**back, c);
    ASSERT_TRUE(r.is_ok()) << r.to_string();
    EXPECT_TRUE(same_rows(**src, **back));

    CheckpointWriteOptions keep;  // overwrite = false: the existing file stays
    const Status again = write_table_checkpoint(path, **src, keep);
    EXPECT_EQ(again.code(), Code::kInvalidArgument) << again.to_string();
  }
  fs::remove_all(dir);
}

TEST(PublicTableIo, ALoadErrorNamesTheCheckpointOnce) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  auto t = HostTable::allocate(*layout);
  ASSERT_TRUE(t.is_ok());
  TableContent c;
  c.kind = TableContent::Kind::kCheckpoint;
  c.path = "/nonexistent/engram.safetensors";
  const Status s = fill_table(**t, c);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  const std::string named = "checkpoint " + c.path;
  const size_t first = s.message().find(named);
  ASSERT_NE(first, std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(named, first + 1), std::string::npos) << s.message();
}

TEST(PublicTableIo, BackingInfoDescribesACreatedTableOnly) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  o.group = "public-io";
  auto t = HostTable::create(*layout, o);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  for (int i = 0; i < (*t)->n_layers(); ++i) {
    const std::optional<BackingInfo> b = backing_info(**t, i);
    ASSERT_TRUE(b.has_value()) << "layer " << i;
    EXPECT_NE(b->identity.find("engram:layer="), std::string::npos) << b->identity;
    EXPECT_GE(b->fd, 0);  // memfd, the default backing
    EXPECT_GE(b->size_bytes, static_cast<uint64_t>((*t)->layer_bytes(i)));
    EXPECT_GE(b->mapped_bytes, b->size_bytes);
    ASSERT_GT(b->page_bytes, 0u);
    EXPECT_EQ(b->mapped_bytes % b->page_bytes, 0u);
    EXPECT_TRUE(b->placement.contains("requested")) << b->placement.dump();
  }
  EXPECT_FALSE(backing_info(**t, -1).has_value());
  EXPECT_FALSE(backing_info(**t, (*t)->n_layers()).has_value());
  EXPECT_FALSE(backing_info(**t, 0, (*t)->n_replicas()).has_value());

  auto priv = HostTable::allocate(*layout);
  ASSERT_TRUE(priv.is_ok());
  EXPECT_FALSE(backing_info(**priv, 0).has_value());
}

TEST(PublicTableIo, SizeTextParsesAndPrints) {
  auto mib = parse_size_bytes("512MiB");
  ASSERT_TRUE(mib.is_ok());
  EXPECT_EQ(*mib, int64_t{512} << 20);
  EXPECT_EQ(parse_size_bytes("1G").status().code(), Code::kInvalidArgument);  // ambiguous unit
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace engram
