// `engram table` (create, info, load): a created checkpoint reads back with its layout and rows; bad arguments
// exit 2 and leave nothing behind.
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
#include "support/checkpoint_support.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ckpt_test;

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
