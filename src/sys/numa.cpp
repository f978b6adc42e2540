// NUMA policy syscalls (see numa.hpp). Raw syscall(2) calls: libnuma's numa_* wrappers hide errno
// behind warnings printed to stderr and silently trim node masks, which is exactly what we must
// report. libnuma is still used for the node-of-CPU and node-size queries, where it only reads sysfs.
#include "numa.hpp"

#include <fcntl.h>
#include <numa.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

#include "core/units.hpp"
#include "fault.hpp"
#include "memory.hpp"
#include "memfd.hpp"
#include "numa_sysfs.hpp"

namespace engram::sys {
namespace {

constexpr int kLongBits = 8 * sizeof(unsigned long);
// Twice the bits we declare: the kernel reads BITS_TO_LONGS(maxnode - 1) longs, never more.
using MaskWords = std::array<unsigned long, 2 * kMaxNodes / kLongBits>;

Status to_mask(const std::vector<int>& nodes, MaskWords* mask) {
  mask->fill(0);
  for (int n : nodes) {
    if (n < 0 || n >= kMaxNodes) return Status(Code::kInvalidArgument, "node " + std::to_string(n) + " out of range");
    (*mask)[static_cast<size_t>(n / kLongBits)] |= 1UL << (n % kLongBits);
  }
  return Status::ok();
}

std::vector<int> from_mask(const MaskWords& mask) {
  std::vector<int> nodes;
  for (int n = 0; n < kMaxNodes; ++n)
    if (mask[static_cast<size_t>(n / kLongBits)] & (1UL << (n % kLongBits))) nodes.push_back(n);
  return nodes;
}

std::string describe(const MemPolicy& p) {
  std::string s = mem_policy_mode_name(p.mode);
  if (!p.nodes.empty()) s += ":" + format_int_list(p.nodes);
  return s;
}

// Appends "; Mems_allowed=<list>" to an EINVAL/EPERM message: the first thing anyone asks.
std::string allowed_suffix() {
  auto a = mems_allowed();
  return a.is_ok() ? "; Mems_allowed=" + format_int_list(*a) : "";
}

Status policy_error(int err, const std::string& what) {
  if (err == EINVAL || err == EPERM || err == EACCES) {
    Status s = errno_status(err, what);
    return Status(s.code(), s.message() + allowed_suffix(), err);
  }
  if (err == EIO)
    return Status(Code::kIo, what + ": EIO (MPOL_MF_STRICT: pages of the range already lie outside the policy)", err);
  return errno_status(err, what);
}

}  // namespace

const char* mem_policy_mode_name(MemPolicyMode m) noexcept {
  switch (m) {
    case MemPolicyMode::kDefault: return "default";
    case MemPolicyMode::kPreferred: return "preferred";
    case MemPolicyMode::kBind: return "bind";
    case MemPolicyMode::kInterleave: return "interleave";
    case MemPolicyMode::kLocal: return "local";
    case MemPolicyMode::kPreferredMany: return "preferred-many";
    case MemPolicyMode::kWeightedInterleave: return "weighted-interleave";
  }
  return "unknown";
}

Status mbind_range(void* addr, size_t len_bytes, const MemPolicy& policy, bool strict) {
  MaskWords mask;
  ENGRAM_RETURN_IF_ERROR(to_mask(policy.nodes, &mask));
  const size_t page = page_size_bytes();
  const size_t len = (len_bytes + page - 1) / page * page;
  const unsigned flags = strict ? 1u /* MPOL_MF_STRICT */ : 0u;
  const std::string what = "mbind(len=" + format_bytes(len) + ", " + describe(policy) + (strict ? ", MPOL_MF_STRICT" : "") + ")";
  int err = fault_errno(kFaultMbind);
  if (err == 0) {
    const bool no_mask = policy.nodes.empty();
    const long r = ::syscall(SYS_mbind, addr, len, static_cast<int>(policy.mode), no_mask ? nullptr : mask.data(),
                             no_mask ? 0UL : static_cast<unsigned long>(kMaxNodes + 1), flags);
    if (r != 0) err = errno;
  }
  if (err != 0) return policy_error(err, what);
  return Status::ok();
}

Status set_thread_mempolicy(const MemPolicy& policy) {
  MaskWords mask;
  ENGRAM_RETURN_IF_ERROR(to_mask(policy.nodes, &mask));
  const std::string what = "set_mempolicy(" + describe(policy) + ")";
  int err = fault_errno(kFaultSetMempolicy);
  if (err == 0) {
    const bool no_mask = policy.nodes.empty();
    const long r = ::syscall(SYS_set_mempolicy, static_cast<int>(policy.mode), no_mask ? nullptr : mask.data(),
                             no_mask ? 0UL : static_cast<unsigned long>(kMaxNodes + 1));
    if (r != 0) err = errno;
  }
  if (err != 0) return policy_error(err, what);
  return Status::ok();
}

namespace {
Result<MemPolicy> get_policy(const void* addr, unsigned long flags, const std::string& what) {
  MaskWords mask;
  mask.fill(0);
  int mode = 0;
  int err = fault_errno(kFaultGetMempolicy);
  if (err == 0) {
    const long r = ::syscall(SYS_get_mempolicy, &mode, mask.data(), static_cast<unsigned long>(kMaxNodes), addr, flags);
    if (r != 0) err = errno;
  }
  if (err != 0) return errno_status(err, what);
  MemPolicy p;
  // The kernel may or in MPOL_F_STATIC_NODES / RELATIVE_NODES / NUMA_BALANCING flags (bits 13..15).
  p.mode = static_cast<MemPolicyMode>(mode & 0xff);
  p.nodes = from_mask(mask);
  return p;
}
}  // namespace

Result<MemPolicy> get_thread_mempolicy() { return get_policy(nullptr, 0, "get_mempolicy()"); }

Result<MemPolicy> get_addr_mempolicy(const void* addr) {
  return get_policy(addr, 2UL /* MPOL_F_ADDR */, "get_mempolicy(MPOL_F_ADDR)");
}

Result<std::vector<int>> mems_allowed() {
  auto p = get_policy(nullptr, 4UL /* MPOL_F_MEMS_ALLOWED */, "get_mempolicy(MPOL_F_MEMS_ALLOWED)");
  if (!p.is_ok()) return p.status();
  return p->nodes;
}

Status move_pages_query(int pid, const std::vector<const void*>& pages, std::vector<int>* status) {
  status->assign(pages.size(), 0);
  constexpr size_t kChunk = 16384;
  for (size_t off = 0; off < pages.size(); off += kChunk) {
    const size_t n = std::min(kChunk, pages.size() - off);
    int err = fault_errno(kFaultMovePages);
    if (err == 0) {
      const long r = ::syscall(SYS_move_pages, pid, static_cast<unsigned long>(n),
                               const_cast<const void**>(pages.data() + off), nullptr, status->data() + off, 0);
      if (r < 0) err = errno;
    }
    if (err != 0)
      return errno_status(err, "move_pages(pid=" + std::to_string(pid) + ", n=" + std::to_string(n) + ", nodes=NULL)");
  }
  return Status::ok();
}

Result<std::vector<uint64_t>> pagemap_entries(const void* addr, size_t n_pages, size_t stride_pages) {
  if (stride_pages == 0) stride_pages = 1;
  const size_t n_out = (n_pages + stride_pages - 1) / stride_pages;
  std::vector<uint64_t> out(n_out);
  if (n_out == 0) return out;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return errno_status(err, "open(/proc/self/pagemap)");
  }
  const off_t base = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / page_size_bytes() * 8);
  // Reads `len` bytes at `off` into `dst`, retrying short reads and EINTR.
  auto read_at = [&](void* dst, size_t len, off_t off) -> int {
    size_t got = 0;
    while (got < len) {
      const ssize_t r = ::pread(fd, static_cast<char*>(dst) + got, len - got, off + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return r < 0 ? errno : EIO;
      got += static_cast<size_t>(r);
    }
    return 0;
  };
  int err = 0;
  if (stride_pages == 1) {
    err = read_at(out.data(), n_out * 8, base);
  } else {
    for (size_t i = 0; i < n_out && err == 0; ++i)
      err = read_at(&out[i], 8, base + static_cast<off_t>(i * stride_pages * 8));
  }
  ::close(fd);
  if (err != 0) return errno_status(err, "pread(/proc/self/pagemap, pages=" + std::to_string(n_pages) + ")");
  return out;
}

