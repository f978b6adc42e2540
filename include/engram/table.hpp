// TableView and HostTable: where one Engram layer's rows live and how a backend addresses them.
//
// A TableView is a non-owning description of one layer's table: base pointer(s), row count, row
// width d, row layout and stride, and which part of the layer it holds (the whole layer, or a
// tensor-parallel rank's slice: tp_slice.hpp). Backends (CPU lookup, CUDA kernel) take TableViews
// only, so the same lookup code serves private memory, shared memfd backings, UVA device pointers
// and TP slices alike.
// HostTable owns the memory of every Engram layer of a layout (one backing per layer, or one per
// layer and NUMA node with replica-per-node). `allocate` gives private anonymous memory; `create`
// gives a shared backing (memfd by default, /dev/shm file, hugetlb, anonymous THP) whose placement
// policy is applied before the first page exists, then every page allocated (src/host/backing.hpp,
// src/host/placement.hpp), and whose pages can be counted per node (src/host/census.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engram/census.hpp"
#include "engram/export.hpp"
#include "engram/layout.hpp"
#include "engram/options.hpp"
#include "engram/status.hpp"
#include "engram/tp_slice.hpp"

namespace engram {
ENGRAM_API_BEGIN

struct TableView {
  const uint8_t* data = nullptr;    // fused: records [rows][stride]; split: payload [rows][d]
  const uint8_t* scales = nullptr;  // split: scales [rows][d/32]; fused: nullptr
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;  // fused: record bytes (multiple of 16); split: d
  // The part of the layer held: default the whole layer (row = global id). A TP slice: `rows` are its rows
  // [slice.row_begin, slice.row_end) of the layer, local row k is global id slice.row_begin + k, and a lookup
  // writes slice.local_heads heads per token (tp_slice.hpp). A slice without heads has no rows (data null).
  LayerSlice slice;

  const uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  const uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
  // Ids >= this are invalid: the layer's rows (a slice's view holds fewer).
  int64_t id_limit() const { return slice.sliced() ? slice.layer_rows : rows; }
};

// Mutable counterpart used while filling or loading a table.
struct TableSpan {
  uint8_t* data = nullptr;
  uint8_t* scales = nullptr;
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;
  LayerSlice slice;  // as TableView::slice

  uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
  TableView view() const { return {data, scales, rows, d, format, stride_bytes, slice}; }
};

// Deterministic synthetic row content: non-zero pseudo-random FP8 payload (never a NaN code) and
// scales in [2^-8, 2^8] (codes 119..135), a pure function of (seed, layer_index, row) with `row` the
// layer's global row id. Used by `engram table create` and by the in-memory default table of `engram run`.
void synth_row(uint64_t seed, int layer_index, int64_t row, int d, uint8_t* payload, uint8_t* scales);

// Span of Engram layer `layer_index` of `layout` over one layer object at `base`: fused records
// [rows][stride], or split payload [rows][d] followed by scales [rows][d/32]; rows are the layer's, or
// with a TP slice (`tp` not whole) the slice's rows only, and the span carries the slice.
TableSpan layer_span(uint8_t* base, const EngramLayout& layout, int layer_index, const TpSlice& tp = TpSlice{});
// Writes synth_row(seed, layer_index, s.slice.row_begin + r, ...) into every row r of `s` (the layer's
// global row ids, so a TP slice holds the same bytes as those rows of the whole table) and zeroes fused
// padding, on `threads` threads (0 = hardware concurrency). The bytes do not depend on the thread count.
void fill_synthetic_span(const TableSpan& s, int layer_index, uint64_t seed, int threads = 0);

// A head range [begin, end) of an Engram layer: the unit of tensor-parallel sharding.
struct HeadRange {
  int begin = 0;
  int end = 0;
};
// Parses a head sharding: "" or "1" (one shard of all heads), "N" (N ranges of consecutive heads, sizes
// differing by at most one), or "a-b,c-d,..." (half-open ranges that must tile [0, heads) in order).
// kInvalidArgument naming the text otherwise.
Result<std::vector<HeadRange>> parse_head_shards(const std::string& text, int heads);

ENGRAM_API_END
namespace host {
struct PlacedBacking;  // internal (src/host/placement.hpp)
}  // namespace host
ENGRAM_API_BEGIN

// How HostTable::create lays a table out in host memory (backing, placement policy: docs/terms.md). Typed values:
// text is parsed at the edge (engram/options.hpp: parse_backing, parse_placement; parse_head_shards above).
struct TableOptions {
  BackingSpec backing;               // memfd (default) | shm | hugetlb | hugetlb-1g | anon-thp (host/backing.hpp)
  PlacementPolicy placement;         // applied before the first page exists (host/placement.hpp); none by default
  std::string shm_dir = "/dev/shm";  // shm backing: directory of the named files
  std::string group;                 // shared-group name, carried in backing names and censuses
  bool prefault = true;              // allocate every page at creation (node-bound MADV_POPULATE_WRITE)
  int prefault_threads = 0;          // 0: one per CPU of the target nodes, at most 64
  bool prefault_fallocate = false;   // memfd / shm: fallocate each chunk before populating it (serialised)
  bool shmem_huge_pages = true;      // memfd / shm: MADV_HUGEPAGE (2 MiB pages where shmem_enabled allows)
  bool allow_fallback = false;       // placement refused: keep the default policy (reported) vs fail
  int home_node = -1;                // replica-per-node: node whose replica view() returns
                                     // (-1: the calling thread's node at creation)
  // Head-range shards (tensor parallelism): empty or one range = one backing per layer. Each shard of a layer is
  // its own backing with its own placement and its own census line, mapped into one reserved address range so the
  // layer is still one contiguous table (global ids work unchanged). Shard boundaries are rounded up to the
  // backing's page: the at most one page that two neighbouring head ranges share belongs to the lower shard's
  // backing. Needs fused rows; not with replica-per-node.
  std::vector<HeadRange> head_shards;
  std::vector<PlacementPolicy> shard_placements;  // one per shard; empty = `placement` for every shard
  // A tensor-parallel rank's slice (tp_slice.hpp): every layer holds only the rows of this rank's heads, one backing
  // per layer (per layer and node with replica-per-node) of the slice's bytes, censused under its head range; a rank
  // without heads holds no backing at all. Not with head_shards. Default: the whole table.
  TpSlice tp;
  // shm backing: called with each named file's path as soon as it exists, before it is sized and allocated (a
  // process that guards named files arms its guardian here, so no instant leaves a file unguarded). An error
  // fails the creation (the file is removed).
  std::function<Status(const std::string& path)> on_named_created;
};

// Sets one TableOptions field from text: the rows of the library's one options table (src/engine/options.cpp) that
// are table fields — backing, placement, shard_placements, shm_dir, group, prefault, prefault_threads,
// prefault_fallocate, shmem_huge_pages, allow_fallback, home_node, tp_size, tp_rank (a slice out of range for the
// layout is refused by check_tp_slice, which HostTable::create calls) and head_shards (parse_head_shards: needs the
// layout's `heads`; 0 refuses it). `key` may be written with '-' or '_' and a leading "--". kInvalidArgument naming
// the option for a malformed value; kNotFound for a key that is not a table option.
Status set_table_option(TableOptions& options, std::string_view key, const std::string& value, int heads = 0);

// One backing of a shared table as a peer receives it from the leader's description (host/group.hpp): what to
// map, where it sits in its layer's table, and the placement the leader applied (as text, for reports).
struct AttachSpec {
  BackingKind kind = BackingKind::kMemfd;
  std::string name;           // memfd name, or the named file's path
  std::string path;           // named file (kShmFile); "" for a descriptor
  int fd = -1;                // memfd / hugetlb: the received descriptor; HostTable::attach owns it from the call on
  uint64_t size_bytes = 0;    // logical bytes of the backing
  uint64_t inode = 0, device = 0;  // what the leader created: a path that now names another file is refused
  int layer_index = 0;
  int replica_node = -1;      // replica-per-node: the node this copy is bound to
  HeadRange heads;            // head range held (a tensor-parallel shard), {0, 0} = all heads
  uint64_t offset_bytes = 0;  // where the backing starts in its layer's table (shards: the page-rounded edge)
  std::string placement_requested, placement_resolved, placement_obtained, prefault;
};

struct AttachOptions {
  bool read_only = false;  // map, then mprotect(PROT_READ): a stray write faults instead of corrupting the others'
  int gpu_node = -1;       // replica-per-node: take the replica on this node (-1: this CPU's node)
  TpSlice tp;              // the leader's TP slice: what each layer's backing holds
};

class HostTable {
 public:
  // Allocates (private anonymous mapping, not yet touched) one table per Engram layer of `layout`.
  static Result<std::unique_ptr<HostTable>> allocate(const EngramLayout& layout);
  // Creates one backing per Engram layer (per layer and node for replica-per-node) as `options`
  // says: size check, create, placement before first touch, prefault. Names each backing
  // "engram:layer=<L>:heads=0-<H>[:group=<g>]" (a TP slice: its held heads a-b, and its rows only).
  // Errors: kInvalidArgument (shards that do not tile the heads, a TP slice check_tp_slice refuses or with
  // head shards,
  // a node that does not exist or is outside Mems_allowed), kNoSpace (does not fit: names size, mount,
  // free space), kPermission (policy refused: EPERM/seccomp), kUnsupported (weighted interleave
  // before Linux 6.9, no hugetlb pool). Nothing is left behind on failure.
  static Result<std::unique_ptr<HostTable>> create(const EngramLayout& layout, const TableOptions& options);
  // A peer's view of a leader's table: maps every part (one replica with replica-per-node: the one on
  // options.gpu_node, else this CPU's node; shards side by side in one reserved range, as create() lays them), so
  // that view/span/census work as on the leader. Every descriptor in `parts` is owned from the call on (closed on
  // failure too). kInvalidArgument (parts that do not cover every layer, a part smaller than its share of the
  // layer, a descriptor announced and not given), kPermission (a path naming another inode than the leader's),
  // kNotFound (a named file already unlinked: this peer joined late).
  static Result<std::unique_ptr<HostTable>> attach(const EngramLayout& layout, std::vector<AttachSpec> parts,
                                                   const AttachOptions& options);
  ~HostTable();
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  const EngramLayout& layout() const { return layout_; }
  int n_layers() const { return layout_.n_layers(); }
  // The TP slice the table holds (whole unless TableOptions::tp / AttachOptions::tp said otherwise); each view
  // carries its layer's LayerSlice. staging_heads(): heads per token of a lookup's staging, ceil(H / tp size).
  const TpSlice& tp() const { return tp_; }
  int staging_heads() const { return tp_local_heads(layout_.heads(), tp_); }
  // Bytes of the rows this table holds in layer `layer_index` (the slice's only, for a TP slice).
  int64_t layer_bytes(int layer_index) const;
  // True for a table mapped read-only (a group peer's attach with read_only): writers fail, registration reads.
  bool read_only() const { return read_only_; }
  TableView view(int layer_index) const { return spans_.at(layer_index).view(); }
  TableSpan span(int layer_index) const { return spans_.at(layer_index); }
  // Fills every row with synth_row(seed, ...) using `threads` threads (0 = one per CPU this process may run on);
  // with replicas, every replica.
  void fill_synthetic(uint64_t seed, int threads = 0);
  // The same rows, reporting progress(bytes written, bytes in all, seconds) on the calling thread after each chunk
  // of about 1/64 of the table, and once at the end (written == all).
  void fill_synthetic(uint64_t seed, int threads, const std::function<void(int64_t, int64_t, double)>& progress);

