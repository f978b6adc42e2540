// Placement policies (see placement.hpp): parse, resolve against the machine, apply with mbind(2) to the
// fresh mapping, prefault with node-pinned threads, and read back what the kernel holds.
//
// Why mbind and not set_mempolicy on the leader: the policy must belong to the table, not to the
// process (staging buffers and everything else keep their own), and for tmpfs/memfd objects mbind on a
// MAP_SHARED mapping stores a shared policy on the inode that fallocate(2) and every peer's page faults
// follow (mm/shmem.c shmem_set_policy / shmem_get_pgoff_policy). hugetlbfs keeps no such shared policy
// from mbind, and its fallocate allocates under the calling thread's policy: the prefault threads
// therefore also set the table's policy as their own thread policy before they allocate.
//
// Prefault work is split in chunks handed out through an atomic counter to threads pinned to the target
// nodes' CPUs. Each chunk is populated with MADV_POPULATE_WRITE: for a memfd / tmpfs object every fault
// allocates, zeroes and inserts its page under the object's shared policy, and faults of different
// threads run in parallel. fallocate(2) of the same object would be serialised on its inode lock (about
// 1 us per 4 KiB page: 12 s for 35 GiB), so shared kinds fallocate only when asked to (the error of a
// full file system then comes from fallocate; without it from the populate, as kNoSpace, still before
// any access). hugetlbfs always fallocates: its pages follow the allocating thread's policy there, and
// huge pages make it cheap. With MADV_HUGEPAGE on a shmem mapping (and the kernel's shmem_enabled
// allowing it) a fault allocates a 2 MiB folio: 512 times fewer faults and page-cache insertions.
#include "host/placement.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "core/parallel.hpp"
#include "core/units.hpp"
#include "host/census.hpp"
#include "sys/affinity.hpp"
#include "sys/memfd.hpp"
#include "sys/numa.hpp"
#include "sys/numa_sysfs.hpp"

namespace engram::host {
namespace {

sys::MemPolicy to_mem_policy(const PlacementPolicy& p) {
  sys::MemPolicy m;
  m.nodes = p.nodes;
  switch (p.kind) {
    case PlacementKind::kNone: m.mode = sys::MemPolicyMode::kDefault; m.nodes.clear(); break;
    case PlacementKind::kLocal: m.mode = sys::MemPolicyMode::kLocal; m.nodes.clear(); break;
    case PlacementKind::kBind:
    case PlacementKind::kReplicaPerNode: m.mode = sys::MemPolicyMode::kBind; break;
    case PlacementKind::kPreferred: m.mode = sys::MemPolicyMode::kPreferred; break;
    case PlacementKind::kInterleave: m.mode = sys::MemPolicyMode::kInterleave; break;
    case PlacementKind::kWeightedInterleave: m.mode = sys::MemPolicyMode::kWeightedInterleave; break;
  }
  return m;
}

std::string mem_policy_text(const sys::MemPolicy& m) {
  std::string s = sys::mem_policy_mode_name(m.mode);
  if (!m.nodes.empty() && m.mode != sys::MemPolicyMode::kDefault && m.mode != sys::MemPolicyMode::kLocal) {
    // Same spelling as PlacementPolicy::to_string ("interleave:0,1"), so reports compare as text.
    s += ":";
    for (size_t i = 0; i < m.nodes.size(); ++i) s += (i ? "," : "") + std::to_string(m.nodes[i]);
  }
  return s;
}

// Weighted interleave takes its weights from sysfs, system-wide (Linux 6.9+). We set them when they
// differ (root only) and report it: there is no per-mapping weight in the kernel API.
Status set_interleave_weights(const PlacementPolicy& p) {
  const std::string dir = "/sys/kernel/mm/mempolicy/weighted_interleave/";
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const std::string path = dir + "node" + std::to_string(p.nodes[i]);
    auto cur = sys::read_int_file(path);
    if (!cur.is_ok())
      return Status(Code::kUnsupported, "weighted-interleave: " + path + " missing: " + cur.status().message());
    if (*cur == p.weights[i]) continue;
    FILE* f = std::fopen(path.c_str(), "w");
    bool ok = f != nullptr && std::fprintf(f, "%d\n", p.weights[i]) > 0;
    if (f != nullptr && std::fclose(f) != 0) ok = false;
    if (!ok)
      return Status(Code::kPermission, "weighted-interleave: node " + std::to_string(p.nodes[i]) + " weight is " +
                                           std::to_string(*cur) + ", requested " + std::to_string(p.weights[i]) +
                                           ", and " + path + " is not writable (system-wide setting; needs root)");
  }
  return Status::ok();
}

std::vector<int> prefault_nodes(const PlacementPolicy& p) {
  if (p.kind == PlacementKind::kNone || p.kind == PlacementKind::kLocal || p.nodes.empty()) {
    const int n = sys::current_cpu_node().node;
    return {n < 0 ? 0 : n};
  }
  return p.nodes;
}

// CPUs of `node` that the calling thread may run on; empty when none (memory-only node, cpuset).
std::vector<int> usable_cpus(int node) {
  auto cpus = sys::node_cpus(node);
  auto allowed = sys::thread_affinity();
  if (!cpus.is_ok() || !allowed.is_ok()) return {};
  std::vector<int> out;
  std::set_intersection(cpus->begin(), cpus->end(), allowed->begin(), allowed->end(), std::back_inserter(out));
  return out;
}

}  // namespace

