// decode_row_fast: table-driven exponent shift (see decode_fast.hpp for why it is exact).
#include "cpu/decode_fast.hpp"

#include <array>

#include "engram/format.hpp"

namespace engram::cpu {

namespace {

struct Tables {
  std::array<uint16_t, 256> bf16{};  // bf16 bits of each FP8 code (canonical NaN for NaN codes)
  std::array<uint16_t, 256> mask{};  // 0xFFFF where the exponent shift applies (non-zero, non-NaN), else 0
};

const Tables& tables() {
  static const Tables t = [] {
    Tables x;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      x.bf16[c] = fp8_e4m3_is_nan(code) ? kBf16CanonicalNaN : float_to_bf16_rne(fp8_e4m3_to_float(code));
      x.mask[c] = (fp8_e4m3_is_nan(code) || (c & 0x7F) == 0) ? 0 : 0xFFFF;
    }
    return x;
  }();
  return t;
}

}  // namespace

void decode_row_fast(const uint8_t* payload, const uint8_t* scales, int d, uint16_t* out) {
  const Tables& t = tables();
  for (int b = 0; b < d / kScaleBlock; ++b) {
    const int e = scales[b];
    const uint8_t* p = payload + b * kScaleBlock;
    uint16_t* o = out + b * kScaleBlock;
    if (e < kFastScaleMin || e > kFastScaleMax) {
      for (int i = 0; i < kScaleBlock; ++i) o[i] = decode_element(p[i], static_cast<uint8_t>(e));
      continue;
    }
    // (e - 127) << 7 as a 16-bit two's-complement addend on the exponent field.
    const auto adj = static_cast<uint16_t>((e - 127) * 128);
    for (int i = 0; i < kScaleBlock; ++i) o[i] = static_cast<uint16_t>(t.bf16[p[i]] + (adj & t.mask[p[i]]));
  }
}

}  // namespace engram::cpu
