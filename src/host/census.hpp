// Census: where a table's pages are, per NUMA node, read from the kernel — never assumed.
//
// Two sources:
//  - move_pages(2) with nodes = NULL (take_census): one address per page (per huge page for hugetlb),
//    exact when the table has at most `max_samples` pages, otherwise every `stride_pages`-th page (the
//    stride is stated in the result). A page that is not resident (-ENOENT: not present, the tmpfs
//    case; -EFAULT: not mapped / the zero page, the anonymous case) is counted as `not_resident`,
//    never as node 0. Any other per-page error is counted by errno. A census that cannot be taken
//    (move_pages refused: EPERM, ENOSYS under seccomp) is `known = false` with the reason, never zeros.
//    move_pages only sees pages mapped in the caller's page tables: a tmpfs page allocated by fallocate
//    or by a peer is in the page cache but not mapped here. With `map_resident` (default) the census
//    first asks mincore(2) which sampled pages are resident and reads one byte of each of those to map
//    it (a read of a resident page allocates nothing); pages that are not resident are left alone.
//    Some kernels (6.18) report the shared zero page with a node; those pages are found through
//    /proc/self/pagemap + /proc/kpageflags and counted as not resident (`zero_pages`).
//  - /proc/<pid>/numa_maps + maps + smaps (process_census): per mapping, the N<node>=<pages> counts in
//    units of kernelpagesize_kB, plus Rss/Pss (PSS divides a shared page among its mappers, so peers
//    sharing one table do not count it once each); smaps_rollup for the process total. Tables are found
//    by their backing name ("/memfd:engram:..." or a path whose file name starts with "engram:").
//
// Each census names the table (layer, head range, bytes, base address, group, backing identity) and
// the named point at which it was taken (after placement / registration / load / replay).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/census.hpp"
#include "engram/status.hpp"

namespace engram::host {

// The census types are public (engram/census.hpp); host code names them as host::...
using engram::CensusPoint;
using engram::census_point_name;
using engram::PageCensus;
using engram::TableIdentity;

// Backing name that encodes a table's identity, so `engram census --pid` can recover it from
// /proc/<pid>/maps: "engram:layer=<L>:heads=<b>-<e>[:group=<g>][:replica=<n>]".
std::string table_backing_name(const TableIdentity& t);
// Inverse; fills layer_id, heads, group, replica_node. false if `name` is not such a name (the name
// may carry a leading "/memfd:" or directory, and a trailing ".<random>" or " (deleted)").
bool parse_table_backing_name(const std::string& name, TableIdentity* t);

struct CensusOptions {
  uint64_t max_samples = uint64_t{1} << 20;  // exact up to this many pages (4 GiB of 4 KiB pages)
  bool map_resident = true;                  // see the file comment
  uint64_t page_bytes = 0;                   // 0: the system page size (pass 2 MiB for hugetlb)
};

// move_pages census of [addr, addr + len) in this process.
PageCensus take_census(const void* addr, uint64_t len_bytes, const TableIdentity& table, CensusPoint point,
                       const CensusOptions& options = {});

// Maps an errno-style move_pages status (>= 0 node, < 0 -errno) to a census bucket: the node, or
// kCensusNotResident (-ENOENT, -EFAULT), or kCensusError for everything else.
inline constexpr int kCensusNotResident = -1;
inline constexpr int kCensusError = -2;
int classify_page_status(int status) noexcept;

// ---- /proc parsers (pure functions of the text; tested on fixed samples) ------------------------

struct MapsEntry {
  uintptr_t start = 0, end = 0;
  std::string perms;
  uint64_t offset = 0;
  uint64_t inode = 0;
  std::string path;  // "" for anonymous; "/memfd:name (deleted)" for a memfd
};
std::vector<MapsEntry> parse_maps(const std::string& text);

struct NumaMapsEntry {
  uintptr_t start = 0;
  std::string policy;                      // "default", "bind:1", "interleave:0-1", ...
  std::string file;                        // file=<path> ("" when none)
  bool anon = false, huge = false, shared = false;
  uint64_t kernel_page_bytes = 4096;       // kernelpagesize_kB * 1024
  std::map<int, uint64_t> pages_per_node;  // N<node>=<count>, in kernel pages
};
std::vector<NumaMapsEntry> parse_numa_maps(const std::string& text);

// Fields of smaps_rollup or of one smaps block ("Rss", "Pss", "Shared_Clean", ...) in bytes.
std::map<std::string, int64_t> parse_smaps_fields(const std::string& text);
// Per-mapping fields of /proc/<pid>/smaps: start address -> fields.
std::map<uintptr_t, std::map<std::string, int64_t>> parse_smaps(const std::string& text);

struct ProcessCensus {
  int pid = 0;
  std::vector<PageCensus> tables;            // one per mapping of a table backing
  std::map<std::string, int64_t> rollup;     // smaps_rollup (empty when unreadable)
  std::string mems_allowed, cpus_allowed;    // from /proc/<pid>/status
  nlohmann::json to_json() const;
  std::string to_text() const;
};
// Reads /proc/<pid>/{maps,numa_maps,smaps,smaps_rollup,status}. kNotFound when the process does not
// exist, kPermission when its files are not readable. `name_prefix` selects table mappings (file
// name starting with it, after "/memfd:").
Result<ProcessCensus> process_census(int pid, const std::string& name_prefix = "engram:");

}  // namespace engram::host
