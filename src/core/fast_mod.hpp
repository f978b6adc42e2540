// Exact modulo of a 64-bit value by a divisor fixed in advance, without a division (Barrett reduction).
//
// Every Engram id is (hash mod p_h) with one prime p_h per head, fixed when the layout is made. On NVIDIA GPUs a
// 64-bit `%` is a software routine of about a hundred instructions; a multiply-high, a multiply and two compares do
// the same exactly. Compiled by the C++ compiler and by nvcc (ENGRAM_HD), so the CUDA hash kernel runs exactly the
// code that tests/unit/core/test_fast_mod.cpp checks on the CPU against `%`.
//
// Method, for a divisor p in [1, 2^63] and the constant m = floor((2^64 - 1) / p) (make_fast_mod):
//   q' = floor(a * m / 2^64)  (the high word of the 128-bit product a * m), r' = a - q' * p.
// Claim: for every a in [0, 2^64), q - 2 <= q' <= q where q = floor(a / p); so r' is in [0, 3p) and at most two
// conditional subtractions of p give a mod p.
// Proof. Upper: m <= (2^64 - 1) / p, so a*m / 2^64 <= a (2^64 - 1) / (p 2^64) <= a / p, and q' <= floor(a / p) = q.
// Lower: m > (2^64 - 1) / p - 1, so a*m / 2^64 > a/p - a/(p 2^64) - a/2^64 > a/p - 1 - 1 (a < 2^64, p >= 1), and
// q' > a/p - 3 >= q - 3; q' is an integer, so q' >= q - 2. Then r' = (a - q p) + (q - q') p is in [0, p) + [0, 2p].
// r' <= a < 2^64, so the wrapping uint64 arithmetic a - q' * p yields r' itself. Two subtractions suffice; no
// loop, no data-dependent iteration count.
// Signed values follow Python's a % p (a result in [0, p) for every a), as the reference hash does.
#pragma once

#include <cstdint>

#ifndef ENGRAM_HD
#if defined(__CUDACC__)
#define ENGRAM_HD __host__ __device__ __forceinline__
#else
#define ENGRAM_HD inline
#endif
#endif

namespace engram {

// Largest divisor fast_mod accepts (the proof needs p <= 2^63; head sizes are below 2^41).
inline constexpr uint64_t kFastModMaxDivisor = uint64_t{1} << 63;

// m = floor((2^64 - 1) / p) for p in [1, kFastModMaxDivisor]; the caller checks the range.
constexpr uint64_t make_fast_mod(uint64_t p) { return ~uint64_t{0} / p; }

ENGRAM_HD uint64_t fast_mod_mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// a mod p for any a, given m = make_fast_mod(p).
ENGRAM_HD uint64_t fast_mod_u64(uint64_t a, uint64_t p, uint64_t m) {
  uint64_t r = a - fast_mod_mulhi(a, m) * p;
  if (r >= p) r -= p;
  if (r >= p) r -= p;
  return r;
}

// Python's a % p (in [0, p)) for a signed a, given m = make_fast_mod(p).
ENGRAM_HD int64_t fast_floor_mod(int64_t a, uint64_t p, uint64_t m) {
  if (a >= 0) return static_cast<int64_t>(fast_mod_u64(static_cast<uint64_t>(a), p, m));
  // |a| as uint64 (exact for INT64_MIN too); -a mod p is r, so a mod p is p - r (0 stays 0).
  const uint64_t r = fast_mod_u64(uint64_t{0} - static_cast<uint64_t>(a), p, m);
  return static_cast<int64_t>(r == 0 ? 0 : p - r);
}

}  // namespace engram
