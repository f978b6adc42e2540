// Placement policies: where a table's pages go, decided BEFORE the first page exists, then checked.
//
// Text forms (parsed by engram/options.hpp's parse_placement at the edge: CLI `--placement`, Python):
//   none                          no policy: the process's own policy decides at first touch
//   local                         MPOL_LOCAL: the node of the CPU that first touches (the prefault threads)
//   bind:N[,M...]                 MPOL_BIND: only these nodes; allocation fails rather than spill
//   preferred:N                   MPOL_PREFERRED: node N first, any other node when N is full
//   interleave:N,M,...|all        MPOL_INTERLEAVE: page i of the object on nodes[i mod n]
//   weighted-interleave:N=w,...   MPOL_WEIGHTED_INTERLEAVE (Linux >= 6.9), weights in
//                                 /sys/kernel/mm/mempolicy/weighted_interleave/node<N> (system-wide)
//   replica-per-node[:N,M...]     one backing per node (default: every node with memory), each bound
//                                 to its node; a rank reads the replica of its GPU's node (~n x capacity)
// Source: mbind(2), Documentation/admin-guide/mm/numa_memory_policy.rst; docs/placement.md.
//
// Applying: `apply_placement` runs mbind(2) on the shared mapping. For a memfd / tmpfs object the kernel
// keeps the policy on the object (shmem shared policy), so fallocate(2) and every other process that maps
// it follow it; for a private anonymous mapping the policy belongs to the mapping. Scope is the table
// only: the calling thread's and process's own policies are left as they were (prefault threads set a
// thread policy on themselves only and exit).
//
// Refusals are reported, never silent: requested and obtained policies and the reason land in a
// PlacementReport. Kernel behaviours we guard against: a node list partly outside Mems_allowed is
// silently trimmed by the kernel (we refuse with kInvalidArgument naming Mems_allowed); all nodes outside
// it gives EINVAL; a seccomp filter or a container without CAP_SYS_NICE gives EPERM (kPermission); a
// kernel older than 6.9 has no weighted interleave (kUnsupported).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/options.hpp"
#include "engram/status.hpp"
#include "host/backing.hpp"

