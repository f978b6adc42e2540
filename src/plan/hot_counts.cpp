// Decayed LFU counts, candidate pool, sampled-victim planning and the counting thread (see hot_counts.hpp).
//
// Decay without touching every count: an observation adds inc_ to its raw count and inc_ grows by growth_ per
// batch, so count(id) = raw / inc_ is the exponentially decayed sum. The rescale pass (every rescale_every batches,
// or when inc_ grows past 1e100) divides every raw count by inc_, resets inc_ to 1 and prunes small counts.
#include "plan/hot_counts.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace engram::plan {

HotCounts::HotCounts(const HotCountsOptions& o) : opt_(o) {
  growth_ = o.half_life_batches > 0 ? std::exp2(1.0 / o.half_life_batches) : 1.0;
  if (opt_.pool_size < 1) opt_.pool_size = 1;
  if (opt_.sample_window < 1) opt_.sample_window = 1;
}

void HotCounts::observe(const int64_t* ids, int64_t n, double weight) {
  const double add = inc_ * (weight > 0 ? weight : 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= opt_.id_limit) continue;
    raw_.get_or_insert(id, 0.0) += add;
    if (!cached(id)) pool_.insert(id);
  }
  if (static_cast<int64_t>(pool_.size()) > 2 * opt_.pool_size) trim_pool();
  ++batches_;
  inc_ *= growth_;
  if ((opt_.rescale_every > 0 && batches_ % opt_.rescale_every == 0) || inc_ > 1e100) rescale();
}

double HotCounts::count(int64_t id) const {
  const double* r = raw_.find(id);
  return r ? *r / inc_ : 0.0;
}

double HotCounts::total() const {
  double s = 0;
  raw_.for_each([&](int64_t, double r) { s += r; });
  return s / inc_;
}

void HotCounts::rescale() {
  const double inc = inc_;
  raw_.for_each([inc](int64_t, double& r) { r /= inc; });
  // Cached ids keep their counts (they are the victims' scores); others below the floor are forgotten.
  raw_.erase_if([this](int64_t id, double r) {
    if (r >= opt_.prune_below || cached(id)) return false;
    pool_.erase(id);
    return true;
  });
  inc_ = 1;
}

namespace {
// Hotter first; ties by smaller id (deterministic).
struct Hotter {
  bool operator()(const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) const {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  }
};
}  // namespace

std::vector<std::pair<int64_t, double>> HotCounts::hottest(int64_t k) const {
  std::vector<std::pair<int64_t, double>> all;
  all.reserve(raw_.size());
  raw_.for_each([&](int64_t id, double r) { all.emplace_back(id, r / inc_); });
  const size_t kk = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(all.size())));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end(), Hotter{});
  all.resize(kk);
  return all;
}

void HotCounts::trim_pool() {
  std::vector<std::pair<int64_t, double>> v;
  v.reserve(pool_.size());
  for (int64_t id : pool_)
    if (!cached(id)) v.emplace_back(id, count(id));
  const size_t keep = static_cast<size_t>(std::min<int64_t>(opt_.pool_size, static_cast<int64_t>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(keep), v.end(), Hotter{});
  v.resize(keep);
  pool_.clear();
  for (const auto& p : v) pool_.insert(p.first);
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
  pool_.clear();
  raw_.for_each([&](int64_t id, double) {
    if (!cached(id)) pool_.insert(id);
  });
  if (static_cast<int64_t>(pool_.size()) > opt_.pool_size) trim_pool();
  cursor_ = 0;
}

std::vector<CacheSwap> HotCounts::plan(int64_t max_rows) {
  std::vector<CacheSwap> out;
  if (max_rows <= 0 || slot_ids_.empty()) return out;
  // Candidates: uncached pool ids, hottest first.
  std::vector<std::pair<int64_t, double>> cand;
  cand.reserve(pool_.size());
  for (int64_t id : pool_)
    if (!cached(id)) cand.emplace_back(id, count(id));
  const size_t nc = static_cast<size_t>(std::min<int64_t>(max_rows, static_cast<int64_t>(cand.size())));
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(nc), cand.end(), Hotter{});
  cand.resize(nc);
  if (cand.empty()) return out;
  // Victims: free slots first (score -1), then the coldest of a window of occupied slots from the cursor.
  std::vector<std::pair<int64_t, double>> victims;  // (slot, score)
  for (auto it = free_.rbegin(); it != free_.rend() && static_cast<int64_t>(victims.size()) < max_rows; ++it)
    victims.emplace_back(*it, -1.0);
  const int64_t n_slots = static_cast<int64_t>(slot_ids_.size());
  if (static_cast<int64_t>(victims.size()) < static_cast<int64_t>(cand.size())) {
    const int64_t window = std::min<int64_t>(n_slots, opt_.sample_window * max_rows);
    std::vector<std::pair<int64_t, double>> sampled;
    sampled.reserve(static_cast<size_t>(window));
    for (int64_t k = 0; k < window; ++k) {
      const int64_t s = (cursor_ + k) % n_slots;
      const int64_t id = slot_ids_[static_cast<size_t>(s)];
      if (id >= 0) sampled.emplace_back(s, count(id));
    }
    cursor_ = (cursor_ + window) % n_slots;
    std::sort(sampled.begin(), sampled.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : a.first < b.first;
    });
    for (const auto& v : sampled) victims.push_back(v);
  }
  for (size_t i = 0; i < cand.size() && i < victims.size(); ++i) {
    const auto [slot, vscore] = victims[i];
    const auto [id, cscore] = cand[i];
    if (vscore >= 0 && cscore < vscore + opt_.min_gain) break;  // candidates only get colder, victims hotter
    CacheSwap sw;
    sw.slot = slot;
    sw.old_id = slot_ids_[static_cast<size_t>(slot)];
    sw.new_id = id;
    if (sw.old_id >= 0) {
      slot_of_.erase(sw.old_id);
      pool_.insert(sw.old_id);  // an evicted id may come back when it heats up again
    } else {
      free_.pop_back();  // free victims come first, taken from the back of free_ in order: this is `slot`
    }
    slot_ids_[static_cast<size_t>(slot)] = id;
    slot_of_.insert_or_assign(id, slot);
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
    HotCounts& c = counts_[static_cast<size_t>(b.layer)];
    const int64_t n = static_cast<int64_t>(b.ids.size());
    if (b.plan_rows > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<CacheSwap> swaps;
      {
        std::lock_guard<std::mutex> g(counts_mu_);
        swaps = c.plan(b.plan_rows);
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> l(planned_mu_);
        Planned& p = planned_[static_cast<size_t>(b.layer)];
        p.swaps.insert(p.swaps.end(), swaps.begin(), swaps.end());
        p.last_rows = static_cast<int64_t>(swaps.size());
        p.queued = false;
        ++plan_times_.plans;
        plan_times_.sum_us += us;
        plan_times_.max_us = std::max(plan_times_.max_us, us);
      }
    } else {
      // The whole batch under one hold (the decay is per batch); try_with() meanwhile answers false at once.
      std::lock_guard<std::mutex> g(counts_mu_);
      c.observe(b.ids.data(), n, b.weight);
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
