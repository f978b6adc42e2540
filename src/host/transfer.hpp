// Chunked parallel transfers: the worker pool behind every table load and write of src/host.
//
// A transfer is a list of independent items (row ranges of tensors), each with its byte count. A
// few worker threads take items from an atomic counter, each with its own scratch buffer allocated
// once (so memory stays bounded by threads x scratch, never a whole tensor); the calling thread only
// waits and reports progress, so progress callbacks always run on the caller's thread. Workers may
// be pinned to a CPU set (the NUMA node that holds the pages they write), through src/sys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engram/status.hpp"

namespace engram::host {

struct TransferProgress {
  const char* phase = "";     // "load" or "write"
  int64_t done_bytes = 0;     // bytes transferred so far
  int64_t total_bytes = 0;    // bytes of the whole transfer
  double elapsed_s = 0;       // since the transfer started
  bool final = false;         // the last report of a transfer that succeeded (done == total)
};
using TransferProgressFn = std::function<void(const TransferProgress&)>;

// Worker count: `requested` when > 0, else min(`cap`, CPUs this process may run on: sys::usable_cpu_count);
// never more than `items`, at least 1.
int resolve_threads(int requested, size_t items, int cap = 8);

struct ChunkedRunOptions {
  int threads = 1;                 // workers (resolve_threads gives a sensible count)
  size_t scratch_bytes = 0;        // per-worker buffer handed to work(); 0 = none
  std::vector<int> cpus;           // pin every worker to these CPUs; empty = no pinning
  const char* phase = "";          // TransferProgress::phase
  TransferProgressFn on_progress;  // about every 100 ms and once at the end (done == total)
};

// Runs work(i, scratch) for every item i in [0, item_bytes.size()) on the workers, counting
// item_bytes[i] as done when it returns OK. Stops at the first error and returns it (later items are
// not started; running ones finish). kOutOfMemory when a scratch buffer or a thread cannot be made;
// kInvalidArgument / kPermission when pinning to `cpus` is refused (no item runs then).
Status run_chunked(const std::vector<int64_t>& item_bytes, const ChunkedRunOptions& options,
                   const std::function<Status(size_t, uint8_t*)>& work);

}  // namespace engram::host