namespace engram::host {

// The policy types and their parser are public (engram/options.hpp); host code names them here.
using engram::parse_placement;
using engram::placement_kind_name;
using engram::PlacementKind;
using engram::PlacementPolicy;

// Replaces all_nodes with the machine's nodes that have memory and are in Mems_allowed (numactl's "all"), maps
// relative_nodes ("+LIST") to those nodes by position and inverts invert_nodes ("!LIST": all of them but LIST;
// a listed node that does not exist is refused, and so is an empty result), and checks that
// every named node exists (kInvalidArgument "node 3 does not exist (nodes with memory: 0-1)") and is
// allowed (kInvalidArgument "... outside Mems_allowed=0"). `memory_nodes` / `allowed` default to the
// machine's when empty (sys::memory_nodes(), sys::mems_allowed()).
Result<PlacementPolicy> resolve_placement(const PlacementPolicy& policy, std::vector<int> memory_nodes = {},
                                          std::vector<int> allowed = {});

// What was asked for, what the kernel holds now, and why they differ.
struct PlacementReport {
  std::string requested;             // policy text as asked ("interleave:all")
  std::string resolved;              // after resolve ("interleave:0,1")
  std::string obtained = "unknown";  // read back with get_mempolicy(MPOL_F_ADDR): "interleave:0,1", "default"
  Status status;                     // OK when obtained == resolved; else the reason (kPermission, ...)
  std::vector<int> mems_allowed;
  std::string prefault;              // "MADV_POPULATE_WRITE, 16 threads on node 0, 35.0 GiB", "fallocate + ..."
  double prefault_seconds = 0.0;
  // Transparent huge pages of a memfd / shm backing: the advice given and the kernel's shmem setting
  // ("MADV_HUGEPAGE (shmem_enabled: advise)"); "" when none was asked for or the kind has its own pages.
  std::string huge_advice;
  // Bytes of the backing mapped by huge pages here once the prefault ran (/proc/self/smaps: ShmemPmdMapped,
  // AnonHugePages; a hugetlb backing: all of it); -1 when not known (not prefaulted, smaps unreadable).
  int64_t huge_page_bytes = -1;
  int replica_node = -1;             // replica-per-node: this backing's node
  nlohmann::json to_json() const;
  std::string to_string() const;     // one line: "requested bind:1, obtained bind:1 (ok), prefault ..."
};

// mbind(2) of [addr, addr+len) with the resolved policy (kind must not be kReplicaPerNode). Uses
// MPOL_MF_STRICT for bind/preferred so that pages already placed elsewhere are reported (kIo: the
// policy is set, those pages stay where they are — a census shows them). kNone does nothing.
// Fills `report` (requested/resolved/obtained/status) and returns report->status.
Status apply_placement(void* addr, uint64_t len_bytes, const PlacementPolicy& resolved, PlacementReport* report);

inline constexpr int kMaxPrefaultThreads = 64;  // bound of the automatic prefault thread count

struct PlacementOptions {
  int prefault_threads = 0;     // 0: one per usable CPU of the target nodes, at most kMaxPrefaultThreads
  bool prefault = true;         // allocate every page now (populate / touch): a first touch under the policy
  // memfd / shm: fallocate(2) each chunk before populating it. Off: the populating faults allocate the pages
  // themselves, in parallel (fallocate of one tmpfs inode is serialised on its inode lock, ~1 us per 4 KiB
  // page). Both report a full file system as kNoSpace before any access could raise SIGBUS. hugetlb backings
  // always fallocate (their pages follow the allocating thread's policy, see placement.cpp).
  bool prefault_fallocate = false;
  // memfd / shm: MADV_HUGEPAGE on the mapping before the first page exists, so that shmem backs the table
  // with 2 MiB transparent huge pages where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it
  // (advise, within_size, always): 512 times fewer faults, page-cache insertions and pins to register.
  bool shmem_huge_pages = true;
  bool allow_fallback = false;  // policy refused: go on with the default policy (report says so) vs fail
};

// Allocates every page of the backing under `resolved` with MADV_POPULATE_WRITE in chunks (touching one
// byte per page on kernels without it), by threads pinned to the CPUs of the target nodes, each of which
// also sets the policy as its own thread policy (what hugetlbfs's fallocate and anonymous faults follow).
// Shared kinds fallocate(2) each chunk first when options.prefault_fallocate (always for hugetlb).
// kNoSpace / kOutOfMemory on failure: never a SIGBUS later. Records method, threads, seconds and the
// bytes in huge pages in `report`.
Status prefault_backing(const Backing& backing, const PlacementPolicy& resolved, const PlacementOptions& options,
                        PlacementReport* report);

// memfd / shm backing: MADV_HUGEPAGE on its mapping (see PlacementOptions::shmem_huge_pages) and the text for
// PlacementReport::huge_advice. Advice only: a kernel that refuses it leaves 4 KiB pages, and the text says
// why. Other kinds: "" (their page size is their own).
std::string advise_shmem_huge_pages(const Backing& backing);

// Bytes of [addr, addr + len) mapped by huge pages in this process (/proc/self/smaps: AnonHugePages,
// ShmemPmdMapped, FilePmdMapped of the mappings starting in the range; hugetlb mappings count whole).
// kIo / kNotFound when smaps cannot be read.
Result<int64_t> huge_mapped_bytes(const void* addr, uint64_t len_bytes);

// A backing with its placement applied and its pages allocated.
struct PlacedBacking {
  Backing backing;
  PlacementPolicy policy;  // as applied to this backing (a replica's is bind:<its node>)
  PlacementReport report;
};

// The backings create_placed_backings makes for one request, before any is made: the policy resolved
// (or, with allow_fallback, refused: `refusal` says why and `resolved` is none), and one backing per
// replica node for replica-per-node (name suffixed ".node<N>", bound to N), else one, each with the
// nodes its pages go to as target_nodes. Errors: resolve_placement's (without allow_fallback).
struct BackingPlan {
  BackingOptions backing;
  PlacementPolicy policy;
};
struct PlacementPlan {
  std::string requested;    // policy text as asked
  PlacementPolicy resolved;
  Status refusal;           // allow_fallback: why the policy was refused (OK when it was not)
  std::vector<BackingPlan> backings;
};
Result<PlacementPlan> plan_placed_backings(const BackingOptions& backing, const PlacementPolicy& policy,
                                           const PlacementOptions& options = {});

// The whole-table room check, before the first backing of a table is made: every (backing, policy)
// request the caller will pass to create_placed_backings (each layer, replica and shard), planned as
// above, summed per room they draw on (kind; tmpfs directory or hugepage size; target nodes) and
// each sum checked once with check_backing_fits. kNoSpace naming the whole table's bytes and the
// room ("the whole table (2 backings of 26.0 GiB in all, ...): ... MemAvailable is 21.0 GiB"), so a
// table that cannot fit is refused before its first layer is allocated; resolve errors as above.
Status check_backings_fit(const std::vector<std::pair<BackingOptions, PlacementPolicy>>& requests,
                          const PlacementOptions& options = {});

// Leader side of protocol steps 1-2 in one call: resolve, size check (on the target nodes), create,
// map, mbind, prefault. replica-per-node gives one PlacedBacking per node (name suffixed ".node<N>"),
// others exactly one. On any failure every backing made so far is released (no file is left) and the
// Status says what was requested and what went wrong. With allow_fallback a refused policy is not a
// failure: the table is created under the default policy and each report's status carries the refusal.
Result<std::vector<PlacedBacking>> create_placed_backings(const BackingOptions& backing, const PlacementPolicy& policy,
                                                          const PlacementOptions& options = {});

// Which replica a rank reads: the one on its GPU's node when known (gpu_node >= 0), else on its CPU's
// node, else the first. Returns an index into replica_nodes (-1 when empty).
int choose_replica(const std::vector<int>& replica_nodes, int gpu_node, int cpu_node);

}  // namespace engram::host
