// How a number that may be missing is written: NaN (not recorded, could not be read) is "n/a" in text and null in
// JSON, never 0 (docs/json.md). The text helpers' one home for the library, the CLI and the benches; the JSON
// one is core/json_num.hpp's.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_num.hpp"

namespace engram::report {

using engram::json_num;

// printf-style formatting of one double; "n/a" when it is not finite.
inline std::string fmt_num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A JSON value that may be null or a number, formatted: "n/a" unless it is a number.
inline std::string fmt_json_num(const nlohmann::json& v, const char* fmt, double scale = 1.0) {
  return v.is_number() ? fmt_num(v.get<double>() * scale, fmt) : std::string("n/a");
}

}  // namespace engram::report
