// Host-side frequency counts for the GPU hot-row cache: which ids to put in the cache at start-up and
// which to swap in online. Pure C++ (no CUDA), so that it is unit-tested on any machine.
//
// HotCounts keeps, for one Engram layer, a decayed LFU count per id seen: every observed batch multiplies the
// weight of later observations by 2^(1/half_life) (raw counts are stored against a growing increment, so decay is
// O(1) per batch; a rescale pass folds the increment back and drops ids whose count fell below `prune_below`,
// which bounds the memory). It mirrors the cache's content (slot -> id) and keeps a pool of the hottest ids that
// are NOT cached (the candidates); plan(M) pairs the hottest candidates with the coldest slots of a bounded
// sample (free slots first, then a window of `sample_window * M` slots read from a rotating cursor: a sampled LFU,
// as Redis does, so that planning costs O(pool + window), not O(cache)), admitting a candidate only when its
// count beats the victim's by `min_gain` (hysteresis: no swapping back and forth of equal counts). The planned
// swaps are applied to the mirror; the caller applies them to the device cache.
//
// HotCountsWorker owns one HotCounts per layer and counts on its own thread: submit() copies the ids and returns, so
// counting never stalls the serving thread. The backlog of ids waiting is bounded: a batch that fits in the room
// left under `max_pending_ids` is copied whole; one that does not (prefill batches of tokens x heads ids arriving
// faster than they are counted, or one larger than the limit) is *sampled*: a deterministic stratified sample (one id per stratum of n/m positions, its place in
// the stratum from a seeded generator, so the [token][head] layout cannot alias with the stride) of m ids, each
// weighing n/m, with m the room left but at least max_pending_ids/64; the counts stay unbiased estimates of the
// batch's. Only a batch that would take the backlog past twice the limit (the counting thread stalled for dozens of
// batches) is dropped, and counted as dropped; memory stays below 2 x max_pending_ids ids. Online updates are planned
// on that thread too: request_plan() queues a plan of at most M swaps ahead of the ids still waiting (a plan costs
// O(pool + window), a batch O(ids): a plan never waits behind a prefill backlog, nor behind more than a chunk of the
// batch being counted, which looks for plans every few thousand ids; it uses the counts of the ids counted so far),
// the worker runs HotCounts::plan when it reaches it and parks the swaps; take_planned() hands them
// out in slices of a per-step row budget. Updates are pipelined: the next plan may be requested while the previous
// one's swaps are still being applied (plan() has already applied them to the mirror, so the next plan starts from
// the cache as it will be), as long as fewer than its own M swaps are still waiting; a slice stops before a swap that
// touches a slot or an id an earlier swap of the same slice touched, so the slices of consecutive plans stay valid
// stage()s of the device cache. The lock take_planned() shares with the worker is held only to move swaps, never
// while a batch is counted or a plan computed, so the serving thread never waits for counting. try_with()/with() run
// f on the caller's thread (start-up: filling the cache from the warm-up window's counts); drain() waits for the
// backlog.
// Thread safety: HotCounts is single-threaded; HotCountsWorker's methods may be called from one driving thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/flat_id_map.hpp"

namespace engram::plan {

struct HotCountsOptions {
  double half_life_batches = 256;  // observed batches after which a count weighs half; <= 0: no decay
  double prune_below = 0.5;        // rescale passes drop ids whose decayed count is below this
  int64_t rescale_every = 1024;    // batches between rescale/prune passes (O(distinct ids) each)
  int64_t pool_size = 4096;        // uncached candidates kept (hottest first); trimmed when it doubles
  int64_t sample_window = 8;       // plan(M) examines sample_window * M occupied slots for victims
  // Admit when count(candidate) >= count(victim) + min_gain. Half an observation: an id seen once lately (count
  // ~1) replaces a cached row not seen for a few half-lives (count ~0), which is how the cache follows new traffic
  // whose ids mostly recur a few times; with a full observation it would wait for each id's second sighting
  // (`engram bench cache-follow` measures both). Equal counts still never swap.
  double min_gain = 0.5;
  int64_t id_limit = INT64_MAX;    // ids >= this (outside the table) are not counted
};

struct CacheSwap {
  int64_t slot = 0;
  int64_t old_id = -1;  // -1: the slot was free
  int64_t new_id = 0;
};

class HotCounts {
 public:
  explicit HotCounts(const HotCountsOptions& options = {});

