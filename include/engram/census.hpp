// Page census types: where a table's pages are, per NUMA node, as read from the kernel (move_pages or
// /proc/<pid>/numa_maps), at a named point of a table's life (after placement / registration / load / replay).
// HostTable::census and Engine::census return these; how a census is taken is src/host/census.hpp.
// A census that could not be taken is known = false with the reason, never zeros; a page that is not resident
// is counted as not_resident, never as node 0.
#pragma once

#include <cstdint>
#include <map>
#include <string>

// The declaration of nlohmann::json only: to_json() returns one; a caller that reads it includes <nlohmann/json.hpp>.
#include <nlohmann/json_fwd.hpp>

#include "engram/export.hpp"

namespace engram {
ENGRAM_API_BEGIN

enum class CensusPoint { kAfterPlacement, kAfterRegistration, kAfterLoad, kAfterReplay, kOnDemand };
const char* census_point_name(CensusPoint p) noexcept;  // "after placement", ..., "on demand"

struct TableIdentity {
  int layer_id = -1;         // model layer id of the Engram layer (-1: unknown)
  int head_begin = 0;        // head range [head_begin, head_end) held by this backing (TP shard)
  int head_end = 0;
  uint64_t bytes = 0;        // bytes of the table in this backing
  uintptr_t base = 0;        // address of the mapping in the process that took the census
  std::string group;         // shared group ("" when not shared)
  std::string backing;       // BackingIdentity::to_string(): memfd name + inode, or path + inode
  int replica_node = -1;     // replica-per-node: the node this copy is bound to
  nlohmann::json to_json() const;
};

struct PageCensus {
  TableIdentity table;
  CensusPoint point = CensusPoint::kOnDemand;
  std::string source;                   // "move_pages" or "numa_maps"
  bool known = false;                   // false: could not be taken; `reason` says why
  std::string reason;
  uint64_t page_bytes = 4096;           // page size the counts are in
  uint64_t pages_total = 0;             // pages in the table's range
  uint64_t pages_sampled = 0;           // pages asked about (== pages_total when exact)
  uint64_t stride_pages = 1;            // 1: exact; k: every k-th page
  std::map<int, uint64_t> pages_per_node;  // node -> sampled pages resident there
  uint64_t not_resident = 0;            // sampled pages with -ENOENT / -EFAULT, or the shared zero page
  uint64_t zero_pages = 0;              // of not_resident: mapped to the shared zero page (read, never written)
  bool zero_page_check = true;          // false: frames not visible (no CAP_SYS_ADMIN), zero pages not told apart
  std::map<int, uint64_t> errors;       // other per-page -errno values -> count (errno as positive)
  int64_t rss_bytes = -1, pss_bytes = -1;  // numa_maps source: from smaps (-1: not read)

  uint64_t resident() const;            // sum of pages_per_node
  // Share of the sampled pages on `node` (0..1); 0 when none sampled.
  double fraction_on(int node) const;
  nlohmann::json to_json() const;
  // Human block: table identity line, then "node  pages  share" rows, not-resident and errors rows.
  std::string to_text() const;
};

ENGRAM_API_END
}  // namespace engram
