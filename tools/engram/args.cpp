// The argument checks shared by every command (args.hpp). Numbers are read with std::from_chars, which refuses
// what is out of its type's range instead of saturating, and reads decimal only.
#include "args.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>

#include "core/units.hpp"
#include "sys/file.hpp"

namespace engram::cli {

namespace {

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The text as a finite double, or nothing (not a number, trailing characters, NaN, infinite, out of range).
std::optional<double> read_finite(const std::string& text) {
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

CLI::Validator quiet(std::function<std::string(std::string&)> check) {
  return CLI::Validator(std::move(check), "");
}

// Checks attached by value type (harden_options).
CLI::Validator any_finite() {
  return quiet([](std::string& text) -> std::string {
    if (read_finite(text)) return {};
    return "expected a finite number, got '" + text + "'";
  });
}

CLI::Validator any_signed(bool non_negative) {
  return quiet([non_negative](std::string& text) -> std::string {
    bool overflow = false;
    const auto v = read_integer<int64_t>(text, &overflow);
    if (overflow) return "'" + text + "' is outside the 64-bit integer range";
    if (!v) return "expected an integer, got '" + text + "'";
    if (non_negative && *v < 0) return "expected a non-negative integer, got '" + text + "'";
    text = std::to_string(*v);
    return {};
  });
}

CLI::Validator any_unsigned() {
  return quiet([](std::string& text) -> std::string {
    bool overflow = false;
    if (!text.empty() && text[0] == '-') return "expected a non-negative integer, got '" + text + "'";
    const auto v = read_integer<uint64_t>(text, &overflow);
    if (overflow) return "'" + text + "' is larger than 18446744073709551615 (2^64 - 1)";
    if (!v) return "expected a non-negative integer, got '" + text + "'";
    text = std::to_string(*v);
    return {};
  });
}

// What CLI11 calls the option's value type ("INT", "UINT", "FLOAT", "TEXT", ...), without its validators'
// descriptions.
std::string base_type(const CLI::Option& o) {
  const std::string t = o.get_type_name();
  return t.substr(0, t.find(':'));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void harden_one(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_size_max() == 0) continue;  // a flag
    const std::string type = base_type(*o);
    const bool seed = ends_with(o->get_name(), "seed");
    if (type == "FLOAT") {
      o->check(any_finite());
    } else if (type == "INT") {
      o->check(any_signed(seed));
    } else if (type == "UINT") {
      o->check(any_unsigned());
    } else if (seed) {
      o->check(any_unsigned());
    }
  }
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) harden_one(*sub);
}

std::string path_check(const Status& s) { return s.is_ok() ? std::string() : s.message(); }

}  // namespace

CLI::Validator finite_number(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const auto v = read_finite(text);
        if (!v || *v < lo || *v > hi)
          return "expected a finite number in [" + num_text(lo) + ", " + num_text(hi) + "], got '" + text + "'";
        return {};
      },
      "in [" + num_text(lo) + ", " + num_text(hi) + "]");
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto v = read_finite(text);
        if (!v || !(*v > 0)) return "expected a finite number > 0, got '" + text + "'";
        return {};
      },
      "> 0");
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        bool overflow = false;
        const auto v = read_integer<int64_t>(text, &overflow);
        if (!v || *v < lo || *v > hi)
          return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'";
        text = std::to_string(*v);
        return {};
      },
      "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator output_file(std::vector<std::string> special) {
  return quiet([special = std::move(special)](std::string& path) -> std::string {
    for (const auto& w : special)
      if (path == w) return {};
    return path_check(sys::check_output_path(path, sys::OutputKind::kFile));
  });
}

CLI::Validator output_dir() {
  return quiet([](std::string& path) -> std::string {
    return path_check(sys::check_output_path(path, sys::OutputKind::kDirectory));
  });
}

CLI::Validator input_file() {
  return quiet([](std::string& path) -> std::string {
    return path_check(sys::check_input_path(path, sys::InputKind::kFile));
  });
}

CLI::Validator input_path() {
  return quiet([](std::string& path) -> std::string {
    return path_check(sys::check_input_path(path, sys::InputKind::kFileOrDirectory));
  });
}

void harden_options(CLI::App& app) { harden_one(app); }

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "expected a non-empty value" : std::string(); },
      "");
}

CLI::Validator size_in(int64_t lo, int64_t hi) {
  const std::string range = "[" + format_bytes(lo) + ", " + format_bytes(hi) + "]";
  return CLI::Validator(
      [range, lo, hi](std::string& text) -> std::string {
        const auto b = parse_size_bytes(text);
        if (!b.is_ok()) return b.status().message();
        if (*b < lo || *b > hi) return "expected a size in " + range + ", got '" + text + "'";
        return {};
      },
      "SIZE in " + range);
}

}  // namespace engram::cli
