// ThreadPool: a fixed set of worker threads that run one parallel_for at a time.
//
// The CPU lookup splits a batch of rows over the pool; the pool is persistent because decode batches
// are small (a few thousand rows) and creating threads per call would cost more than the gather.
// Workers can be bound to a NUMA node's CPUs by the placement layer through `on_start`.
// Thread safety: parallel_for may be called from one thread at a time per pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace engram {

class ThreadPool {
 public:
  // `threads` workers in total including the caller (so 1 = run inline). 0 = hardware concurrency.
  explicit ThreadPool(int threads = 0, std::function<void(int)> on_start = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items; the
  // calling thread takes part. Returns when every chunk is done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, n_chunks_ = 0;
  int64_t next_chunk_ = 0;
  int64_t chunks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace engram
