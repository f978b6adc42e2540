// Chunked parallel transfers (see transfer.hpp). Items are handed out through one atomic counter, so
// faster workers take more items and the order of completion does not matter to the result; the first
// error stops new items from starting and is the one returned.
#include "host/transfer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "core/units.hpp"
#include "sys/affinity.hpp"

namespace engram::host {

int resolve_threads(int requested, size_t items, int cap) {
  // The CPUs this process may run on (its affinity mask), as sys::threads_or_auto counts them, capped.
  const int t = requested > 0 ? requested : std::min(std::max(cap, 1), sys::usable_cpu_count());
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(t), items)));
}

Status run_chunked(const std::vector<int64_t>& item_bytes, const ChunkedRunOptions& options,
                   const std::function<Status(size_t, uint8_t*)>& work) {
  using Clock = std::chrono::steady_clock;
  const size_t n_items = item_bytes.size();
  int64_t total = 0;
  for (int64_t b : item_bytes) total += b;
  const auto start = Clock::now();
  auto report = [&](int64_t done_bytes, bool final) {
    if (options.on_progress)
      options.on_progress(TransferProgress{options.phase, done_bytes, total,
                                           std::chrono::duration<double>(Clock::now() - start).count(), final});
  };

  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  Status first_error;
  auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lk(mu);
    if (first_error.is_ok()) first_error = std::move(s);
    failed = true;
  };
  auto worker = [&] {
    std::unique_ptr<uint8_t[]> scratch;
    if (!options.cpus.empty()) {
      if (Status s = sys::set_thread_affinity(options.cpus); !s.is_ok()) fail(s.with_context("pinning a transfer thread"));
    }
    if (options.scratch_bytes > 0 && !failed.load()) {
      scratch.reset(new (std::nothrow) uint8_t[options.scratch_bytes]);
      if (!scratch)
        fail(Status(Code::kOutOfMemory,
                    "transfer chunk buffer of " + format_bytes(static_cast<int64_t>(options.scratch_bytes))));
    }
    while (!failed.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= n_items) break;
      Status s = work(i, scratch.get());
      if (!s.is_ok()) {
        fail(std::move(s));
        break;
      }
      done.fetch_add(item_bytes[i], std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lk(mu);
    --running;
    cv.notify_all();
  };

  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  try {
    for (int t = 0; t < threads; ++t) {
      {
        std::lock_guard<std::mutex> lk(mu);
        ++running;
      }
      try {
        pool.emplace_back(worker);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        --running;
        throw;
      }
    }
  } catch (const std::exception& e) {
    fail(Status(Code::kOutOfMemory, std::string("starting transfer threads: ") + e.what()));
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    while (running > 0) {
      cv.wait_for(lk, std::chrono::milliseconds(100));
      if (running == 0) break;
      lk.unlock();
      report(done.load(), false);
      lk.lock();
    }
  }
  for (auto& th : pool) th.join();
  if (first_error.is_ok()) report(done.load(), true);
  return first_error;
}

}  // namespace engram::host
