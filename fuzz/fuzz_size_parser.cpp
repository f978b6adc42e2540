// libFuzzer target: parse_size_bytes and format_bytes on arbitrary text (the CLI's --table-size and
// every other size argument). An accepted size is non-negative; its formatted form (rounded to one
// decimal) parses again, or is refused only for not being a whole number of bytes or for rounding
// above INT64_MAX; nothing crashes or overflows (UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = engram::parse_size_bytes(text);
  if (!r.is_ok()) {
    if (r.status().code() != engram::Code::kInvalidArgument) std::abort();
    return 0;
  }
  if (*r < 0) std::abort();
  const std::string shown = engram::format_bytes(*r);
  auto back = engram::parse_size_bytes(shown);
  if (!back.is_ok() && back.status().message().find("whole number") == std::string::npos &&
      back.status().message().find("too large") == std::string::npos)
    std::abort();
  (void)engram::format_bytes(-*r);
  return 0;
}
