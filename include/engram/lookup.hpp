// Lookup: Engram hash ids -> BF16 staging, the operation every backend implements.
//
// ids[tokens][heads] int64 global row indices of one Engram layer's table (head offsets already
// added); -1 (kDeadId) and any negative id give a zero row (padding / dead positions).
// out[tokens][heads][d] bf16 bits, row-major, written completely.
// An id >= table rows is invalid: in checked mode the call fails with kInvalidArgument before
// writing anything; otherwise that position is written as a zero row and counted in invalid_ids
// (never an out-of-bounds read). Both backends decode with format.hpp, so outputs are bit-identical.
// On a tensor-parallel slice (TableView::slice, engram/tp_slice.hpp) ids are still the layer's
// [tokens][heads] and global; out is [tokens][slice.local_heads][d] (local head j = global head
// head_begin + j): zero rows for padded heads and for ids of another rank's rows (neither counted),
// and "table rows" above means the whole layer's rows.
#pragma once

#include <cstdint>
#include <string>

#include "engram/export.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {
ENGRAM_API_BEGIN

inline constexpr int64_t kDeadId = -1;

struct LookupStats {
  int64_t rows = 0;         // tokens * heads positions written (a TP slice: tokens * local heads)
  int64_t dead_rows = 0;    // positions with a negative id (zero rows)
  int64_t invalid_ids = 0;  // positions with id >= rows (zero rows; 0 in checked mode)
};

// What a lookup launched: the grid of a CUDA launch (the CUDA launchers return this type) and the path the
// planner took; on the CPU only `rows` and `path`.
struct LaunchShape {
  int64_t rows = 0;        // positions written (tokens * out heads)
  int64_t tiles = 0;       // ceil(rows / tile_rows)
  int grid = 0;            // blocks launched: min(tiles, cap); 0 when nothing was launched
  int cap = 0;             // the grid cap in blocks (GridCap::blocks_for(SM count))
  int block_threads = 0;
  int tile_rows = 0;       // 8 warps * (32 / G) * rows_in_flight
  int lanes_per_row = 0;   // G
  int rows_in_flight = 0;  // U: 1 when ceil(rows / (8 * 32 / G)) <= cap (one wave), else 4
  std::string path;        // "cpu", "plain-uva", "dedup(hash)+cache+uva, background", ...
};

struct LookupRequest {
  const int64_t* ids = nullptr;  // [tokens][heads]
  int64_t tokens = 0;
  int heads = 0;
  uint16_t* out = nullptr;       // [tokens][heads][d] bf16 bits ([tokens][local heads][d] on a TP slice)
  bool checked = false;          // validate every id before writing
};

ENGRAM_API_END
}  // namespace engram
