// CPU de-duplication (see dedup.hpp). The hash table stores (id, unique index) pairs with linear probing and a
// multiplicative (Fibonacci) hash of the id; 2x load headroom keeps probes short on any id distribution. Sorting
// permutes unique_ids and remaps inverse through the permutation, so the two orders give identical staging.
#include "cpu/dedup.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "cpu/decode_fast.hpp"

namespace engram::cpu {

Result<DedupResult> dedup_ids(const int64_t* ids, int64_t n, int64_t rows, bool sort_by_address) {
  DedupResult r;
  if (n < 0 || n > INT32_MAX)
    return Status(Code::kInvalidArgument, "dedup: batch of " + std::to_string(n) + " ids is outside [0, 2^31)");
  if (n > 0 && !ids) return Status(Code::kInvalidArgument, "dedup: null ids");
  r.inverse.assign(static_cast<size_t>(n), -1);
  if (n == 0) return r;
  uint64_t cap = 16;
  while (cap < static_cast<uint64_t>(2 * n)) cap <<= 1;
  const int shift = 64 - __builtin_ctzll(cap);
  std::vector<int64_t> keys(cap, -1);
  std::vector<int32_t> vals(cap, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0) {
      ++r.dead_rows;
      continue;
    }
    if (id >= rows) {
      ++r.invalid_ids;
      continue;
    }
    uint64_t h = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift;
    while (keys[h] != -1 && keys[h] != id) h = (h + 1) & (cap - 1);
    if (keys[h] == -1) {
      keys[h] = id;
      vals[h] = static_cast<int32_t>(r.unique_ids.size());
      r.unique_ids.push_back(id);
    }
    r.inverse[static_cast<size_t>(i)] = vals[h];
  }
  if (sort_by_address && r.unique_ids.size() > 1) {
    const size_t u = r.unique_ids.size();
    std::vector<int32_t> order(u);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r.unique_ids[a] < r.unique_ids[b]; });
    std::vector<int32_t> rank(u);
    std::vector<int64_t> sorted(u);
    for (size_t k = 0; k < u; ++k) {
      rank[static_cast<size_t>(order[k])] = static_cast<int32_t>(k);
      sorted[k] = r.unique_ids[static_cast<size_t>(order[k])];
    }
    r.unique_ids = std::move(sorted);
    for (auto& x : r.inverse)
      if (x >= 0) x = rank[static_cast<size_t>(x)];
  }
  return r;
}

Result<DedupLookupStats> lookup_dedup(const TableView& table, const LookupRequest& req, ThreadPool* pool,
                                      bool sort_by_address) {
  if (req.tokens < 0 || req.heads < 0)
    return Status(Code::kInvalidArgument, "cpu dedup lookup: tokens=" + std::to_string(req.tokens) +
                                              " heads=" + std::to_string(req.heads) + " must be >= 0");
  const int64_t n = req.tokens * req.heads;
  DedupLookupStats st;
  st.lookup.rows = n;
  if (n == 0) return st;
  if (!req.ids || !req.out || !table.data)
    return Status(Code::kInvalidArgument, "cpu dedup lookup: null ids, out or table pointer");
  if (table.d <= 0 || table.d % 32 != 0)
    return Status(Code::kInvalidArgument, "cpu dedup lookup: d=" + std::to_string(table.d) + " is not a multiple of 32");
  if (req.checked) {
    for (int64_t i = 0; i < n; ++i)
      if (req.ids[i] >= table.rows)
        return Status(Code::kInvalidArgument, "cpu dedup lookup: id " + std::to_string(req.ids[i]) + " at position " +
                                                  std::to_string(i) + " >= table rows " + std::to_string(table.rows));
  }
  ENGRAM_ASSIGN_OR_RETURN(DedupResult dd, dedup_ids(req.ids, n, table.rows, sort_by_address));
  const int d = table.d;
  const int64_t u = static_cast<int64_t>(dd.unique_ids.size());
  std::vector<uint16_t> compact(static_cast<size_t>(u) * static_cast<size_t>(d));
  auto decode = [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const int64_t id = dd.unique_ids[static_cast<size_t>(k)];
      decode_row_fast(table.payload_of(id), table.scales_of(id), d, compact.data() + k * d);
    }
  };
  auto scatter = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int32_t k = dd.inverse[static_cast<size_t>(i)];
      uint16_t* o = req.out + i * d;
      if (k < 0)
        std::memset(o, 0, sizeof(uint16_t) * static_cast<size_t>(d));
      else
        std::memcpy(o, compact.data() + static_cast<int64_t>(k) * d, sizeof(uint16_t) * static_cast<size_t>(d));
    }
  };
  if (pool) {
    pool->parallel_for(u, 64, decode);
    pool->parallel_for(n, 256, scatter);
  } else {
    decode(0, u);
    scatter(0, n);
  }
  st.lookup.dead_rows = dd.dead_rows;
  st.lookup.invalid_ids = dd.invalid_ids;
  st.unique_rows = u;
  return st;
}

}  // namespace engram::cpu
