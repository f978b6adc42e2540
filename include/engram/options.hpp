// Options of engram-offload as typed values, and the one place where text becomes those values.
//
// Everything that configures the library is a field of a typed struct (TableOptions in table.hpp, EngineOptions
// in engine.hpp). Text — a command line, Python keyword arguments, a config file — is parsed once, at the edge,
// by the functions below; the library never parses option text itself. Every parser answers kInvalidArgument
// with a message that quotes the text and says what was expected; set_engine_option() (engine.hpp) also names
// the option.
//
// Vocabulary (docs/terms.md): a *backing* is the memory that holds a table (memfd, named /dev/shm file, hugetlb memfd,
// private anonymous THP); a *placement policy* says on which NUMA nodes its pages go, applied before the first
// page exists; the *backend* runs lookups (cpu threads, or a CUDA device over UVA); the *fast path* is the CUDA
// lookup beyond the plain gather (in-batch dedup, address sort, hot-row cache, host-gather hybrid) chosen per
// batch by the planner.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

// ---- lookup backend ------------------------------------------------------------------------------------------

enum class BackendKind {
  kAuto,  // cuda when the library has the CUDA backend and a usable device exists, else cpu (the reason is kept)
  kCpu,   // CPU threads gather and decode into host staging
  kCuda,  // the GPU reads the registered host table over UVA and decodes into device staging
};
const char* backend_kind_name(BackendKind kind) noexcept;  // "auto", "cpu", "cuda"
Result<BackendKind> parse_backend_kind(std::string_view text);

// ---- table memory --------------------------------------------------------------------------------------------

enum class BackingKind {
  kMemfd,    // memfd_create(2) on the kernel's internal tmpfs: no name to leak or hijack (default)
  kShmFile,  // named file in /dev/shm (or another tmpfs dir), O_CREAT|O_EXCL|O_NOFOLLOW, 0600
  kHugetlb,  // memfd_create(MFD_HUGETLB) from the hugepage pool (2 MiB or 1 GiB pages)
  kAnonThp,  // private anonymous memory with MADV_HUGEPAGE; one process only
};
const char* backing_kind_name(BackingKind kind) noexcept;  // "memfd", "shm", "hugetlb", "anon-thp"
// Accepts "memfd", "shm", "hugetlb" (2 MiB pages), "hugetlb-1g", "anon-thp". `huge_page_bytes` (optional) receives
// 2 MiB / 1 GiB for hugetlb and 0 otherwise.
Result<BackingKind> parse_backing_kind(const std::string& text, uint64_t* huge_page_bytes = nullptr);

// A backing kind with its page size: what `--backing` names.
struct BackingSpec {
  BackingKind kind = BackingKind::kMemfd;
  uint64_t huge_page_bytes = 0;  // kHugetlb: 2 MiB (0 means 2 MiB) or 1 GiB; 0 otherwise
  std::string to_string() const;  // "memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"
  // Spelled out (not defaulted): this header is also compiled as C++17 (CUDA translation units, consumers).
  bool operator==(const BackingSpec& o) const { return kind == o.kind && huge_page_bytes == o.huge_page_bytes; }
};
Result<BackingSpec> parse_backing(const std::string& text);

// Placement policies (host/placement.hpp applies them; mbind(2), numa_memory_policy.rst). Text forms:
//   none | local | bind:NODES | preferred:N | interleave:NODES | weighted-interleave:N=w,... |
//   replica-per-node[:NODES]
// NODES is numactl's node list: 0,2 or 0-3 (mixed: 0-1,4), all (every node with memory this process may use),
// !LIST (all of those but LIST) and +LIST (LIST counts the nodes this process may use: +0 is the first of
// them, whatever its number, as numactl's cpuset-relative lists), also !+LIST. `!` and `+` are resolved when the
// policy is applied (host/placement.hpp resolve_placement), against the machine's nodes; weighted-interleave
// names each node with its weight and takes neither.
enum class PlacementKind { kNone, kLocal, kBind, kPreferred, kInterleave, kWeightedInterleave, kReplicaPerNode };
const char* placement_kind_name(PlacementKind kind) noexcept;  // "none", "local", "bind", ...

struct PlacementPolicy {
  PlacementKind kind = PlacementKind::kNone;
  std::vector<int> nodes;    // sorted; empty with all_nodes for "interleave:all" / "replica-per-node"
  std::vector<int> weights;  // weighted-interleave: weights[i] of nodes[i], 1..255
  bool all_nodes = false;    // resolve to every allowed node with memory when applied
  // numactl's "!LIST": the policy's nodes are every allowed node with memory except `nodes` (resolved when
  // applied).
  bool invert_nodes = false;
  // numactl's "+LIST": `nodes` are positions in the sorted list of allowed nodes with memory (resolved when
  // applied).
  bool relative_nodes = false;
  // Canonical text ("bind:1", "interleave:0,1", "interleave:all", "bind:!0", "interleave:+0-1",
  // "weighted-interleave:0=3,1=1").
  std::string to_string() const;
  bool operator==(const PlacementPolicy& o) const {
    return kind == o.kind && nodes == o.nodes && weights == o.weights && all_nodes == o.all_nodes &&
           invert_nodes == o.invert_nodes && relative_nodes == o.relative_nodes;
  }
};
// kInvalidArgument naming the problem for an unknown kind, a missing/extra node list, a negative or non-numeric
// node, a duplicate node, a weight outside 1..255, or preferred with more than one node.
Result<PlacementPolicy> parse_placement(const std::string& text);
// ";"-separated policies, one per head shard ("bind:0;bind:1").
Result<std::vector<PlacementPolicy>> parse_placement_list(const std::string& text);

// ---- lookup path ---------------------------------------------------------------------------------------------

