// The fast CPU decoder equals the reference for every (fp8 code, scale code) pair and on random rows.
#include <gtest/gtest.h>

#include <random>

#include "cpu/decode_fast.hpp"
#include "engram/format.hpp"

namespace engram {
namespace {

TEST(DecodeFast, EveryCodePairEqualsReference) {
  uint8_t payload[256];
  for (int c = 0; c < 256; ++c) payload[c] = static_cast<uint8_t>(c);
  uint16_t fast[256], ref[256];
  for (int e = 0; e < 256; ++e) {
    uint8_t scales[8];
    for (auto& s : scales) s = static_cast<uint8_t>(e);
    std::fill(std::begin(fast), std::end(fast), 0xDEAD);
    cpu::decode_row_fast(payload, scales, 256, fast);
    decode_row_reference(payload, scales, 256, ref);
    for (int c = 0; c < 256; ++c) ASSERT_EQ(fast[c], ref[c]) << "fp8 " << c << " scale " << e;
  }
}

TEST(DecodeFast, RandomRowsMixedScales) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> payload(512), scales(16);
  std::vector<uint16_t> fast(512), ref(512);
  for (int it = 0; it < 2000; ++it) {
    for (auto& b : payload) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(rng());
    std::fill(fast.begin(), fast.end(), 0xDEAD);
    cpu::decode_row_fast(payload.data(), scales.data(), 512, fast.data());
    decode_row_reference(payload.data(), scales.data(), 512, ref.data());
    ASSERT_EQ(fast, ref);
  }
}

}  // namespace
}  // namespace engram
