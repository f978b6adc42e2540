// Decayed LFU counts, candidate pool, sampled-victim planning and the counting thread (see hot_counts.hpp).
//
// Decay without touching every count: an observation adds inc_ to its raw count and inc_ grows by growth_ per
// batch, so count(id) = raw / inc_ is the exponentially decayed sum. The rescale pass (every rescale_every batches,
// or when inc_ grows past 1e100) divides every raw count by inc_, resets inc_ to 1 and prunes small counts.
#include "plan/hot_counts.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_set>

namespace engram::plan {

HotCounts::HotCounts(const HotCountsOptions& o) : opt_(o) {
  growth_ = o.half_life_batches > 0 ? std::exp2(1.0 / o.half_life_batches) : 1.0;
  if (opt_.pool_size < 1) opt_.pool_size = 1;
  if (opt_.sample_window < 1) opt_.sample_window = 1;
}

namespace {
// Ids looked up ahead of the one being counted: their map entries are fetched meanwhile (a map of millions of ids
// misses the caches on nearly every lookup).
constexpr int64_t kPrefetchAhead = 16;
}  // namespace

void HotCounts::observe(const int64_t* ids, int64_t n, double weight) {
  observe_part(ids, n, weight);
  end_batch();
}

void HotCounts::observe_part(const int64_t* ids, int64_t n, double weight) {
  const double add = inc_ * (weight > 0 ? weight : 1.0);
  for (int64_t i = 0; i < std::min(n, kPrefetchAhead); ++i) ids_.prefetch(ids[i]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) ids_.prefetch(ids[i + kPrefetchAhead]);
    const int64_t id = ids[i];
    if (id < 0 || id >= opt_.id_limit) continue;
    IdState* e = ids_.find(id);
    if (!e) {  // first counted: its slot, once
      const int64_t* slot = slot_of_.find(id);
      e = &ids_.get_or_insert(id, IdState{0.0, slot ? *slot : -1});
    }
    IdState& entry = *e;
    entry.raw += add;
    if (entry.slot >= 0) {
      slot_raw_[static_cast<size_t>(entry.slot)] = entry.raw;
    } else {
      pool_.insert_or_assign(id, entry.raw);
      if (static_cast<int64_t>(pool_.size()) > 2 * opt_.pool_size) trim_pool();
    }
  }
}

void HotCounts::end_batch() {
  ++batches_;
  inc_ *= growth_;
  if ((opt_.rescale_every > 0 && batches_ % opt_.rescale_every == 0) || inc_ > 1e100) rescale();
}

double HotCounts::count(int64_t id) const {
  const IdState* e = ids_.find(id);
  return e ? e->raw / inc_ : 0.0;
}

double HotCounts::total() const {
  double s = 0;
  ids_.for_each([&](int64_t, const IdState& e) { s += e.raw; });
  return s / inc_;
}

void HotCounts::rescale() {
  const double inc = inc_;
  ids_.for_each([inc](int64_t, IdState& e) { e.raw /= inc; });
  pool_.for_each([inc](int64_t, double& r) { r /= inc; });
  for (double& r : slot_raw_) r /= inc;
  // Cached ids keep their counts (they are the victims' scores); others below the floor are forgotten, and leave
  // the pool, whose counts are equal to theirs (an evicted id never counted stays there, at 0).
  ids_.erase_if([this](int64_t, const IdState& e) { return e.raw < opt_.prune_below && e.slot < 0; });
  pool_.erase_if([this](int64_t, double r) { return r > 0 && r < opt_.prune_below; });
  inc_ = 1;
}

namespace {
// Hotter first; ties by smaller id (deterministic).
struct Hotter {
  bool operator()(const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) const {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  }
};
// Puts the k first of v under `before` (a strict total order) at its front, in order: a linear selection, then a
// sort of those k (a heap-based partial sort of thousands of entries costs several times more).
template <typename Before>
void select_first(std::vector<std::pair<int64_t, double>>& v, size_t k, Before before) {
  if (k < v.size()) std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end(), before);
  std::sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(k, v.size())), before);
}
}  // namespace

