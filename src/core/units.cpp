// Size parsing and formatting (see units.hpp).
//
// The number is parsed as an exact decimal: integer part and fraction digits are kept as integers
// and multiplied by the unit with 128-bit arithmetic, so "1.5GiB" is exact and overflow is detected
// instead of being rounded away in a double.
#include "core/units.hpp"

#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace engram {
namespace {

Status bad_size(const std::string& text, const std::string& why) {
  return Status(Code::kInvalidArgument,
                "size '" + text + "': " + why +
                    " (expected a byte count such as 4096, 512MiB, 2GiB or 1GB; GB = 10^9 B, GiB = 2^30 B)");
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<int64_t> parse_size_bytes(const std::string& text) {
  // Strict: nothing before the number or after the unit (a stray space or newline is a quoting mistake, not part
  // of the size); a space between the number and the unit is allowed ("512 MiB", as format_bytes writes it).
  const size_t b = 0, e = text.size();
  if (b == e) return bad_size(text, "empty");
  if (std::isspace(static_cast<unsigned char>(text[b])) || std::isspace(static_cast<unsigned char>(text[e - 1])))
    return bad_size(text, "whitespace before or after the size");
  if (text[b] == '-' || text[b] == '+') return bad_size(text, "a sign is not allowed");

  using u128 = unsigned __int128;
  const u128 kMax = static_cast<u128>(std::numeric_limits<int64_t>::max());
  size_t i = b;
  u128 int_part = 0;
  int int_digits = 0;
  while (i < e && std::isdigit(static_cast<unsigned char>(text[i]))) {
    int_part = int_part * 10 + static_cast<unsigned>(text[i] - '0');
    if (int_part > kMax) return bad_size(text, "too large (above 2^63-1 bytes)");
    ++int_digits;
    ++i;
  }
  u128 frac = 0, frac_scale = 1;
  int frac_digits = 0;
  if (i < e && text[i] == '.') {
    ++i;
    while (i < e && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (frac_digits < 18) {  // frac < 10^18 and a unit <= 2^60 keep frac * unit below 2^128
        frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
        frac_scale *= 10;
      } else if (text[i] != '0') {
        return bad_size(text, "too many fraction digits");
      }
      ++frac_digits;
      ++i;
    }
    if (frac_digits == 0) return bad_size(text, "no digit after the decimal point");
  }
  if (int_digits == 0) return bad_size(text, "no number");
  while (i < e && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const std::string unit = lower(text.substr(i, e - i));

  u128 mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kb") mult = 1000ULL;
  else if (unit == "mb") mult = 1000ULL * 1000;
  else if (unit == "gb") mult = 1000ULL * 1000 * 1000;
  else if (unit == "tb") mult = 1000ULL * 1000 * 1000 * 1000;
  else if (unit == "pb") mult = 1000ULL * 1000 * 1000 * 1000 * 1000;
  else if (unit == "eb") mult = 1000ULL * 1000 * 1000 * 1000 * 1000 * 1000;
  else if (unit == "kib") mult = 1ULL << 10;
  else if (unit == "mib") mult = 1ULL << 20;
  else if (unit == "gib") mult = 1ULL << 30;
  else if (unit == "tib") mult = 1ULL << 40;
  else if (unit == "pib") mult = 1ULL << 50;
  else if (unit == "eib") mult = 1ULL << 60;  // format_bytes prints EiB near INT64_MAX
  else if (unit == "k" || unit == "m" || unit == "g" || unit == "t" || unit == "p" || unit == "e")
    return bad_size(text, "ambiguous unit '" + text.substr(i, e - i) + "': write " +
                              static_cast<char>(std::toupper(unit[0])) + "B (powers of 1000) or " +
                              static_cast<char>(std::toupper(unit[0])) + "iB (powers of 1024)");
  else
    return bad_size(text, "unknown unit '" + text.substr(i, e - i) + "'");

  const u128 whole = int_part * mult;
  if (whole > kMax) return bad_size(text, "too large (above 2^63-1 bytes)");
  const u128 frac_num = frac * mult;  // < 10^18 * 2^60 < 2^120
  if (frac_num % frac_scale != 0) return bad_size(text, "not a whole number of bytes");
  const u128 total = whole + frac_num / frac_scale;
  if (total > kMax) return bad_size(text, "too large (above 2^63-1 bytes)");
  return static_cast<int64_t>(total);
}

std::string format_bytes(int64_t bytes) {
  const bool neg = bytes < 0;
  // Magnitude as unsigned so INT64_MIN does not overflow.
  const uint64_t mag = neg ? uint64_t{0} - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  char buf[64];
  if (mag < 1024) {
    std::snprintf(buf, sizeof buf, "%s%" PRIu64 " B", neg ? "-" : "", mag);
    return buf;
  }
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  long double v = static_cast<long double>(mag) / 1024.0L;
  while (v >= 1023.95L && u < 5) {  // else 1023.96 KiB would print as 1024.0 KiB
    v /= 1024.0L;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%s%.1Lf %s", neg ? "-" : "", v, kUnits[u]);
  return buf;
}

std::string format_gbps(double bytes, double seconds) {
  if (!(seconds > 0)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes / seconds / 1e9);
  return buf;
}

}  // namespace engram
