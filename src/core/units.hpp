// Byte sizes: the parser and the human form are public (engram/units.hpp); the rate text of reports is here.
//
// The units (docs/terms.md): GB = 10^9 B, GiB = 2^30 B. A bare K/M/G/T is refused rather than
// guessed (dd reads "1G" as 2^30, disk vendors as 10^9): the message says to write GB or GiB.
#pragma once

#include <cstdint>
#include <string>

#include "engram/status.hpp"
#include "engram/units.hpp"  // IWYU pragma: export

namespace engram {

// Decimal rate: "2.51 GB/s" from bytes and seconds (GB = 10^9 B); "n/a" when seconds <= 0.
std::string format_gbps(double bytes, double seconds);

}  // namespace engram
