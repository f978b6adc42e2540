// The lookup kernel's fast decode path equals format.hpp's decode_element for every (FP8 code, ue8m0 scale) pair
// in its range, and its range is as wide as that claim allows. Host-only: runs without a GPU.
#include <gtest/gtest.h>

#include "cuda/decode_fast.cuh"
#include "engram/format.hpp"

namespace engram {
namespace {

TEST(DecodeFast, EqualsTheReferenceForEveryCodeInRange) {
  int checked = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    if (!cuda::decode_fast_ok(s)) continue;
    for (uint32_t c = 0; c < 256; ++c) {
      const uint16_t want = decode_element(static_cast<uint8_t>(c), static_cast<uint8_t>(s));
      ASSERT_EQ(cuda::decode_fast(c, s), want) << "code 0x" << std::hex << c << " scale 0x" << s;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 256 * static_cast<int>(cuda::kFastScaleMax - cuda::kFastScaleMin + 1));
}

TEST(DecodeFast, RangeIsExactlyWhereNoProductRoundsOrOverflows) {
  EXPECT_FALSE(cuda::decode_fast_ok(cuda::kFastScaleMin - 1));
  EXPECT_FALSE(cuda::decode_fast_ok(cuda::kFastScaleMax + 1));
  EXPECT_FALSE(cuda::decode_fast_ok(0));
  EXPECT_FALSE(cuda::decode_fast_ok(255));
  // Just outside the range the reference leaves the normal bf16 range (subnormal result or infinity), which the
  // fast path would get wrong: the bounds are tight, not arbitrary.
  const uint16_t below = decode_element(0x01, static_cast<uint8_t>(cuda::kFastScaleMin - 1));  // 2^-9 * 2^-118
  EXPECT_EQ(below & 0x7F80, 0) << "expected a bf16 subnormal";
  const uint16_t above = decode_element(0x7E, static_cast<uint8_t>(cuda::kFastScaleMax + 1));  // 448 * 2^120
  EXPECT_EQ(above, 0x7F80) << "expected +infinity";
}

}  // namespace
}  // namespace engram
