// Helpers for untrusted JSON (safetensors headers and metadata, model config.json and index.json):
// untrusted text made printable, a JSON value's kind in words, lists in brackets, a nesting-depth
// guard run before parsing so that neither the parser nor a destructor recurses as deep as an
// attacker likes, and range-checked integer fields.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engram/status.hpp"

namespace engram::host {

inline constexpr int kMaxJsonDepth = 64;

// Control and non-ASCII bytes become '?', text longer than 80 bytes is cut with "...".
std::string printable(std::string_view s);
// "an object", "an array", "a string", "a number", "a boolean", "null".
std::string a_type(const nlohmann::json& j);
// "[1, 2, 3]"; more than ten entries print the first eight and the count.
std::string list_text(const std::vector<int64_t>& v);
std::string list_text(const std::vector<int>& v);
// Depth of [ and { nesting outside strings is at most max_depth. For a prefix of valid JSON this is
// the parser's depth exactly; the parser stops at the first invalid byte, so the bound holds for
// invalid input too.
bool json_depth_within(std::string_view text, int max_depth = kMaxJsonDepth);

// An integer in [lo, hi]. kInvalidArgument "<field>: expected an integer, got a string" or
// "<field> = 7 is not in [lo, hi]".
Result<int64_t> json_integer(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi);
// An array of at most max_len integers in [lo, hi] (may be empty); errors name "<field>[i]".
Result<std::vector<int64_t>> json_integer_list(const nlohmann::json& v, const std::string& field, int64_t lo,
                                               int64_t hi, size_t max_len);

// The member `name` of object j as T; kInvalidArgument "<where>: missing field 'name'" when absent, and
// "<where>: field 'name' ..." when it holds another kind of value. An integral T (bool aside) takes only a JSON
// integer within T's range: nlohmann's get<int64_t>() would truncate 6.5 to 6 and cast 6e24 past the range, which
// is undefined behaviour (a fuzz finding, tests/unit/host/test_regress_token_io.cpp).
template <typename T>
Result<T> json_field(const nlohmann::json& j, const std::string& where, const char* name);
// The same, `fallback` when the member is absent.
template <typename T>
Result<T> json_optional_field(const nlohmann::json& j, const std::string& where, const char* name, T fallback);

namespace detail {
template <typename T>
Result<T> json_member_as(const nlohmann::json& v, const std::string& where, const char* name) {
  if constexpr (std::integral<T> && !std::same_as<T, bool>) {
    static_assert(sizeof(T) <= sizeof(int64_t), "64-bit integers at most");
    constexpr int64_t kHi = static_cast<uint64_t>(std::numeric_limits<T>::max()) > uint64_t{INT64_MAX}
                                ? INT64_MAX
                                : static_cast<int64_t>(std::numeric_limits<T>::max());
    auto x = json_integer(v, std::string("field '") + name + "'", static_cast<int64_t>(std::numeric_limits<T>::min()), kHi);
    if (!x.is_ok()) return Status(Code::kInvalidArgument, where + ": " + x.status().message());
    return static_cast<T>(*x);
  } else {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      return Status(Code::kInvalidArgument, where + ": field '" + name + "' has the wrong type: " +
                                                printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    }
  }
}
}  // namespace detail

template <typename T>
Result<T> json_field(const nlohmann::json& j, const std::string& where, const char* name) {
  if (!j.is_object()) return Status(Code::kInvalidArgument, where + ": expected a JSON object holding '" + name + "'");
  auto it = j.find(name);
  if (it == j.end()) return Status(Code::kInvalidArgument, where + ": missing field '" + name + "'");
  return detail::json_member_as<T>(*it, where, name);
}

template <typename T>
Result<T> json_optional_field(const nlohmann::json& j, const std::string& where, const char* name, T fallback) {
  if (!j.is_object()) return Status(Code::kInvalidArgument, where + ": expected a JSON object holding '" + name + "'");
  auto it = j.find(name);
  if (it == j.end()) return fallback;
  return detail::json_member_as<T>(*it, where, name);
}

}  // namespace engram::host
