// The size of the hot-row cache's next online update, adapted to how fast the traffic moves. Each update asks
// HotCounts::plan for at most rows() swaps and applies them rows at most slice() per step. A plan that comes back
// full (every row it was allowed was a gain: hotter uncached ids remain) means the traffic moves faster than the
// updates follow, so the next plan and the per-step slice double, up to `burst` times the base; a plan at most half
// full halves them back. Steady traffic keeps the base (the per-step maintenance budget of a serving run); a change
// of traffic (another kind of text) bursts until the cache has caught up, then returns to the base.
// One slice is staged per step, so an update of rows() swaps is applied within its period of `every` steps only when
// the slice is at least rows() / every: slice_for(every) raises the slice to that (the next update is planned while
// the last slice is still being committed: HotCountsWorker pipelines them). The serving thread's work per step and
// layer is then at most max_slice_for(every) rows staged plus as many committed.
// Pure C++ (no CUDA): the engine's maintenance (src/cuda/backend_cache.cpp) and the host simulation (`engram bench
// cache-follow`) use it alike. Not thread-safe (one per layer, driven by one thread).
#pragma once

#include <algorithm>
#include <cstdint>

namespace engram::plan {

class UpdateBudget {
 public:
  UpdateBudget() : UpdateBudget(1, 1, 1) {}
  // base_rows, base_slice >= 1; burst >= 1 (1 = never more than the base).
  UpdateBudget(int64_t base_rows, int64_t base_slice, int64_t burst)
      : rows_(std::max<int64_t>(1, base_rows)), slice_(std::max<int64_t>(1, base_slice)), burst_(std::max<int64_t>(1, burst)) {}
  int64_t rows() const { return rows_ * scale_; }
  int64_t slice() const { return slice_ * scale_; }
  int64_t scale() const { return scale_; }
  // The largest rows() ever asked for.
  int64_t max_rows() const { return rows_ * burst_; }
  // The uncached candidates HotCounts keeps for this budget (HotCountsOptions::pool_size): 4x the rows one update
  // may swap, bursts included; a plan costs O(pool + window) on the counting thread.
  int64_t candidate_pool() const { return std::max<int64_t>(256, 4 * max_rows()); }
  // The slice that applies rows() within `every` steps: max(slice(), ceil(rows() / every)); every <= 0: slice().
  int64_t slice_for(int every) const { return scale_ * base_slice_for(every); }
  // The largest slice_for(every) (sizes the staging).
  int64_t max_slice_for(int every) const { return burst_ * base_slice_for(every); }
  // The last plan returned `planned` swaps of the rows() it was allowed.
  void on_plan(int64_t planned) {
    if (planned >= rows()) scale_ = std::min(burst_, 2 * scale_);
    else if (2 * planned <= rows()) scale_ = std::max<int64_t>(1, scale_ / 2);
  }

 private:
  int64_t base_slice_for(int every) const {
    return every > 0 ? std::max(slice_, (rows_ + every - 1) / every) : slice_;
  }
  int64_t rows_, slice_, burst_;
  int64_t scale_ = 1;
};

// When online updates come due and how many were deferred, counted as the engine's report counts them
// (EngineCacheReport: updates_deferred, update_deferred_steps): one update comes due every `every` counted steps; an
// update due while the previous one still waits merges into it and is deferred too; a due update that cannot be
// asked for at a step is deferred once and waits a step. Pure C++; one per layer.
class UpdateClock {
 public:
  explicit UpdateClock(int every) : every_(every) {}
  // A counted step: true when an update came due at it (none when every <= 0).
  bool tick() {
    if (every_ <= 0 || ++since_ < every_) return false;
    since_ = 0;
    ++attempts_;
    if (due_) {
      ++deferred_;
      due_deferred_ = true;
    } else {
      due_ = true;
      due_deferred_ = false;
    }
    return true;
  }
  bool due() const { return due_; }
  // The due update was asked for.
  void asked() { due_ = false; }
  // The due update could not be asked for at this step.
  void refused() {
    if (!due_deferred_) ++deferred_;
    due_deferred_ = true;
    ++waited_;
  }
  int64_t attempts() const { return attempts_; }
  int64_t deferred() const { return deferred_; }
  int64_t waited_steps() const { return waited_; }

 private:
  int every_;
  int since_ = 0;
  bool due_ = false, due_deferred_ = false;
  int64_t attempts_ = 0, deferred_ = 0, waited_ = 0;
};

}  // namespace engram::plan