std::vector<std::pair<int64_t, double>> HotCounts::hottest(int64_t k) const {
  std::vector<std::pair<int64_t, double>> all;
  all.reserve(ids_.size());
  ids_.for_each([&](int64_t id, const IdState& e) { all.emplace_back(id, e.raw / inc_); });
  const size_t kk = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(all.size())));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end(), Hotter{});
  all.resize(kk);
  return all;
}

void HotCounts::trim_pool() {
  std::vector<std::pair<int64_t, double>> v;
  v.reserve(pool_.size());
  pool_.for_each([&](int64_t id, double r) { v.emplace_back(id, r / inc_); });
  const size_t keep = static_cast<size_t>(std::min<int64_t>(opt_.pool_size, static_cast<int64_t>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(keep), v.end(), Hotter{});
  v.resize(keep);
  for (auto& p : v) p.second = *pool_.find(p.first);  // the raw counts, exactly as ids_ holds them
  pool_.clear();
  for (const auto& p : v) pool_.insert_or_assign(p.first, p.second);
}

void HotCounts::set_slots(const std::vector<int64_t>& slot_ids) {
  slot_ids_ = slot_ids;
  slot_of_.clear();
  slot_of_.reserve(slot_ids_.size());
  free_.clear();
  for (int64_t s = static_cast<int64_t>(slot_ids_.size()) - 1; s >= 0; --s) {
    const int64_t id = slot_ids_[static_cast<size_t>(s)];
    if (id < 0) {
      free_.push_back(s);  // back = lowest slot
    } else {
      slot_of_.insert_or_assign(id, s);
    }
  }
  slot_raw_.assign(slot_ids_.size(), 0.0);
  ids_.for_each([&](int64_t id, IdState& e) {
    const int64_t* slot = slot_of_.find(id);
    e.slot = slot ? *slot : -1;
    if (e.slot >= 0) slot_raw_[static_cast<size_t>(e.slot)] = e.raw;
  });
  pool_.clear();
  ids_.for_each([&](int64_t id, const IdState& e) {
    if (e.slot < 0) pool_.insert_or_assign(id, e.raw);
  });
  if (static_cast<int64_t>(pool_.size()) > opt_.pool_size) trim_pool();
  cursor_ = 0;
}

std::vector<CacheSwap> HotCounts::plan(int64_t max_rows) {
  std::vector<CacheSwap> out;
  if (max_rows <= 0 || slot_ids_.empty()) return out;
  // Candidates: the pool (uncached ids), hottest first.
  std::vector<std::pair<int64_t, double>>& cand = scratch_cand_;
  cand.clear();
  pool_.for_each([&](int64_t id, double r) { cand.emplace_back(id, r); });  // raw: the same order as the counts
  const size_t nc = static_cast<size_t>(std::min<int64_t>(max_rows, static_cast<int64_t>(cand.size())));
  select_first(cand, nc, Hotter{});
  cand.resize(nc);
  for (auto& c : cand) c.second /= inc_;
  if (cand.empty()) return out;
  // Victims: free slots first (score -1), then the coldest of a window of occupied slots from the cursor.
  std::vector<std::pair<int64_t, double>>& victims = scratch_victims_;  // (slot, score)
  victims.clear();
  for (auto it = free_.rbegin(); it != free_.rend() && static_cast<int64_t>(victims.size()) < max_rows; ++it)
    victims.emplace_back(*it, -1.0);
  const int64_t n_slots = static_cast<int64_t>(slot_ids_.size());
  if (static_cast<int64_t>(victims.size()) < static_cast<int64_t>(cand.size())) {
    const int64_t window = std::min<int64_t>(n_slots, opt_.sample_window * max_rows);
    std::vector<std::pair<int64_t, double>>& sampled = scratch_sampled_;
    sampled.clear();
    for (int64_t k = 0, s = cursor_; k < window; ++k, s = s + 1 == n_slots ? 0 : s + 1)
      if (slot_ids_[static_cast<size_t>(s)] >= 0) sampled.emplace_back(s, slot_raw_[static_cast<size_t>(s)]);
    cursor_ = (cursor_ + window) % n_slots;
    // Only the coldest ones the candidates can pair with are needed, in order (raw: the same order as the counts).
    const size_t need = std::min(sampled.size(), cand.size() - std::min(cand.size(), victims.size()));
    select_first(sampled, need, [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : a.first < b.first;
    });
    for (size_t i = 0; i < need; ++i) victims.emplace_back(sampled[i].first, sampled[i].second / inc_);
  }
  // The entries the swaps edit miss the CPU caches in a map of millions of ids: each is asked for a few swaps ahead.
  const size_t pairs = std::min(cand.size(), victims.size());
  auto prefetch_pair = [&](size_t i) {
    if (i >= pairs) return;
    const int64_t old_id = slot_ids_[static_cast<size_t>(victims[i].first)];
    ids_.prefetch(cand[i].first);
    ids_.prefetch(old_id);
    slot_of_.prefetch(old_id);
  };
  for (size_t i = 0; i < static_cast<size_t>(kPrefetchAhead) / 2; ++i) prefetch_pair(i);
  for (size_t i = 0; i < pairs; ++i) {
    prefetch_pair(i + static_cast<size_t>(kPrefetchAhead) / 2);
    const auto [slot, vscore] = victims[i];
    const auto [id, cscore] = cand[i];
    if (vscore >= 0 && cscore < vscore + opt_.min_gain) break;  // candidates only get colder, victims hotter
    CacheSwap sw;
    sw.slot = slot;
    sw.old_id = slot_ids_[static_cast<size_t>(slot)];
    sw.new_id = id;
    if (sw.old_id >= 0) {
      slot_of_.erase(sw.old_id);
      IdState* old = ids_.find(sw.old_id);  // none: cached, never counted
      if (old) old->slot = -1;
      pool_.insert_or_assign(sw.old_id, old ? old->raw : 0.0);  // an evicted id may come back when it heats up again
    } else {
      free_.pop_back();  // free victims come first, taken from the back of free_ in order: this is `slot`
    }
    slot_ids_[static_cast<size_t>(slot)] = id;
    slot_of_.insert_or_assign(id, slot);
    IdState* e = ids_.find(id);  // none: an evicted id never counted
    if (e) e->slot = slot;
    slot_raw_[static_cast<size_t>(slot)] = e ? e->raw : 0.0;
    pool_.erase(id);
    out.push_back(sw);
  }
  return out;
}

// ---- worker -----------------------------------------------------------------------------------------------

HotCountsWorker::HotCountsWorker(int layers, const HotCountsOptions& o, int64_t max_pending_ids)
    : max_pending_ids_(max_pending_ids) {
  counts_.reserve(static_cast<size_t>(std::max(0, layers)));
  for (int i = 0; i < layers; ++i) counts_.emplace_back(o);
  planned_.resize(counts_.size());
  thread_ = std::thread([this] { loop(); });
}

HotCountsWorker::~HotCountsWorker() {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

void HotCountsWorker::submit(int layer, const int64_t* ids, int64_t n) {
  if (layer < 0 || layer >= static_cast<int>(counts_.size()) || n <= 0) return;
  const int64_t limit = std::max<int64_t>(1, max_pending_ids_);
  int64_t m = n;  // ids copied
  uint64_t seed = 0;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (pending_ids_ + n > limit) {
      // Sample: the room left, but at least limit/64 ids, so that every batch weighs in while the backlog is full.
      const int64_t floor_ids = std::max<int64_t>(1, limit / 64);
      m = std::min(n, std::max(limit - pending_ids_, floor_ids));
      if (pending_ids_ + m > 2 * limit) {
        ++dropped_;
        return;
      }
      if (m < n) {
        ++sampled_;
        sampled_out_ids_ += n - m;
        seed = ++sample_seed_;
      }
    }
    pending_ids_ += m;
  }
  Batch b;  // copied outside the queue lock
  b.layer = layer;
  if (m == n) {
    b.ids.assign(ids, ids + n);
  } else {
    // Stratified: stratum k = positions [k*n/m, (k+1)*n/m), one position drawn uniformly in each.
    b.ids.resize(static_cast<size_t>(m));
    uint64_t x = seed * 0xD1B54A32D192ED03ull;
    for (int64_t k = 0; k < m; ++k) {
      const int64_t lo = static_cast<int64_t>((static_cast<__int128>(k) * n) / m);
      const int64_t hi = static_cast<int64_t>((static_cast<__int128>(k + 1) * n) / m);
      const int64_t at = lo + static_cast<int64_t>(splitmix64(x) % static_cast<uint64_t>(hi - lo));
      b.ids[static_cast<size_t>(k)] = ids[at];
    }
    b.weight = static_cast<double>(n) / static_cast<double>(m);
  }
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    queue_.push_back(std::move(b));
  }
  cv_.notify_one();
}