enum class FastPathMode {
  kPlanner,  // per batch: plain / dedup / sort / hot-row cache / hybrid from calibrated costs (CUDA)
  kPlain,    // the fast-path machinery runs the plain gather (A/B against the planner, same buffers)
  kOff,      // the plain kernel alone: no fast path, no cache
};
const char* fast_path_mode_name(FastPathMode mode) noexcept;  // "planner", "plain", "off"
Result<FastPathMode> parse_fast_path_mode(std::string_view text);

// The grid cap of a CUDA lookup: the most blocks its kernels launch, as a fraction of the device's SMs in (0, 1] or
// as a block count >= 1. The prefetch queue's lookups run in the background beside the consumer's compute, capped
// (half the SMs by default); a direct lookup runs in the foreground (every SM) unless its caller caps it. A GridCap
// is valid by construction: the only ways to make one are the checked factories below, so nothing downstream
// checks it again, and blocks_for() is the one place it becomes a number of blocks.
class GridCap {
 public:
  constexpr GridCap() = default;  // every SM (fraction 1)
  static constexpr GridCap all_sms() { return GridCap(1.0, 0); }
  static constexpr GridCap background_default() { return GridCap(0.5, 0); }
  // kInvalidArgument quoting the value unless 0 < fraction <= 1 (NaN refused).
  static Result<GridCap> of_fraction(double fraction);
  // kInvalidArgument unless 1 <= blocks <= 2^20.
  static Result<GridCap> of_blocks(int64_t blocks);

  bool in_blocks() const { return blocks_ > 0; }
  double fraction() const { return fraction_; }  // 1 when in_blocks()
  int blocks() const { return blocks_; }          // 0 unless in_blocks()
  // Blocks on a device of `sm_count` SMs: max(1, floor(fraction * sm_count)), or min(blocks, sm_count) (at least 1).
  int blocks_for(int sm_count) const;
  // "fraction 0.50" or "24 blocks" (reports).
  std::string to_string() const;
  bool operator==(const GridCap& o) const { return fraction_ == o.fraction_ && blocks_ == o.blocks_; }
  bool operator!=(const GridCap& o) const { return !(*this == o); }

 private:
  constexpr GridCap(double fraction, int blocks) : fraction_(fraction), blocks_(blocks) {}
  double fraction_ = 1.0;
  int blocks_ = 0;
};
// "F" (a fraction of the SMs in (0, 1]) and "N" (blocks, N >= 1): the text forms of the grid_fraction and grid_blocks
// options.
Result<GridCap> parse_grid_fraction(const std::string& text);
Result<GridCap> parse_grid_blocks(const std::string& text);

// When a layer's lookup is submitted to the prefetch queue: early (at step start) or on demand (right before the layer).
enum class PrefetchMode {
  kEarly,     // as soon as the layer's ids are ready
  kOnDemand,  // at the consuming layer
};
const char* prefetch_mode_name(PrefetchMode mode) noexcept;  // "early", "on_demand"
Result<PrefetchMode> parse_prefetch_mode(std::string_view text);

// ---- GPU hot-row cache ---------------------------------------------------------------------------------------

enum class CacheFormat {
  kFp8,   // records as stored (payload + scales), about 1.9x the rows per byte of bf16
  kBf16,  // decoded once into bf16 rows
};
const char* cache_format_name(CacheFormat format) noexcept;  // "fp8", "bf16"
Result<CacheFormat> parse_cache_format(std::string_view text);

// A cache size per Engram layer: off, a byte count, or a share of that layer's table.
struct CacheSize {
  enum class Kind { kOff, kBytes, kShare };
  Kind kind = Kind::kOff;
  int64_t bytes = 0;   // kBytes
  double share = 0;    // kShare, in (0, 1]
  bool off() const { return kind == Kind::kOff; }
  // Bytes for a layer whose table holds `table_bytes`.
  int64_t bytes_for(int64_t table_bytes) const;
  std::string to_string() const;  // "off", "256.0 MiB", "5%"
};
// "off" / "0", bytes ("256MiB", "1.5GB"), or a share ("5%", in [0, 100]; "0%" is off).
Result<CacheSize> parse_cache_size(const std::string& text);

// The online update of the cache: every `every` counted steps, at most `rows` rows swapped per layer, applied
// `slice` rows per layer and step (the per-step budget of cache maintenance; the engine raises it to rows / every
// so that an update is applied within its period). While the traffic moves faster than that (a plan comes back
// full), rows and slice double per update up to `burst` times these values, and halve back once plans come back at
// most half full (plan::UpdateBudget). Default burst 4: the base rate (64 rows per step) never reaches another kind
// of text's hot set in a 5% cache, 4x reaches it within ~200-300 decode steps (`engram bench cache-follow`,
// docs/results/2026-12-05-cache-updates.md); each step then stages and commits at most 4 x 64 rows per layer.
// burst=1 keeps the base cost; 8 or 16 follow faster at longer slices.
struct CacheUpdate {
  static constexpr int64_t kDefaultSlice = 64;
  static constexpr int64_t kDefaultBurst = 4;
  int every = 4;       // 0 = no online update
  int64_t rows = 256;
  int64_t slice = kDefaultSlice;
  int64_t burst = kDefaultBurst;  // 1 = never more than rows / slice
  std::string to_string() const;  // "every=4,rows=256" (",slice=S", ",burst=B" when not the default) or "off"
};
// "every=K,rows=M,slice=S,burst=B" (K, M, S, B >= 1; a key left out keeps the value in `base`) or "off" / "0".
Result<CacheUpdate> parse_cache_update(const std::string& text, const CacheUpdate& base = {});

ENGRAM_API_END
}  // namespace engram
