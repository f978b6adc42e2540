// CPU lookup: each worker takes a contiguous range of (token, head) positions, reads the row's
// payload and scales through the TableView (fused or split) and decodes it with decode_row_fast
// (table-driven, bit-identical to the reference decoder of format.hpp).
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
  const int64_t n = req.tokens * req.heads;
  LookupStats stats;
  stats.rows = n;
  if (n == 0) return stats;
  if (!req.ids || !req.out || !table.data)
    return Status(Code::kInvalidArgument, "cpu lookup: null ids, out or table pointer");
  if (table.d <= 0 || table.d % kScaleBlock != 0)
    return Status(Code::kInvalidArgument, "cpu lookup: d=" + std::to_string(table.d) + " is not a multiple of 32");
  if (req.checked) {
    for (int64_t i = 0; i < n; ++i) {
      if (req.ids[i] >= table.rows)
        return Status(Code::kInvalidArgument, "cpu lookup: id " + std::to_string(req.ids[i]) + " at position " +
                                                  std::to_string(i) + " >= table rows " + std::to_string(table.rows));
    }
  }
  std::atomic<int64_t> dead{0}, invalid{0};
  const int d = table.d;
  auto body = [&](int64_t lo, int64_t hi) {
    int64_t my_dead = 0, my_invalid = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t id = req.ids[i];
      uint16_t* o = req.out + i * d;
      if (id < 0 || id >= table.rows) {
        (id < 0 ? my_dead : my_invalid) += 1;
        std::memset(o, 0, sizeof(uint16_t) * static_cast<size_t>(d));
        continue;
      }
      decode_row_fast(table.payload_of(id), table.scales_of(id), d, o);
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
