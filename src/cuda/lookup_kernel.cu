// UVA lookup kernel: FP8 E4M3 rows + ue8m0 scales in registered host memory -> BF16 staging in device memory.
//
// A random row read over PCIe costs one request whatever its size (~37 M rows/s over an 8 GiB span on the
// H200, docs/fastpath.md), so the kernel's job is to keep many independent row requests in flight and to issue each row as few, wide
// requests as possible: G = d/16 lanes read one row with one 16-byte load each (a warp covers 32/G rows per load
// round), every lane issues U = 4 rounds of loads before it uses the first (U = 1 when the batch fits in one wave
// of the grid: a small lookup's time is one round trip plus the decode), and the scale bytes are fetched in
// the same round (fused records keep them in the row's last 16-byte sector, so a row is one contiguous read).
// Decoding is exact: scales in decode_fast's range (decode_fast.cuh; every real table's) take a branch-free bit
// construction proven equal to format.hpp's decode_element for all 65,536 code pairs in that range; other scales
// go through decode_element itself. So the staging is bit-identical to the CPU reference. No fast-math.
//
// The grid is persistent (blocks stride over tiles) and capped by a fraction of the SMs so that a background
// lookup leaves room to the consumer's compute. Dead ids write zero rows; ids beyond the table write zero rows
// and are counted with one atomic per warp at the end of the kernel (never a read outside the table).
// A tensor-parallel slice (TableView::slice) changes only where a row's id comes from and which local row it
// names: output row (token t, local head j) reads ids[t][head_begin + j] and local row id - row_begin; padded
// heads and ids of another rank's rows write zero rows. The branch is uniform (one table per launch), so a whole
// table's launch runs the same instructions as without slices but for that test.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/decode_fast.cuh"
#include "cuda/lookup_kernel.cuh"
#include "engram/format.hpp"

namespace engram::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kBlockThreads = 32 * kWarpsPerBlock;
// U: rows each lane group loads before the first use. 4 for large batches (requests in flight); 1 when the whole
// batch fits in one wave of the grid, so that a small (decode) lookup spreads its rows over more warps and each
// lane decodes one row instead of four (a small lookup's time is latency: one round trip plus the decode).
constexpr int kRowsInFlightLarge = 4;

// What a kernel needs of a table: addresses already translated when one offset does (segs == nullptr),
// host addresses plus the device segment table otherwise.
struct KernelTable {
  const uint8_t* data;
  const uint8_t* scales;
  int64_t rows;
  int64_t stride;
  int d;
  const UvaSegment* segs;
  int n_segs;
  // TP slice (tp_slice.hpp); local_heads == 0: the whole layer (row_begin 0, id_limit = rows).
  int local_heads;
  int heads;       // ids' columns
  int head_begin;
  int64_t row_begin;
  int64_t id_limit;  // ids >= it are invalid (the whole layer's rows)
};

// G: lanes reading one row = largest power of two <= 32 dividing d/16 (d % 32 == 0, so at least 2).
int lanes_per_row(int d) {
  const int chunks = d / 16;
  int g = 1;
  while (g < 32 && chunks % (g * 2) == 0) g *= 2;
  return g;
}

constexpr int tile_rows_for(int g, int u) { return kWarpsPerBlock * (32 / g) * u; }

// The budgets the launch shapes rely on: a block is whole warps, and the d = 256 tile (G = 16 lanes a row,
// U = 4 rounds in flight) is the 64 rows the header promises.
static_assert(kBlockThreads == 256 && kBlockThreads % 32 == 0, "a block of 8 whole warps");
static_assert(tile_rows_for(16, kRowsInFlightLarge) == 64, "d = 256 tile: 8 warps x 2 rows x 4 rounds");

}  // namespace

__device__ __forceinline__ static const uint8_t* translate(const KernelTable& t, const uint8_t* a) {
  if (t.segs == nullptr) return a;
  const uint64_t x = reinterpret_cast<uint64_t>(a);
  for (int i = 0; i < t.n_segs; ++i) {
    const UvaSegment s = t.segs[i];
    if (x >= s.host_begin && x < s.host_end) return a + s.delta;
  }
  return nullptr;
}

