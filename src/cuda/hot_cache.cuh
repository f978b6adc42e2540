// GPU hot-row cache: the most frequent rows of one Engram layer's table kept in device memory, so a
// lookup reads them from HBM instead of issuing a PCIe request per row.
//
// N-gram frequencies of text are Zipfian, so a small cache (a few % of the table) holds a large share of the
// lookups. The cache is filled from a frequency profile: ids hottest first (a warm-up window of real traffic, or
// `engram profile` over a corpus). Rows are stored either as FP8 records (payload | scales, padded to 16 B; the
// probe decodes them exactly as the UVA kernel does) or as BF16 rows (decoded once at fill time, bit-identical to
// the CPU's decoder; a hit is a 2d-byte copy): FP8 holds ~1.9x more rows per byte, BF16 needs no decode. The
// initial fill reads the rows on the GPU from the registered table when it is given (HotCacheOptions::
// device_source: one batched gather), else on the host, row by row.
// The id -> slot map is an open-addressing hash table sized for the cache (2x slots, power of two, linear
// probing; deleted entries are tombstones), not for the table. HBM: the budget covers every device buffer of the
// cache, rows + map + the update staging (rows and map edits of one stage, allocated at creation), sized by
// plan::hot_cache_sizing, so hbm_bytes() <= budget_bytes always.
//
// Online update (bounded rate, LFU by the caller's counts): update() swaps at most max_rows slots, enqueued on the
// caller's stream as two small copies and one small kernel (map edits), so it is ordered with the lookups and never
// stalls the prefetch queue by more than that bounded work; the host keeps a mirror of the map. replace() is the
// same update with the victims chosen by the caller (the engine's sampled LFU, src/plan/hot_counts.hpp). Evictions
// leave tombstones; when keys + tombstones pass 3/4 of the map it is rebuilt on the host and copied whole.
// Two phases, so that a server keeps the transfer off its lookups: stage() fills the new rows on the host and
// copies them (and the map edits) to device staging on a side stream (a low-priority one); commit(), called once
// stage_ready() says that copy is done, enqueues the device-to-device row copy and the map edits on the lookup
// stream. Lookups never read the staging, and the commit is ordered with them on their stream, so every lookup
// sees either the cache before or after the whole slice: results stay bit-identical to the table's at all times.
// replace() is stage() + commit() on one stream. The host mirror (contains(), slot_ids()) changes at stage().
// Thread safety: one driving thread. No CUDA types in this header.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engram/options.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::cuda {

using engram::cache_format_name;
using engram::CacheFormat;

class UvaTable;  // lookup_kernel.cuh

struct HotCacheOptions {
  int64_t budget_bytes = 0;          // HBM for rows + map + update staging (plan::hot_cache_sizing): all of it
  CacheFormat format = CacheFormat::kFp8;
  int64_t staging_rows = 16;         // rows one stage() may hold (capped at a quarter of the budget)
  // The same table as the GPU reads it (registered): create() gathers the initial rows on the GPU from it, a
  // batched read at the lookup's rate, instead of reading and decoding them one by one on the host. The bytes are
  // the same: FP8 records are the table's own bytes, BF16 rows the lookup kernel's decode (bit-identical to the
  // CPU's). Ignored (host fill) for a TP slice or a fused stride other than the record's. Online updates read
  // their few rows on the host either way.
  const UvaTable* device_source = nullptr;
};

class HotRowCache {
 public:
  // Fills the cache with the first distinct valid ids of hot_first (hottest first) that fit. Synchronous
  // (creation time). kInvalidArgument (view), kOutOfMemory / kCuda.
  static Result<std::unique_ptr<HotRowCache>> create(const TableView& host_view, const std::vector<int64_t>& hot_first,
                                                     const HotCacheOptions& options);
  ~HotRowCache();
  HotRowCache(const HotRowCache&) = delete;
  HotRowCache& operator=(const HotRowCache&) = delete;

  // The standalone probe, which says per id whether the device map holds it now (the fast path probes inside its
  // gather instead, map_view()). For k < (n_device ? *n_device : n): id = ids[k]; a cached id writes its decoded
  // row to out[k] and sets miss_ids[k] = kSkipId; a miss sets miss_ids[k] = id (id < 0: -1). hits_counter
  // (device, may be null) += hits.
  Status launch_probe(const int64_t* ids, int64_t n, const unsigned long long* n_device, int64_t* miss_ids,
                      uint16_t* out, unsigned long long* hits_counter, void* stream) const;
  // The device map and rows as the fast gather probes them in its own pass (FastGatherArgs::cache), counting hits
  // into hits_counter (device, may be null). Valid until the next commit() (a map rebuild may move it).
  CacheMapView map_view(unsigned long long* hits_counter) const;

  // Bounded online update: admits up to max_rows ids of `candidates` (hottest first) that are not cached, evicting
  // the cached ids with the lowest `score` (the caller's LFU counts or LRU times; missing ids score 0). Enqueued
  // on `stream`; the host staging it reads stays valid until the next update (waits for the previous one).
  // Returns the number of rows swapped.
  Result<int64_t> update(const std::vector<int64_t>& candidates, const std::vector<std::pair<int64_t, double>>& score,
                         int64_t max_rows, void* stream);

