// One-shot parallel loops over row ranges: [0, n) cut into contiguous ranges, one std::thread each, the
// caller waiting for all of them. For bulk work that runs once (a table's synthetic fill, a bench's table,
// a check of every row); a lookup's repeated loops use a persistent pool (cpu/thread_pool.hpp) instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace engram {

// Calls fn(lo, hi) on ranges of ceil(n / threads) rows covering [0, n), each on its own thread; one range runs on
// the calling thread. Nothing for n <= 0. `threads` is the caller's resolved count (sys::threads_or_auto gives
// --threads 0 its one meaning: the CPUs of the affinity mask); < 1 counts as 1, never as "all hardware threads".
// fn must be safe to call concurrently on disjoint ranges.
template <typename Fn>
void parallel_ranges(int64_t n, int threads, const Fn& fn) {
  if (n <= 0) return;
  threads = std::max(1, threads);
  const int64_t per = (n + threads - 1) / threads;
  if (per >= n) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const int64_t lo = t * per, hi = std::min(n, lo + per);
    if (lo >= hi) break;
    pool.emplace_back([&fn, lo, hi] { fn(lo, hi); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace engram