// Runs with counts_mu_ held: the plan, then its swaps parked for take_planned().
void HotCountsWorker::compute_plan(int layer, int64_t rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<CacheSwap> swaps = counts_[static_cast<size_t>(layer)].plan(rows);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> l(planned_mu_);
  Planned& p = planned_[static_cast<size_t>(layer)];
  p.swaps.insert(p.swaps.end(), swaps.begin(), swaps.end());
  p.last_rows = static_cast<int64_t>(swaps.size());
  p.queued = false;
  ++plan_times_.plans;
  plan_times_.sum_us += us;
  plan_times_.max_us = std::max(plan_times_.max_us, us);
}

// Runs with counts_mu_ held: every plan asked for so far.
void HotCountsWorker::serve_plans() {
  while (true) {
    Batch b;
    {
      std::lock_guard<std::mutex> l(queue_mu_);
      if (plans_.empty()) return;
      b = std::move(plans_.front());
      plans_.pop_front();
    }
    compute_plan(b.layer, b.plan_rows);
  }
}

void HotCountsWorker::loop() {
  while (true) {
    Batch b;
    {
      std::unique_lock<std::mutex> l(queue_mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty() || !plans_.empty(); });
      if (queue_.empty() && plans_.empty()) return;  // stop_ and nothing left
      std::deque<Batch>& from = plans_.empty() ? queue_ : plans_;  // plans first (see the file comment)
      b = std::move(from.front());
      from.pop_front();
      busy_ = true;
    }
    const int64_t n = static_cast<int64_t>(b.ids.size());
    {
      // The whole batch under one hold (the decay is per batch); try_with() meanwhile answers false at once. Plans
      // asked for meanwhile are computed between its chunks, on the counts so far.
      std::lock_guard<std::mutex> g(counts_mu_);
      if (b.plan_rows > 0) {
        compute_plan(b.layer, b.plan_rows);
      } else {
        HotCounts& c = counts_[static_cast<size_t>(b.layer)];
        for (int64_t at = 0; at < n; at += kCountChunk) {
          c.observe_part(b.ids.data() + at, std::min(kCountChunk, n - at), b.weight);
          serve_plans();
        }
        c.end_batch();
      }
    }
    {
      std::lock_guard<std::mutex> l(queue_mu_);
      pending_ids_ -= n;
      busy_ = false;
      if (b.plan_rows == 0) ++counted_;
    }
    idle_cv_.notify_all();
  }
}