template <int G, int kRowsInFlight, bool kFused>
__global__ static void __launch_bounds__(kBlockThreads)
    lookup_kernel(const KernelTable t, const int64_t* __restrict__ ids, int64_t n_rows, int64_t n_tiles,
                  uint16_t* __restrict__ out, unsigned long long* __restrict__ counters) {
  static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a warp holds whole lane groups");
  constexpr int kGroups = 32 / G;
  constexpr int kRowsPerWarp = kGroups * kRowsInFlight;
  constexpr int kTileRows = kWarpsPerBlock * kRowsPerWarp;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gl = lane % G;
  const int n_chunks = t.d / 16;
  unsigned dead = 0, invalid = 0;

  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kTileRows + warp * kRowsPerWarp + lane / G;
    const uint8_t* pay[kRowsInFlight];
    const uint8_t* sca[kRowsInFlight];
    int state[kRowsInFlight];  // 0: past the end, 1: read the row, 2: write a zero row
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int64_t row = row0 + u * kGroups;
      pay[u] = nullptr;
      sca[u] = nullptr;
      state[u] = 0;
      if (row < n_rows) {
        int64_t id = kDeadId;
        bool padding = false;
        if (t.local_heads > 0) {  // TP slice: this rank's heads of the layer's ids
          const int64_t token = row / t.local_heads;
          const int h = t.head_begin + static_cast<int>(row - token * t.local_heads);
          padding = h >= t.heads;
          if (!padding) id = __ldg(ids + token * t.heads + h);
        } else {
          id = __ldg(ids + row);
        }
        const int64_t local = id - t.row_begin;
        if (padding) {
          state[u] = 2;
        } else if (id < 0) {
          state[u] = 2;
          dead += gl == 0;
        } else if (id >= t.id_limit) {
          state[u] = 2;
          invalid += gl == 0;
        } else if (local < 0 || local >= t.rows) {  // another rank's row
          state[u] = 2;
        } else {
          const uint8_t* p = t.data + local * t.stride;
          const uint8_t* s = kFused ? p + t.d : t.scales + local * (t.d / kScaleBlock);
          p = translate(t, p);
          s = translate(t, s);
          if (p != nullptr && s != nullptr) {
            state[u] = 1;
            pay[u] = p;
            sca[u] = s;
          } else {  // not inside a registered chunk: can_launch rules this out; never read it
            state[u] = 2;
            invalid += gl == 0;
          }
        }
      }
    }
    for (int c = gl; c < n_chunks; c += G) {
      uint4 v[kRowsInFlight];
      uint8_t s[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (state[u] == 1) {
          v[u] = __ldg(reinterpret_cast<const uint4*>(pay[u]) + c);
          s[u] = __ldg(sca[u] + (c >> 1));  // 16 values per chunk, 32 per scale
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (state[u] != 0) {
          uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
          if (state[u] == 1) decode16(v[u], s[u], lo, hi);
          uint4* o = reinterpret_cast<uint4*>(out + (row0 + u * kGroups) * t.d + c * 16);
          o[0] = lo;
          o[1] = hi;
        }
      }
    }
  }
  if (counters != nullptr) {  // uniform branch: every lane of the warp takes it
    dead = __reduce_add_sync(0xFFFFFFFFu, dead);
    invalid = __reduce_add_sync(0xFFFFFFFFu, invalid);
    if (lane == 0) {
      if (dead) atomicAdd(&counters[0], static_cast<unsigned long long>(dead));
      if (invalid) atomicAdd(&counters[1], static_cast<unsigned long long>(invalid));
    }
  }
}

