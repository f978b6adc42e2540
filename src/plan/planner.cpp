// Planner (see planner.hpp): enumerates {no dedup, hash dedup, sort dedup} x {cache off, on} on the device alone,
// the plain hybrid at its balanced (or measured) share, and the split of a device path with dedup or the cache
// beside host threads at host shares of 5..50%; predicts each one's time with the request-bound model, and keeps the
// fastest one only if it beats the plain gather by min_gain. The figures behind every decision stay in the Plan, and
// explain() turns them into sentences only when a report asks, so a report can say which path a batch took and why
// without the prefetch path formatting text per batch.
#include "plan/planner.hpp"

#include "plan/cost_learner.hpp"

#include <algorithm>
#include <cstdio>

namespace engram::plan {
namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

enum class Dedup { kOff, kHash, kSort };

// `scale` (0, 1) of a grid cap: a fraction times scale, or blocks times scale, at least one block.
GridCap scaled(const GridCap& g, double scale) {
  const Result<GridCap> r =
      g.in_blocks() ? GridCap::of_blocks(std::max<int64_t>(1, static_cast<int64_t>(g.blocks() * scale)))
                    : GridCap::of_fraction(g.fraction() * scale);
  return r.is_ok() ? *r : g;
}

struct Candidate {
  Dedup dedup = Dedup::kOff;
  bool cache = false;
  double host_share = 0;
  double us = 0;
};

// The host-gather path alone on `rows` rows: its measured curve, else fixed + rows / rate.
double host_part_us(double rows, const Costs& k) {
  return k.host_curve.empty() ? k.host_fixed_us + rows / k.host_rows_per_s * 1e6 : curve_us(k.host_curve, rows);
}

double predict_us(const Candidate& c, double n, double u, double h, const Costs& k) {
  double pre = 0;
  double gathered = n;
  double rate = k.uva_rows_per_s;
  if (c.dedup == Dedup::kHash) pre = k.dedup_hash_fixed_us + n * k.dedup_hash_ns_per_row * 1e-3;
  if (c.dedup == Dedup::kSort) {
    pre = k.dedup_sort_fixed_us + n * k.dedup_sort_ns_per_row * 1e-3;
    if (k.uva_sorted_rows_per_s > 0) rate = k.uva_sorted_rows_per_s;
  }
  if (c.dedup != Dedup::kOff) {
    gathered = n * u;
    pre += n * k.scatter_ns_per_row * 1e-3;
  }
  double misses = gathered;
  double hits_us = 0;  // the rows read from the cache, beside the misses' UVA reads in the same launch
  if (c.cache) {
    pre += k.cache_fixed_us + gathered * k.cache_probe_ns_per_row * 1e-3;
    misses = gathered * (1 - h);
    hits_us = gathered * h * k.cache_hit_ns_per_row * 1e-3;
  }
  const double uva_rows = misses * (1 - c.host_share);
  double uva_us = k.uva_fixed_us + uva_rows / rate * 1e6;
  if (!k.uva_curve.empty()) {
    uva_us = curve_us(k.uva_curve, uva_rows);  // measured by size; sorted rows scaled by the large-batch ratio
    if (c.dedup == Dedup::kSort && k.uva_sorted_rows_per_s > 0 && k.uva_rows_per_s > 0)
      uva_us *= k.uva_rows_per_s / k.uva_sorted_rows_per_s;
  }
  if (c.host_share > 0 && !k.hybrid_curve.empty() && c.host_share == k.hybrid_share)
    return pre + curve_us(k.hybrid_curve, misses);  // measured as a whole (the plain hybrid: no dedup, no cache)
  const double host_us = c.host_share > 0 ? host_part_us(misses * c.host_share, k) : 0;
  return pre + std::max({uva_us, hits_us, host_us});
}

// How much slower running the UVA and host paths at once is than the slower of the two alone, at `rows` rows: the
// measured plain hybrid over the prediction of its parts (>= 1; 1 when the hybrid was not measured). The two
// paths share the link and the host's memory, which neither part's curve sees.
double split_interference(double rows, const Costs& k) {
  if (k.hybrid_curve.empty() || !(k.hybrid_share > 0) || k.uva_curve.empty()) return 1;
  const double parts =
      std::max(curve_us(k.uva_curve, rows * (1 - k.hybrid_share)), host_part_us(rows * k.hybrid_share, k));
  const double whole = curve_us(k.hybrid_curve, rows);
  return parts > 0 && std::isfinite(whole) ? std::max(1.0, whole / parts) : 1;
}

// A device path with dedup and/or the cache on the first (1 - s) of the batch's tokens while host threads gather
// the rest (split by position). The device part is priced with the whole batch's unique and hit fractions (a part
// of a batch repeats a little less than the whole, so this is slightly optimistic for it), times `interference`
// (split_interference of the batch).
double predict_split_us(const Candidate& c, double n, double u, double h, const Costs& k, double interference) {
  Candidate device = c;
  device.host_share = 0;
  const double device_us = predict_us(device, n * (1 - c.host_share), u, h, k);
  return std::max(device_us, host_part_us(n * c.host_share, k)) * interference;
}

}  // namespace

