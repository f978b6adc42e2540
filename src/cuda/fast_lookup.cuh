// FastLookup: the lookup beyond the request-bound ceiling. It is a lookup path chosen when a prefetch queue (or a
// caller) is built: the queue holds one per layer and calls launch() instead of the plain kernel.
//
// Per batch the planner (src/plan/planner.hpp) picks, from calibrated costs and the id statistics of earlier
// batches: the plain kernel; in-batch de-duplication (hash, or sort = unique ids in address order) with a
// scatter; the GPU hot-row cache (hot_cache.cuh); or the hybrid that gathers the last share of the batch's tokens on
// host threads + DMA (host_gather.cuh) while the device reads the rest, with the plain kernel or with dedup and/or
// the cache (a split). Statistics reach the host without synchronising:
// the device totals are copied to pinned memory after each batch and read by a later batch once that copy's event
// has completed; every batch run through launch_plan (forced plans included) feeds them. When a cache is attached
// and no hit rate has been measured yet, the planner prices the cache with its profile coverage (a prior) and
// re-plans as soon as the first probe's hit rate arrives. When a technique is off, the engine re-measures it every
// `serve.explore_every` batches (one dedup/cache pass), so the planner notices when ids start repeating. Every path
// is bit-identical to the plain kernel.
// Counters (LookupArgs::counters) keep the plain kernel's meaning (dead rows, invalid ids).
//
// Learning (plan/cost_learner.hpp; off with FastLookupOptions::learn): served batches (not the calibration's) are
// timed on their stream with a pair of events from a small ring, read with cudaEventQuery after the next batch is
// enqueued (never a wait, never inside a batch's window; a batch whose ring slot is still busy, or one launched
// while the stream is being captured, is not timed): every batch of a path until it has a few measurements in its
// bucket, then a share of them (exploration and retry batches always; LearnerOptions::steady_samples, time_every); the
// measured time and the model's price feed the learner, which corrects the planner's prices per path and batch-size
// bucket, bars a path measured slower than the plain gather there, and asks for a plain batch now and then while
// another path is chosen (one in LearnerOptions::plain_every of a bucket, one in plain_warm_every until plain has 3
// measurements there). The unique fraction is estimated per bucket from device counts; when a batch's bucket has none
// and hash dedup costs at most `serve.measure_unique_max_overhead` of the batch's price (prefill-sized batches: a few
// %), that batch measures it: once per bucket, after which the measured fraction prices dedup for every batch of that
// size.
// Start-up calibration (calibrate()) measures on this table, every call on rows no call read before (a repeated
// row set comes back warm): plain UVA rows/s, the same rows sorted by address, the fixed and per-row costs of hash
// and sort dedup with the scatter (timed alone), the host-gather rate, and the unique-row count above which the
// sorted gather beats the hashed one (the sort threshold); costs().source says where they came from.
// Thread safety: one stream at a time (the prefetch queue's). No CUDA types in this header.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/dedup.cuh"
#include "cuda/host_gather.cuh"
#include "cuda/hot_cache.cuh"
#include "cuda/lookup_kernel.cuh"
#include "plan/cost_learner.hpp"
#include "plan/planner.hpp"
#include "plan/served_batch.hpp"

namespace engram::cuda {

struct FastLookupOptions {
  int64_t max_rows = 8192 * 24;   // largest batch (tokens * heads)
  plan::PlannerOptions planner;
  plan::Costs costs;
  int host_threads = 0;           // > 0: create the host-gather path with this many threads
  bool learn = true;              // time served batches and correct the planner with them (cost_learner.hpp)
  plan::LearnerOptions learner;
  // Explorations of unused techniques and the one-time unique-fraction measurement (plan/served_batch.hpp).
  plan::ServeOptions serve;
};

struct FastLookupStats {
  int64_t batches = 0, rows = 0;
  int64_t dedup_batches = 0, dedup_rows = 0, unique_rows = 0;  // unique rows of the dedup batches
  int64_t cache_probes = 0, cache_hits = 0;
  int64_t host_rows = 0;                                        // rows gathered by host threads
  std::map<std::string, int64_t> paths;                         // served batches per path name (filled by stats();
                                                                // calibration batches are not counted)
  // What the learner holds (filled by stats()): predicted vs measured per path and batch-size bucket, and the
  // unique fraction per bucket; timed / untimed served batches (untimed: ring slot busy, or captured).
  std::vector<plan::LearnedPath> learned;
  std::vector<std::pair<int, double>> unique_by_bucket;  // (size_bucket, unique fraction)
  int64_t timed_batches = 0, untimed_batches = 0;
  double unique_fraction() const;  // NaN when no dedup batch ran
  double cache_hit_rate() const;   // of probed rows; NaN when none
};

// One technique forced for experiments (benches); kAuto = the planner.
struct ForcedPlan {
  bool use = false;
  plan::Plan plan;
};

class FastLookup final {
 public:
  // table must use one device offset (UvaTable::uniform()) and be a whole layer; kUnsupported otherwise (the plain
  // kernel stays): a tensor-parallel slice's lookup always runs the plain kernel (its dedup, planner and hot-row
  // cache address whole layers).
  static Result<std::unique_ptr<FastLookup>> create(const UvaTable* table, const FastLookupOptions& options);
  ~FastLookup();

