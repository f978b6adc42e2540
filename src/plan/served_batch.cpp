// plan_served_batch (see served_batch.hpp).
#include "plan/served_batch.hpp"

#include <cmath>

namespace engram::plan {

Plan plan_served_batch(const BatchStats& b, const Costs& k, const PlannerOptions& po, CostLearner* learner,
                       ExploreCounters& counters, const ServeOptions& so, bool capturing) {
  const int64_t rows = b.rows;
  Plan p = choose(b, k, po, learner);
  const bool learning = learner != nullptr && po.enabled && !capturing && rows > 0;
  int64_t& since_dedup = counters.since_dedup[static_cast<size_t>(size_bucket(rows))];
  // An exploration of plain or a retry of a barred path runs as chosen here: nothing below adds a technique to it
  // (its measurement must reach that path's key).
  bool as_is = false;
  if (learning) {
    switch (learner->explore(rows, learn_key(p), p.predicted_us)) {
      case Explore::kPlain:
        p.dedup = p.sort = p.cache = false;
        p.host_share = 0;
        p.notes |= kNoteExplorePlain;
        as_is = true;
        break;
      case Explore::kRetryBarred: {
        // The barred path the corrected prices would pick, else the one measured closest to plain: a path whose
        // statistics are no longer measured (a barred cache's hit rate) would otherwise never come back.
        Plan q = choose(b, k, po, learner, /*allow_barred=*/true);
        if (!learner->barred(learn_key(q), rows)) {
          const Plan shape = plan_of_key(learner->retry_key(rows));
          const bool runnable = (!shape.cache || (po.cache_present && po.allow_cache)) &&
                                (!shape.dedup || po.allow_dedup) && (shape.host_share == 0 || po.allow_hybrid);
          if (runnable && learner->barred(learn_key(shape), rows)) {
            q.dedup = shape.dedup;
            q.sort = shape.sort;
            q.cache = shape.cache;
            q.host_share = shape.host_share;
            q.predicted_us = model_price(q, b, k, po.cache_present) * learner->correction(learn_key(q), rows).factor;
          }
        }
        if (learner->barred(learn_key(q), rows)) {
          p = q;
          p.notes |= kNoteRetryBarred;
          as_is = true;
        }
        break;
      }
      case Explore::kNone: break;
    }
  }
  // Unique fraction unknown for this batch size: measure it on this batch when hash dedup costs little beside it
  // (prefill-sized batches), rather than waiting for the periodic exploration.
  if (learning && !as_is && !p.dedup && po.allow_dedup && !std::isfinite(b.unique_fraction) &&
      so.measure_unique_max_overhead > 0) {
    Plan m = p;
    m.dedup = true;
    m.sort = false;
    const double base = model_price(p, b, k, po.cache_present);
    const double with = model_price(m, b, k, po.cache_present);
    if (std::isfinite(base) && std::isfinite(with) && with - base <= so.measure_unique_max_overhead * base) {
      p.dedup = true;
      p.sort = false;
      p.notes |= kNoteMeasureUnique;
    }
  }
  // Exploration: re-measure a technique the planner keeps off, at a bounded rate (per size bucket for dedup). Not
  // into a path the learner barred in this bucket: its retries (one in LearnerOptions::retry_every) re-measure it.
  auto barred = [&](const Plan& q) { return learning && learner->barred(learn_key(q), rows); };
  if (po.enabled && so.explore_every > 0 && !as_is) {
    Plan with_dedup = p;
    with_dedup.dedup = true;
    with_dedup.sort = false;
    if (!p.dedup && po.allow_dedup && ++since_dedup >= so.explore_every && !barred(with_dedup)) {
      p.dedup = true;  // beside a hybrid this is a split: dedup on the device part
      p.sort = false;
      p.notes |= kNoteExploreDedup;
      p.explore_every = so.explore_every;
    }
    // Cache: probe at once while no hit rate is known (neither measured nor a prior), else one batch in
    // explore_every, which also interrupts a hybrid plan (the hybrid never probes, so it would never learn that
    // the cache started to pay).
    const bool hit_unknown = !std::isfinite(b.cache_hit_fraction) && !std::isfinite(b.cache_hit_prior);
    Plan with_cache = p;
    with_cache.cache = true;
    with_cache.host_share = 0;
    if (po.cache_present && !p.cache && po.allow_cache &&
        ((hit_unknown && p.host_share == 0) || ++counters.since_cache >= so.explore_every) &&
        !barred(with_cache)) {
      p.cache = true;
      p.host_share = 0;
      p.notes |= kNoteExploreCache;
    }
  }
  if (p.dedup) since_dedup = 0;
  if (p.cache) counters.since_cache = 0;
  place_on_grid(p, po);  // the grid of the path that runs, explorations included
  return p;
}

}  // namespace engram::plan