void HotCountsWorker::drain() {
  std::unique_lock<std::mutex> l(queue_mu_);
  idle_cv_.wait(l, [&] { return queue_.empty() && plans_.empty() && !busy_; });
}

bool HotCountsWorker::try_with(int layer, const std::function<void(HotCounts&)>& f) {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return false;
  std::unique_lock<std::mutex> g(counts_mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;
  f(counts_[static_cast<size_t>(layer)]);
  return true;
}

void HotCountsWorker::with(int layer, const std::function<void(HotCounts&)>& f) {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return;
  std::lock_guard<std::mutex> g(counts_mu_);
  f(counts_[static_cast<size_t>(layer)]);
}

bool HotCountsWorker::request_plan(int layer, int64_t max_rows) {
  if (layer < 0 || layer >= static_cast<int>(counts_.size()) || max_rows <= 0) return false;
  {
    std::lock_guard<std::mutex> l(planned_mu_);
    Planned& p = planned_[static_cast<size_t>(layer)];
    if (p.queued || static_cast<int64_t>(p.swaps.size()) >= max_rows) return false;
    p.queued = true;
  }
  Batch b;
  b.layer = layer;
  b.plan_rows = max_rows;
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    plans_.push_back(std::move(b));
  }
  cv_.notify_one();
  return true;
}