double balanced_host_share(double uva_rows_per_s, double host_rows_per_s) {
  if (!(host_rows_per_s > 0) || !(uva_rows_per_s > 0)) return 0;
  return host_rows_per_s / (host_rows_per_s + uva_rows_per_s);
}

double curve_us(const std::vector<std::pair<double, double>>& c, double rows) {
  if (c.empty()) return kUnknown;
  if (rows <= c.front().first || c.size() == 1)
    return rows <= c.front().first ? c.front().second : c.front().second * rows / c.front().first;
  size_t i = 1;
  while (i + 1 < c.size() && rows > c[i].first) ++i;
  const auto& [x0, y0] = c[i - 1];
  const auto& [x1, y1] = c[i];
  const double slope = x1 > x0 ? (y1 - y0) / (x1 - x0) : 0;
  if (rows > x1) return y1 + std::max(0.0, slope) * (rows - x1);  // past the last point
  return y0 + slope * (rows - x0);
}

uint32_t Plan::path_key() const {
  // A host share rounds to whole percent, but never to 0: a hybrid stays apart from the device-only path.
  const long whole = std::clamp(std::lround(100 * host_share), 0L, 100L);
  const uint32_t pct = static_cast<uint32_t>(host_share > 0 ? std::max(1L, whole) : 0L);
  return (dedup ? 1u : 0u) | (sort ? 2u : 0u) | (cache ? 4u : 0u) | (background ? 8u : 0u) | (pct << 4);
}

std::string path_name_of_key(uint32_t key) {
  const bool dedup = key & 1u, sort = key & 2u, cache = key & 4u, background = key & 8u;
  const uint32_t pct = key >> 4;
  std::string s;
  if (dedup) s += sort ? "dedup(sort)+" : "dedup(hash)+";
  if (cache) s += "cache+";
  if (pct > 0) {
    s += "hybrid(host " + std::to_string(pct) + "%)";
  } else {
    s += s.empty() ? "plain-uva" : "uva";
  }
  s += background ? ", background" : ", inline";
  return s;
}

std::string Plan::path_name() const { return path_name_of_key(path_key()); }

namespace {

// The unique fraction and hit rate choose() prices with: unknown = the worst case, except a hit prior with a cache.
struct Resolved {
  double u = 1, h = 0;
  bool u_known = false, h_measured = false, h_prior = false;
};
Resolved resolve(const BatchStats& b, bool cache_present) {
  Resolved r;
  r.u_known = std::isfinite(b.unique_fraction);
  r.h_measured = std::isfinite(b.cache_hit_fraction);
  // A prior only counts for a table with a cache; without one, unknown stays the worst case.
  r.h_prior = !r.h_measured && cache_present && std::isfinite(b.cache_hit_prior);
  r.u = r.u_known ? std::clamp(b.unique_fraction, 0.0, 1.0) : 1.0;
  r.h = r.h_measured ? std::clamp(b.cache_hit_fraction, 0.0, 1.0)
        : r.h_prior  ? std::clamp(b.cache_hit_prior, 0.0, 1.0)
                     : 0.0;
  return r;
}

}  // namespace

double model_price(const Plan& shape, const BatchStats& b, const Costs& k, bool cache_present) {
  const double n = static_cast<double>(std::max<int64_t>(b.rows, 0));
  const Resolved r = resolve(b, cache_present);
  Candidate c{shape.dedup ? (shape.sort ? Dedup::kSort : Dedup::kHash) : Dedup::kOff, shape.cache,
              std::clamp(std::isfinite(shape.host_share) ? shape.host_share : 0.0, 0.0, 1.0), 0};
  if (c.host_share > 0 && (c.dedup != Dedup::kOff || c.cache))
    return predict_split_us(c, n, r.u, r.h, k, split_interference(n, k));
  return predict_us(c, n, r.u, r.h, k);
}

