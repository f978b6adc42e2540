// Lookup planner: for one lookup batch, picks the path — inline or background, grid cap, in-batch
// de-duplication, sort of the unique ids by address, GPU hot-row cache, hybrid share of host-gather — from
// calibrated costs and the batch's id statistics, and records the figures that made the decision (explain() words
// them when a report asks: nothing is formatted per batch).
//
// Pure C++ (no CUDA): the CUDA fast path (src/cuda/fast_lookup.cuh) calls it per batch with the costs measured by
// its start-up calibration (or the defaults below, which name their source), and tests check its decisions on
// the CPU. The model is the request-bound one (docs/fastpath.md): a lookup costs a fixed launch/round-trip time plus
// rows / (rows per second of the path); de-duplication removes (1 - unique fraction) of the rows for a fixed
// cost plus a per-row cost; a cache removes the hit fraction of the unique rows; a hybrid runs a share s of the
// rows on the host-gather path in parallel with the UVA path (time = max of the two). A technique is switched on
// only when its predicted time beats the plain gather by `min_gain` (default 5%), so on uniform ids — where
// nothing repeats and nothing is cached — every technique stays off (never more than 5% slower than the plain gather).
// Prices can be corrected with what served batches measured (cost_learner.hpp): choose() with a learner multiplies
// each path's model price by its learned factor for the batch's size bucket and skips paths the learner barred
// (measured slower than the plain gather there).
// Unknown statistics (NaN) count as the adversarial case: unique fraction 1, hit rate 0 — except that a batch of a
// table WITH a cache may carry a prior hit estimate (the cache's coverage of the profile it was filled from), used
// until a measured hit rate replaces it; without a cache the worst-case rule stands. The hybrid is a split by
// position: host threads gather the last share of the batch's tokens as they are, while the device reads the rest,
// either with the plain gather (the plain hybrid) or with dedup and/or the cache (a split: the device part keeps its
// dedup and cache, the host part gains nothing from them; priced with the interference the plain hybrid measured).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engram/options.hpp"