Result<PlacementPolicy> resolve_placement(const PlacementPolicy& policy, std::vector<int> memory_nodes,
                                          std::vector<int> allowed) {
  if (memory_nodes.empty()) memory_nodes = sys::memory_nodes();
  if (allowed.empty()) {
    auto a = sys::mems_allowed();
    allowed = a.is_ok() ? *a : memory_nodes;
  }
  PlacementPolicy r = policy;
  const std::string text = policy.to_string();
  if (r.invert_nodes || r.relative_nodes) {  // numactl's !LIST / +LIST: over the allowed nodes with memory
    std::vector<int> usable;
    std::set_intersection(memory_nodes.begin(), memory_nodes.end(), allowed.begin(), allowed.end(),
                          std::back_inserter(usable));
    const std::string where = " (nodes with memory in Mems_allowed: " + sys::format_int_list(usable) + ")";
    if (r.relative_nodes) {
      for (int& n : r.nodes) {
        if (n >= static_cast<int>(usable.size()))
          return Status(Code::kInvalidArgument, "placement " + text + ": relative node +" + std::to_string(n) +
                                                    " is past the last of the " + std::to_string(usable.size()) +
                                                    " nodes this process may use" + where);
        n = usable[static_cast<size_t>(n)];
      }
      r.relative_nodes = false;
    }
    if (r.invert_nodes) {
      for (int n : r.nodes)  // a typo must not turn "all but 3" into "all"
        if (!std::binary_search(memory_nodes.begin(), memory_nodes.end(), n))
          return Status(Code::kInvalidArgument, "placement " + text + ": node " + std::to_string(n) +
                                                    " does not exist or has no memory (nodes with memory: " +
                                                    sys::format_int_list(memory_nodes) + ")");
      std::vector<int> rest;
      std::set_difference(usable.begin(), usable.end(), r.nodes.begin(), r.nodes.end(), std::back_inserter(rest));
      if (rest.empty())
        return Status(Code::kInvalidArgument, "placement " + text + ": no node is left" + where);
      r.nodes = std::move(rest);
      r.invert_nodes = false;
    }
    if (r.kind == PlacementKind::kPreferred && r.nodes.size() != 1)
      return Status(Code::kInvalidArgument, "placement " + text + ": preferred takes one node, this leaves " +
                                                sys::format_int_list(r.nodes) + where);
    return r;
  }
  if (r.all_nodes) {
    r.nodes.clear();
    std::set_intersection(memory_nodes.begin(), memory_nodes.end(), allowed.begin(), allowed.end(),
                          std::back_inserter(r.nodes));
    r.all_nodes = false;
    if (r.nodes.empty())
      return Status(Code::kInvalidArgument, "placement " + text + ": no node with memory is in Mems_allowed=" +
                                                sys::format_int_list(allowed));
    return r;
  }
  for (int n : r.nodes) {
    if (!std::binary_search(memory_nodes.begin(), memory_nodes.end(), n))
      return Status(Code::kInvalidArgument, "placement " + text + ": node " + std::to_string(n) +
                                                " does not exist or has no memory (nodes with memory: " +
                                                sys::format_int_list(memory_nodes) + ")");
    if (!std::binary_search(allowed.begin(), allowed.end(), n))
      return Status(Code::kInvalidArgument, "placement " + text + ": node " + std::to_string(n) +
                                                " is outside this process's Mems_allowed=" +
                                                sys::format_int_list(allowed) + " (cpuset)",
                    22 /* EINVAL, what mbind would say */);
  }
  return r;
}

