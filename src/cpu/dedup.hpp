// In-batch de-duplication of Engram ids on the CPU, and the CPU lookup built on it.
//
// N-gram hash ids of real text repeat within a batch (the same N-gram in many sequences, the same token at many
// positions), so a batch needs one row read and one decode per *distinct* id; every position then gets a copy of
// its row. dedup_ids() finds the distinct valid ids with an open-addressing hash table sized for the batch (not
// for the table: 2x the batch, rounded up to a power of two), in order of first occurrence, optionally sorted by
// id (= by address: rows are laid out in id order). lookup_dedup() decodes each unique row once (decode_row_fast,
// bit-identical to format.hpp's reference) and copies it to every position. Dead (negative) ids and ids >= rows
// are not rows: they map to -1 and give zero rows, counted as the plain lookup counts them.
// Thread safety: pure functions; lookup_dedup uses `pool` as cpu::lookup does.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "engram/lookup.hpp"

namespace engram::cpu {

struct DedupResult {
  std::vector<int64_t> unique_ids;  // distinct ids in [0, rows): first-occurrence order, or ascending if sorted
  std::vector<int32_t> inverse;     // [n]: index into unique_ids, -1 for dead / out-of-range positions
  int64_t dead_rows = 0;            // positions with a negative id
  int64_t invalid_ids = 0;          // positions with id >= rows
  // distinct valid ids / positions (NaN-free: 0 when n == 0)
  double unique_fraction(int64_t n) const { return n > 0 ? static_cast<double>(unique_ids.size()) / n : 0.0; }
};

// ids[n] int64; rows: the table's row count. n must fit in int32 (kInvalidArgument otherwise).
Result<DedupResult> dedup_ids(const int64_t* ids, int64_t n, int64_t rows, bool sort_by_address);

struct DedupLookupStats {
  LookupStats lookup;
  int64_t unique_rows = 0;  // rows read and decoded
};

// Same contract and output as cpu::lookup (src/cpu/lookup.hpp), one decode per distinct id.
Result<DedupLookupStats> lookup_dedup(const TableView& table, const LookupRequest& req, ThreadPool* pool,
                                      bool sort_by_address = false);

}  // namespace engram::cpu