// Plain gather: same lane/row mapping, 16-byte loads of the record (or payload) and byte loads of split scales,
// raw bytes to out[row][out_stride]. Up to 2 chunks per lane per round are issued before any store.
template <int G, int kRowsInFlight, bool kFused>
__global__ static void __launch_bounds__(kBlockThreads)
    gather_kernel(const KernelTable t, const int64_t* __restrict__ ids, int64_t n_rows, int64_t n_tiles,
                  uint8_t* __restrict__ out, int64_t out_stride, int n_chunks, int n_scale_bytes) {
  static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a warp holds whole lane groups");
  constexpr int kGroups = 32 / G;
  constexpr int kRowsPerWarp = kGroups * kRowsInFlight;
  constexpr int kTileRows = kWarpsPerBlock * kRowsPerWarp;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gl = lane % G;
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kTileRows + warp * kRowsPerWarp + lane / G;
    const uint8_t* pay[kRowsInFlight];
    const uint8_t* sca[kRowsInFlight];
    int state[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int64_t row = row0 + u * kGroups;
      state[u] = 0;
      pay[u] = nullptr;
      sca[u] = nullptr;
      if (row < n_rows) {
        const int64_t id = __ldg(ids + row);
        state[u] = 2;
        if (id >= 0 && id < t.rows) {
          const uint8_t* p = translate(t, t.data + id * t.stride);
          const uint8_t* s = kFused ? nullptr : translate(t, t.scales + id * (t.d / kScaleBlock));
          if (p != nullptr && (kFused || s != nullptr)) {
            state[u] = 1;
            pay[u] = p;
            sca[u] = s;
          }
        }
      }
    }
    for (int c0 = gl; c0 < n_chunks; c0 += 2 * G) {
      // Chunk indices c0 and c0 + G; split scale bytes use the same indices (d/32 < d/16 chunks).
      uint4 v[kRowsInFlight][2];
      uint8_t sb[kRowsInFlight][2];
      const bool second = c0 + G < n_chunks;
      const bool scale0 = !kFused && c0 < n_scale_bytes;
      const bool scale1 = !kFused && c0 + G < n_scale_bytes;
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        v[u][0] = v[u][1] = make_uint4(0, 0, 0, 0);
        sb[u][0] = sb[u][1] = 0;
        if (state[u] == 1) {
          v[u][0] = __ldg(reinterpret_cast<const uint4*>(pay[u]) + c0);
          if (second) v[u][1] = __ldg(reinterpret_cast<const uint4*>(pay[u]) + c0 + G);
          if (scale0) sb[u][0] = __ldg(sca[u] + c0);
          if (scale1) sb[u][1] = __ldg(sca[u] + c0 + G);
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (state[u] != 0) {
          uint8_t* o = out + (row0 + u * kGroups) * out_stride;
          reinterpret_cast<uint4*>(o)[c0] = v[u][0];
          if (second) reinterpret_cast<uint4*>(o)[c0 + G] = v[u][1];
          if (scale0) o[16 * static_cast<int64_t>(n_chunks) + c0] = sb[u][0];
          if (scale1) o[16 * static_cast<int64_t>(n_chunks) + c0 + G] = sb[u][1];
        }
      }
    }
  }
}

// Checked mode: count ids >= rows and find the first such position (atomicMin on the position).
__global__ static void check_ids_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t rows,
                                        unsigned long long* __restrict__ result) {
  unsigned count = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (ids[i] >= rows) {
      ++count;
      atomicMin(&result[1], static_cast<unsigned long long>(i));
    }
  }
  count = __reduce_add_sync(0xFFFFFFFFu, count);
  if ((threadIdx.x & 31) == 0 && count) atomicAdd(&result[0], static_cast<unsigned long long>(count));
}

// ---- launchers ------------------------------------------------------------------------------------

