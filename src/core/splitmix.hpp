// SplitMix64: a tiny, fast, well-mixed 64-bit generator for synthetic data and id streams.
// Not numpy's PCG64 (that one lives with the N-gram hash, where bit-compatibility matters).
#pragma once

#include <cstdint>

namespace engram {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stateless mix of several words into one seed.
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  uint64_t x = splitmix64(s);
  s ^= c * 0xD1B54A32D192ED03ull;
  return x ^ splitmix64(s);
}

}  // namespace engram