nlohmann::json PlacementReport::to_json() const {
  nlohmann::json j;
  j["requested"] = requested;
  j["resolved"] = resolved;
  j["obtained"] = obtained;
  j["status"] = code_name(status.code());
  if (!status.is_ok()) j["reason"] = status.message();
  j["mems_allowed"] = sys::format_int_list(mems_allowed);
  j["prefault"] = prefault;
  j["prefault_seconds"] = prefault_seconds;
  j["huge_advice"] = huge_advice.empty() ? nlohmann::json(nullptr) : nlohmann::json(huge_advice);
  j["huge_page_bytes"] = huge_page_bytes < 0 ? nlohmann::json(nullptr) : nlohmann::json(huge_page_bytes);
  if (replica_node >= 0) j["replica_node"] = replica_node;
  return j;
}

std::string PlacementReport::to_string() const {
  std::string s = "requested " + requested;
  if (resolved != requested && !resolved.empty()) s += " (" + resolved + ")";
  s += ", obtained " + obtained;
  s += status.is_ok() ? " (ok)" : " (" + status.to_string() + ")";
  if (!prefault.empty()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " in %.3f s", prefault_seconds);
    s += ", prefault " + prefault + buf;
  }
  if (huge_page_bytes >= 0) s += ", " + format_bytes(huge_page_bytes) + " in huge pages";
  if (!huge_advice.empty()) s += " (" + huge_advice + ")";
  return s;
}

Status apply_placement(void* addr, uint64_t len_bytes, const PlacementPolicy& resolved, PlacementReport* report) {
  PlacementReport local;
  PlacementReport& r = report ? *report : local;
  if (r.requested.empty()) r.requested = resolved.to_string();
  r.resolved = resolved.to_string();
  auto allowed = sys::mems_allowed();
  if (allowed.is_ok()) r.mems_allowed = *allowed;
  auto read_back = [&] {
    auto got = sys::get_addr_mempolicy(addr);
    r.obtained = got.is_ok() ? mem_policy_text(*got) : "unknown (" + got.status().message() + ")";
    return got;
  };
  if (resolved.kind == PlacementKind::kReplicaPerNode || resolved.all_nodes || resolved.invert_nodes ||
      resolved.relative_nodes) {
    r.status = Status(Code::kInternal, "apply_placement: " + r.resolved + " must be resolved first");
    return r.status;
  }
  if (resolved.kind == PlacementKind::kNone) {
    (void)read_back();
    r.status = Status::ok();
    return r.status;
  }
  if (resolved.kind == PlacementKind::kWeightedInterleave) {
    const sys::KernelVersion kv = sys::kernel_version();
    if (!kv.at_least(6, 9)) {
      (void)read_back();
      r.status = Status(Code::kUnsupported, "placement " + r.requested + ": weighted interleave needs Linux >= 6.9, "
                                                "this kernel is " + kv.release);
      return r.status;
    }
    Status w = set_interleave_weights(resolved);
    if (!w.is_ok()) {
      (void)read_back();
      r.status = w.with_context("placement " + r.requested);
      return r.status;
    }
  }
  const sys::MemPolicy want = to_mem_policy(resolved);
  const bool strict = resolved.kind == PlacementKind::kBind || resolved.kind == PlacementKind::kPreferred;
  Status s = sys::mbind_range(addr, len_bytes, want, strict);
  if (s.code() == Code::kIo) {
    // MPOL_MF_STRICT found pages already placed elsewhere. Kernels differ on whether the policy was
    // still set (6.1 returns before setting it), so set it again without STRICT: pages that exist keep
    // their node, every later page follows the policy, and the caller hears about it.
    Status again = sys::mbind_range(addr, len_bytes, want, false);
    if (!again.is_ok()) s = again;
  }
  auto got = read_back();
  if (!s.is_ok()) {
    if (s.code() == Code::kIo)
      r.status = Status(Code::kIo, "placement " + r.requested + ": policy set, but pages that existed before it "
                                       "keep their node (a census shows where): " + s.message(), s.sys_error());
    else
      r.status = Status(s.code(), "placement " + r.requested + ": requested " + r.resolved + ", obtained " +
                                      r.obtained + ": " + s.message(), s.sys_error());
    return r.status;
  }
  if (got.is_ok() && (got->mode != want.mode || (want.mode != sys::MemPolicyMode::kLocal && got->nodes != want.nodes))) {
    r.status = Status(Code::kInternal, "placement " + r.requested + ": mbind succeeded but the kernel reports " +
                                           r.obtained + " for the range");
    return r.status;
  }
  r.status = Status::ok();
  return r.status;
}

