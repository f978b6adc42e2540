// The UVA lookup kernel's host side: a registered table as the GPU sees it (UvaTable), and the launchers of
// the lookup (FP8 E4M3 rows + ue8m0 scales -> BF16 staging) and of the plain 16-byte gather that bounds it.
//
// Lookup: ids[tokens][heads] int64 on the device (global row ids of one Engram layer, head offsets added) ->
// out[tokens][heads][d] bf16 bits on the device, row-major, every element written. A negative id (kDeadId) gives
// a zero row; an id >= table rows is clamped to a zero row and counted (counters[1]) — never an out-of-bounds
// host read — or, with LookupArgs::checked, rejected before the launch (cost: one extra pass over the ids on the
// GPU plus one stream synchronisation; not allowed while the stream is being captured). Decoding uses
// format.hpp's decode_element, so the staging is bit-identical to the CPU reference (src/cpu/lookup.hpp).
// A tensor-parallel slice's table (TableView::slice, engram/tp_slice.hpp) takes the layer's ids [tokens][heads]
// and writes out[tokens][local_heads][d]: zeros for padded heads and for ids of another rank's rows; "table rows"
// is then the whole layer's rows (TableView::id_limit). A slice without heads has no rows and reads nothing.
//
// Kernel shape: a group of G lanes (G = d/16 up to 32) reads one row with 16-byte loads;
// a warp holds 32/G rows per load round and U = 4 rounds in flight before the first use (U = 1 when the batch
// fits in one wave of the grid); a block of 8 warps is a tile of 8*(32/G)*U rows (64 rows for d = 256 and
// U = 4). Scales in [10, 246] decode through a branch-free exact path (decode_fast.cuh), others through
// format.hpp's decode_element. Persistent grid = min(tiles, cap), cap = LookupArgs::grid_cap.blocks_for(SM count)
// (engram/options.hpp: every SM in the foreground, half of them by default in the background; the cap bounds the
// number of blocks, it does not reserve SMs). The launcher reports rows, tiles and grid.
//
// No CUDA types in this header: streams are passed as `void*` (a cudaStream_t; nullptr = legacy stream).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/registration.cuh"
#include "engram/lookup.hpp"
#include "engram/options.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::cuda {

// Host range [host_begin, host_end) is read by the device at address host + delta.
struct UvaSegment {
  uint64_t host_begin = 0;
  uint64_t host_end = 0;
  int64_t delta = 0;
};

// The checks of a view that UvaTable::make (and can_launch) apply: kInvalidArgument "UVA table: ..." for null data,
// rows <= 0 (except a TP slice without heads), d % 32 != 0, a bad stride or a slice that does not describe the rows.
Status check_uva_view(const TableView& v);

// One Engram layer's table as a kernel reads it: the host TableView plus the device addresses of the
// registered chunks that hold it. When every chunk has the same host->device offset (always on devices with
// cudaDevAttrCanUseHostPointerForRegisteredMem, where it is 0) the kernel adds one offset; otherwise it
// translates each row address through the per-chunk segment table (kept in device memory).
// Move-only; the registrations must outlive it. Thread safety: immutable after make().
class UvaTable {
 public:
  // Errors: kInvalidArgument when the view is malformed (null data, rows <= 0 — except a TP slice without heads,
  // which has neither —, d % 32 != 0, bad stride, a slice that does not describe the rows) or when its
  // payload/scale bytes are not wholly inside `regs`; kCuda/kOutOfMemory for the segment-table copy.
  // force_segments: translate per chunk even when one offset would do (exercises that path in tests).
  static Result<UvaTable> make(const TableView& host_view, const std::vector<const HostRegistration*>& regs,
                               bool force_segments = false);

  UvaTable() = default;
  UvaTable(UvaTable&&) noexcept = default;
  UvaTable& operator=(UvaTable&&) noexcept = default;

  const TableView& host_view() const { return view_; }
  bool uniform() const { return uniform_; }          // one offset for every chunk
  int64_t uniform_delta() const { return delta_; }   // device address - host address when uniform()
  const std::vector<UvaSegment>& segments() const { return segments_; }
  const UvaSegment* device_segments() const { return dev_segments_.get(); }  // nullptr when uniform()