Result<bool> pfn_is_zero_page(uint64_t pfn) {
  static int fd = ::open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);  // kept open: one per process
  if (fd < 0) return Status(Code::kPermission, "open(/proc/kpageflags): not readable here");
  uint64_t flags = 0;
  if (::pread(fd, &flags, sizeof flags, static_cast<off_t>(pfn * 8)) != static_cast<ssize_t>(sizeof flags)) {
    const int err = errno;
    return errno_status(err, "pread(/proc/kpageflags, pfn=" + std::to_string(pfn) + ")");
  }
  return ((flags >> 24) & 1) != 0;
}

std::vector<int> online_nodes() {
  auto t = read_text_file("/sys/devices/system/node/online");
  if (t.is_ok()) {
    auto l = parse_int_list(*t);
    if (l.is_ok() && !l->empty()) return *l;
  }
  return {0};
}

std::vector<int> memory_nodes() {
  auto t = read_text_file("/sys/devices/system/node/has_memory");
  if (t.is_ok()) {
    auto l = parse_int_list(*t);
    if (l.is_ok() && !l->empty()) return *l;
  }
  return online_nodes();
}

Result<std::vector<int>> node_cpus(int node) {
  ENGRAM_ASSIGN_OR_RETURN(std::string t,
                          read_text_file("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
  return parse_int_list(t);
}

Result<NodeMemory> node_memory(int node) {
  // node<N>/meminfo: "Node 0 MemTotal:  24000000 kB" / "Node 0 MemFree: ..." (read directly so that
  // a missing node is an error, not libnuma's -1 with a warning on stderr).
  ENGRAM_ASSIGN_OR_RETURN(std::string t,
                          read_text_file("/sys/devices/system/node/node" + std::to_string(node) + "/meminfo"));
  NodeMemory m;
  size_t pos = 0;
  while (pos < t.size()) {
    size_t nl = t.find('\n', pos);
    if (nl == std::string::npos) nl = t.size();
    const std::string line = t.substr(pos, nl - pos);
    pos = nl + 1;
    long long kb = 0;
    char key[64] = {0};
    int nn = 0;
    if (std::sscanf(line.c_str(), "Node %d %63[^:]: %lld", &nn, key, &kb) == 3) {
      if (std::string(key) == "MemTotal") m.total_bytes = kb * 1024;
      if (std::string(key) == "MemFree") m.free_bytes = kb * 1024;
    }
  }
  return m;
}

KernelVersion kernel_version() {
  KernelVersion v;
  struct utsname u {};
  if (::uname(&u) == 0) {
    v.release = u.release;
    std::sscanf(u.release, "%d.%d.%d", &v.major, &v.minor, &v.patch);
  }
  return v;
}

}  // namespace engram::sys