Status prefault_backing(const Backing& backing, const PlacementPolicy& resolved, const PlacementOptions& options,
                        PlacementReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> nodes = prefault_nodes(resolved);
  std::vector<std::vector<int>> node_cpu_sets;
  size_t cpu_total = 0;
  for (int n : nodes) {
    node_cpu_sets.push_back(usable_cpus(n));
    cpu_total += node_cpu_sets.back().size();
  }
  int threads = options.prefault_threads;
  if (threads <= 0) threads = static_cast<int>(std::clamp<size_t>(cpu_total, 1, kMaxPrefaultThreads));
  const bool anon = backing.kind() == BackingKind::kAnonThp;
  const bool use_fallocate = !anon && (options.prefault_fallocate || backing.kind() == BackingKind::kHugetlb);
  const uint64_t total = backing.mapped_bytes();
  const uint64_t unit = std::max<uint64_t>(backing.page_bytes(), 2u << 20);
  uint64_t chunk = (total / static_cast<uint64_t>(threads * 4) + unit - 1) / unit * unit;
  chunk = std::clamp<uint64_t>(chunk, unit, uint64_t{256} << 20);
  const uint64_t n_chunks = (total + chunk - 1) / chunk;
  if (static_cast<uint64_t>(threads) > n_chunks) threads = static_cast<int>(n_chunks);

  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first_error;
  const std::string alloc = use_fallocate ? "fallocate + " : "";
  std::string method = anon ? "touch (MADV_POPULATE_WRITE)" : alloc + "MADV_POPULATE_WRITE";
  const sys::MemPolicy thread_policy = to_mem_policy(resolved);
  const bool set_thread_policy = resolved.kind != PlacementKind::kNone;

  auto worker = [&](int t) {
    const size_t ni = static_cast<size_t>(t) % nodes.size();
    std::vector<int> cpus = node_cpu_sets[ni];
    std::unique_ptr<sys::ScopedAffinity> pin;
    if (!cpus.empty()) pin = std::make_unique<sys::ScopedAffinity>(cpus);
    // A thread policy on this short-lived thread only: hugetlbfs fallocate and anon faults follow it
    // even where the mapping's policy would not reach (see the file comment).
    if (set_thread_policy) (void)sys::set_thread_mempolicy(thread_policy);
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      const uint64_t i = next.fetch_add(1);
      if (i >= n_chunks) return;
      const uint64_t off = i * chunk, len = std::min(chunk, total - off);
      // The populate maps every page here (for the census) and zeroes it on this node-bound thread; tmpfs
      // leaves fallocated pages unzeroed and !uptodate until first access (mincore and SEEK_DATA call
      // them holes), so a fallocated chunk is populated too.
      Status s = use_fallocate ? backing.fallocate_range(off, len) : Status::ok();
      if (s.is_ok()) {
        s = sys::madvise_range(backing.data() + off, len, sys::MemAdvice::kPopulateWrite);
        if (s.code() == Code::kUnsupported) {
          // Kernels before 5.14: write one byte per page (a write fault allocates it; a full tmpfs
          // raises SIGBUS here, which only fallocate could have turned into an error first).
          volatile uint8_t* p = backing.data() + off;
          for (uint64_t b = 0; b < len; b += 4096) p[b] = 0;
          s = Status::ok();
          std::lock_guard<std::mutex> lock(mu);
          method = anon ? "touch (one write per 4 KiB page)" : alloc + "touch (one write per 4 KiB page)";
        }
      }
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.is_ok()) first_error = s;
        failed.store(true);
        return;
      }
    }
  };
  parallel_items(threads, worker);  // new threads even for one: the worker pins itself and sets a thread policy

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report) {
    report->prefault = method + ", " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") +
                       " on node" + (nodes.size() == 1 ? " " : "s ") + sys::format_int_list(nodes) +
                       (cpu_total == 0 ? " (unpinned: no usable CPU there)" : "") + ", " +
                       format_bytes(static_cast<int64_t>(total));
    report->prefault_seconds = secs;
    if (first_error.is_ok()) {
      if (backing.page_bytes() > 4096) {
        report->huge_page_bytes = static_cast<int64_t>(total);
      } else {
        auto huge = huge_mapped_bytes(backing.data(), total);
        report->huge_page_bytes = huge.is_ok() ? *huge : -1;
      }
    }
  }
  if (!first_error.is_ok())
    return first_error.with_context("prefault of " + backing.identity().to_string() + " (" +
                                    format_bytes(static_cast<int64_t>(total)) + ")");
  return Status::ok();
}

