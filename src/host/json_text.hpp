// Helpers for messages about untrusted JSON (safetensors headers, model config.json and index.json):
// untrusted text made printable, a JSON value's kind in words, lists in brackets, and a nesting-depth
// guard run before parsing so that neither the parser nor a destructor recurses as deep as an
// attacker likes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace engram::host
