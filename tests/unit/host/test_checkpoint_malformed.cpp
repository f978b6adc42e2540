// Malformed checkpoints: every malformed-file case (bytes crafted here, not by the writer) is an error naming what
// is wrong and never a read past a buffer -- through every entry point (info, layout, load) -- and unusual but
// valid files are accepted; every truncation and random header corruption of a valid file; the fuzz corpus.
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

}  // namespace
}  // namespace engram::host
