// A lookup kernel in the style of the most widely used serving engine's Engram kernel, written for this project's
// benchmarks from the facts of that kernel (never its code): the bar `engram bench traffic` measures the engine
// against. What it shares with that kernel:
//   - split rows: the FP8 payload [rows][d] and the ue8m0 scales [rows][d/32] are two arrays, read separately;
//   - a persistent grid: grid = min(ceil(rows / 16), cap) blocks (cap = every SM in the foreground), each looping
//     over blocks of 16 rows with stride grid * 16;
//   - one block of 16 rows per iteration, 4 warps: 8 threads per row, each reading 32 payload bytes (two 16-byte
//     loads) and the one scale byte of those 32 values, decoding fp8 x 2^(scale - 127) in float and writing bf16
//     rounded to nearest even;
//   - int64 ids [tokens][heads], global row ids of the layer; an id < 0 or >= rows writes a zero row.
// Its output is bit-identical to the project's decoder (format.hpp's decode_element) for scale codes 1..254 (every
// table the benches build: codes 119..135); code 0 decodes to 0 there (2^-127 here) and code 255 is not a NaN there.
// d = 256 only (V4.1-Flash rows). No CUDA types here: streams are void* (cudaStream_t).
#pragma once

#include <cstdint>

#include "engram/status.hpp"

namespace engram::bench {

struct ReferenceLookupArgs {
  const uint8_t* payload = nullptr;  // device address of the payload array [table_rows][d] (UVA: host memory)
  const uint8_t* scales = nullptr;   // device address of the scale array [table_rows][d/32]
  int64_t table_rows = 0;
  int d = 256;
  const int64_t* ids = nullptr;      // device [rows]
  int64_t rows = 0;                  // tokens x heads
  uint16_t* out = nullptr;           // device [rows][d] bf16 bits, 16-byte aligned
  int grid_cap = 0;                  // most blocks; 0 = the device's SM count
};

struct ReferenceLaunch {
  int grid = 0;
  int64_t tiles = 0;  // blocks of 16 rows
};

// Enqueues the lookup on `stream`. kInvalidArgument for d != 256, null or misaligned pointers, rows < 0; kCuda for a
// launch failure (the pending error is cleared).
Result<ReferenceLaunch> launch_reference_lookup(const ReferenceLookupArgs& args, void* stream);

}  // namespace engram::bench
