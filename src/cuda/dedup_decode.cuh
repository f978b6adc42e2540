// Device helpers shared by the fast-path kernels (dedup.cu, hot_cache.cu): the 16-value exact decode
// (decode_fast.cuh's decode16, the UVA lookup kernel's) and the id hash of the device hash tables (Fibonacci
// hashing; host code that builds a table uses the same function).
#pragma once

#include <cstdint>

#include "cuda/decode_fast.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

ENGRAM_HD unsigned long long hash_slot(unsigned long long id, unsigned long long mask) {
  return (id * 0x9E3779B97F4A7C15ull >> 20) & mask;
}


}  // namespace engram::cuda