  // Bounded online update with the victims chosen by the caller (plan::HotCounts::plan, a sampled LFU): each
  // (slot, id) puts `id` into `slot`, evicting the id the slot held (or filling a free slot). Enqueued on `stream`
  // exactly as update(): rows copied first, then tombstones, then admissions; the host waits only for the
  // previous update's staging (normally long done). Returns the rows swapped (= slot_id.size()).
  // kInvalidArgument (nothing enqueued) for a slot outside [0, slots()) or given twice, an id outside the table,
  // an id given twice, or an id already cached. More swaps than staging_rows() are applied in chunks of it (the host
  // waits for each chunk's staging copy before it reuses the staging).
  Result<int64_t> replace(const std::vector<std::pair<int64_t, int64_t>>& slot_id, void* stream);
  // Phase one of replace(): validates and stages the swaps (the rows read from the host table, H2D on
  // stage_stream after the previous commit has read the staging; the host waits only for the previous stage's
  // pinned buffer, normally long done). Same errors as replace(); kInvalidArgument also while a stage is not
  // committed or for more swaps than staging_rows(). Returns the rows staged.
  Result<int64_t> stage(const std::vector<std::pair<int64_t, int64_t>>& slot_id, void* stage_stream);
  bool has_staged() const { return staged_rows_ > 0; }
  // The staged copy has completed (an event query: never waits). False when nothing is staged.
  bool stage_ready() const;
  // Phase two: the staged rows and map edits applied on the lookup stream (a map rebuild too when due: host
  // O(map), see map_rebuilds()). Waits on the GPU, not the host, for the staged copy. Returns the rows committed
  // (0 when nothing was staged).
  Result<int64_t> commit(void* lookup_stream);
  // The id held by each slot (-1: free), the host mirror's view; what plan::HotCounts::set_slots takes.
  const std::vector<int64_t>& slot_ids() const { return slot_ids_; }
  int64_t swapped_rows() const { return swapped_rows_; }  // rows admitted by update()/replace() since create()
  // Full map uploads so far: when keys + tombstones exceed 3/4 of the map, the map is rebuilt from the slots on the
  // host and copied whole (12 B per map entry) instead of the edits, so probe chains stay short and always end.
  int64_t map_rebuilds() const { return map_rebuilds_; }

  bool contains(int64_t id) const;  // host mirror
  // Share of the profile's lookups whose ids this cache holds (set by whoever owns the profile's counts; NaN =
  // unknown). FastLookup's planner uses it as the hit-rate prior until hits are measured. In-sample: optimistic
  // when later traffic differs from the profile, which the first measured batches correct.
  double profile_coverage() const { return profile_coverage_; }
  void set_profile_coverage(double share) { profile_coverage_ = share; }
  // Coverage of a profile given as (id, count) pairs: sum of the counts of cached ids / sum of all counts. With
  // probe_first >= 0 only the first probe_first pairs are looked up (the caller knows the others are not cached,
  // e.g. a profile whose first ids filled the cache): the rest only add to the total. When the cache's slots hold
  // the pairs' first ids in order (filled from them, none skipped), the coverage is a prefix sum of the counts.
  double coverage_of(const std::vector<std::pair<int64_t, int64_t>>& id_counts, int64_t probe_first = -1) const;
  int64_t slots() const { return slots_; }
  int64_t filled() const { return filled_; }
  int64_t hbm_bytes() const { return hbm_bytes_; }  // every device allocation of the cache
  int64_t staging_rows() const { return staging_rows_; }
  int64_t row_bytes() const { return row_bytes_; }   // per slot in HBM (record or bf16 row)
  bool filled_on_device() const { return filled_on_device_; }  // create() gathered its rows on the GPU
  int64_t source_bytes_per_row() const { return view_.d + view_.d / 32; }
  CacheFormat format() const { return format_; }
  const TableView& host_view() const { return view_; }

 private:
  HotRowCache() = default;
  int64_t find_slot_index(int64_t id) const;  // map index or -1
  void fill_row(int64_t id, uint8_t* dst) const;
  Status gather_on_device(const UvaTable& source, const int64_t* ids, int64_t n);  // create()'s GPU fill
  Status validate(const std::vector<std::pair<int64_t, int64_t>>& slot_id) const;  // replace()'s checks
  Status ensure_staging();                       // waits until the previous stage's copy has read the staging
  Status maybe_rebuild_map(void* stream);        // see map_rebuilds()
  TableView view_;
  CacheFormat format_ = CacheFormat::kFp8;
  double profile_coverage_ = std::numeric_limits<double>::quiet_NaN();
  int64_t slots_ = 0, filled_ = 0, map_cap_ = 0, row_bytes_ = 0, hbm_bytes_ = 0;
  int64_t used_entries_ = 0;  // map entries that are not empty (keys + tombstones)
  int64_t swapped_rows_ = 0, map_rebuilds_ = 0;
  bool filled_on_device_ = false;
  std::vector<int64_t> h_keys_;   // host mirror: -1 empty, -2 tombstone
  std::vector<int32_t> h_slots_;
  std::vector<int64_t> slot_ids_; // id held by each slot
  int64_t* d_keys_ = nullptr;
  int32_t* d_slots_ = nullptr;
  uint8_t* d_rows_ = nullptr;
  // update staging (pinned) and its completion event
  uint8_t* pin_rows_ = nullptr;
  int64_t* pin_edits_ = nullptr;
  int64_t staging_rows_ = 0;      // capacity of the staging buffers, in rows
  void* ev_update_ = nullptr;
  uint8_t* d_stage_rows_ = nullptr;
  int64_t* d_edits_ = nullptr;
  uint8_t* pin_map_ = nullptr;  // full-map staging (keys then slots) of maybe_rebuild_map, pinned
  void* ev_staged_ = nullptr;   // the staged copy's completion (stage stream)
  int64_t staged_rows_ = 0, staged_tombs_ = 0;
};

}  // namespace engram::cuda