namespace {

KernelTable kernel_table(const UvaTable& t) {
  const TableView& v = t.host_view();
  KernelTable k{};
  k.rows = v.rows;
  k.stride = v.stride_bytes;
  k.d = v.d;
  k.local_heads = v.slice.local_heads;
  k.heads = v.slice.heads;
  k.head_begin = v.slice.head_begin;
  k.row_begin = v.slice.row_begin;
  k.id_limit = v.id_limit();
  if (t.uniform()) {
    k.data = v.data + t.uniform_delta();
    k.scales = v.scales ? v.scales + t.uniform_delta() : nullptr;
    k.segs = nullptr;
    k.n_segs = 0;
  } else {
    k.data = v.data;
    k.scales = v.scales;
    k.segs = t.device_segments();
    k.n_segs = static_cast<int>(t.segments().size());
  }
  return k;
}


// cap: the grid cap in blocks (GridCap::blocks_for), >= 1.
LaunchInfo plan_launch(int64_t rows, int d, int cap) {
  LaunchInfo info;
  info.rows = rows;
  info.lanes_per_row = lanes_per_row(d);
  info.block_threads = kBlockThreads;
  info.cap = cap;
  // One row per lane group when the batch fits in one wave of the capped grid, else kRowsInFlightLarge.
  const int64_t small_tile = tile_rows_for(info.lanes_per_row, 1);
  info.rows_in_flight = (rows + small_tile - 1) / small_tile <= info.cap ? 1 : kRowsInFlightLarge;
  info.tile_rows = tile_rows_for(info.lanes_per_row, info.rows_in_flight);
  info.tiles = (rows + info.tile_rows - 1) / info.tile_rows;
  info.grid = static_cast<int>(std::min<int64_t>(info.tiles, info.cap));
  return info;
}

template <int U, bool kFused>
cudaError_t launch_lookup_gu(int g, const LaunchInfo& li, const KernelTable& kt, const LookupArgs& a,
                             cudaStream_t s) {
#define ENGRAM_LOOKUP_CASE(G)                                                                                  \
  case G:                                                                                                      \
    lookup_kernel<G, U, kFused><<<li.grid, kBlockThreads, 0, s>>>(kt, a.ids, li.rows, li.tiles, a.out, a.counters); \
    break;
  switch (g) {
    ENGRAM_LOOKUP_CASE(2)
    ENGRAM_LOOKUP_CASE(4)
    ENGRAM_LOOKUP_CASE(8)
    ENGRAM_LOOKUP_CASE(16)
    ENGRAM_LOOKUP_CASE(32)
    default:
      return cudaErrorInvalidValue;
  }
#undef ENGRAM_LOOKUP_CASE
  return cudaGetLastError();
}

template <bool kFused>
cudaError_t launch_lookup_g(int g, const LaunchInfo& li, const KernelTable& kt, const LookupArgs& a,
                            cudaStream_t s) {
  return li.rows_in_flight == 1 ? launch_lookup_gu<1, kFused>(g, li, kt, a, s)
                                : launch_lookup_gu<kRowsInFlightLarge, kFused>(g, li, kt, a, s);
}

template <int U, bool kFused>
cudaError_t launch_gather_gu(int g, const LaunchInfo& li, const KernelTable& kt, const GatherArgs& a,
                             int64_t out_stride, int n_chunks, int n_scale_bytes, cudaStream_t s) {
#define ENGRAM_GATHER_CASE(G)                                                                             \
  case G:                                                                                                 \
    gather_kernel<G, U, kFused><<<li.grid, kBlockThreads, 0, s>>>(kt, a.ids, li.rows, li.tiles, a.out, out_stride, \
                                                                  n_chunks, n_scale_bytes);               \
    break;
  switch (g) {
    ENGRAM_GATHER_CASE(2)
    ENGRAM_GATHER_CASE(4)
    ENGRAM_GATHER_CASE(8)
    ENGRAM_GATHER_CASE(16)
    ENGRAM_GATHER_CASE(32)
    default:
      return cudaErrorInvalidValue;
  }
#undef ENGRAM_GATHER_CASE
  return cudaGetLastError();
}

template <bool kFused>
cudaError_t launch_gather_g(int g, const LaunchInfo& li, const KernelTable& kt, const GatherArgs& a,
                            int64_t out_stride, int n_chunks, int n_scale_bytes, cudaStream_t s) {
  return li.rows_in_flight == 1
             ? launch_gather_gu<1, kFused>(g, li, kt, a, out_stride, n_chunks, n_scale_bytes, s)
             : launch_gather_gu<kRowsInFlightLarge, kFused>(g, li, kt, a, out_stride, n_chunks, n_scale_bytes, s);
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

Result<int> resolve_sm_count(int sm_count) {
  if (sm_count > 0) return sm_count;
  int dev = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev), "lookup: cudaGetDevice");
  int n = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev),
                              "lookup: SM count");
  return n;
}

