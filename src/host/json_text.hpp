// Helpers for untrusted JSON (safetensors headers and metadata, model config.json and index.json):
// untrusted text made printable, a JSON value's kind in words, lists in brackets, a nesting-depth
// guard run before parsing so that neither the parser nor a destructor recurses as deep as an
// attacker likes, and range-checked integer fields.
#pragma once

#include <cstdint>
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

}  // namespace engram::host
