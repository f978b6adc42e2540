// Thread affinity wrappers (see affinity.hpp). Masks are sized dynamically (CPU_ALLOC) so machines
// with more than 1024 CPUs work.
#include "affinity.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "fault.hpp"
#include "numa_sysfs.hpp"

namespace engram::sys {
namespace {
constexpr int kMaxCpus = 8192;
}

Status set_thread_affinity(const std::vector<int>& cpus) {
  const std::string what = "sched_setaffinity(cpus=" + format_int_list(cpus) + ")";
  if (cpus.empty()) return Status(Code::kInvalidArgument, what + ": empty CPU set");
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const size_t sz = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(sz, set);
  for (int c : cpus)
    if (c >= 0 && c < kMaxCpus) CPU_SET_S(static_cast<size_t>(c), sz, set);
  int err = fault_errno(kFaultSchedSetaffinity);
  if (err == 0 && ::sched_setaffinity(0, sz, set) != 0) err = errno;
  CPU_FREE(set);
  if (err != 0) return errno_status(err, what);
  return Status::ok();
}

Result<std::vector<int>> thread_affinity() {
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const size_t sz = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(sz, set);
  if (::sched_getaffinity(0, sz, set) != 0) {
    const int err = errno;
    CPU_FREE(set);
    return errno_status(err, "sched_getaffinity");
  }
  std::vector<int> cpus;
  for (int c = 0; c < kMaxCpus; ++c)
    if (CPU_ISSET_S(static_cast<size_t>(c), sz, set)) cpus.push_back(c);
  CPU_FREE(set);
  return cpus;
}

int usable_cpu_count() {
  auto cpus = thread_affinity();
  if (cpus.is_ok() && !cpus->empty()) return static_cast<int>(cpus->size());
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int threads_or_auto(int requested, int sharers) {
  if (requested > 0) return requested;
  return std::max(1, usable_cpu_count() / std::max(1, sharers));
}

CpuNode current_cpu_node() {
  unsigned cpu = 0, node = 0;
  CpuNode r;
  if (::syscall(SYS_getcpu, &cpu, &node, nullptr) == 0) {
    r.cpu = static_cast<int>(cpu);
    r.node = static_cast<int>(node);
  }
  return r;
}

ScopedAffinity::ScopedAffinity(const std::vector<int>& cpus) {
  auto cur = thread_affinity();
  if (cur.is_ok()) saved_ = *cur;
  status_ = set_thread_affinity(cpus);
}

ScopedAffinity::~ScopedAffinity() {
  if (status_.is_ok() && !saved_.empty()) (void)set_thread_affinity(saved_);
}

}  // namespace engram::sys