Status can_launch(const LookupArgs& a) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "lookup launch: " + m); };
  if (!a.table) return bad("no table");
  ENGRAM_RETURN_IF_ERROR(check_uva_view(a.table->host_view()));
  if (a.tokens < 0) return bad("tokens " + std::to_string(a.tokens) + " < 0");
  if (a.heads <= 0) return bad("heads " + std::to_string(a.heads) + " <= 0");
  const LayerSlice& sl = a.table->host_view().slice;
  if (sl.sliced() && a.heads != sl.heads)
    return bad("ids of " + std::to_string(a.heads) + " heads for a TP slice of a " + std::to_string(sl.heads) +
               "-head layer");
  const int64_t d = a.table->host_view().d;
  if (a.tokens > INT64_MAX / a.heads / d / 2) return bad("tokens * heads * d overflows");
  if (a.tokens * a.heads == 0) return Status::ok();
  if (!a.ids || !aligned(a.ids, 8)) return bad("ids must be a non-null 8-byte-aligned device pointer");
  if (!a.out || !aligned(a.out, 16)) return bad("out must be a non-null 16-byte-aligned device pointer");
  return Status::ok();
}

Result<IdCheck> check_ids(const UvaTable& table, const int64_t* ids, int64_t n, void* stream) {
  IdCheck r;
  if (n <= 0) return r;
  const auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(s, &cap), "check_ids: cudaStreamIsCapturing");
  if (cap != cudaStreamCaptureStatusNone)
    return Status(Code::kInvalidArgument, "checked lookup: the id check synchronises and cannot be captured");
  unsigned long long* dev = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&dev, 2 * sizeof(unsigned long long), s), "check_ids: cudaMallocAsync");
  unsigned long long host[2] = {0, ~0ull};
  cudaError_t err = cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, s);
  if (err == cudaSuccess) {
    const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 1024));
    check_ids_kernel<<<grid, 256, 0, s>>>(ids, n, table.host_view().id_limit(), dev);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpyAsync(host, dev, sizeof host, cudaMemcpyDeviceToHost, s);
  (void)cudaFreeAsync(dev, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  ENGRAM_CUDA_RETURN_IF_ERROR(err, "check_ids");
  r.invalid = static_cast<int64_t>(host[0]);
  if (r.invalid > 0) {
    r.first_position = static_cast<int64_t>(host[1]);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(&r.first_id, ids + r.first_position, sizeof(int64_t), cudaMemcpyDeviceToHost),
                                "check_ids: read first bad id");
  }
  return r;
}

Result<LaunchInfo> launch_lookup(const LookupArgs& a, void* stream) {
  ENGRAM_RETURN_IF_ERROR(can_launch(a));
  ENGRAM_ASSIGN_OR_RETURN(int sm, resolve_sm_count(a.sm_count));
  const TableView& v = a.table->host_view();
  LaunchInfo li = plan_launch(a.tokens * v.slice.out_heads(a.heads), v.d, a.grid_cap.blocks_for(sm));
  if (li.rows == 0) {
    li.grid = 0;
    return li;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.checked) {
    ENGRAM_ASSIGN_OR_RETURN(IdCheck chk, check_ids(*a.table, a.ids, a.tokens * a.heads, stream));
    if (chk.invalid > 0)
      return Status(Code::kInvalidArgument,
                    "checked lookup: " + std::to_string(chk.invalid) + " id(s) >= table rows " +
                        std::to_string(v.id_limit()) +
                        "; first at position " + std::to_string(chk.first_position) + " (id " +
                        std::to_string(chk.first_id) + "); nothing was written");
  }
  const KernelTable kt = kernel_table(*a.table);
  const cudaError_t err = v.format == RowFormat::kFused ? launch_lookup_g<true>(li.lanes_per_row, li, kt, a, s)
                                                        : launch_lookup_g<false>(li.lanes_per_row, li, kt, a, s);
  ENGRAM_CUDA_RETURN_IF_ERROR(err, "lookup kernel launch (grid " + std::to_string(li.grid) + ", rows " +
                                       std::to_string(li.rows) + ")");
  return li;
}

