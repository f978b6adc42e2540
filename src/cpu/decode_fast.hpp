// Fast CPU row decoder, bit-identical to decode_row_reference (format.hpp).
//
// For a scale code e in [kFastScaleMin, kFastScaleMax] (core/decode_fast_range.hpp) every non-zero FP8 value times 2^(e-127) is a normal bf16 number (|fp8| in
// [2^-9, 448], so the exponent stays in [-126, 127]); the FP8 value itself is exact in bf16 (4 significant bits),
// so the product's bf16 bits are the FP8 value's bf16 bits with (e-127) added to the exponent field. One table
// lookup and one masked add per element, no float math; zeros keep their sign, NaN codes map to the canonical NaN.
// Blocks with other scale codes (tiny/huge/NaN) take the reference path. tests/backend/test_cpu_decode_fast.cpp
// checks every (fp8, scale) pair.
#pragma once

#include <cstdint>

#include "core/decode_fast_range.hpp"

namespace engram::cpu {

// out[d] = decode of payload[d] with scales[d/32]; d % 32 == 0.
void decode_row_fast(const uint8_t* payload, const uint8_t* scales, int d, uint16_t* out);

}  // namespace engram::cpu
