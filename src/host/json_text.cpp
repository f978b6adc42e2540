// Message helpers for untrusted JSON (see json_text.hpp).
#include "host/json_text.hpp"

#include <algorithm>

namespace engram::host {
namespace {

constexpr size_t kMaxTextInMessage = 80;

template <typename T>
std::string list_text_of(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 8 && v.size() > 10) {
      s += ", ... (" + std::to_string(v.size()) + " entries)";
      break;
    }
    s += (i ? ", " : "") + std::to_string(v[i]);
  }
  return s + "]";
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  const size_t n = std::min(s.size(), kMaxTextInMessage);
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.push_back(c >= 0x20 && c < 0x7F ? static_cast<char>(c) : '?');
  }
  if (s.size() > n) out += "...";
  return out;
}

std::string a_type(const nlohmann::json& j) {
  using value_t = nlohmann::json::value_t;
  switch (j.type()) {
    case value_t::object: return "an object";
    case value_t::array: return "an array";
    case value_t::string: return "a string";
    case value_t::boolean: return "a boolean";
    case value_t::null: return "null";
    case value_t::number_integer:
    case value_t::number_unsigned:
    case value_t::number_float: return "a number";
    default: return std::string("a ") + j.type_name();
  }
}

std::string list_text(const std::vector<int64_t>& v) { return list_text_of(v); }
std::string list_text(const std::vector<int>& v) { return list_text_of(v); }

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

Result<int64_t> json_integer(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi) {
  auto out_of_range = [&](const std::string& text) {
    return Status(Code::kInvalidArgument,
                  field + " = " + text + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return out_of_range(std::to_string(u));
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return Status(Code::kInvalidArgument, field + ": expected an integer, got " + a_type(v));
  }
  if (x < lo || x > hi) return out_of_range(std::to_string(x));
  return x;
}

Result<std::vector<int64_t>> json_integer_list(const nlohmann::json& v, const std::string& field, int64_t lo,
                                               int64_t hi, size_t max_len) {
  if (!v.is_array()) return Status(Code::kInvalidArgument, field + ": expected an array of integers, got " + a_type(v));
  if (v.size() > max_len)
    return Status(Code::kInvalidArgument,
                  field + ": " + std::to_string(v.size()) + " entries, at most " + std::to_string(max_len));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ENGRAM_ASSIGN_OR_RETURN(const int64_t x, json_integer(v[i], field + "[" + std::to_string(i) + "]", lo, hi));
    out.push_back(x);
  }
  return out;
}

}  // namespace engram::host
