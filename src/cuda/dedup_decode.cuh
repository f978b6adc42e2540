// Device helpers shared by the fast-path kernels (dedup.cu, hot_cache.cu): the 16-value exact decode (the UVA
// lookup kernel's decode16: decode_fast.cuh for scales in [10, 246], format.hpp's decode_element otherwise) and
// the id hash of the device hash tables (Fibonacci hashing; host code that builds a table uses the same function).
#pragma once

#include <cstdint>

#include "cuda/decode_fast.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

ENGRAM_HD unsigned long long hash_slot(unsigned long long id, unsigned long long mask) {
  return (id * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

#if defined(__CUDACC__)
// 16 FP8 codes (little-endian in v) with one scale -> 16 bf16 in lo (elements 0..7) and hi (8..15).
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