  // Attaches (or detaches, nullptr) the cache. The measured hit rate restarts: until a batch has probed the new
  // cache, the planner prices it with cache->profile_coverage() (NaN there = worst case, 0 hits).
  void set_cache(std::unique_ptr<HotRowCache> cache);
  // Launches the gather that probes the attached cache once in every launch shape on `stream`, on scratch buffers,
  // counting nothing. CUDA loads a kernel on its first launch (lazy module loading: far longer than a decode batch);
  // the start-up calibration runs before a cache exists, so without this the first served cache batch would carry
  // that load and the learner would take it as the cache path's measured time. Enqueued after whatever `stream`
  // holds (the fast path's scratch buffers are reused in stream order).
  Status warm_cache_kernels(void* stream);
  HotRowCache* cache() const { return cache_.get(); }
  HostGather* host_gather() const { return host_.get(); }

  // Plans the batch, then runs the plan. kInvalidArgument when the batch exceeds max_rows. A checked lookup
  // (args.checked) runs the plain kernel's checked launch.
  Result<LaunchInfo> launch(const LookupArgs& args, void* stream);
  // Runs a given plan (benches, tests). The hybrid needs args.ids_host (else it runs on UVA alone). Its batch feeds
  // the unique-fraction and hit-rate statistics but is not timed for the learner: only launch()'s batches are
  // (a bench's forced variants would otherwise hand the planner measurements that serving would not have).
  Result<LaunchInfo> launch_plan(const LookupArgs& args, const plan::Plan& p, void* stream);
  // Every later launch() runs this plan: counted in the statistics like launch_plan()'s batches, not timed for the
  // learner (a forced plan is not the planner's choice).
  void force(const ForcedPlan& f) { forced_ = f; }

  // Measures the costs on this table (synchronous, ~0.1 s; not while capturing). Updates costs(); with a cache
  // attached, calibrate_cache() too.
  Status calibrate(void* stream);
  // Measures what a row served from the attached cache costs (costs().cache_hit_ns_per_row): the gather on cached
  // ids only, at two batch sizes (up to 65536 rows, at most the cache's, and 2048), median of 3 synchronised calls
  // each. Counts nothing in the statistics and leaves the learner as it is (call it before cache paths are learned
  // from). A cache of no more rows than the small batch keeps the figure as it was. Synchronous; it uses the fast
  // path's scratch buffers on `stream`, so nothing else of this fast path may run meanwhile, and no cache update may
  // be staged (it reads the cache's host mirror of its ids). Run warm_cache_kernels() first (attaching a cache in
  // the engine does; calibrate() warms every kernel): a kernel's first launch in the process loads it.
  Status calibrate_cache(void* stream);
  // Totals so far (synchronises `stream`).
  Result<FastLookupStats> stats(void* stream);
  const plan::Plan& last_plan() const { return last_plan_; }
  plan::Costs& costs() { return opt_.costs; }
  plan::PlannerOptions& planner_options() { return opt_.planner; }
  bool learns() const { return opt_.learn; }
  // The learner the planner's prices are corrected with (tests feed it measurements).
  plan::CostLearner& learner() { return learner_; }
  int64_t device_bytes() const;

