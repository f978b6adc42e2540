// One-shot parallel loops over row ranges: [0, n) cut into contiguous ranges, one std::thread each, the
// caller waiting for all of them; and the bare form, n threads each given its index. For bulk work that runs once (a table's synthetic fill, a bench's table,
// a check of every row); a lookup's repeated loops use a persistent pool (cpu/thread_pool.hpp) instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace engram {

// Calls fn(t) for every t in [0, n), each on a new thread of its own, never on the calling thread (so
// per-thread state a worker sets, CPU affinity or a memory policy, stays off the caller); waits for all.
// Nothing for n <= 0. For workers that take their items themselves (an atomic counter) or need a thread
// each whatever the count.
template <typename Fn>
void parallel_items(int n, const Fn& fn) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(std::max(n, 0)));
  for (int t = 0; t < n; ++t) pool.emplace_back([&fn, t] { fn(t); });
  for (auto& th : pool) th.join();
}

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
  const int ranges = static_cast<int>((n + per - 1) / per);
  parallel_items(ranges, [&fn, n, per](int t) {
    const int64_t lo = t * per;
    fn(lo, std::min(n, lo + per));
  });
}

}  // namespace engram
