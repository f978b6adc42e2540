// Small formatting helpers shared by subcommands: NaN -> "n/a" in text and null in JSON, never 0.
#pragma once

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace engram::cli {

inline nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

inline std::string fmt_num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace engram::cli
