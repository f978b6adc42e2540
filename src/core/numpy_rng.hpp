// numpy's default random stream, bit for bit: SeedSequence -> PCG64 -> Generator.integers(int64).
//
// The reference Engram draws its hash multipliers with
//   numpy.random.default_rng(seed).integers(low, high, size, dtype=numpy.int64)
// so reproducing its hash ids without Python means reproducing these three pieces exactly:
//   - SeedSequence (numpy/random/bit_generator.pyx): the entropy integer, split into 32-bit words
//     (least significant first), is hash-mixed into a pool of 4 words; generate_state() hashes the pool
//     cyclically into as many 32-bit words as asked (pairs, low word first, for 64-bit words);
//   - PCG64 (O'Neill's pcg_setseq_128_xsl_rr_64): seeded with generate_state(4, uint64) as
//     (state high, state low, increment high, increment low); next_uint64 steps the 128-bit LCG and
//     outputs XSL-RR of the new state; next_uint32 returns the low half of a 64-bit draw and buffers the
//     high half for the next call;
//   - Generator.integers(low, high, size, int64) with endpoint=False: the range rng = high-1-low;
//     rng == 0 draws nothing; rng < 2^32 - 1 uses Lemire's method on 32-bit draws; rng == 2^32 - 1 takes
//     next_uint32 as is; larger ranges use Lemire's method on 64-bit draws with a 128-bit product
//     (numpy/random/src/distributions/distributions.c, random_bounded_uint64_fill, use_masked = false).
// tests/unit/core/test_numpy_rng.cpp checks every piece against the python3-numpy of the machine.
// Not thread-safe: one Pcg64 per thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engram/status.hpp"

namespace engram::numpy_rng {

class SeedSequence {
 public:
  static constexpr int kPoolSize = 4;  // numpy's DEFAULT_POOL_SIZE (32-bit words)

  // SeedSequence(entropy) for a non-negative integer entropy that fits in 64 bits.
  explicit SeedSequence(uint64_t entropy);
  // SeedSequence(entropy) for an arbitrary non-negative integer given as 32-bit words, least
  // significant first (numpy's own split; an empty vector is entropy 0).
  explicit SeedSequence(const std::vector<uint32_t>& entropy_words);

  // The mixed entropy pool (SeedSequence.pool).
  const std::array<uint32_t, kPoolSize>& pool() const { return pool_; }
  // generate_state(n_words, numpy.uint32).
  std::vector<uint32_t> generate_state_u32(int n_words) const;
  // generate_state(n_words, numpy.uint64).
  std::vector<uint64_t> generate_state_u64(int n_words) const;

 private:
  std::array<uint32_t, kPoolSize> pool_{};
};

class Pcg64 {
 public:
  // PCG64(seed_sequence), as numpy.random.default_rng(seed) builds it.
  explicit Pcg64(const SeedSequence& seed);
  // PCG64 from a raw state (bit_generator.state): 128-bit state and increment as (high, low) words.
  Pcg64(uint64_t state_high, uint64_t state_low, uint64_t inc_high, uint64_t inc_low);

  uint64_t next_uint64();
  uint32_t next_uint32();

  uint64_t state_high() const { return static_cast<uint64_t>(state_ >> 64); }
  uint64_t state_low() const { return static_cast<uint64_t>(state_); }
  uint64_t inc_high() const { return static_cast<uint64_t>(inc_ >> 64); }
  uint64_t inc_low() const { return static_cast<uint64_t>(inc_); }
  bool has_uint32() const { return has_uint32_; }
  uint32_t buffered_uint32() const { return uinteger_; }

 private:
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

// Generator(bitgen).integers(low, high, size=n, dtype=numpy.int64) (endpoint=False): n draws from
// [low, high). kInvalidArgument when low >= high (numpy raises ValueError "low >= high").
Result<std::vector<int64_t>> integers_int64(Pcg64& bitgen, int64_t low, int64_t high, int64_t n);

// numpy.random.default_rng(seed).integers(low, high, size=n, dtype=numpy.int64), seed >= 0.
Result<std::vector<int64_t>> default_rng_integers_int64(uint64_t seed, int64_t low, int64_t high, int64_t n);

}  // namespace engram::numpy_rng
