// Exhaustive tests of the FP8 E4M3, ue8m0 and bf16 codecs against independent double-precision math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engram/format.hpp"

namespace engram {
namespace {

// Independent decoder: value of an E4M3 code from its definition, in double.
double e4m3_reference(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// Independent bf16 rounding: nearest representable bf16 (ties to even), computed with doubles.
uint16_t bf16_reference(double v) {
  if (std::isnan(v)) return kBf16CanonicalNaN;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  // Walk candidates around float(a) truncated; exhaustive over the two neighbours.
  uint32_t fb;
  const float af = static_cast<float>(a);  // exact for all products in this test
  std::memcpy(&fb, &af, 4);
  const uint16_t lo = static_cast<uint16_t>(fb >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  auto val = [](uint16_t h) {
    uint32_t b = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return static_cast<double>(f);
  };
  const double dl = a - val(lo), dh = val(hi) - a;
  uint16_t r;
  if (dl < dh) r = lo;
  else if (dh < dl) r = hi;
  else r = (lo & 1) ? hi : lo;
  if (std::isinf(a)) r = 0x7F80;
  return static_cast<uint16_t>(sign | r);
}

TEST(Fp8E4M3, AllCodesMatchDefinition) {
  for (int c = 0; c < 256; ++c) {
    const double ref = e4m3_reference(static_cast<uint8_t>(c));
    const float got = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      EXPECT_TRUE(fp8_e4m3_is_nan(static_cast<uint8_t>(c)));
    } else {
      EXPECT_EQ(static_cast<double>(got), ref) << "code " << c;
      EXPECT_FALSE(fp8_e4m3_is_nan(static_cast<uint8_t>(c)));
    }
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  EXPECT_EQ(fp8_e4m3_to_float(0x80), 0.0f);
}

TEST(Ue8m0, AllCodes) {
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(static_cast<double>(ue8m0_to_float(static_cast<uint8_t>(e))), std::ldexp(1.0, e - 127)) << e;
  }
  // Edge codes as chosen (OCP MX): 0x00 is 2^-127, not zero; 0xFF is NaN, not infinity.
  EXPECT_GT(ue8m0_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
}

TEST(Bf16, RoundNearestEvenSpotChecks) {
  EXPECT_EQ(float_to_bf16_rne(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_rne(bits_to_float(0x3F808000u)), 0x3F80);  // tie -> even (down)
  EXPECT_EQ(float_to_bf16_rne(bits_to_float(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16_rne(bits_to_float(0x3F808001u)), 0x3F81);  // above tie
  EXPECT_EQ(float_to_bf16_rne(bits_to_float(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16_rne(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16_rne(-INFINITY), 0xFF80);
  EXPECT_EQ(float_to_bf16_rne(std::nanf("")), kBf16CanonicalNaN);
  EXPECT_EQ(float_to_bf16_rne(-std::nanf("")), kBf16CanonicalNaN);
  EXPECT_EQ(float_to_bf16_rne(bits_to_float(0x00018000u)), 0x0002);  // subnormal tie -> even
}

// Every (fp8 code, scale code) pair: 65,536 products against the double-precision definition.
TEST(DecodeElement, ExhaustiveAgainstDoubleDefinition) {
  int checked = 0;
  for (int c = 0; c < 256; ++c) {
    for (int e = 0; e < 256; ++e) {
      const uint16_t got = decode_element(static_cast<uint8_t>(c), static_cast<uint8_t>(e));
      const double x = e4m3_reference(static_cast<uint8_t>(c));
      if (std::isnan(x) || e == 0xFF) {
        EXPECT_EQ(got, kBf16CanonicalNaN) << c << "," << e;
        continue;
      }
      const double v = x * std::ldexp(1.0, e - 127);
      uint16_t want;
      if (std::fabs(v) > 3.4028234663852886e38) {
        want = std::signbit(v) ? 0xFF80 : 0x7F80;
      } else {
        want = bf16_reference(v);
      }
      ASSERT_EQ(got, want) << "fp8 " << c << " scale " << e << " value " << v;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 254 * 255);
}

TEST(DecodeRowReference, ScalesApplyPerBlockOf32) {
  uint8_t payload[64];
  for (int i = 0; i < 64; ++i) payload[i] = 0x38;  // 1.0
  uint8_t scales[2] = {128, 126};                   // 2.0 and 0.5
  uint16_t out[64];
  std::memset(out, 0xAB, sizeof out);
  decode_row_reference(payload, scales, 64, out);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0x4000) << i;  // 2.0
  for (int i = 32; i < 64; ++i) EXPECT_EQ(out[i], 0x3F00) << i;  // 0.5
}

}  // namespace
}  // namespace engram
