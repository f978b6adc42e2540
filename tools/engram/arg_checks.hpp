// The per-option checks of the argument layer (args.hpp): numbers, sizes, lists, paths. Header-only so that the
// bench entries (bench/, an object library that declares its options on the CLI's subcommands) use the same
// validators as every command. Numbers are read with std::from_chars, which refuses what is out of its type's
// range instead of saturating, and reads decimal only. Ranges are printed with %g (never a 309-digit DBL_MAX).
// Path checks are made at parse time (sys::check_output_path / check_input_path), so nothing is computed for an
// output that cannot be written, and a FIFO given as an input is refused instead of blocking the read.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "engram/status.hpp"
#include "engram/units.hpp"
#include "sys/file.hpp"

namespace engram::cli {

namespace detail {

inline std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The text as a finite double, or nothing (not a number, trailing characters, NaN, infinite, out of range).
inline std::optional<double> read_finite(const std::string& text) {
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  double v = 0;
  const auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The text as a decimal integer of type T (optional sign), or nothing; `overflow` is set when it is an integer
// that T cannot hold.
template <typename T>
std::optional<T> read_integer(const std::string& text, bool* overflow) {
  *overflow = false;
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  T v{};
  const auto [p, ec] = std::from_chars(b, e, v, 10);
  if (ec == std::errc::result_out_of_range && p == e) *overflow = true;
  if (ec != std::errc() || p != e || b == e) return std::nullopt;
  return v;
}

}  // namespace detail

// A finite number in [lo, hi].
inline CLI::Validator finite_number(double lo, double hi) {
  const std::string range = "[" + detail::num_text(lo) + ", " + detail::num_text(hi) + "]";
  return CLI::Validator(
      [range, lo, hi](std::string& text) -> std::string {
        const auto v = detail::read_finite(text);
        if (!v || *v < lo || *v > hi) return "expected a finite number in " + range + ", got '" + text + "'";
        return {};
      },
      "in " + range);
}

// A decimal integer in [lo, hi] (no clamping: a value outside is refused). The text is rewritten in canonical
// decimal, so that CLI11's own conversion reads what was checked.
inline CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [range, lo, hi](std::string& text) -> std::string {
        bool overflow = false;
        const auto v = detail::read_integer<int64_t>(text, &overflow);
        if (!v || *v < lo || *v > hi) return "expected an integer in " + range + ", got '" + text + "'";
        text = std::to_string(*v);
        return {};
      },
      "in " + range);
}

// One check for every ranged option: integer_in for integer bounds, finite_number for floating ones.
template <typename T>
CLI::Validator range(T lo, T hi) {
  if constexpr (std::is_floating_point_v<T>) return finite_number(static_cast<double>(lo), static_cast<double>(hi));
  else return integer_in(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}

// A decimal integer in [lo, hi] that is a multiple of `m` (row widths: a multiple of 32).
inline CLI::Validator multiple_in(int64_t lo, int64_t hi, int64_t m) {
  const std::string what = "a multiple of " + std::to_string(m) + " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [what, lo, hi, m](std::string& text) -> std::string {
        bool overflow = false;
        const auto v = detail::read_integer<int64_t>(text, &overflow);
        if (!v || *v < lo || *v > hi || *v % m != 0) return "expected " + what + ", got '" + text + "'";
        text = std::to_string(*v);
        return {};
      },
      what);
}

// A byte size as engram/units.hpp reads it ("512MiB", "1GB", "4096") in [lo, hi] bytes.
inline CLI::Validator size_in(int64_t lo, int64_t hi) {
  // The largest byte count is printed exactly: format_bytes would round 2^63-1 up to "8.0 EiB", which is refused.
  const auto bound = [](int64_t b) {
    return b == INT64_MAX ? std::string("9223372036854775807 B (2^63-1)") : format_bytes(b);
  };
  const std::string range = "[" + bound(lo) + ", " + bound(hi) + "]";
  return CLI::Validator(
      [range, lo, hi](std::string& text) -> std::string {
        const auto b = parse_size_bytes(text);
        if (!b.is_ok()) return b.status().message();
        if (*b < lo || *b > hi) return "expected a size in " + range + ", got '" + text + "'";
        return {};
      },
      "SIZE in " + range);
}

