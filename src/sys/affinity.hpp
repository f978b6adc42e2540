// CPU affinity of the calling thread: sched_setaffinity / sched_getaffinity / getcpu.
//
// Used to run prefault and load threads on the CPUs of the node that will hold the pages they
// touch, and to report a rank's CPU mask. Same contract as the rest of src/sys (Status, no errno).
#pragma once

#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

// sched_setaffinity(0, cpus) for the calling thread. kInvalidArgument (EINVAL) when none of the
// CPUs is allowed by the cpuset; kPermission under a seccomp filter.
Status set_thread_affinity(const std::vector<int>& cpus);
// sched_getaffinity(0) of the calling thread: sorted CPU ids.
Result<std::vector<int>> thread_affinity();
// CPUs the calling thread may run on (its sched_getaffinity mask, as taskset, cpusets and cgroups set it), at
// least 1; the online CPU count when the mask cannot be read.
int usable_cpu_count();
// What a thread count of 0 means everywhere (every command's --threads, every pool): one thread per CPU the
// calling thread may run on, shared out over `sharers` processes of one host (the ranks of `run --ranks`), at
// least 1. `requested` > 0 is returned as is.
int threads_or_auto(int requested, int sharers = 1);

// CPU and node the calling thread runs on now (getcpu(2)); node -1 when unknown.
struct CpuNode {
  int cpu = -1;
  int node = -1;
};
CpuNode current_cpu_node();

// Pins the calling thread to `cpus` for the lifetime of the object and restores the previous mask
// afterwards. `status()` tells whether pinning worked (the thread runs unpinned when it did not).
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int>& cpus);
  ~ScopedAffinity();
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;
  const Status& status() const { return status_; }

 private:
  std::vector<int> saved_;
  Status status_;
};

}  // namespace engram::sys