Plan choose(const BatchStats& b, const Costs& k, const PlannerOptions& o, const CostLearner* learner,
            bool allow_barred) {
  Plan p;
  p.planner_enabled = o.enabled;
  p.grid_cap = o.background_grid_cap;
  const double n = static_cast<double>(std::max<int64_t>(b.rows, 0));
  const Resolved r = resolve(b, o.cache_present);
  const bool u_known = r.u_known, h_measured = r.h_measured, h_prior = r.h_prior;
  const double u = r.u, h = r.h;
  // A candidate's price: the model's, times the learned factor of its path in this size range; NaN when barred.
  const bool learn = learner != nullptr && o.enabled && b.rows > 0;
  auto corrected = [&](const Candidate& c, double model_us, Correction* out) {
    if (!learn) return model_us;
    const Correction cr =
        learner->correction(learn_key(c.dedup != Dedup::kOff, c.dedup == Dedup::kSort, c.cache, c.host_share), b.rows);
    if (out) *out = cr;
    if (cr.barred && !allow_barred) return kUnknown;
    return model_us * cr.factor;
  };
  const Candidate plain{};
  p.plain_model_us = predict_us(plain, n, u, h, k);
  Correction plain_cr;
  p.plain_us = corrected(plain, p.plain_model_us, &plain_cr);
  p.learned = learn;
  p.plain_factor = plain_cr.factor;
  p.plain_samples = plain_cr.samples;
  p.predicted_us = p.plain_us;
  p.model_us = p.plain_model_us;
  p.rows = n;
  p.unique = u;
  p.unique_known = u_known;
  p.hit = h;
  p.hit_source = !o.cache_present ? HitSource::kNoCache
                 : h_measured     ? HitSource::kMeasured
                 : h_prior        ? HitSource::kPrior
                                  : HitSource::kAssumedZero;
  p.min_gain = o.min_gain;
  p.dedup_allowed = o.allow_dedup;
  p.sort_min_unique_rows = k.sort_min_unique_rows;
  p.hybrid_wanted_unavailable = o.allow_hybrid && !(k.host_rows_per_s > 0);
  p.overlap_budget_us = o.overlap_budget_us;
  if (!o.enabled || b.rows <= 0) return p;
  double share = std::isfinite(o.host_share_override) ? std::clamp(o.host_share_override, 0.0, 1.0)
                                                      : balanced_host_share(k.uva_rows_per_s, k.host_rows_per_s);
  if (!std::isfinite(o.host_share_override) && !k.hybrid_curve.empty() && k.hybrid_share > 0) {
    share = k.hybrid_share;  // the share the hybrid was measured at
  } else if (!std::isfinite(o.host_share_override) && !k.uva_curve.empty() && !k.host_curve.empty() &&
             k.host_rows_per_s > 0) {
    // Measured curves: the share where the two paths' predicted times balance best, in steps of 5%.
    double best_us = 1e300;
    for (int i = 1; i < 20; ++i) {
      const double s = 0.05 * i;
      const double us = predict_us(Candidate{Dedup::kOff, false, s, 0}, n, u, h, k);
      if (us < best_us) {
        best_us = us;
        share = s;
      }
    }
  }
  const bool can_hybrid = o.allow_hybrid && k.host_rows_per_s > 0 && share > 0;
  const bool forced_share = std::isfinite(o.host_share_override);
  const bool can_split = can_hybrid && o.allow_split && !k.hybrid_curve.empty() && k.hybrid_share > 0 &&
                         b.rows >= o.split_min_rows;
  const bool can_sort = o.allow_dedup && o.allow_sort && k.sort_min_unique_rows > 0 &&
                        n * u >= static_cast<double>(k.sort_min_unique_rows);
  const double interference = can_split ? split_interference(n, k) : 1;
  Candidate best = plain;
  best.us = p.plain_us;
  double best_model = p.plain_model_us;
  Correction best_cr = plain_cr;
  // Offers a candidate priced `model_us` by the model; a barred one is counted and skipped.
  auto offer = [&](Candidate c, double model_us) {
    Correction cr;
    const double us = corrected(c, model_us, &cr);
    if (!std::isfinite(us)) {
      ++p.barred_paths;
      return;
    }
    c.us = us;
    if (c.us < best.us) {
      best = c;
      best_model = model_us;
      best_cr = cr;
    }
  };
  for (Dedup d : {Dedup::kOff, Dedup::kHash, Dedup::kSort}) {
    if (d == Dedup::kHash && !o.allow_dedup) continue;
    if (d == Dedup::kSort && !can_sort) continue;
    for (bool c : {false, true}) {
      if (c && !(o.cache_present && o.allow_cache)) continue;
      Candidate device{d, c, 0, 0};
      if (d != Dedup::kOff || c) offer(device, predict_us(device, n, u, h, k));
      if (!can_hybrid) continue;
      if (d == Dedup::kOff && !c) {  // the plain hybrid, at its share
        Candidate cand{d, c, share, 0};
        offer(cand, predict_us(cand, n, u, h, k));
        continue;
      }
      // Dedup/cache on the device beside host threads, at host shares of 5-50%: the host gathers its tokens' rows
      // as they are (duplicates and cached rows included). Skipped when the host's smallest share alone is
      // already slower than the best plan so far, below split_min_rows, and where the start-up calibration did
      // not measure the plain hybrid (its curve is the interference price: at small batches running both paths
      // at once measured 2x the slower part alone).
      if (!can_split || host_part_us(0.05 * n, k) >= best.us) continue;
      for (int i = 1; i <= 10; ++i) {
        if (forced_share && i > 1) break;
        Candidate cand{d, c, forced_share ? share : 0.05 * i, 0};
        offer(cand, predict_split_us(cand, n, u, h, k, interference));
      }
    }
  }
  const bool pays = best.us <= p.plain_us * (1 - o.min_gain);
  if (!pays) {
    best = plain;
    best_model = p.plain_model_us;
    best_cr = plain_cr;
  }
  p.dedup = best.dedup != Dedup::kOff;
  p.sort = best.dedup == Dedup::kSort;
  p.cache = best.cache;
  p.host_share = best.host_share;
  p.predicted_us = pays ? best.us : p.plain_us;
  p.model_us = best_model;
  p.chosen_factor = best_cr.factor;
  p.chosen_samples = best_cr.samples;
  p.chosen_sibling = best_cr.source == CorrectionSource::kSibling;

  p.chosen_pays = pays;
  // Inline vs background: a lookup that cannot hide behind the available compute is exposed anyway, so it runs
  // with the full grid to finish sooner; otherwise it stays in the background with the capped grid.
  if (std::isfinite(o.overlap_budget_us) && p.predicted_us > o.overlap_budget_us) {
    p.background = false;
    p.grid_cap = GridCap::all_sms();
  } else {
    p.background = true;
    place_on_grid(p, o);
  }
  return p;
}