std::vector<CacheSwap> HotCountsWorker::take_planned(int layer, int64_t max_rows) {
  std::vector<CacheSwap> out;
  if (layer < 0 || layer >= static_cast<int>(counts_.size()) || max_rows <= 0) return out;
  std::lock_guard<std::mutex> l(planned_mu_);
  std::deque<CacheSwap>& q = planned_[static_cast<size_t>(layer)].swaps;
  // Slots and ids the slice already touches: a swap of a later plan may re-use a slot filled (or evict an id
  // admitted) earlier in the queue; it waits for the next slice.
  std::unordered_set<int64_t> slots, evicted;
  while (!q.empty() && static_cast<int64_t>(out.size()) < max_rows) {
    const CacheSwap& sw = q.front();
    if (slots.count(sw.slot) || evicted.count(sw.new_id)) break;
    slots.insert(sw.slot);
    if (sw.old_id >= 0) evicted.insert(sw.old_id);
    out.push_back(sw);
    q.pop_front();
  }
  return out;
}

bool HotCountsWorker::update_in_progress(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return false;
  std::lock_guard<std::mutex> l(planned_mu_);
  const Planned& p = planned_[static_cast<size_t>(layer)];
  return p.queued || !p.swaps.empty();
}

int64_t HotCountsWorker::planned_backlog(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return 0;
  std::lock_guard<std::mutex> l(planned_mu_);
  return static_cast<int64_t>(planned_[static_cast<size_t>(layer)].swaps.size());
}

bool HotCountsWorker::plan_queued(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return false;
  std::lock_guard<std::mutex> l(planned_mu_);
  return planned_[static_cast<size_t>(layer)].queued;
}

int64_t HotCountsWorker::last_plan_rows(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(counts_.size())) return 0;
  std::lock_guard<std::mutex> l(planned_mu_);
  return planned_[static_cast<size_t>(layer)].last_rows;
}

HotCountsWorker::PlanTimes HotCountsWorker::plan_times() const {
  std::lock_guard<std::mutex> l(planned_mu_);
  return plan_times_;
}

int64_t HotCountsWorker::dropped_batches() const {
  std::lock_guard<std::mutex> l(queue_mu_);
  return dropped_;
}

int64_t HotCountsWorker::sampled_batches() const {
  std::lock_guard<std::mutex> l(queue_mu_);
  return sampled_;
}

int64_t HotCountsWorker::sampled_out_ids() const {
  std::lock_guard<std::mutex> l(queue_mu_);
  return sampled_out_ids_;
}

int64_t HotCountsWorker::counted_batches() const {
  std::lock_guard<std::mutex> l(queue_mu_);
  return counted_;
}

}  // namespace engram::plan