  // Counts one batch (ids < 0 are padding and ids >= id_limit invalid: both ignored; repeats within the batch count
  // each time), each observation weighing `weight` (> 0; a sample of a larger batch weighs batch / sample). One batch
  // of the decay whatever its size or weight: observe() = observe_part() over the batch, then end_batch().
  void observe(const int64_t* ids, int64_t n, double weight = 1.0);
  // Counts part of a batch (no decay step); a plan between two parts sees the batch's ids counted so far.
  void observe_part(const int64_t* ids, int64_t n, double weight = 1.0);
  // Closes the batch counted by observe_part(): one batch of the decay.
  void end_batch();
  double count(int64_t id) const;  // decayed count; 0 for an id never seen (or pruned)
  int64_t batches() const { return batches_; }
  int64_t distinct() const { return static_cast<int64_t>(ids_.size()); }  // ids with a count
  double total() const;            // decayed sum of every count

  // The k hottest ids with their decayed counts, hottest first (ties: smaller id first). O(distinct log k).
  std::vector<std::pair<int64_t, double>> hottest(int64_t k) const;

  // Mirror of the cache: slot_ids[s] = id held by slot s, -1 = free. Resets the candidate pool.
  void set_slots(const std::vector<int64_t>& slot_ids);
  bool cached(int64_t id) const { return slot_of_.contains(id); }
  int64_t slots() const { return static_cast<int64_t>(slot_ids_.size()); }
  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t pool() const { return static_cast<int64_t>(pool_.size()); }

  // Up to max_rows swaps (hottest candidate first), applied to the mirror. Empty when nothing gains.
  // O(pool + sample_window * max_rows), no lookups: the candidates' counts are in the pool, the victims' in slot_raw_.
  std::vector<CacheSwap> plan(int64_t max_rows);

 private:
  // One entry per counted id: a lookup of a counted id finds whether it is cached in the same cache line (its slot
  // is looked up in slot_of_ once, when the id is first counted, and kept by every swap).
  struct IdState {
    double raw = 0;     // raw count (see count())
    int64_t slot = -1;  // cache slot holding the id, -1: not cached
  };
  void trim_pool();
  void rescale();
  HotCountsOptions opt_;
  double growth_ = 1;  // per-batch factor of the increment
  double inc_ = 1;     // weight of one observation now (raw counts are in units of the increment at their time)
  int64_t batches_ = 0;
  // Counted ids (millions at prefill; grows from empty, so its rebuilds stay small until the traffic has spread).
  FlatIdMap<IdState> ids_;
  std::vector<int64_t> slot_ids_;
  FlatIdMap<int64_t> slot_of_;  // id -> slot of the cached ids (millions for a large cache; its size never changes)
  // slot_raw_[s]: the raw count of the id slot s holds, kept equal to its entry's (set at each observation, scaled
  // at each rescale), so that plan() reads the victims' counts in one pass over the window instead of a lookup each.
  std::vector<double> slot_raw_;
  std::vector<int64_t> free_;  // free slots, taken from the back
  // The candidates: uncached ids with their raw counts, kept equal to ids_'s (set at each observation, scaled at
  // each rescale), so that plan() reads them in one pass over a map that fits the CPU caches.
  FlatIdMap<double> pool_;
  int64_t cursor_ = 0;
  // plan()'s candidates, sampled slots and victims, kept between plans so that a plan does not fault fresh pages in.
  std::vector<std::pair<int64_t, double>> scratch_cand_, scratch_sampled_, scratch_victims_;
};

// One counting thread for several layers (see the file comment).
class HotCountsWorker {
 public:
  HotCountsWorker(int layers, const HotCountsOptions& options, int64_t max_pending_ids = int64_t{1} << 22);
  ~HotCountsWorker();
  HotCountsWorker(const HotCountsWorker&) = delete;
  HotCountsWorker& operator=(const HotCountsWorker&) = delete;