 private:
  FastLookup() = default;
  void read_snapshot();
  // warm_cache_kernels() for the gather with (probe) or without the cache; warm_kernels(): the plain lookup and both
  // gathers, every launch shape (calibrate() runs it first).
  Status warm_gather(bool probe, void* stream);
  Status warm_kernels(void* stream);
  // The launches of plan `p` (already adjusted to what this batch can take) on `stream`.
  Result<LaunchInfo> run_plan(const LookupArgs& a, const plan::Plan& p, bool cap, void* stream);
  // A served batch: the planner's choice with the learner's corrections and measurements, then launch_plan().
  Result<LaunchInfo> serve(const LookupArgs& a, bool cap, void* stream);
  void harvest_timings();  // reads the completed timing events (cudaEventQuery only) into the learner
  static bool capturing(void* stream);  // the stream is being captured into a graph (false when unknown)
  // A gather of this table's rows (their device addresses and layout); ids, n, out and cap are the caller's.
  FastGatherArgs table_gather() const;
  plan::BatchStats batch_stats(int64_t rows) const;
  Status snapshot(void* stream);
  // The device part of a plan with dedup and/or the cache, on a.tokens tokens (the whole batch, or the first part
  // of a split): its rows go to a.out; the statistics are counted, the snapshot is the caller's.
  Status launch_device_path(const LookupArgs& a, const plan::Plan& p, int cap_blocks, bool capturing, void* stream);
  const UvaTable* table_ = nullptr;
  FastLookupOptions opt_;
  std::unique_ptr<DeviceDedup> dedup_;
  std::unique_ptr<HotRowCache> cache_;
  std::unique_ptr<HostGather> host_;
  ForcedPlan forced_;
  plan::Plan last_plan_;
  int64_t* sanitized_ = nullptr;        // [max_rows]
  uint16_t* compact_ = nullptr;         // [max_rows][d]
  // Device counters, kStatWords each: [0] unique rows, [1] cache hits, [2] cache probes (dedup batches; the others'
  // probes are host_probes_), [3 + b] unique rows of size bucket b. Three sets: served batches count into set
  // active_stats_ (0 or 1); snapshot() copies that set off the lookup stream and switches to the other, so a copy
  // never reads a set a batch is adding to, and the two pinned copies sum to the totals at the snapshot's cut. Set
  // 2 takes what launches captured into a graph count (replayed any number of times, unknown to the host): stats()
  // adds it, snapshots leave it out.
  static constexpr int kStatWords = 3 + plan::kSizeBuckets;
  unsigned long long* dev_stats_ = nullptr;  // [3][kStatWords]
  unsigned long long* pin_stats_ = nullptr;  // [2][kStatWords]: the last completed copy of sets 0 and 1
  int active_stats_ = 0;
  unsigned long long* counting_stats(bool capturing) const {
    return dev_stats_ + (capturing ? 2 : active_stats_) * kStatWords;
  }
  void* stats_stream_ = nullptr;  // the snapshot copies
  void* ev_cut_ = nullptr;        // on the lookup stream after the snapshot's batch; the copy waits for it
  void* ev_snapshot_ = nullptr;
  void* side_stream_ = nullptr;
  void* ev_fork_ = nullptr;
  void* ev_join_ = nullptr;
  bool snapshot_pending_ = false;
  // Snapshot cuts issued and the last one read (sequence numbers from 1); counted_since_cut_: a batch counted into
  // the device set after the last cut (its counts reach the host with the next one).
  int64_t cut_seq_ = 0, read_seq_ = 0;
  bool counted_since_cut_ = false;
  // Snapshot intervals still to be read whose hits (some of them) were counted on a detached cache: the hit
  // estimate skips them (the timed batches in them still get their own interval's rate).
  int discard_hit_intervals_ = 0;
  bool counted_now_ = false;  // the batch being launched counted into the device statistics
  // Host totals at the time of the pending snapshot, and at the last one consumed.
  FastLookupStats totals_;               // host-known totals (rows, batches, dedup_rows, host probes...)
  std::map<uint32_t, int64_t> path_batches_;  // batches per Plan::path_key()
  int64_t snap_dedup_rows_ = 0, snap_probes_host_ = 0;
  int64_t used_dedup_rows_ = 0, used_unique_ = 0, used_probes_ = 0, used_hits_ = 0;
  int64_t host_probes_ = 0;             // probes counted on the host (no-dedup batches)
  double ema_hit_ = plan::kUnknown;
  plan::ExploreCounters explore_;
  // Dedup rows per size bucket (host totals), at the pending snapshot and at the last one consumed; the device
  // counts unique rows per bucket beside the totals (dev_stats_[3 + bucket]).
  std::array<int64_t, plan::kSizeBuckets> dedup_rows_b_{}, snap_dedup_rows_b_{}, used_dedup_rows_b_{}, used_unique_b_{};
  int cur_bucket_ = 0;  // size bucket of the batch being launched
  plan::CostLearner learner_;
  bool calibrating_ = false;  // calibrate()'s batches: neither counted as served nor learned from
  bool served_ = false;       // inside launch(): the batch is served traffic, timed for the learner
  // Timing ring: an event pair per timed batch, read back by cudaEventQuery.
  struct TimedBatch {
    void* start = nullptr;
    void* end = nullptr;
    uint32_t key = 0;
    int64_t rows = 0;
    bool dedup = false, sort = false, cache = false;  // the path, re-priced when read (statistics known by then)
    double host_share = 0;
    double predicted_us = 0;  // the corrected price when it was launched (reports)
    // A dedup or cache batch is re-priced with the statistics of the snapshot interval that holds its own counts
    // (stats_seq: that snapshot's cut; 0: a plain batch, which needs none), filled when that snapshot is read.
    int64_t stats_seq = 0;
    double unique = plan::kUnknown, hit = plan::kUnknown;
    bool pending = false;
  };
  static constexpr int kTimingRing = 8;
  std::array<TimedBatch, kTimingRing> ring_{};
  int ring_next_ = 0;
  int64_t timed_batches_ = 0, untimed_batches_ = 0;
};

}  // namespace engram::cuda
