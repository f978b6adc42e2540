// Topology: the machine facts that decide and explain a placement (the minimal field check before trusting one):
// NUMA nodes with their CPUs and memory, the node distance matrix, each GPU's and NIC's NUMA node (by PCI
// bus id), THP and NUMA-balancing settings, the /dev/shm mount, hugepage pools, and this process's
// Cpus_allowed / Mems_allowed / memory policy.
//
// Sources: hwloc (nodes, CPU sets, local memory, distances, PCI devices) with sysfs as the authority for
// a device's numa_node (the kernel's own answer; -1 means the firmware did not say: reported as
// "unknown", never as node 0) and as the fallback when hwloc finds no distance matrix. Anything that
// cannot be read is recorded in `notes` and printed as "n/a" — a report never invents a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/status.hpp"

namespace engram::host {

struct HugePagePool {
  uint64_t page_bytes = 0;
  int64_t total = -1, free = -1;  // pages; -1: n/a
};

struct NumaNodeInfo {
  int id = 0;
  std::vector<int> cpus;
  int64_t total_bytes = -1, free_bytes = -1;  // -1: n/a
  std::vector<HugePagePool> hugepages;
};

struct PciDeviceInfo {
  std::string bus_id;      // "0000:17:00.0"
  std::string kind;        // "gpu" or "nic"
  std::string name;        // hwloc's name / vendor:device ids, NIC interface name ("eth0")
  int numa_node = -1;      // -1: unknown (the kernel reports -1 or nothing)
  std::string numa_source; // "sysfs", "hwloc", "unknown"
};

struct Topology {
  std::string kernel;
  int packages = -1, cores = -1, pus = -1;
  std::vector<NumaNodeInfo> nodes;
  std::vector<std::vector<int>> distances;  // [i][j] over `nodes` order; empty: n/a
  std::string distances_source;             // "hwloc", "sysfs" or "n/a"
  std::vector<PciDeviceInfo> gpus, nics;
  std::string thp_enabled, thp_defrag, thp_shmem_enabled;  // the bracketed choice ("madvise"), or "n/a"
  int numa_balancing = -1;                                  // /proc/sys/kernel/numa_balancing; -1: n/a
  std::string shm_fs, shm_options;                          // /dev/shm: "tmpfs", "rw,relatime,size=..."
  int64_t shm_total_bytes = -1, shm_free_bytes = -1;
  std::string cpus_allowed, mems_allowed;                   // lists from /proc/self/status
  std::string mempolicy;                                    // calling thread's policy ("default", "bind:1")
  std::vector<std::string> notes;                           // what could not be read, and why
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Reads everything above now. Fails only when hwloc cannot load a topology at all (kInternal); any
// single missing fact becomes "n/a" plus a note.
Result<Topology> read_topology();

// "[always] madvise never" -> "always"; "" when no bracket.
std::string bracketed_choice(const std::string& text);

}  // namespace engram::host
