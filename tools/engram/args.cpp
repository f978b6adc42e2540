// The argument checks shared by every command (args.hpp; the number checks are in arg_checks.hpp).
#include "args.hpp"

#include <cctype>
#include <functional>
#include <limits>
#include <optional>

#include "option_rules.hpp"
#include "sys/file.hpp"

namespace engram::cli {

namespace {

using detail::read_finite;
using detail::read_integer;

using detail::printable;
using detail::quiet;

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

// A value with whitespace or a control character at either end: a size, a number, a duration, a name or a list
// read with it would be read without it (or not at all), so it is refused whatever the option. Paths are exempt
// (a file name may end in a space); their own checks find a missing file.
CLI::Validator no_surrounding_space() {
  return quiet([](std::string& text) -> std::string {
    if (text.empty()) return {};
    const auto edge = [](char c) { return std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)); };
    if (edge(text.front()) || edge(text.back()))
      return "'" + printable(text) + "' has whitespace or a control character at an end (the value is read strictly)";
    return {};
  });
}

// An empty value: an option given '' would read as not given (its default: `run --model ''` runs the default
// table) or name no file, so it is refused whatever the option.
CLI::Validator not_empty() {
  return quiet([](std::string& text) -> std::string { return text.empty() ? "expected a non-empty value, got ''" : std::string(); });
}

bool is_path_option(CLI::Option* o) {
  for (const char* name : {"OUTPUT", "INPUT", "SOCKET"}) {
    try {
      if (o->get_validator(name)->get_name() == name) return true;
    } catch (const CLI::OptionNotFound&) {
    }
  }
  return false;
}

void harden_one(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    // A flag takes no value: `--force=yes` or `--verbose=0` is refused (parse_command_line names the flag) rather
    // than read as true, false or an error depending on the word.
    if (is_flag(*o)) {
      o->disable_flag_override();
      continue;
    }
    o->check(not_empty());
    if (!is_path_option(o)) o->check(no_surrounding_space());
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
  refuse_shared_files(app);
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) harden_one(*sub);
}

}  // namespace

CLI::Validator socket_path() {
  return CLI::Validator([](std::string& path) -> std::string {
    if (path.empty()) return "expected a socket path, got ''";
    auto info = sys::lstat_path(path);
    if (!info.is_ok()) return info.status().code() == Code::kNotFound ? std::string() : info.status().message();
    if (info->kind == sys::PathKind::kSocket) return {};
    const char* kind = info->kind == sys::PathKind::kDirectory ? "a directory"
                       : info->kind == sys::PathKind::kRegular ? "a regular file"
                                                               : "another kind of file";
    return "'" + path + "' exists and is not a socket (" + kind +
           "): give the path of the socket to create, in a directory of mode 0700";
  }, "", "SOCKET");
}

void harden_options(CLI::App& app) { harden_one(app); }

}  // namespace engram::cli