namespace engram::plan {

class CostLearner;

inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// Costs of each path on the machine; times in microseconds, rates in rows per second.
struct Costs {
  double uva_rows_per_s = 28.5e6;      // plain UVA lookup, random distinct rows, full grid (README: 32 GiB, 8K prefill)
  double uva_sorted_rows_per_s = 0;    // same rows sorted by address; 0 = not measured (sort never chosen on gain)
  double uva_fixed_us = 8;             // launch + one PCIe round trip of a small lookup
  double dedup_hash_fixed_us = 12;     // hash de-duplication: memset + 3 launches
  double dedup_hash_ns_per_row = 0.15; // per input row (HBM atomics)
  double dedup_sort_fixed_us = 25;     // sort-based de-duplication: radix sort + scan launches
  double dedup_sort_ns_per_row = 0.4;  // per input row
  double scatter_ns_per_row = 0.25;    // copy of one decoded row (d = 256: 512 B) to each position
  double cache_probe_ns_per_row = 0.1; // id -> slot probe per unique row
  double cache_fixed_us = 10;          // cache path launches (sanitize + probe); H200 run 1: a 64-token probe batch
                                       // cost ~+30 us over plain, so a small batch must save more than this
  // A row served from the cache: its read from HBM and its output row, measured with its probe
  // (FastLookup::calibrate_cache, on an all-hit batch; the probe is also priced apart, cache_probe_ns_per_row per
  // gathered row: a small overlap); 0 = not measured. The gather reads cached rows and misses in one launch, so a
  // cache path's gather takes the longer of the two parts: an 8K-token prefill that hits every row took ~200 us on
  // an H200, where the misses' part alone prices it at ~40.
  double cache_hit_ns_per_row = 0;
  double host_rows_per_s = 0;          // host-gather + DMA path; 0 = unavailable
  double host_fixed_us = 30;           // wake the gather threads + one DMA round trip
  int64_t sort_min_unique_rows = 0;    // sort the unique ids at or above this many; 0 = never (not measured)
  // Measured times by batch size, (rows, us) with rows ascending, of the plain UVA gather and of the host-gather
  // path alone (start-up calibration). When present they replace fixed + rows / rate, which does not hold on the
  // H200: a 6 K-row batch ran at ~94 M rows/s, a 196 K-row batch at 28-40 M rows/s (H200 run 2026-12-01), so a
  // rate fitted on large batches over-predicts small ones and made the planner pick a slower hybrid in decode.
  std::vector<std::pair<double, double>> uva_curve;
  std::vector<std::pair<double, double>> host_curve;
  // The hybrid itself measured at share `hybrid_share` by batch size: running both paths at once costs more than
  // the slower of the two alone (H200 2026-12-01: a 6 K-row uniform batch split 60/40 took 181 us where the two
  // paths alone predicted < 75 us), so when this curve exists the planner prices the hybrid with it.
  std::vector<std::pair<double, double>> hybrid_curve;
  double hybrid_share = 0;
  std::string source = "defaults";     // where these figures come from (calibration, file, defaults)
};

// What is known of the batch before it runs.
struct BatchStats {
  int64_t rows = 0;                       // tokens * heads
  double unique_fraction = kUnknown;      // distinct valid ids / rows (e.g. the previous batch's)
  double cache_hit_fraction = kUnknown;   // measured, of the unique rows (e.g. the previous batches')
  double cache_hit_prior = kUnknown;      // estimate before any measurement (the cache's profile coverage); used
                                          // only when cache_hit_fraction is unknown and a cache is present
};

struct PlannerOptions {
  bool enabled = true;            // false: the plain gather, background grid (experiments, A/B)
  bool allow_dedup = true;
  bool allow_sort = true;
  bool allow_cache = true;        // only meaningful when cache_present
  bool allow_hybrid = true;       // only meaningful when costs.host_rows_per_s > 0
  bool allow_split = true;        // a host share beside device dedup/cache (needs allow_hybrid and a measured
                                  // hybrid curve: Costs::hybrid_curve prices the interference)
  // Smallest batch (rows) offered a split: prefill-sized batches. Below it (decode: up to ~1,300 tokens x 24) the
  // host share's BF16 copies double the link bytes of its rows, and on the H200 the split's price was not reliable
  // there (a 512-token uniform batch predicted faster ran 7% slower than the plain gather).
  int64_t split_min_rows = 32768;
  bool cache_present = false;
  double min_gain = 0.05;         // a technique must save at least this fraction of the plain time
  GridCap background_grid_cap = GridCap::background_default();  // the grid of a plan that stays in the background
  // A background batch that reads at least large_batch_min_rows rows over UVA (prefill-sized; uva_rows(): a cache
  // path's expected hits and a dedup path's repeats are not read over UVA) runs on large_batch_grid_scale of
  // background_grid_cap (at least one block). A large gather over UVA is bound by the requests the link and the
  // translation caches take, not by SMs: fewer blocks in flight measured faster (H200, 8K-token prefill
  // dedup(sort)+cache, 32 GiB table: 2,630 us on half the SMs, 2,330 on a quarter, 2,333 on an eighth; H100: half
  // the SMs 10 % faster than all), while decode batches measured 2-6 % slower on fewer. Rows read from the cache in
  // HBM are bound by the blocks in flight: an 8K-token prefill whose rows all hit took 358 us on half the grid and
  // 258 us on all of it (H100). 1: every size on the background grid.
  int64_t large_batch_min_rows = 32768;
  double large_batch_grid_scale = 0.5;
  // Compute available to hide the lookup behind; a lookup predicted longer runs inline with every SM. Unknown:
  // background. The engine leaves it unknown: every SM made its exposed prefill gather slower (engine.hpp, grid_cap).
  double overlap_budget_us = kUnknown;
  double host_share_override = kUnknown;  // force the hybrid's host share in [0, 1]
};

// Adjustments the CUDA fast path makes to a plan after choose() (exploration, paths it cannot take); explain()
// words them.
enum PlanNote : uint8_t {
  kNoteExploreDedup = 1 << 0,    // one hash-dedup batch every explore_every measures the unique fraction
  kNoteExploreCache = 1 << 1,    // a cache probe measures the hit rate
  kNoteCacheMissing = 1 << 2,    // cache requested but none attached: off
  kNoteHybridNoHost = 1 << 3,    // hybrid requested but no host-gather path or no host ids: UVA only
  kNoteHybridCaptured = 1 << 4,  // hybrid cannot be captured (host threads): UVA only
  kNoteMeasureUnique = 1 << 5,   // unique fraction unknown in this size range: hash dedup measures it on this batch
  kNoteExplorePlain = 1 << 6,    // the plain gather, run to keep its measured time in this size range current
  kNoteRetryBarred = 1 << 7,     // a path barred in this size range (measured slower than plain), re-measured
};
// The notes of a batch run to measure something (its time must reach the learner).
inline constexpr uint8_t kMeasuringNotes =
    kNoteExploreDedup | kNoteExploreCache | kNoteMeasureUnique | kNoteExplorePlain | kNoteRetryBarred;

// Where the hit rate the planner used came from.
enum class HitSource : uint8_t { kNoCache, kMeasured, kPrior, kAssumedZero };

struct Plan {
  bool background = true;      // prefetch queue with a capped grid; false: inline, full grid
  // background_grid_cap (scaled for a large batch), or every SM inline
  GridCap grid_cap = GridCap::background_default();
  bool large_batch_grid = false;  // grid_cap is the large-batch share of the background grid
  bool dedup = false;
  bool sort = false;           // sort-based dedup (unique ids in address order) instead of hash-based
  bool cache = false;
  double host_share = 0;       // share of the batch's tokens (the last ones) gathered by host threads + DMA
  double plain_us = 0;         // predicted time of the plain UVA gather
  double predicted_us = 0;     // predicted time of this plan
  bool planner_enabled = true;
  // The figures the decision was made from: plain numbers, so that choosing a plan per batch builds no text;
  // explain() words them when a report asks.
  double rows = 0;
  double unique = 1;            // unique fraction used (1 when unknown)
  bool unique_known = false;
  double hit = 0;               // hit fraction used
  HitSource hit_source = HitSource::kNoCache;
  bool chosen_pays = false;     // a technique beat the plain gather by min_gain
  double min_gain = 0.05;
  bool dedup_allowed = false;
  int64_t sort_min_unique_rows = 0;
  bool hybrid_wanted_unavailable = false;  // allowed, but the host path is not calibrated / available
  double overlap_budget_us = kUnknown;
  uint8_t notes = 0;            // PlanNote bits
  int explore_every = 0;        // for kNoteExploreDedup
  // Learned corrections (choose() with a CostLearner): the model's prices before correction, the factors applied
  // and their sample counts, and how many candidate paths were barred in this size range.
  bool learned = false;
  double plain_model_us = 0;    // plain_us before correction
  double model_us = 0;          // predicted_us before correction
  double plain_factor = 1, chosen_factor = 1;
  int64_t plain_samples = 0, chosen_samples = 0;
  bool chosen_sibling = false;  // chosen_factor (not measured on the path) is its technique's at another host share
  int barred_paths = 0;
  std::string path_name() const; // e.g. "dedup(hash)+cache+uva", "plain-uva", "dedup(sort)+hybrid(host 35%)"
  // The path as a small number (dedup, sort, cache, host share in percent, background): per-batch counting keyed
  // by this builds no string; path_name_of_key() gives the name.
  uint32_t path_key() const;
};
std::string path_name_of_key(uint32_t key);

// One line per decision of `p`, with the figures that made it; `costs_source` is Costs::source of the costs the
// plan was priced with.
std::vector<std::string> explain(const Plan& p, const std::string& costs_source);

// Picks the plan. Deterministic, no I/O. rows <= 0 gives the plain plan with a reason. With `learner`, prices are
// corrected by what earlier batches of the same size range measured and barred paths are skipped (unless
// `allow_barred`: a retry of a barred path).
Plan choose(const BatchStats& batch, const Costs& costs, const PlannerOptions& options,
            const CostLearner* learner = nullptr, bool allow_barred = false);

// The model's price (uncorrected) of the path of `shape` (dedup, sort, cache, host share) on `batch`, with the
// statistics rules of choose(); `cache_present` says whether a hit prior counts. What the learner compares a
// measured batch with.
double model_price(const Plan& shape, const BatchStats& batch, const Costs& costs, bool cache_present);

// Rows plan `p` is expected to read over UVA: its device part's rows, times its unique fraction with dedup, times
// its miss fraction with the cache (the figures it was chosen with: Plan::rows, unique, hit).
double uva_rows(const Plan& p);
// A background plan's grid for its path: background_grid_cap, or its large-batch share when uva_rows(p) is at
// least large_batch_min_rows (PlannerOptions). choose() calls it; a caller that changes the path afterwards
// (exploration) calls it again. An inline plan, or one of a disabled planner, is left as it is.
void place_on_grid(Plan& p, const PlannerOptions& o);

// Best host share of the hybrid: the split where both paths finish together, s = R_host / (R_host + R_uva)
// (fixed costs ignored); 0 when the host path is unavailable.
double balanced_host_share(double uva_rows_per_s, double host_rows_per_s);

// Time in us of `rows` rows on a measured curve ((rows, us) ascending): linear between points, the first point's
// time below it (a batch smaller than the smallest measured one is taken as fixed-cost bound), the last segment's
// slope (>= 0) above the last point. NaN when the curve is empty.
double curve_us(const std::vector<std::pair<double, double>>& curve, double rows);

}  // namespace engram::plan
