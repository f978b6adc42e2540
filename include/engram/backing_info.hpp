// What a consumer can read of one backing of a table HostTable::create made (or HostTable::attach mapped): which
// memory it is, its descriptor, its sizes, and the placement that was asked for, resolved, obtained and how its
// pages were allocated (docs/placement.md). The backing itself (mapping, descriptor ownership, policy calls) stays
// inside the library; this is a copy taken when asked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engram/export.hpp"
#include "engram/table.hpp"

namespace engram {
ENGRAM_API_BEGIN

struct BackingInfo {
  std::string identity;       // memfd name + inode, or file path + inode (what censuses and peers name)
  int fd = -1;                // its descriptor (memfd / file), owned by the table and valid while it lives; -1: none
  uint64_t size_bytes = 0;    // logical bytes of the backing
  uint64_t mapped_bytes = 0;  // bytes mapped (size rounded up to the page size)
  uint64_t page_bytes = 0;    // page size of the backing (4 KiB, or the huge page size of hugetlb)
  // The placement report: requested, resolved, obtained (read back with get_mempolicy), status, mems_allowed,
  // prefault (how the pages were allocated, seconds), huge-page advice and bytes, replica_node.
  nlohmann::json placement;
};

// The backing of layer `layer_index`'s replica `replica` (shard 0's for a head-sharded table). nullopt for a table
// made by HostTable::allocate (private memory, no backing) and for a layer or replica out of range.
std::optional<BackingInfo> backing_info(const HostTable& table, int layer_index, int replica = 0);

ENGRAM_API_END
}  // namespace engram
