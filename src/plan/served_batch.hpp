// The plan of one served batch: the planner's choice (corrected by the learner), then the measurements the engine
// takes on the way — a plain batch or a barred path's retry when the learner asks, the unique fraction of a size
// range that has none (when hash dedup is cheap beside the batch), and the periodic dedup / cache exploration.
// Pure C++ (the CUDA fast path calls it per batch; tests run whole measurement streams through it on the CPU).
#pragma once

#include <array>
#include <cstdint>

#include "plan/cost_learner.hpp"
#include "plan/planner.hpp"

namespace engram::plan {

struct ServeOptions {
  int explore_every = 32;                     // batches between measurements of an unused technique; 0 = never
  // A batch whose size bucket has no unique-fraction estimate measures it with hash dedup when that costs at most
  // this fraction of the batch's price (plan_served_batch; a one-time cost per bucket); 0 = wait for the periodic
  // exploration.
  double measure_unique_max_overhead = 0.15;
};

// Exploration counters, kept by the caller between batches.
struct ExploreCounters {
  std::array<int64_t, kSizeBuckets> since_dedup{};  // per size bucket
  int64_t since_cache = 0;
};

// `batch` holds what is known before the batch runs (unique fraction of its bucket, hit rate, prior);
// `options.cache_present` whether a cache is attached. `learner` null: no learning (no corrections, no plain
// exploration, no retries); `capturing`: the batch goes into a CUDA graph, so neither the learner's explorations
// nor the unique measurement are added (the periodic exploration keeps its old behaviour). Counts the batch in the
// learner's bucket (CostLearner::explore) and in `counters`. The result carries PlanNote bits for what was added.
Plan plan_served_batch(const BatchStats& batch, const Costs& costs, const PlannerOptions& options,
                       CostLearner* learner, ExploreCounters& counters, const ServeOptions& serve, bool capturing);

}  // namespace engram::plan
