// TableView and HostTable: where one Engram layer's rows live and how a backend addresses them.
//
// A TableView is a non-owning description of one layer's table: base pointer(s), row count, row
// width d, row layout and stride. Backends (CPU lookup, CUDA kernel) take TableViews only, so the
// same lookup code serves private memory, shared memfd backings and UVA device pointers alike.
// HostTable owns the memory of every Engram layer of a layout (one backing per layer, or one per
// layer and NUMA node with replica-per-node). `allocate` gives private anonymous memory; `create`
// gives a shared backing (memfd by default, /dev/shm file, hugetlb, anonymous THP) whose placement
// policy is applied before the first page exists, then every page allocated (src/host/backing.hpp,
// src/host/placement.hpp), and whose pages can be counted per node (src/host/census.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {

struct TableView {
  const uint8_t* data = nullptr;    // fused: records [rows][stride]; split: payload [rows][d]
  const uint8_t* scales = nullptr;  // split: scales [rows][d/32]; fused: nullptr
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;  // fused: record bytes (multiple of 16); split: d

  const uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  const uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
};

// Mutable counterpart used while filling or loading a table.
struct TableSpan {
  uint8_t* data = nullptr;
  uint8_t* scales = nullptr;
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;

  uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
  TableView view() const { return {data, scales, rows, d, format, stride_bytes}; }
};

// Deterministic synthetic row content: non-zero pseudo-random FP8 payload (never a NaN code) and
// scales in [2^-8, 2^8] (codes 119..135), a pure function of (seed, layer_index, row). Used by
// `engram table create` and by the in-memory default table of `engram run`.
void synth_row(uint64_t seed, int layer_index, int64_t row, int d, uint8_t* payload, uint8_t* scales);

namespace host {
struct PlacedBacking;
struct PageCensus;
enum class CensusPoint;
}  // namespace host

// How HostTable::create lays a table out in host memory (design.md: backing, placement policy).
struct TableOptions {
  std::string backing = "memfd";     // memfd | shm | hugetlb | hugetlb-1g | anon-thp (host/backing.hpp)
  std::string placement = "none";    // none | local | bind:N | preferred:N | interleave:N,M|all |
                                     // weighted-interleave:N=w,... | replica-per-node (host/placement.hpp)
  std::string shm_dir = "/dev/shm";  // shm backing: directory of the named files
  std::string group;                 // shared-group name, carried in backing names and censuses
  bool prefault = true;              // allocate every page at creation (fallocate / node-bound touch)
  int prefault_threads = 0;          // 0: one per CPU of the target nodes, at most 8
  bool allow_fallback = false;       // placement refused: keep the default policy (reported) vs fail
  int home_node = -1;                // replica-per-node: node whose replica view() returns
                                     // (-1: the calling thread's node at creation)
};

class HostTable {
 public:
  // Allocates (private anonymous mapping, not yet touched) one table per Engram layer of `layout`.
  static Result<std::unique_ptr<HostTable>> allocate(const EngramLayout& layout);
  // Creates one backing per Engram layer (per layer and node for replica-per-node) as `options`
  // says: size check, create, placement before first touch, prefault. Names each backing
  // "engram:layer=<L>:heads=0-<H>[:group=<g>]". Errors: kInvalidArgument (bad option text, node
  // that does not exist or is outside Mems_allowed), kNoSpace (does not fit: names size, mount,
  // free space), kPermission (policy refused: EPERM/seccomp), kUnsupported (weighted interleave
  // before Linux 6.9, no hugetlb pool). Nothing is left behind on failure.
  static Result<std::unique_ptr<HostTable>> create(const EngramLayout& layout, const TableOptions& options);
  ~HostTable();
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  const EngramLayout& layout() const { return layout_; }
  int n_layers() const { return layout_.n_layers(); }
  TableView view(int layer_index) const { return spans_.at(layer_index).view(); }
  TableSpan span(int layer_index) const { return spans_.at(layer_index); }
  // Fills every row with synth_row(seed, ...) using `threads` threads (0 = hardware concurrency);
  // with replicas, every replica.
  void fill_synthetic(uint64_t seed, int threads = 0);

  // Replicas (replica-per-node): 1 otherwise. view(layer) reads the home replica.
  int n_replicas() const;
  int replica_node(int replica) const;  // node of a replica; -1 when not replicated
  int home_replica() const { return home_replica_; }
  TableView view(int layer_index, int replica) const;
  TableSpan span(int layer_index, int replica) const;
  // Backing and placement report of a layer's replica (created by `create`; kInvalidArgument-free:
  // nullptr for a table made by `allocate`). Complete type in host/placement.hpp.
  const host::PlacedBacking* backing(int layer_index, int replica = 0) const;
  // Census (move_pages) of every backing at a named point; an `allocate`d table is censused as its
  // anonymous mappings. Complete types in host/census.hpp. `max_samples`: exact up to that many pages.
  std::vector<host::PageCensus> census(host::CensusPoint point, uint64_t max_samples = uint64_t{1} << 20) const;

 private:
  HostTable();
  struct Storage;
  EngramLayout layout_;
  std::vector<TableSpan> spans_;                    // home replica's spans, [layer]
  std::vector<std::vector<TableSpan>> replicas_;    // [replica][layer]
  std::vector<int> replica_nodes_;                  // [replica]; {-1} when not replicated
  int home_replica_ = 0;
  std::vector<std::pair<void*, size_t>> mappings_;  // allocate(): private anonymous mappings
  std::unique_ptr<Storage> storage_;                // create(): backings
};

}  // namespace engram