std::string advise_shmem_huge_pages(const Backing& backing) {
  if (backing.kind() != BackingKind::kMemfd && backing.kind() != BackingKind::kShmFile) return "";
  // The setting in force is the bracketed word ("always within_size advise [never] deny force"). A named file
  // on a tmpfs mount follows that mount's huge= option instead; the global setting is what memfds follow.
  std::string setting = "unknown";
  if (auto t = sys::read_text_file("/sys/kernel/mm/transparent_hugepage/shmem_enabled"); t.is_ok()) {
    const size_t a = t->find('['), b = t->find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) setting = t->substr(a + 1, b - a - 1);
  } else {
    setting = "n/a: no transparent_hugepage/shmem_enabled";
  }
  const std::string knob = backing.kind() == BackingKind::kMemfd ? "shmem_enabled: " : "the mount's huge=; shmem_enabled: ";
  Status s = sys::madvise_range(backing.data(), backing.mapped_bytes(), sys::MemAdvice::kHugePage);
  if (!s.is_ok()) return "MADV_HUGEPAGE refused: " + s.message() + " (" + knob + setting + ")";
  return "MADV_HUGEPAGE (" + knob + setting + ")";
}

Result<int64_t> huge_mapped_bytes(const void* addr, uint64_t len_bytes) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string text, sys::read_text_file("/proc/self/smaps"));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + len_bytes;
  int64_t sum = 0;
  for (const auto& [start, fields] : parse_smaps(text)) {
    if (start < lo || start >= hi) continue;
    for (const char* key : {"AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb", "Private_Hugetlb"})
      if (auto it = fields.find(key); it != fields.end()) sum += it->second;
  }
  return sum;
}

Result<PlacementPlan> plan_placed_backings(const BackingOptions& backing, const PlacementPolicy& policy,
                                           const PlacementOptions& options) {
  PlacementPlan plan;
  plan.requested = policy.to_string();
  plan.resolved = policy;
  auto res = resolve_placement(policy);
  if (res.is_ok()) {
    plan.resolved = *res;
  } else if (options.allow_fallback) {
    plan.refusal = res.status();
    plan.resolved = PlacementPolicy{};
  } else {
    return res.status();
  }
  const PlacementPolicy& resolved = plan.resolved;
  if (resolved.kind == PlacementKind::kReplicaPerNode) {
    for (int n : resolved.nodes) {
      BackingOptions o = backing;
      o.name = backing.name + ".node" + std::to_string(n);
      o.target_nodes = {n};
      PlacementPolicy p;
      p.kind = PlacementKind::kBind;
      p.nodes = {n};
      plan.backings.push_back({o, p});
    }
  } else {
    BackingOptions o = backing;
    if (resolved.kind == PlacementKind::kBind || resolved.kind == PlacementKind::kInterleave ||
        resolved.kind == PlacementKind::kWeightedInterleave)
      o.target_nodes = resolved.nodes;
    plan.backings.push_back({o, resolved});
  }
  return plan;
}

