// NUMA memory-policy syscalls: mbind, set_mempolicy, get_mempolicy, move_pages (raw syscalls, not
// libnuma's wrappers, so that the exact errno and the MPOL_MF_STRICT semantics reach the caller),
// plus node enumeration from sysfs and the kernel version.
//
// Node sets are sorted vectors of node ids. Masks passed to the kernel are 1024 bits (MAX_NUMNODES
// of Debian's kernels, CONFIG_NODES_SHIFT=10); `maxnode` follows the kernel's off-by-one (bits + 1).
// Errors: EPERM from a seccomp filter or missing CAP_SYS_NICE -> kPermission; EINVAL for a node
// outside Mems_allowed or an offline node -> kInvalidArgument (the message says which nodes were
// allowed); EIO from MPOL_MF_STRICT (pages already elsewhere) -> kIo; ENOSYS -> kUnsupported.
// Sources: mbind(2), set_mempolicy(2), get_mempolicy(2), move_pages(2), Documentation/admin-guide/
// mm/numa_memory_policy.rst.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

// Memory policy modes, numbered as the kernel's MPOL_* (linux/mempolicy.h).
enum class MemPolicyMode : int {
  kDefault = 0,
  kPreferred = 1,
  kBind = 2,
  kInterleave = 3,
  kLocal = 4,
  kPreferredMany = 5,
  kWeightedInterleave = 6,  // Linux >= 6.9; weights from /sys/kernel/mm/mempolicy/weighted_interleave/
};
const char* mem_policy_mode_name(MemPolicyMode m) noexcept;  // "bind", "interleave", ...

struct MemPolicy {
  MemPolicyMode mode = MemPolicyMode::kDefault;
  std::vector<int> nodes;  // empty for default / local
};

inline constexpr int kMaxNodes = 1024;

// mbind(addr, len, mode, nodes, flags). `strict` adds MPOL_MF_STRICT: the call fails with EIO
// (kIo) when a page of the range already lies outside the policy (meaningful for bind/preferred;
// not for interleave). `addr` must be page aligned; len is rounded up to the page size. For a
// MAP_SHARED tmpfs/memfd mapping the policy is stored on the object (the inode's shared policy)
// and applies to every process that maps it, and to fallocate(2).
Status mbind_range(void* addr, size_t len_bytes, const MemPolicy& policy, bool strict);
// set_mempolicy(mode, nodes) for the calling thread.
Status set_thread_mempolicy(const MemPolicy& policy);
// get_mempolicy() of the calling thread.
Result<MemPolicy> get_thread_mempolicy();
// get_mempolicy(MPOL_F_ADDR) of the policy governing `addr` (the VMA's, or the shared object's).
Result<MemPolicy> get_addr_mempolicy(const void* addr);
// get_mempolicy(MPOL_F_MEMS_ALLOWED): the nodes the calling thread's cpuset allows.
Result<std::vector<int>> mems_allowed();

// move_pages(pid, n, pages, nodes=NULL, status, 0): where each page lies, without moving anything.
// status[i] >= 0 is a node id; < 0 is -errno for that page (-EFAULT: not mapped or the zero page,
// -ENOENT: not present). pid 0 is the calling process. A whole-call failure (EPERM for a process
// not ours, ESRCH, ENOSYS under seccomp) is returned as a non-OK Status.
// Sends the pages in chunks of 16384 so a huge table does not need one giant kernel buffer.
Status move_pages_query(int pid, const std::vector<const void*>& pages, std::vector<int>* status);

// /proc/self/pagemap entries of `n_pages` base pages from `addr` (page aligned), every `stride_pages`-th
// page (entry i is page i * stride): bit 63 present, bit 56 exclusively mapped, bits 0-54 the PFN (0
// unless CAP_SYS_ADMIN). Stride 1 is one bulk read; larger strides read entry by entry. See
// Documentation/admin-guide/mm/pagemap.rst.
Result<std::vector<uint64_t>> pagemap_entries(const void* addr, size_t n_pages, size_t stride_pages = 1);
// True when the page frame is the shared zero page (or the huge zero page): /proc/kpageflags bit 24
// (KPF_ZERO_PAGE). kPermission without CAP_SYS_ADMIN; kUnsupported without /proc/kpageflags.
Result<bool> pfn_is_zero_page(uint64_t pfn);

// Nodes listed in /sys/devices/system/node/online (a machine without that file: {0}).
std::vector<int> online_nodes();
// Nodes that have memory (/sys/devices/system/node/has_memory, else online_nodes()).
std::vector<int> memory_nodes();
// CPUs of a node from /sys/devices/system/node/node<N>/cpulist; kNotFound for no such node.
Result<std::vector<int>> node_cpus(int node);
// Total / free bytes of a node (libnuma numa_node_size64); kNotFound for no such node.
struct NodeMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};
Result<NodeMemory> node_memory(int node);

struct KernelVersion {
  int major = 0, minor = 0, patch = 0;
  std::string release;  // uname -r
  bool at_least(int ma, int mi) const { return major > ma || (major == ma && minor >= mi); }
};
KernelVersion kernel_version();

}  // namespace engram::sys
