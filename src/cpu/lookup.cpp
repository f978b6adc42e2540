// CPU lookup: each worker takes a contiguous range of output positions, reads the row's payload and
// scales through the TableView (fused or split) and decodes it with decode_row_fast (table-driven,
// bit-identical to the reference decoder of format.hpp). A whole table's position i is ids[i]; a TP
// slice's position (token t, local head j) reads ids[t][head_begin + j] and its local row id - row_begin
// (engram/tp_slice.hpp), writing zeros for padded heads and for ids of another rank's rows.
#include "cpu/lookup.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "cpu/decode_fast.hpp"
#include "engram/format.hpp"

namespace engram::cpu {

Result<LookupStats> lookup(const TableView& table, const LookupRequest& req, ThreadPool* pool) {
  if (req.tokens < 0 || req.heads < 0)
    return Status(Code::kInvalidArgument, "cpu lookup: tokens=" + std::to_string(req.tokens) +
                                              " heads=" + std::to_string(req.heads) + " must be >= 0");
  const LayerSlice& sl = table.slice;
  if (sl.sliced() && req.heads != sl.heads)
    return Status(Code::kInvalidArgument, "cpu lookup: ids of " + std::to_string(req.heads) + " heads for a TP slice of a " +
                                              std::to_string(sl.heads) + "-head layer");
  const int out_heads = sl.out_heads(req.heads);
  const int64_t n = req.tokens * out_heads;
  LookupStats stats;
  stats.rows = n;
  if (n == 0) return stats;
  if (!req.ids || !req.out || (!table.data && table.rows > 0))
    return Status(Code::kInvalidArgument, "cpu lookup: null ids, out or table pointer");
  if (table.d <= 0 || table.d % kScaleBlock != 0)
    return Status(Code::kInvalidArgument, "cpu lookup: d=" + std::to_string(table.d) + " is not a multiple of 32");
  // Ids of the whole layer are valid on every rank: the limit is the layer's rows.
  const int64_t id_limit = sl.sliced() ? sl.layer_rows : table.rows;
  if (req.checked) {
    for (int64_t i = 0; i < req.tokens * req.heads; ++i) {
      if (req.ids[i] >= id_limit)
        return Status(Code::kInvalidArgument, "cpu lookup: id " + std::to_string(req.ids[i]) + " at position " +
                                                  std::to_string(i) + " >= table rows " + std::to_string(id_limit));
    }
  }
  std::atomic<int64_t> dead{0}, invalid{0};
  const int d = table.d;
  const size_t row_bytes = sizeof(uint16_t) * static_cast<size_t>(d);
  auto body = [&](int64_t lo, int64_t hi) {
    int64_t my_dead = 0, my_invalid = 0;
    for (int64_t i = lo; i < hi; ++i) {
      uint16_t* o = req.out + i * d;
      int64_t id = 0;
      if (sl.sliced()) {
        const int64_t t = i / out_heads;
        const int h = sl.head_begin + static_cast<int>(i - t * out_heads);
        if (h >= sl.heads) {  // padding head of a last rank
          std::memset(o, 0, row_bytes);
          continue;
        }
        id = req.ids[t * req.heads + h];
      } else {
        id = req.ids[i];
      }
      if (id < 0 || id >= id_limit) {
        (id < 0 ? my_dead : my_invalid) += 1;
        std::memset(o, 0, row_bytes);
        continue;
      }
      const int64_t row = id - sl.row_begin;  // row_begin is 0 for a whole table
      if (row < 0 || row >= table.rows) {  // another rank's row
        std::memset(o, 0, row_bytes);
        continue;
      }
      decode_row_fast(table.payload_of(row), table.scales_of(row), d, o);
    }
    dead += my_dead;
    invalid += my_invalid;
  };
  if (pool) {
    pool->parallel_for(n, 64, body);
  } else {
    body(0, n);
  }
  stats.dead_rows = dead.load();
  stats.invalid_ids = invalid.load();
  return stats;
}

}  // namespace engram::cpu
