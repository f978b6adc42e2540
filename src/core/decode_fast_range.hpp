// The ue8m0 scale codes of the fast FP8 -> BF16 decoders (cpu/decode_fast.hpp, cuda/decode_fast.cuh): for a scale
// code e in [kFastScaleMin, kFastScaleMax] every product fp8 * 2^(e-127) is a normal bf16 number (the smallest, FP8
// subnormal 2^-9 times 2^-117, has biased exponent >= 1; the largest, 448 * 2^119, is < 2^128), so the decode is
// exact without rounding. Blocks with other codes take format.hpp's decode_element. Compiled by g++ and nvcc.
#pragma once

namespace engram {

inline constexpr int kFastScaleMin = 10;
inline constexpr int kFastScaleMax = 246;

}  // namespace engram
