// Number formats of an Engram row and the scalar reference decoder.
//
// Compiled by both the C++ compiler and nvcc (functions are ENGRAM_HD), so the CPU backend, the CUDA
// kernel and the tests share one definition of every conversion: bit-identical results follow from
// running the same integer/float steps, not from hoping two implementations agree.
//
// Formats (sources: OCP 8-bit Floating Point Specification (OFP8) rev 1.0; OCP Microscaling Formats
// (MX) v1.0 §5.4; bfloat16 as in the Google/Intel definition):
//  - FP8 E4M3 ("fn" variant): 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals when exponent
//    is 0; no infinities; S.1111.111 (0x7F, 0xFF) is NaN; max finite ±448.
//  - ue8m0 scale: unsigned 8-bit exponent, value 2^(e-127). Edge codes follow OCP MX, which we chose
//    over the "shift e into a float's exponent field" trick: 0x00 is 2^-127 (a float subnormal,
//    0x00400000), not 0; 0xFF is NaN, not infinity. One scale covers 32 consecutive values of a row.
//  - BF16: the high 16 bits of an IEEE float, rounded to nearest even. Every NaN becomes the one
//    canonical quiet NaN 0x7FC0 so that backends agree bit for bit.
//
// Decoded value of element i of a row: bf16(float(fp8[i]) * 2^(scale[i/32] - 127)). The product is
// exact in float for every code pair (fp8 has 4 significant bits, the smallest product 2^-136 is above
// float's 2^-149 subnormal step) or overflows to infinity, so the only rounding is the final one to
// bf16 (which matters for tiny values in bf16's subnormal range and for overflow to infinity).
// Backends must not flush subnormals to zero (no -ffast-math, no nvcc --use_fast_math / -ftz=true).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ENGRAM_HD __host__ __device__ __forceinline__
#else
#define ENGRAM_HD inline
#endif

namespace engram {

inline constexpr int kScaleBlock = 32;            // values per ue8m0 scale (OCP MX block size)
inline constexpr uint16_t kBf16CanonicalNaN = 0x7FC0;
inline constexpr uint8_t kFp8NaNPos = 0x7F;
inline constexpr uint8_t kFp8NaNNeg = 0xFF;
inline constexpr uint8_t kUe8m0NaN = 0xFF;

ENGRAM_HD float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

ENGRAM_HD uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

ENGRAM_HD bool fp8_e4m3_is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }

// Exact float value of an FP8 E4M3 code (NaN codes give a quiet NaN).
ENGRAM_HD float fp8_e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t exp = (code >> 3) & 0xF;
  const uint32_t mant = code & 0x7;
  if (exp == 0xF && mant == 0x7) return bits_to_float(sign | 0x7FC00000u);
  if (exp == 0) {
    // Subnormal: mant/8 * 2^-6 = mant * 2^-9, exact in float.
    const float mag = static_cast<float>(mant) * bits_to_float(0x3B000000u);  // 2^-9
    return (code & 0x80) ? -mag : mag;
  }
  // Normal: rebias 7 -> 127 and widen the mantissa 3 -> 23 bits.
  return bits_to_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

ENGRAM_HD bool ue8m0_is_nan(uint8_t code) { return code == kUe8m0NaN; }

// Float value of a ue8m0 scale code: 2^(code-127); 0x00 -> 2^-127 (float subnormal); 0xFF -> NaN.
ENGRAM_HD float ue8m0_to_float(uint8_t code) {
  if (code == kUe8m0NaN) return bits_to_float(0x7FC00000u);
  if (code == 0) return bits_to_float(0x00400000u);
  return bits_to_float(static_cast<uint32_t>(code) << 23);
}

// Round a float to bf16, nearest even; NaN -> kBf16CanonicalNaN; overflow rounds to infinity.
ENGRAM_HD uint16_t float_to_bf16_rne(float f) {
  const uint32_t bits = float_to_bits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNaN;
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

ENGRAM_HD float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// One decoded element: bf16(fp8 * 2^(scale-127)), NaN in either input -> canonical NaN.
ENGRAM_HD uint16_t decode_element(uint8_t fp8, uint8_t scale) {
  if (fp8_e4m3_is_nan(fp8) || ue8m0_is_nan(scale)) return kBf16CanonicalNaN;
  return float_to_bf16_rne(fp8_e4m3_to_float(fp8) * ue8m0_to_float(scale));
}

// Scalar reference decoder of one row: payload[d] FP8 codes, scales[d/32] ue8m0 codes -> out[d] bf16
// bits. d must be a multiple of 32 (checked by the layout, not here).
ENGRAM_HD void decode_row_reference(const uint8_t* payload, const uint8_t* scales, int d,
                                    uint16_t* out) {
  for (int i = 0; i < d; ++i) out[i] = decode_element(payload[i], scales[i / kScaleBlock]);
}

}  // namespace engram
