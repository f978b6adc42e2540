// Byte sizes as people write them (an option's text, a Python argument) and as reports print them.
//
// The units (docs/terms.md): GB = 10^9 B, GiB = 2^30 B. A bare K/M/G/T is refused rather than guessed (dd reads
// "1G" as 2^30, disk vendors as 10^9): the message says to write GB or GiB.
#pragma once

#include <cstdint>
#include <string>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

// Parses "<number>[ ]<unit>" into bytes. number: digits with an optional fraction ("1.5"); unit
// (case-insensitive): none or B; KB MB GB TB PB EB (powers of 1000); KiB MiB GiB TiB PiB EiB (powers
// of 1024). Surrounding blanks are ignored. Examples: "4096" -> 4096, "512MiB" -> 536870912,
// "1GB" -> 1000000000, "1.5 KiB" -> 1536.
// kInvalidArgument (the message quotes the text and says what was expected) for an empty string, a
// sign, a missing or malformed number, an unknown or ambiguous unit (K, M, G, ...), a value that is
// not a whole number of bytes, or one above INT64_MAX.
Result<int64_t> parse_size_bytes(const std::string& text);

// Human size with binary units and one decimal: "512 B", "1.0 KiB", "512.0 MiB", "1.5 GiB".
// Values under 1 KiB print as exact bytes; negative values keep their sign.
std::string format_bytes(int64_t bytes);

ENGRAM_API_END
}  // namespace engram