double uva_rows(const Plan& p) {
  double rows = p.rows * (1 - std::clamp(p.host_share, 0.0, 1.0));
  if (p.dedup) rows *= std::clamp(p.unique, 0.0, 1.0);
  if (p.cache) rows *= 1 - std::clamp(p.hit, 0.0, 1.0);
  return rows;
}

void place_on_grid(Plan& p, const PlannerOptions& o) {
  if (!p.background || !p.planner_enabled) return;  // disabled: the plain gather on the background grid
  p.grid_cap = o.background_grid_cap;
  p.large_batch_grid = false;
  if (uva_rows(p) >= static_cast<double>(o.large_batch_min_rows) && o.large_batch_grid_scale > 0 &&
      o.large_batch_grid_scale < 1) {
    p.grid_cap = scaled(o.background_grid_cap, o.large_batch_grid_scale);
    p.large_batch_grid = true;
  }
}

std::vector<std::string> explain(const Plan& p, const std::string& costs_source) {
  std::vector<std::string> why;
  if (!p.planner_enabled) {
    why.push_back("planner disabled: plain UVA gather, background grid");
  } else if (p.rows <= 0) {
    why.push_back("empty batch: nothing to plan");
  } else {
    const double n = p.rows, u = p.unique, h = p.hit;
    std::string hits;
    switch (p.hit_source) {
      case HitSource::kNoCache: hits = "no cache"; break;
      case HitSource::kMeasured: hits = fmt("%.1f%%", 100 * h); break;
      case HitSource::kPrior: hits = fmt("%.1f%%", 100 * h) + " (prior: profile coverage, not yet measured)"; break;
      case HitSource::kAssumedZero: hits = "unknown (assumed 0%)"; break;
    }
    why.push_back("rows " + fmt("%.0f", n) + ", unique " +
                  (p.unique_known ? fmt("%.1f%%", 100 * u) : "unknown (assumed 100%)") + ", cache hits " + hits +
                  "; plain UVA predicted " + fmt("%.1f us", p.plain_us) + " (costs: " + costs_source + ")");
    if (p.learned) {
      const auto [lo, hi] = bucket_rows(size_bucket(static_cast<int64_t>(n)));
      std::string l = "learned in rows " + fmt("%.0f", static_cast<double>(lo)) + "-" +
                      fmt("%.0f", static_cast<double>(hi)) + ": plain ";
      l += p.plain_samples > 0 ? "measured " + fmt("%.2fx", p.plain_factor) + " its model over " +
                                     std::to_string(p.plain_samples) + " batches (model " +
                                     fmt("%.1f us", p.plain_model_us) + ")"
                               : std::string("not measured yet");
      if (p.chosen_pays)
        l += "; chosen path " + (p.chosen_samples > 0 ? fmt("x%.2f", p.chosen_factor) + " (" +
                                                            std::to_string(p.chosen_samples) + " batches)"
                                 : p.chosen_sibling     ? fmt("x%.2f", p.chosen_factor) + " (its technique's at another host share)"
                                 : p.chosen_factor != 1 ? fmt("x%.2f", p.chosen_factor) + " (plain's factor)"
                                                        : std::string("not measured yet")) +
             " (model " + fmt("%.1f us", p.model_us) + ")";
      if (p.barred_paths > 0)
        l += "; " + std::to_string(p.barred_paths) + " path(s) barred (measured slower than plain here)";
      why.push_back(l);
    }
    if (!p.chosen_pays) {
      why.push_back("no technique saves >= " + fmt("%.0f%%", 100 * p.min_gain) + " of the plain time: plain UVA gather");
    } else {
      why.push_back(std::string("chosen: dedup ") + (p.dedup ? (p.sort ? "sort" : "hash") : "off") + ", cache " +
                    (p.cache ? "on" : "off") + ", host share " + fmt("%.0f%%", 100 * p.host_share) + " -> predicted " +
                    fmt("%.1f us", p.predicted_us) + " (" + fmt("%.2fx", p.plain_us / p.predicted_us) + " vs plain)");
    }
    if (p.dedup_allowed && p.sort_min_unique_rows <= 0)
      why.push_back("sort by address: no measured threshold, not considered");
    else if (p.dedup_allowed && n * u < static_cast<double>(p.sort_min_unique_rows))
      why.push_back("sort by address: " + fmt("%.0f", n * u) + " unique rows < measured threshold " +
                    fmt("%.0f", static_cast<double>(p.sort_min_unique_rows)));
    if (p.hybrid_wanted_unavailable) why.push_back("hybrid: host-gather path not calibrated/available");
    if (!p.background) {
      why.push_back("inline, full grid: predicted " + fmt("%.1f us", p.predicted_us) + " > overlap budget " +
                    fmt("%.1f us", p.overlap_budget_us));
    } else {
      why.push_back("background, grid " + p.grid_cap.to_string() +
                    (p.large_batch_grid ? " (the large-batch share of the background grid: ~" +
                                              fmt("%.0f", uva_rows(p)) + " rows read over UVA)"
                                        : "") +
                    (std::isfinite(p.overlap_budget_us) ? ": fits the overlap budget" : ": no overlap budget given"));
    }
  }
  if (p.notes & kNoteExploreDedup)
    why.push_back("exploring: one hash-dedup batch every " + std::to_string(p.explore_every) +
                  " measures the unique fraction");
  if (p.notes & kNoteMeasureUnique)
    why.push_back("unique fraction unknown in this size range: hash dedup measures it on this batch");
  if (p.notes & kNoteExplorePlain)
    why.push_back("exploring: plain gather, keeps its measured time in this size range current");
  if (p.notes & kNoteRetryBarred) why.push_back("re-measuring a path barred in this size range");
  if (p.notes & kNoteExploreCache) why.push_back("exploring: cache probe measures the hit rate");
  if (p.notes & kNoteCacheMissing) why.push_back("cache requested but none attached: off");
  if (p.notes & kNoteHybridNoHost) why.push_back("hybrid requested but no host-gather path or no host ids: UVA only");
  if (p.notes & kNoteHybridCaptured) why.push_back("hybrid cannot be captured (host threads): UVA only");
  return why;
}

}  // namespace engram::plan