Status check_backings_fit(const std::vector<std::pair<BackingOptions, PlacementPolicy>>& requests,
                          const PlacementOptions& options) {
  // Backings that draw on the same room: same kind, same tmpfs directory or hugepage size, same
  // target nodes. Each group is checked once, as if it were one backing of the summed size.
  struct Group {
    BackingOptions sum;
    int count = 0;
  };
  std::vector<Group> groups;
  for (const auto& [backing, policy] : requests) {
    ENGRAM_ASSIGN_OR_RETURN(PlacementPlan plan, plan_placed_backings(backing, policy, options));
    for (const BackingPlan& bp : plan.backings) {
      const BackingOptions& o = bp.backing;
      auto same = [&](const Group& g) {
        return g.sum.kind == o.kind && g.sum.target_nodes == o.target_nodes && g.sum.check_memory == o.check_memory &&
               (o.kind != BackingKind::kShmFile || g.sum.shm_dir == o.shm_dir) &&
               (o.kind != BackingKind::kHugetlb || g.sum.huge_page_bytes == o.huge_page_bytes);
      };
      auto it = std::find_if(groups.begin(), groups.end(), same);
      if (it == groups.end()) {
        Group g;
        g.sum = o;
        g.sum.size_bytes = 0;
        g.sum.map_at = nullptr;
        g.sum.on_named_created = nullptr;
        groups.push_back(std::move(g));
        it = groups.end() - 1;
      }
      // Whole pages per backing: that is what each one takes.
      const uint64_t page = o.kind == BackingKind::kHugetlb ? o.huge_page_bytes : 4096;
      it->sum.size_bytes += (o.size_bytes + page - 1) / page * page;
      ++it->count;
    }
  }
  for (const Group& g : groups) {
    Status s = check_backing_fits(g.sum);
    if (!s.is_ok() && g.count > 1)
      return s.with_context("the whole table (" + std::to_string(g.count) + " backings of " +
                            format_bytes(static_cast<int64_t>(g.sum.size_bytes)) +
                            " in all, checked before the first is made)");
    ENGRAM_RETURN_IF_ERROR(s);
  }
  return Status::ok();
}

Result<std::vector<PlacedBacking>> create_placed_backings(const BackingOptions& backing, const PlacementPolicy& policy,
                                                          const PlacementOptions& options) {
  ENGRAM_ASSIGN_OR_RETURN(PlacementPlan plan, plan_placed_backings(backing, policy, options));
  const bool replicated = plan.resolved.kind == PlacementKind::kReplicaPerNode;
  std::vector<PlacedBacking> out;
  for (auto& [o, p] : plan.backings) {
    PlacedBacking pb;
    pb.report.requested = plan.requested;
    pb.policy = p;
    if (replicated) pb.report.replica_node = p.nodes.front();
    ENGRAM_ASSIGN_OR_RETURN(pb.backing, Backing::create(o));
    Status s = apply_placement(pb.backing.data(), pb.backing.mapped_bytes(), p, &pb.report);
    if (!s.is_ok()) {
      if (!options.allow_fallback) return s.with_context(pb.backing.identity().to_string());
      // Go on under the default policy; the report keeps the refusal for the caller to print.
      pb.policy = PlacementPolicy{};
    }
    if (options.shmem_huge_pages) pb.report.huge_advice = advise_shmem_huge_pages(pb.backing);
    if (!plan.refusal.is_ok()) {
      pb.report.status = plan.refusal;
      pb.report.resolved = "none (refused)";
    }
    if (options.prefault) ENGRAM_RETURN_IF_ERROR(prefault_backing(pb.backing, pb.policy, options, &pb.report));
    out.push_back(std::move(pb));
  }
  return out;
}

int choose_replica(const std::vector<int>& replica_nodes, int gpu_node, int cpu_node) {
  if (replica_nodes.empty()) return -1;
  for (int want : {gpu_node, cpu_node}) {
    if (want < 0) continue;
    for (size_t i = 0; i < replica_nodes.size(); ++i)
      if (replica_nodes[i] == want) return static_cast<int>(i);
  }
  return 0;
}

}  // namespace engram::host
