// Fast exact FP8 E4M3 x ue8m0 -> BF16 decode for the lookup kernel's common case (compiled by nvcc and g++).
//
// format.hpp's decode_element converts through float and rounds to bf16, with branches for NaN, subnormal FP8 and
// every edge code: exact, but ~40 instructions per element, which dominates a small lookup's latency. When the
// scale code lies in [kFastScaleMin, kFastScaleMax] every product fp8 * 2^(scale-127) is a *normal* bf16 (the
// smallest, FP8 subnormal 2^-9 times 2^-117, has biased exponent >= 1; the largest, 448 * 2^119, is < 2^128), so
// it is exact in bf16 and needs no rounding: the bf16 bits are the FP8 sign, the exponent rebiased by the scale,
// and the 3 mantissa bits shifted up (subnormal FP8 codes normalised first). Outside that range the kernel calls
// decode_element. tests/cuda/test_decode_fast.cpp checks all 65,536 (code, scale) pairs against decode_element.
#pragma once

#include <cstdint>

#include "core/decode_fast_range.hpp"
#include "engram/format.hpp"

namespace engram::cuda {

using engram::kFastScaleMax;
using engram::kFastScaleMin;

ENGRAM_HD bool decode_fast_ok(uint32_t scale) {
  return scale - static_cast<uint32_t>(kFastScaleMin) <= static_cast<uint32_t>(kFastScaleMax - kFastScaleMin);
}

// bf16 bits of fp8 `code` times 2^(scale - 127); requires decode_fast_ok(scale). Branch-free (selects only).
ENGRAM_HD uint32_t decode_fast(uint32_t code, uint32_t scale) {
  const uint32_t sign = (code & 0x80u) << 8;
  const uint32_t e = (code >> 3) & 0xFu;
  const uint32_t m = code & 0x7u;
  // Normal FP8: value 2^(e-7) * (1 + m/8) -> bf16 biased exponent e - 7 + (scale - 127) + 127.
  const uint32_t normal = sign | ((e + scale - 7u) << 7) | (m << 4);
  // Subnormal FP8: value m * 2^-9 = 2^(p-9) * (m / 2^p), p = position of m's leading one (0..2).
  const uint32_t p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
  const uint32_t sub = sign | ((scale - 9u + p) << 7) | ((m << (7u - p)) & 0x7Fu);
  uint32_t bits = e != 0 ? normal : (m != 0 ? sub : sign);  // +-0 keeps its sign
  bits = (code & 0x7Fu) == 0x7Fu ? static_cast<uint32_t>(kBf16CanonicalNaN) : bits;
  return bits;
}

#if defined(__CUDACC__)
// 16 FP8 codes (little-endian in v) with one scale -> 16 bf16 in lo (elements 0..7) and hi (8..15): the decode of
// every lookup kernel (lookup_kernel.cu, dedup.cu, hot_cache.cu). Scales in decode_fast's range take the
// branch-free exact path, others format.hpp's decode_element.
__device__ __forceinline__ void decode16(const uint4 v, uint8_t scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[8];
  if (decode_fast_ok(scale)) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t word = w[i / 2] >> ((i % 2) * 16);
      o[i] = decode_fast(word & 0xFFu, scale) | (decode_fast((word >> 8) & 0xFFu, scale) << 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t word = w[i / 2] >> ((i % 2) * 16);
      const uint16_t e0 = decode_element(static_cast<uint8_t>(word), scale);
      const uint16_t e1 = decode_element(static_cast<uint8_t>(word >> 8), scale);
      o[i] = static_cast<uint32_t>(e0) | (static_cast<uint32_t>(e1) << 16);
    }
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}
#endif

}  // namespace engram::cuda
