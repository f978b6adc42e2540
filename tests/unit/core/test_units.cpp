// Size parsing (parse_size_bytes) and formatting (format_bytes, format_gbps): accepted spellings,
// exact fractional values, every rejection path, and random round trips.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "core/units.hpp"

namespace engram {
namespace {

int64_t parse_ok(const std::string& s) {
  auto r = parse_size_bytes(s);
  EXPECT_TRUE(r.is_ok()) << s << ": " << r.status().to_string();
  return r.is_ok() ? *r : -1;
}

void expect_rejected(const std::string& s, const std::string& fragment) {
  auto r = parse_size_bytes(s);
  ASSERT_FALSE(r.is_ok()) << "'" << s << "' parsed as " << *r;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  // Every rejection says what was expected.
  EXPECT_NE(r.status().message().find("expected"), std::string::npos) << r.status().message();
}

TEST(ParseSizeBytes, PlainBytesAndUnits) {
  EXPECT_EQ(parse_ok("0"), 0);
  EXPECT_EQ(parse_ok("4096"), 4096);
  EXPECT_EQ(parse_ok("17B"), 17);
  EXPECT_EQ(parse_ok("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_ok("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_ok("1GB"), 1'000'000'000);
  EXPECT_EQ(parse_ok("3KB"), 3000);
  EXPECT_EQ(parse_ok("3KiB"), 3072);
  EXPECT_EQ(parse_ok("2TB"), 2'000'000'000'000);
  EXPECT_EQ(parse_ok("1TiB"), int64_t{1} << 40);
  EXPECT_EQ(parse_ok("1PB"), 1'000'000'000'000'000);
  EXPECT_EQ(parse_ok("4PiB"), int64_t{4} << 50);
}

TEST(ParseSizeBytes, CaseBlanksAndFractions) {
  EXPECT_EQ(parse_ok("512 mib"), int64_t{512} << 20);
  EXPECT_EQ(parse_ok("1gb"), 1'000'000'000);
  EXPECT_EQ(parse_ok("1.5KiB"), 1536);
  EXPECT_EQ(parse_ok("1.5 GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_ok("0.5MB"), 500'000);
  EXPECT_EQ(parse_ok("2.000GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_ok("007"), 7);
}

TEST(ParseSizeBytes, Limits) {
  EXPECT_EQ(parse_ok("9223372036854775807"), std::numeric_limits<int64_t>::max());
  expect_rejected("9223372036854775808", "too large");
  expect_rejected("99999999999999999999999999", "too large");
  expect_rejected("8192PiB", "too large");  // 2^63
  EXPECT_EQ(parse_ok("8191PiB"), int64_t{8191} << 50);
}

TEST(ParseSizeBytes, Rejections) {
  expect_rejected("", "empty");
  expect_rejected("   ", "whitespace before or after");
  expect_rejected("1GiB ", "whitespace before or after");  // a quoting mistake, not part of the size
  expect_rejected("1GiB\n", "whitespace before or after");
  expect_rejected(" 1GiB", "whitespace before or after");
  expect_rejected("-1", "sign");
  expect_rejected("+5MiB", "sign");
  expect_rejected("MiB", "no number");
  expect_rejected(".5GiB", "no number");
  expect_rejected("1.GiB", "decimal point");
  expect_rejected("12XB", "unknown unit");
  expect_rejected("12 MiBs", "unknown unit");
  expect_rejected("1e9", "unknown unit");
  expect_rejected("1,024", "unknown unit");
  expect_rejected("2G", "ambiguous");
  expect_rejected("512m", "ambiguous");
  expect_rejected("1k", "ambiguous");
  expect_rejected("0.3B", "whole number");
  expect_rejected("1.0001KiB", "whole number");
}

TEST(ParseSizeBytes, RandomRoundTrips) {
  std::mt19937_64 rng(std::random_device{}());
  struct Unit {
    const char* name;
    int64_t mult;
  };
  const Unit units[] = {{"", 1},           {"B", 1},          {"KB", 1000},        {"KiB", 1024},
                        {"MB", 1000000},   {"MiB", 1 << 20},  {"GB", 1000000000},  {"GiB", int64_t{1} << 30},
                        {"TiB", int64_t{1} << 40}};
  for (int i = 0; i < 2000; ++i) {
    const Unit& u = units[rng() % (sizeof units / sizeof units[0])];
    const int64_t n = static_cast<int64_t>(rng() % 1'000'000);
    // A space between the number and a unit (never after the number alone: that is trailing whitespace).
    const std::string text = std::to_string(n) + (rng() % 2 && *u.name ? " " : "") + u.name;
    EXPECT_EQ(parse_ok(text), n * u.mult) << text;
  }
}

TEST(FormatBytes, Examples) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(int64_t{512} << 20), "512.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 40), "1.0 TiB");
  EXPECT_EQ(format_bytes((int64_t{1} << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(format_bytes(-2048), "-2.0 KiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::max()), "8.0 EiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::min()), "-8.0 EiB");
}

TEST(FormatBytes, RoundTripsThroughParseWithinRounding) {
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 1000; ++i) {
    const int64_t n = static_cast<int64_t>(rng() >> (rng() % 60 + 4));
    const std::string s = format_bytes(n);
    auto back = parse_size_bytes(s);
    if (!back.is_ok()) {
      // One decimal of a binary unit is rarely a whole byte count (e.g. "1.1 KiB"); allow that only.
      EXPECT_NE(back.status().message().find("whole number"), std::string::npos) << s;
      continue;
    }
    // One decimal: within 5% of the unit's magnitude (or exact under 1 KiB).
    const double err = std::abs(static_cast<double>(*back) - static_cast<double>(n));
    EXPECT_LE(err, n < 1024 ? 0.0 : 0.05 * static_cast<double>(n)) << n << " -> " << s;
  }
}

// Regression (fuzz_size_parser): format_bytes(INT64_MAX) printed "8.0 EiB", a unit the parser did not
// know; parsing it back must fail for the value being too large, never for an unknown unit.
TEST(FormatBytes, ExbibytesParseBack) {
  EXPECT_EQ(parse_ok("1EiB"), int64_t{1} << 60);
  EXPECT_EQ(parse_ok("7.5 EiB"), int64_t{15} << 59);
  EXPECT_EQ(parse_ok("9EB"), 9'000'000'000'000'000'000);
  expect_rejected(format_bytes(std::numeric_limits<int64_t>::max()), "too large");
  expect_rejected("1e", "ambiguous");
}

TEST(FormatGbps, Rates) {
  EXPECT_EQ(format_gbps(2.5e9, 1.0), "2.50 GB/s");
  EXPECT_EQ(format_gbps(1e9, 4.0), "0.25 GB/s");
  EXPECT_EQ(format_gbps(1e9, 0.0), "n/a");
}

}  // namespace
}  // namespace engram