  // Replicas (replica-per-node): 1 otherwise. view(layer) reads the home replica.
  int n_replicas() const;
  int replica_node(int replica) const;  // node of a replica; -1 when not replicated
  int home_replica() const { return home_replica_; }
  TableView view(int layer_index, int replica) const;
  TableSpan span(int layer_index, int replica) const;
  // Backing and placement report of a layer's replica (created by `create`; kInvalidArgument-free:
  // nullptr for a table made by `allocate`; shard 0's for a sharded table, see shard_backing). Complete type in host/placement.hpp.
  const host::PlacedBacking* backing(int layer_index, int replica = 0) const;
  // Head-range shards (TableOptions::head_shards): 1 and all heads unless sharded.
  int n_shards() const { return static_cast<int>(shard_heads_.size()); }
  HeadRange shard_heads(int shard) const { return shard_heads_.at(static_cast<size_t>(shard)); }
  // A shard's backing of a layer (nullptr for an `allocate`d table). Its data() lies inside view(layer).
  const host::PlacedBacking* shard_backing(int layer_index, int shard) const;
  // Census (move_pages) of every backing at a named point (one line per layer, replica and shard, each
  // naming its head range); an `allocate`d table is censused as its anonymous mappings (engram/census.hpp).
  // `max_samples`: exact up to that many pages.
  std::vector<PageCensus> census(CensusPoint point, uint64_t max_samples = uint64_t{1} << 20) const;
  // Every backing of the table, replica and shard (create/attach; empty for allocate()), with where it sits.
  struct Part {
    int layer_index = 0;
    int replica = 0;   // replica index (0 unless replica-per-node)
    int shard = 0;     // head shard index (0 unless sharded)
    const host::PlacedBacking* backing = nullptr;
  };
  std::vector<Part> parts() const;
  // Unlinks the path of every named file this table created (mappings and descriptors stay valid); calls
  // `on_unlinked(path)` for each. Idempotent. Returns the first failure after trying all.
  Status unlink_named_files(const std::function<void(const std::string&)>& on_unlinked = {});

 private:
  HostTable();
  struct Storage;
  EngramLayout layout_;
  std::vector<TableSpan> spans_;                    // home replica's spans, [layer]
  std::vector<std::vector<TableSpan>> replicas_;    // [replica][layer]
  std::vector<int> replica_nodes_;                  // [replica]; {-1} when not replicated
  std::vector<HeadRange> shard_heads_;              // [shard]
  TpSlice tp_;
  std::vector<std::pair<void*, size_t>> reservations_;  // sharded create(): one address range per layer
  int home_replica_ = 0;
  bool read_only_ = false;
  std::vector<std::pair<void*, size_t>> mappings_;  // allocate(): private anonymous mappings
  std::unique_ptr<Storage> storage_;                // create(): backings
};

ENGRAM_API_END
}  // namespace engram