// A value that `parse` accepts; its message when it does not (e.g. a placement or a duration parser).
inline CLI::Validator parsed_by(std::function<Status(const std::string&)> parse, const std::string& description = "") {
  return CLI::Validator(
      [parse = std::move(parse)](std::string& text) -> std::string {
        const Status s = parse(text);
        return s.is_ok() ? std::string() : s.message();
      },
      description);
}

// A comma-separated list whose every item is one of `words` (each item once or more; no empty item).
inline CLI::Validator list_of(const std::set<std::string>& words) {
  std::string accepted;
  for (const auto& w : words) accepted += (accepted.empty() ? "" : ", ") + w;
  return CLI::Validator(
      [words, accepted](std::string& text) -> std::string {
        size_t b = 0;
        for (;;) {
          const size_t e = text.find(',', b);
          const std::string item = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
          if (!words.count(item))
            return "'" + item + "'" + (item == text ? std::string() : " (in '" + text + "')") + " is not one of: " + accepted;
          if (e == std::string::npos) return {};
          b = e + 1;
        }
      },
      "list of " + accepted);
}

// A non-empty text (a name or a path where '' would silently mean something else).
inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "expected a non-empty value" : std::string(); },
      "");
}

namespace detail {
// A validator with no description in --help; `name` lets the argument layer find it again (a path check is named
// OUTPUT or INPUT: option_rules.hpp compares the files those options name).
inline CLI::Validator quiet(std::function<std::string(std::string&)> check, const std::string& name = "") {
  return CLI::Validator(std::move(check), "", name);
}
// The text with its control characters written as escapes (\n, \t, \xNN), for messages.
inline std::string printable(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}
inline std::string path_check(const Status& s) { return s.is_ok() ? std::string() : s.message(); }
}  // namespace detail

// An output file (sys::check_output_path kFile). `special` words pass unchecked ("none", "-" for stdout).
inline CLI::Validator output_file(std::vector<std::string> special = {}) {
  return detail::quiet([special = std::move(special)](std::string& path) -> std::string {
    for (const auto& w : special)
      if (path == w) return {};
    return detail::path_check(sys::check_output_path(path, sys::OutputKind::kFile));
  }, "OUTPUT");
}

// An output directory that exists or can be made (its parent exists and is writable).
inline CLI::Validator output_dir() {
  return detail::quiet([](std::string& path) -> std::string {
    return detail::path_check(sys::check_output_path(path, sys::OutputKind::kDirectory));
  }, "OUTPUT");
}

// An input file that exists and is a regular file; input_path() also takes a directory; input_dir() only one.
inline CLI::Validator input_file() {
  return detail::quiet([](std::string& path) -> std::string {
    return detail::path_check(sys::check_input_path(path, sys::InputKind::kFile));
  }, "INPUT");
}
inline CLI::Validator input_path() {
  return detail::quiet([](std::string& path) -> std::string {
    return detail::path_check(sys::check_input_path(path, sys::InputKind::kFileOrDirectory));
  }, "INPUT");
}
inline CLI::Validator input_dir() {
  return detail::quiet([](std::string& path) -> std::string {
    return detail::path_check(sys::check_input_path(path, sys::InputKind::kDirectory));
  }, "INPUT");
}

// A group name (serve-table, run --ranks, soak and their rank processes): not empty, no whitespace or control
// character (it is printed in messages and logs, and a peer must type it), no '/' (it names the socket file in the
// private runtime directory when no --socket is given).
inline CLI::Validator group_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return "expected a group name, got ''";
        for (const char ch : text) {
          const auto c = static_cast<unsigned char>(ch);
          if (c <= 0x20 || c == 0x7f || ch == '/')
            return "'" + detail::printable(text) + "' is not a group name: no whitespace, control character or '/'";
        }
        return {};
      },
      "NAME (no whitespace, control character or '/')");
}

}  // namespace engram::cli
