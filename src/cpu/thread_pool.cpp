// ThreadPool implementation: chunks are claimed under one mutex; a generation counter wakes workers.
// The chunk count is small (a few per thread), so the lock is not a bottleneck.
#include "thread_pool.hpp"

#include "sys/affinity.hpp"

#include <algorithm>

namespace engram {

ThreadPool::ThreadPool(int threads, std::function<void(int)> on_start) {
  threads = sys::threads_or_auto(threads);
  n_threads_ = threads;
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i, on_start] {
      if (on_start) on_start(i);
      worker(i);
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_chunk_ < n_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* fn = fn_;
      const int64_t lo = c * chunk_, hi = std::min(n_, lo + chunk_);
      lk.unlock();
      (*fn)(lo, hi);
      lk.lock();
      if (++chunks_done_ == n_chunks_) cv_done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t n_chunks = std::min<int64_t>(max_chunks, int64_t{n_threads_} * 4);
  if (n_threads_ == 1 || n_chunks == 1) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lk(mu_);
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + n_chunks - 1) / n_chunks;
  n_chunks_ = (n + chunk_ - 1) / chunk_;
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  cv_start_.notify_all();
  while (next_chunk_ < n_chunks_) {
    const int64_t c = next_chunk_++;
    const int64_t lo = c * chunk_, hi = std::min(n_, lo + chunk_);
    lk.unlock();
    fn(lo, hi);
    lk.lock();
    ++chunks_done_;
  }
  cv_done_.wait(lk, [&] { return chunks_done_ == n_chunks_; });
  fn_ = nullptr;
}

}  // namespace engram
