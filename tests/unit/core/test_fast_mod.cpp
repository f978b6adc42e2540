// Description: the Barrett modulo of core/fast_mod.hpp (what the CUDA hash kernel runs) must equal `%` exactly:
// every divisor 1..2048 against every dividend of the lowest and highest 4096 values and around every multiple of
// p near 2^63 and 2^64; divisors at and around every power of two up to 2^63, the head sizes of the V4.1-Flash
// layout, and random divisors of every bit length, each against the edge dividends (0, 1, p-1, p, p+1, the
// largest multiples of p below 2^64, 2^63 +- 1, 2^64 - 1) and fresh random ones; and the signed form must follow
// Python's sign rule (INT64_MIN, INT64_MAX, -1, -p, -p +- 1 included).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/fast_mod.hpp"
#include "engram/layout.hpp"

namespace engram {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Python's a % p.
int64_t py_mod(int64_t a, uint64_t p) {
  const __int128 r = static_cast<__int128>(a) % static_cast<__int128>(p);
  return static_cast<int64_t>(r < 0 ? r + static_cast<__int128>(p) : r);
}

std::vector<uint64_t> edge_dividends(uint64_t p, std::mt19937_64& rng) {
  std::vector<uint64_t> a = {0, 1, 2, p - 1, p, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, kMax, kMax - 1, kMax - p,
                             uint64_t{1} << 63, (uint64_t{1} << 63) - 1, (uint64_t{1} << 63) + 1};
  const uint64_t top = kMax / p * p;  // the largest multiple of p <= 2^64 - 1
  for (uint64_t k = 0; k < 4; ++k)
    for (int64_t d = -2; d <= 2; ++d) a.push_back(top - k * p + static_cast<uint64_t>(d));
  const uint64_t half = (uint64_t{1} << 63) / p * p;
  for (int64_t d = -2; d <= 2; ++d) a.push_back(half + static_cast<uint64_t>(d));
  for (int i = 0; i < 64; ++i) a.push_back(rng());
  for (int i = 0; i < 16; ++i) a.push_back(rng() >> (rng() % 64));
  return a;
}

void check_divisor(uint64_t p, std::mt19937_64& rng) {
  ASSERT_GE(p, 1u);
  ASSERT_LE(p, kFastModMaxDivisor);
  const uint64_t m = make_fast_mod(p);
  for (uint64_t a : edge_dividends(p, rng)) {
    ASSERT_EQ(fast_mod_u64(a, p, m), a % p) << "a " << a << " p " << p;
    const int64_t s = static_cast<int64_t>(a);
    ASSERT_EQ(fast_floor_mod(s, p, m), py_mod(s, p)) << "a " << s << " p " << p;
  }
}

TEST(FastMod, EveryDivisorUpTo2048OnLowAndHighDividends) {
  for (uint64_t p = 1; p <= 2048; ++p) {
    const uint64_t m = make_fast_mod(p);
    for (uint64_t a = 0; a < 4096; ++a) ASSERT_EQ(fast_mod_u64(a, p, m), a % p) << "a " << a << " p " << p;
    for (uint64_t a = kMax - 4095;; ++a) {
      ASSERT_EQ(fast_mod_u64(a, p, m), a % p) << "a " << a << " p " << p;
      if (a == kMax) break;
    }
    // Around every multiple near 2^63 (where the signed form changes sign).
    const uint64_t base = (uint64_t{1} << 63) / p * p;
    for (uint64_t k = 0; k < 3; ++k)
      for (uint64_t d = 0; d < 3 * p && d < 64; ++d) {
        const uint64_t a = base - k * p + d;
        ASSERT_EQ(fast_mod_u64(a, p, m), a % p) << "a " << a << " p " << p;
      }
  }
}

TEST(FastMod, PowersOfTwoAndNeighbours) {
  std::mt19937_64 rng{std::random_device{}()};
  for (int k = 0; k <= 63; ++k) {
    const uint64_t p = uint64_t{1} << k;
    check_divisor(p, rng);
    if (p > 1) check_divisor(p - 1, rng);
    if (k < 63) check_divisor(p + 1, rng);
  }
}

TEST(FastMod, HeadSizesOfTheFlashLayoutAndRandomDivisors) {
  std::mt19937_64 rng{std::random_device{}()};
  auto l = make_preset_layout("v41-flash");
  ASSERT_TRUE(l.is_ok());
  for (const auto& rows : l->head_rows)
    for (int64_t p : rows) check_divisor(static_cast<uint64_t>(p), rng);
  for (int bits = 1; bits <= 63; ++bits)
    for (int i = 0; i < 20; ++i) {
      uint64_t p = (rng() >> (64 - bits)) | (uint64_t{1} << (bits - 1));
      if (p > kFastModMaxDivisor) p = kFastModMaxDivisor;
      check_divisor(p, rng);
    }
}

TEST(FastMod, SignedFormFollowsPythonSignRule) {
  std::mt19937_64 rng{std::random_device{}()};
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  for (uint64_t p : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{16000057}, uint64_t{4294967311},
                     (uint64_t{1} << 40) + 15, kFastModMaxDivisor - 1, kFastModMaxDivisor}) {
    const uint64_t m = make_fast_mod(p);
    const int64_t sp = p > static_cast<uint64_t>(kMax64) ? kMax64 : static_cast<int64_t>(p);
    for (int64_t a : {kMin64, kMin64 + 1, kMax64, kMax64 - 1, int64_t{-1}, int64_t{0}, int64_t{1}, -sp, -sp + 1,
                      -sp - (sp < kMax64 ? 1 : 0), sp, sp - 1})
      ASSERT_EQ(fast_floor_mod(a, p, m), py_mod(a, p)) << "a " << a << " p " << p;
    for (int i = 0; i < 1000; ++i) {
      const int64_t a = static_cast<int64_t>(rng());
      ASSERT_EQ(fast_floor_mod(a, p, m), py_mod(a, p)) << "a " << a << " p " << p;
    }
  }
}

}  // namespace
}  // namespace engram