  // Copies ids [n] of `layer` (or a weighted sample of them, see the file comment) for counting; returns at once.
  // Serving-thread cost O(ids copied) <= O(max(n, max_pending_ids)). Dropped (and counted) only past twice the backlog.
  void submit(int layer, const int64_t* ids, int64_t n);
  // Blocks until every submitted batch has been counted.
  void drain();
  // Runs f on the layer's counts on the calling thread if no batch is being counted now; false (f not run)
  // otherwise. try_with never waits for counting; with() does.
  bool try_with(int layer, const std::function<void(HotCounts&)>& f);
  void with(int layer, const std::function<void(HotCounts&)>& f);

  int64_t dropped_batches() const;
  int64_t counted_batches() const;
  // Batches counted from a sample, and the ids of submitted batches left out of the samples (dropped batches not
  // included).
  int64_t sampled_batches() const;
  int64_t sampled_out_ids() const;

  // Queues a plan of at most max_rows swaps for `layer`, computed on the counting thread ahead of the batches still
  // waiting. False (nothing queued) while the layer's previous plan is queued (not computed yet) or while max_rows
  // or more of its planned swaps have not been taken: the application lags a whole update behind.
  bool request_plan(int layer, int64_t max_rows);
  // Up to max_rows of the layer's planned swaps, in plan order (hottest candidate first, plans in the order asked);
  // it stops early before a swap whose slot, or whose admitted id, an earlier swap of the slice evicted or filled
  // (a later plan re-using a slot), so no slice names a slot or an id twice and every id it admits is uncached
  // before the slice. Empty while the plan is still queued or when it is used up. Never waits for counting.
  std::vector<CacheSwap> take_planned(int layer, int64_t max_rows);
  // A plan of `layer` is queued, or some of its swaps have not been taken yet.
  bool update_in_progress(int layer) const;
  // The layer's planned swaps not yet taken.
  int64_t planned_backlog(int layer) const;
  // A plan of `layer` was asked for and is not computed yet.
  bool plan_queued(int layer) const;
  // Swaps the layer's last computed plan returned (0 before the first).
  int64_t last_plan_rows(int layer) const;
  // Host time of the plans computed on the counting thread (all layers).
  struct PlanTimes {
    int64_t plans = 0;
    double sum_us = 0, max_us = 0;
  };
  PlanTimes plan_times() const;

 private:
  void loop();
  void compute_plan(int layer, int64_t rows);
  void serve_plans();
  // Ids counted between two looks for plans asked for meanwhile (~0.1-0.2 ms of counting).
  static constexpr int64_t kCountChunk = 1024;
  struct Batch {
    int layer = 0;
    std::vector<int64_t> ids;
    double weight = 1;      // each id's weight (a sample of a larger batch: batch / sample)
    int64_t plan_rows = 0;  // > 0: a plan request (no ids)
  };
  struct Planned {
    bool queued = false;          // request_plan() accepted, the worker has not reached it yet
    std::deque<CacheSwap> swaps;  // planned, not yet taken
    int64_t last_rows = 0;        // swaps of the last computed plan
  };
  std::vector<HotCounts> counts_;
  int64_t max_pending_ids_;
  mutable std::mutex queue_mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Batch> queue_;   // counting batches, in submission order
  std::deque<Batch> plans_;   // plan requests, taken before any batch
  int64_t pending_ids_ = 0;
  bool busy_ = false, stop_ = false;
  int64_t dropped_ = 0, counted_ = 0, sampled_ = 0, sampled_out_ids_ = 0;
  uint64_t sample_seed_ = 0;  // advances per sampled batch: the samples are deterministic for one submission order
  std::mutex counts_mu_;  // held while a batch is counted or a plan computed, and by try_with/with
  mutable std::mutex planned_mu_;  // planned_ and plan_times_: held only to move swaps in or out
  std::vector<Planned> planned_;
  PlanTimes plan_times_;
  std::thread thread_;
};

}  // namespace engram::plan
