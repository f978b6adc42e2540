// In-batch de-duplication of Engram ids on the GPU, and the fast-path kernels built around it.
//
// Real-text N-gram ids repeat within a batch, and a random row read over UVA costs one PCIe request whatever its
// size (docs/fastpath.md), so the fast path reads each distinct row once: dedup produces unique_ids[U] and
// inverse[n] (position -> unique index, -1 for dead / out-of-range ids), the rows are gathered and decoded into a
// compact device buffer [U][d], and a scatter copies each row to every position (HBM copies, ~4 TB/s, versus
// PCIe requests). Two methods, both with U kept on the device (no host synchronisation, graph-capturable):
//  - hash: open-addressing table sized 2x the batch (power of two; keys = id, linear probing, atomicCAS insert),
//    unique ids in arbitrary order. A memset and three small kernels.
//  - sort: CUB radix sort of (id, position) over the bits the table's row count needs, head flags, an inclusive
//    scan: unique ids in ascending id order = ascending address (rows are stored in id order): the
//    gather reads the table in address order.
// Dead (negative) and out-of-range ids are counted exactly as the plain kernel counts them (counters[0] dead,
// counters[1] invalid) and never read.
//
// Thread safety: a DeviceDedup's buffers serve one batch at a time (one stream: the prefetch queue's). No CUDA
// types in this header.
#pragma once

#include <cstdint>
#include <memory>

#include "engram/status.hpp"

namespace engram::cuda {

enum class DedupMethod { kHash, kSort };

class DeviceDedup {
 public:
  // Buffers for batches of up to max_rows ids (max_rows < 2^31). kOutOfMemory / kCuda.
  static Result<std::unique_ptr<DeviceDedup>> create(int64_t max_rows);
  ~DeviceDedup();
  DeviceDedup(const DeviceDedup&) = delete;
  DeviceDedup& operator=(const DeviceDedup&) = delete;

  // Enqueues the dedup of device ids[n] (n <= max_rows) on `stream`. Afterwards, in stream order:
  // unique_ids()[0..*unique_count()) and inverse()[0..n). counters (device [2], may be null): += dead, += invalid.
  Status run(const int64_t* ids, int64_t n, int64_t table_rows, DedupMethod method, unsigned long long* counters,
             void* stream);

  const int64_t* unique_ids() const { return unique_; }
  const int32_t* inverse() const { return inverse_; }
  const unsigned long long* unique_count() const { return count_; }  // device scalar
  int64_t max_rows() const { return max_rows_; }
  int64_t device_bytes() const { return bytes_; }

 private:
  DeviceDedup() = default;
  int64_t max_rows_ = 0;
  int64_t bytes_ = 0;
  int64_t hash_cap_ = 0;
  // hash
  unsigned long long* keys_ = nullptr;  // [hash_cap]
  int32_t* vals_ = nullptr;             // [hash_cap]
  int32_t* pos_slot_ = nullptr;         // [max_rows]
  // sort
  unsigned long long* skeys_in_ = nullptr;
  unsigned long long* skeys_out_ = nullptr;
  int32_t* svals_in_ = nullptr;
  int32_t* svals_out_ = nullptr;
  int32_t* flags_ = nullptr;
  int32_t* scan_ = nullptr;
  void* cub_temp_ = nullptr;
  size_t cub_temp_bytes_ = 0;
  // results
  int64_t* unique_ = nullptr;           // [max_rows]
  int32_t* inverse_ = nullptr;          // [max_rows]
  unsigned long long* count_ = nullptr; // [1]
};

// Fast-path gather: the UVA lookup kernel's shape (lookup_kernel.cu: G = d/16 lanes per row, U rows in flight; here
// U is 8 as well as 1 and 4 when that makes the batch one wave of the capped grid) with an indirect destination and
// a device-side row count:
//   for k < (n_device ? *n_device : n): id = ids[k] (or k when ids == nullptr);
//   id >= 0: decode row id of `rows_base` into out[dst ? dst[k] : k]; id == -1: write a zero row;
//   id == kSkipId: write nothing (the row comes from elsewhere, e.g. the cache).
// rows_base is a device-accessible address (UVA-translated host table, device cache, or staged records); rows are
// fused records of `stride` bytes or split (payload stride = d, scales at `scales_base`). Ids are trusted unless
// id_limit > 0: the caller has mapped dead/out-of-range ids to -1. Grid: min(ceil(n / tile), cap).
// With id_limit > 0 the gather sanitizes as launch_sanitize_ids would, in the same pass: an id < 0 (kSkipId
// included) or >= id_limit writes a zero row and counts into counters[0] (dead) / counters[1] (out of range).
// With cache.keys set, every valid id is first looked up in the hot-row cache's map (one lane per row group walks
// the chain in HBM): a cached row is read from the cache (FP8 records decoded as table rows are, BF16 rows copied),
// the others over UVA; cache.hits counts the rows served from the cache. One launch replaces sanitize, probe and
// gather, with outputs bit-identical to theirs.
inline constexpr int64_t kSkipId = INT64_MIN;
// A hot-row cache as the gather reads it (HotRowCache::map_view).
struct CacheMapView {
  const int64_t* keys = nullptr;         // null: no cache
  const int32_t* slots = nullptr;
  unsigned long long mask = 0;
  const uint8_t* rows = nullptr;         // [slots][row_bytes]: FP8 records (payload d, then d/32 scales) or BF16 rows
  int64_t row_bytes = 0;
  bool fp8 = true;
  unsigned long long* hits = nullptr;    // device counter, may be null
};
struct FastGatherArgs {
  const uint8_t* rows_base = nullptr;
  const uint8_t* scales_base = nullptr;  // split only
  int64_t stride = 0;
  int d = 0;
  bool fused = true;
  const int64_t* ids = nullptr;
  const int32_t* dst = nullptr;
  int64_t n = 0;                         // upper bound (sizes the grid)
  const unsigned long long* n_device = nullptr;
  uint16_t* out = nullptr;
  int cap = 1;                           // grid cap in blocks (GridCap::blocks_for), >= 1
  int64_t id_limit = 0;                  // > 0: sanitize in the gather (ids >= id_limit or < 0 are zero rows)
  unsigned long long* counters = nullptr;  // with id_limit: [0] dead, [1] out of range (may be null)
  CacheMapView cache;
};
Status launch_fast_gather(const FastGatherArgs& a, void* stream);
// Launches the gather of `a` once in every shape launch_fast_gather may choose (rows in flight; one block each),
// so that CUDA loads each kernel, which it does at a kernel's first launch in the process, before a served batch
// needs it. Writes `a`'s outputs and counters as a launch would; the caller passes harmless ids and null counters.
Status warm_fast_gather(const FastGatherArgs& a, void* stream);

// out[i] = inverse[i] >= 0 ? compact[inverse[i]] : 0 (rows of d bf16), i < n.
Status launch_scatter_rows(const uint16_t* compact, const int32_t* inverse, int64_t n, int d, uint16_t* out,
                           void* stream);

// Without dedup: ids_out[i] = ids[i] if 0 <= ids[i] < rows else -1; counters += dead, invalid.
Status launch_sanitize_ids(const int64_t* ids, int64_t n, int64_t rows, int64_t* ids_out, unsigned long long* counters,
                           void* stream);

}  // namespace engram::cuda