 private:
  struct DeviceFree {
    void operator()(UvaSegment* p) const;
  };
  TableView view_;
  bool uniform_ = true;
  int64_t delta_ = 0;
  std::vector<UvaSegment> segments_;
  std::unique_ptr<UvaSegment, DeviceFree> dev_segments_;
};

struct LookupArgs {
  const UvaTable* table = nullptr;
  const int64_t* ids = nullptr;             // device, [tokens][heads], 8-byte aligned
  int64_t tokens = 0;
  int heads = 0;                            // the ids' heads (a TP slice: the layer's, slice.heads)
  uint16_t* out = nullptr;                  // device, [tokens][out heads][d] bf16 bits, 16-byte aligned; out heads
                                            // = table->host_view().slice.out_heads(heads)
  unsigned long long* counters = nullptr;   // device [2]: += dead rows, += invalid ids; nullptr = not counted
  GridCap grid_cap;                         // cap = grid_cap.blocks_for(sm_count); every SM by default
  int sm_count = 0;                         // 0 = read from the current device
  bool checked = false;                     // reject ids >= rows before launching (see above)
  const int64_t* ids_host = nullptr;        // optional host copy of ids (lets FastLookup use the host-gather path)
};

// What a launcher launched is the public engram::LaunchShape (engram/lookup.hpp): the engine hands it out as is,
// and the backend adds the path's name.
using LaunchInfo = LaunchShape;

// Checks what the launch needs: table (d % 32 == 0, fused stride % 16 == 0, 16-byte aligned payload and
// device offset), non-null 8-byte-aligned ids and 16-byte-aligned out when rows > 0, tokens >= 0, heads > 0
// (a TP slice: the layer's heads), rows * d within int64 (the grid cap is valid by construction). kInvalidArgument names the
// first violation.
Status can_launch(const LookupArgs& args);

// Enqueues the lookup on `stream` (nothing is launched when rows == 0). Asynchronous: returns after the launch;
// errors are can_launch's, kInvalidArgument for checked-mode rejects (naming the first bad position and id), and
// kCuda for a launch failure. Graph-capturable when !checked.
Result<LaunchInfo> launch_lookup(const LookupArgs& args, void* stream);

// Launches the lookup of `a` once in each launch shape launch_lookup may choose (rows in flight; one block each), so
// that CUDA loads each kernel, which it does at a kernel's first launch in the process, before a served batch needs
// it. Writes a.out and a.counters as a lookup would (dead ids give zero rows and read nothing). Not checked mode.
Status warm_lookup(const LookupArgs& args, void* stream);

// Checked mode's pre-pass: number of ids in device ids[n] that are >= table rows (TableView::id_limit), and the first such position
// (-1 if none). Synchronises `stream`. kInvalidArgument while `stream` is being captured.
struct IdCheck {
  int64_t invalid = 0;
  int64_t first_position = -1;
  int64_t first_id = 0;
};
Result<IdCheck> check_ids(const UvaTable& table, const int64_t* ids, int64_t n, void* stream);

// Plain 16-byte-vector gather of the same rows, no decode: the request-bound ceiling of the lookup.
// kRowBytes reads exactly the bytes the lookup reads (fused: the whole record; split: payload + scales);
// kPayloadOnly reads the d payload bytes (the plain gather of the payloads: the bound the lookup is measured against).
// out[rows][plain_gather_out_stride()] raw bytes; negative / out-of-range ids write zero bytes.
enum class GatherBytes { kRowBytes, kPayloadOnly };
int64_t plain_gather_out_stride(const TableView& view, GatherBytes what);
struct GatherArgs {
  const UvaTable* table = nullptr;
  const int64_t* ids = nullptr;  // device [rows]
  int64_t rows = 0;
  uint8_t* out = nullptr;        // device [rows][out_stride], 16-byte aligned
  GatherBytes what = GatherBytes::kRowBytes;
  GridCap grid_cap;
  int sm_count = 0;
};
Result<LaunchInfo> launch_plain_gather(const GatherArgs& args, void* stream);

// `sm_count` when > 0, else the current device's SM count.
Result<int> resolve_sm_count(int sm_count);

}  // namespace engram::cuda
