// Cost learner (see cost_learner.hpp): running estimates per (bucket, path), the guard, exploration counters and
// the unique fraction per bucket.
#include "plan/cost_learner.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace engram::plan {

int size_bucket(int64_t rows) {
  if (rows <= 1) return 0;
  int b = 0;
  for (uint64_t r = static_cast<uint64_t>(rows); r > 1; r >>= 1) ++b;
  return std::min(b, kSizeBuckets - 1);
}

std::pair<int64_t, int64_t> bucket_rows(int b) {
  b = std::clamp(b, 0, kSizeBuckets - 1);
  const int64_t lo = b == 0 ? 0 : int64_t{1} << b;
  const int64_t hi = b == kSizeBuckets - 1 ? INT64_MAX : (int64_t{1} << (b + 1)) - 1;
  return {lo, hi};
}

uint32_t learn_key(bool dedup, bool sort, bool cache, double host_share) {
  Plan p;
  p.dedup = dedup;
  p.sort = dedup && sort;
  p.cache = cache;
  p.host_share = std::isfinite(host_share) ? host_share : 0;
  return learn_key(p);
}

uint32_t learn_key(const Plan& p) { return p.path_key() & ~8u; }

std::string learned_path_name(uint32_t key) {
  std::string s = path_name_of_key(key & ~8u);
  const auto cut = s.rfind(", ");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

Plan plan_of_key(uint32_t key) {
  Plan p;
  p.dedup = key & 1u;
  p.sort = p.dedup && (key & 2u);
  p.cache = key & 4u;
  p.host_share = static_cast<double>(key >> 4) / 100.0;
  return p;
}

uint32_t CostLearner::retry_key(int64_t rows) const {
  const Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  uint32_t best = kPlainKey;
  double best_us_row = 0;
  for (const auto& [key, e] : b.paths)
    if (barred_in(b, key) && (best == kPlainKey || e.log_us_row < best_us_row)) {
      best = key;
      best_us_row = e.log_us_row;
    }
  return best;
}

bool CostLearner::observe(uint32_t key, int64_t rows, double model_us, double measured_us, double predicted_us) {
  if (rows <= 0 || !std::isfinite(model_us) || !std::isfinite(measured_us) || !(model_us > 0) || !(measured_us > 0))
    return false;
  if (!std::isfinite(predicted_us) || !(predicted_us > 0)) predicted_us = model_us;
  key &= ~8u;
  Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  Entry& e = b.paths[key];
  const double lim = std::log(std::max(1.0, o_.max_factor));
  const double lr = std::clamp(std::log(measured_us / model_us), -lim, lim);
  const double lu = std::log(measured_us / static_cast<double>(rows));
  if (key != kPlainKey && barred_in(b, key)) {
    // A re-measurement of a barred path: within the margin of plain, it restarts from this measurement (the
    // traffic changed); otherwise it joins the average and the bar stays.
    const auto pl = b.paths.find(kPlainKey);
    if (lu <= pl->second.log_us_row + std::log1p(o_.guard_margin)) e = Entry{};
  }
  if (e.samples == 0) {
    e.log_ratio = lr;
    e.log_us_row = lu;
    e.predicted_us = predicted_us;
    e.measured_us = measured_us;
  } else {
    const double w = std::clamp(o_.weight, 0.0, 1.0);
    e.log_ratio += w * (lr - e.log_ratio);
    e.log_us_row += w * (lu - e.log_us_row);
    e.predicted_us += w * (predicted_us - e.predicted_us);
    e.measured_us += w * (measured_us - e.measured_us);
  }
  ++e.samples;
  return true;
}

bool CostLearner::barred_in(const Bucket& b, uint32_t key) const {
  if (key == kPlainKey) return false;
  const auto it = b.paths.find(key);
  const auto pl = b.paths.find(kPlainKey);
  if (it == b.paths.end() || pl == b.paths.end() || pl->second.samples < 1) return false;
  if (it->second.samples < std::max(1, o_.min_samples)) return false;
  return it->second.log_us_row > pl->second.log_us_row + std::log1p(o_.guard_margin);
}

Correction CostLearner::correction(uint32_t key, int64_t rows) const {
  key &= ~8u;
  Correction c;
  const Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  const auto it = b.paths.find(key);
  if (it != b.paths.end() && it->second.samples > 0) {
    c.factor = std::exp(it->second.log_ratio);
    c.samples = it->second.samples;
    c.source = CorrectionSource::kOwn;
    c.barred = barred_in(b, key);
    return c;
  }
  // Not measured here: a measured path with the same device technique (dedup, sort, cache) at another host share,
  // else plain. A split's price is mostly its device part's, so its error is its sibling's rather than the plain
  // gather's; with plain's factor an unmeasured split would look cheaper than the measured path it splits, and the
  // planner would try one share after another. Of the siblings, a split takes the split nearest its share (what the
  // model misses of running host threads beside the device, a device path does not show), a device path the
  // smallest split; ties go to the most measured.
  const uint32_t share = key >> 4;
  const Entry* sib = nullptr;
  uint32_t sib_rank = 0;
  for (const auto& [k, e] : b.paths) {
    if (k == key || k == kPlainKey || (k & 7u) != (key & 7u) || e.samples == 0) continue;
    const uint32_t s = k >> 4;
    // Lower is nearer: the same split-ness first, then the share's distance.
    const uint32_t rank = ((s > 0) == (share > 0) ? 0u : 1000u) + (s > share ? s - share : share - s);
    if (!sib || rank < sib_rank || (rank == sib_rank && e.samples > sib->samples)) {
      sib = &e;
      sib_rank = rank;
    }
  }
  if (sib) {
    c.factor = std::exp(sib->log_ratio);
    c.source = CorrectionSource::kSibling;
    return c;
  }
  const auto pl = b.paths.find(kPlainKey);
  if (pl != b.paths.end() && pl->second.samples > 0) {
    c.factor = std::exp(pl->second.log_ratio);
    c.source = CorrectionSource::kPlain;
  }
  return c;
}

bool CostLearner::wants_timing(uint32_t key, int64_t rows) {
  key &= ~8u;
  Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  const auto it = b.paths.find(key);
  if (o_.time_every <= 1 || it == b.paths.end() || it->second.samples < o_.steady_samples) return true;
  Entry& e = it->second;
  if (++e.untimed < o_.time_every) return false;
  e.untimed = 0;
  return true;
}

Explore CostLearner::explore(int64_t rows, uint32_t chosen_key, double chosen_us) {
  chosen_key &= ~8u;
  Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  ++b.batches;
  ++b.since_plain;
  ++b.since_retry;
  if (chosen_key == kPlainKey) b.since_plain = 0;
  if (o_.retry_every > 0 && b.since_retry >= o_.retry_every) {
    b.since_retry = 0;
    for (const auto& [key, e] : b.paths)
      if (barred_in(b, key)) return Explore::kRetryBarred;
  }
  if (chosen_key != kPlainKey && o_.plain_every > 0) {
    const auto pl = b.paths.find(kPlainKey);
    const int64_t plain_samples = pl == b.paths.end() ? 0 : pl->second.samples;
    // Plain's time per row over the chosen path's: measured, else the chosen path's price; NaN when unknown.
    double gain = kUnknown;
    if (plain_samples > 0) {
      const auto ch = b.paths.find(chosen_key);
      if (ch != b.paths.end() && ch->second.samples > 0) {
        gain = std::exp(pl->second.log_us_row - ch->second.log_us_row);
      } else if (std::isfinite(chosen_us) && chosen_us > 0) {
        gain = std::exp(pl->second.log_us_row) * static_cast<double>(rows) / chosen_us;
      }
    }
    const bool warming = plain_samples < o_.min_samples && o_.plain_warm_every > 0 &&
                         !(o_.plain_warm_gain > 0 && std::isfinite(gain) && gain >= o_.plain_warm_gain);
    int64_t every = warming ? std::min(o_.plain_warm_every, o_.plain_every) : o_.plain_every;
    if (std::isfinite(gain) && o_.plain_overhead > 0) {
      // A plain batch costs (plain / chosen - 1) of a chosen batch: one in `spaced` keeps that within the overhead.
      // While plain warms up, at most one in plain_every: its first measurements come within a few dozen batches.
      const int cap = std::max(1, warming ? o_.plain_every : o_.plain_every_max);
      const double spaced = std::min<double>(cap, (gain - 1) / o_.plain_overhead);
      if (std::isfinite(spaced) && spaced > static_cast<double>(every)) every = static_cast<int64_t>(std::ceil(spaced));
    }
    // The first plain batch of a bucket comes at its second batch: the first one runs the planner's choice.
    if (b.since_plain >= every || (plain_samples == 0 && b.batches == 2)) {
      b.since_plain = 0;
      return Explore::kPlain;
    }
  }
  return Explore::kNone;
}

void CostLearner::observe_unique(int64_t rows, int64_t dedup_rows, int64_t unique_rows) {
  if (dedup_rows <= 0 || unique_rows < 0 || unique_rows > dedup_rows) return;
  Bucket& b = b_[static_cast<size_t>(size_bucket(rows))];
  const double u = static_cast<double>(unique_rows) / static_cast<double>(dedup_rows);
  b.unique = std::isfinite(b.unique) ? 0.5 * b.unique + 0.5 * u : u;
}

double CostLearner::unique_fraction(int64_t rows) const { return b_[static_cast<size_t>(size_bucket(rows))].unique; }

std::vector<LearnedPath> CostLearner::paths() const {
  std::vector<LearnedPath> out;
  for (int i = 0; i < kSizeBuckets; ++i) {
    const Bucket& b = b_[static_cast<size_t>(i)];
    for (const auto& [key, e] : b.paths) {
      if (e.samples == 0) continue;
      LearnedPath r;
      r.bucket = i;
      std::tie(r.rows_min, r.rows_max) = bucket_rows(i);
      r.key = key;
      r.name = learned_path_name(key);
      r.samples = e.samples;
      r.predicted_us = e.predicted_us;
      r.measured_us = e.measured_us;
      r.factor = std::exp(e.log_ratio);
      r.barred = barred_in(b, key);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<std::pair<int, double>> CostLearner::unique_by_bucket() const {
  std::vector<std::pair<int, double>> out;
  for (int i = 0; i < kSizeBuckets; ++i)
    if (std::isfinite(b_[static_cast<size_t>(i)].unique)) out.emplace_back(i, b_[static_cast<size_t>(i)].unique);
  return out;
}

void CostLearner::reset() { b_ = {}; }

}  // namespace engram::plan
