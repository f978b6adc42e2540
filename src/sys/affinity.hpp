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