Status warm_lookup(const LookupArgs& a, void* stream) {
  ENGRAM_RETURN_IF_ERROR(can_launch(a));
  const TableView& v = a.table->host_view();
  LaunchInfo li = plan_launch(a.tokens * v.slice.out_heads(a.heads), v.d, 1);
  if (li.rows == 0) return Status::ok();
  const KernelTable kt = kernel_table(*a.table);
  const auto s = static_cast<cudaStream_t>(stream);
  for (const int u : {1, kRowsInFlightLarge}) {
    li.rows_in_flight = u;
    li.tile_rows = tile_rows_for(li.lanes_per_row, u);
    li.tiles = (li.rows + li.tile_rows - 1) / li.tile_rows;
    li.grid = 1;
    const cudaError_t err = v.format == RowFormat::kFused ? launch_lookup_g<true>(li.lanes_per_row, li, kt, a, s)
                                                          : launch_lookup_g<false>(li.lanes_per_row, li, kt, a, s);
    ENGRAM_CUDA_RETURN_IF_ERROR(err, "lookup kernel warm-up launch (" + std::to_string(u) + " rows in flight)");
  }
  return Status::ok();
}

int64_t plain_gather_out_stride(const TableView& v, GatherBytes what) {
  if (what == GatherBytes::kPayloadOnly) return v.d;
  if (v.format == RowFormat::kFused) return v.stride_bytes;
  return (v.d + v.d / 32 + 15) / 16 * 16;
}

Result<LaunchInfo> launch_plain_gather(const GatherArgs& a, void* stream) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "plain gather: " + m); };
  if (!a.table) return bad("no table");
  if (a.rows < 0) return bad("rows < 0");
  const TableView& v = a.table->host_view();
  ENGRAM_ASSIGN_OR_RETURN(int sm, resolve_sm_count(a.sm_count));
  LaunchInfo li = plan_launch(a.rows, v.d, a.grid_cap.blocks_for(sm));
  if (li.rows == 0) {
    li.grid = 0;
    return li;
  }
  if (!a.ids || !aligned(a.ids, 8) || !a.out || !aligned(a.out, 16)) return bad("ids/out null or misaligned");
  const int64_t out_stride = plain_gather_out_stride(v, a.what);
  const bool fused_bytes = v.format == RowFormat::kFused || a.what == GatherBytes::kPayloadOnly;
  // Fused kRowBytes: the whole record as 16-byte chunks. Payload-only: d/16 chunks of the row start (fused or
  // split). Split kRowBytes: d/16 payload chunks plus d/32 scale bytes.
  const int n_chunks = static_cast<int>(v.format == RowFormat::kFused && a.what == GatherBytes::kRowBytes
                                            ? v.stride_bytes / 16
                                            : v.d / 16);
  const int n_scale_bytes = fused_bytes ? 0 : v.d / 32;
  KernelTable kt = kernel_table(*a.table);
  const auto s = static_cast<cudaStream_t>(stream);
  const cudaError_t err =
      fused_bytes ? launch_gather_g<true>(li.lanes_per_row, li, kt, a, out_stride, n_chunks, n_scale_bytes, s)
                  : launch_gather_g<false>(li.lanes_per_row, li, kt, a, out_stride, n_chunks, n_scale_bytes, s);
  ENGRAM_CUDA_RETURN_IF_ERROR(err, "plain gather launch");
  return li;
}

}  // namespace engram::cuda
