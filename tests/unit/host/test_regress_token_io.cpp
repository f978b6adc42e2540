// Regressions found by fuzzing the token-file reader (fuzz/fuzz_token_file.cpp): sidecar fields of
// the wrong JSON type threw nlohmann::json::type_error out of the library (json::value() throws when a
// present field has another type), and two documents whose token counts add past INT64_MAX overflowed
// a signed sum (UBSan), and an integer field holding a number past int64 (JSON parses it as a float) was cast to
// int64 (UBSan: float-cast-overflow). Each must now be kInvalidArgument naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "host/token_io.hpp"

using namespace engram;
using nlohmann::json;

namespace {

json base_sidecar() {
  return {{"format", "engram-tokens"}, {"format_version", 1}, {"dtype", "uint32le"},
          {"tokenizer", "deepseek-ai/DeepSeek-V3"}, {"tokenizer_version", "3.7.2"},
          {"vocab_size", 10}, {"token_count", 4}};
}

std::string ids(std::initializer_list<uint32_t> v) {
  std::string out(v.size() * 4, '\0');
  size_t i = 0;
  for (uint32_t x : v) std::memcpy(out.data() + 4 * i++, &x, 4);
  return out;
}

void expect_invalid(const json& side, const std::string& data, const std::string& needle) {
  Result<TokenFile> r = Status(Code::kInternal, "not run");
  ASSERT_NO_THROW(r = parse_token_file("t.tokens", data, side.dump()));
  ASSERT_FALSE(r.is_ok()) << side.dump();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

}  // namespace

TEST(RegressTokenIo, ValidSidecarStillParses) {
  auto r = parse_token_file("t.tokens", ids({1, 2, 3, 9}), base_sidecar().dump());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->ids.size(), 4u);
  EXPECT_EQ(r->documents.size(), 1u);
}

TEST(RegressTokenIo, AddBosOfWrongTypeIsAnErrorNotAThrow) {
  json s = base_sidecar();
  s["add_bos"] = "yes";
  expect_invalid(s, ids({1, 2, 3, 9}), "add_bos");
}

TEST(RegressTokenIo, FormatOfWrongTypeIsAnErrorNotAThrow) {
  json s = base_sidecar();
  s["format"] = 7;
  expect_invalid(s, ids({1, 2, 3, 9}), "format");
}

TEST(RegressTokenIo, TokenizerPackageOfWrongTypeIsAnError) {
  json s = base_sidecar();
  s["tokenizer_package"] = json::array({1, 2});
  expect_invalid(s, ids({1, 2, 3, 9}), "tokenizer_package");
}

TEST(RegressTokenIo, DocumentThatIsNotAnObjectIsAnError) {
  json s = base_sidecar();
  s["documents"] = json::array({5});
  expect_invalid(s, ids({1, 2, 3, 9}), "documents[0]");
}

TEST(RegressTokenIo, DocumentSourceOfWrongTypeIsAnError) {
  json s = base_sidecar();
  s["documents"] = json::array({{{"source", 3}, {"first_token", 0}, {"token_count", 4}}});
  expect_invalid(s, ids({1, 2, 3, 9}), "source");
}

TEST(RegressTokenIo, DocumentCountsThatOverflowInt64AreAnError) {
  json s = base_sidecar();
  const int64_t big = INT64_MAX;
  s["documents"] = json::array({{{"first_token", 0}, {"token_count", big}}, {{"first_token", big}, {"token_count", 9}}});
  expect_invalid(s, ids({1, 2, 3, 9}), "documents[0]");
}

TEST(RegressTokenIo, FormatVersionOfWrongTypeIsAnError) {
  json s = base_sidecar();
  s["format_version"] = "1";
  expect_invalid(s, ids({1, 2, 3, 9}), "format_version");
}

TEST(RegressTokenIo, CompressionTableSidecarOfWrongTypesIsAnError) {
  json s = {{"format", "engram-compression-table"}, {"format_version", 1}, {"dtype", 5}};
  Result<CompressionTable> r = Status(Code::kInternal, "not run");
  ASSERT_NO_THROW(r = parse_compression_table("t.compress", ids({0, 1}), s.dump()));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("dtype"), std::string::npos) << r.status().to_string();
}

// Fault: "pad_id": 6000000000074407370955161 parses as the float 6e24, which get<int64_t>() cast past int64's range
// (undefined behaviour; the fuzzer's input below, a compression-table sidecar).
TEST(RegressTokenIo, IntegerFieldPastInt64IsAnErrorNotACast) {
  json s = {{"format", "engram-compression-table"}, {"format_version", 1}, {"dtype", "uint32le"},
            {"tokenizer", "deepseek-ai/DeepSeek-V3"}, {"tokenizer_version", "3.7.2"}, {"vocab_size", 2},
            {"compressed_vocab_size", 2}, {"pad_compressed_id", 0}};
  const std::string text = s.dump();
  const std::string with_pad = text.substr(0, text.size() - 1) + ",\"pad_id\": 6000000000074407370955161}";
  Result<CompressionTable> r = Status(Code::kInternal, "not run");
  ASSERT_NO_THROW(r = parse_compression_table("t.compress", ids({0, 1}), with_pad));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("pad_id"), std::string::npos) << r.status().to_string();
}

// Fault: get<int64_t>() truncated a fractional count (4.5 read as 4) and wrapped an unsigned one past INT64_MAX.
TEST(RegressTokenIo, FractionalAndUnsignedPastInt64CountsAreErrors) {
  json s = base_sidecar();
  s["token_count"] = 4.5;
  expect_invalid(s, ids({1, 2, 3, 9}), "token_count");
  s = base_sidecar();
  s["token_count"] = uint64_t{1} << 63;
  expect_invalid(s, ids({1, 2, 3, 9}), "token_count");
  s = base_sidecar();
  s["vocab_size"] = 1e30;
  expect_invalid(s, ids({1, 2, 3, 9}), "vocab_size");
}
