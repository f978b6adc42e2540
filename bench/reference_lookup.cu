// See reference_lookup.hpp. One thread owns one 32-value scale group of one row: its two 16-byte payload loads and its
// scale byte come from the two arrays independently (two memory requests per group, as split storage costs), and its
// 32 bf16 values leave in four 16-byte stores.
#include <cuda_runtime.h>

#include <string>

#include "bench/reference_lookup.hpp"
#include "engram/format.hpp"

namespace engram::bench {
namespace {

constexpr int kRowsPerBlock = 16;
constexpr int kThreadsPerRow = 8;   // 256 values / 32 per thread
constexpr int kBlockThreads = kRowsPerBlock * kThreadsPerRow;  // 4 warps
constexpr int kD = 256;
static_assert(kThreadsPerRow * 32 == kD, "one thread per scale group");

__device__ __forceinline__ uint32_t pack2(float a, float b) {
  return static_cast<uint32_t>(float_to_bf16_rne(a)) | (static_cast<uint32_t>(float_to_bf16_rne(b)) << 16);
}

__global__ void __launch_bounds__(kBlockThreads) reference_split_lookup(const uint8_t* __restrict__ payload,
                                                                        const uint8_t* __restrict__ scales,
                                                                        int64_t table_rows,
                                                                        const int64_t* __restrict__ ids, int64_t rows,
                                                                        uint16_t* __restrict__ out) {
  const int group = threadIdx.x % kThreadsPerRow;
  const int row_in_block = threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; base < rows; base += step) {
    const int64_t row = base + row_in_block;
    if (row >= rows) continue;
    const int64_t id = ids[row];
    const bool owned = id >= 0 && id < table_rows;
    uint4 v[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    uint32_t sc = 0;
    if (owned) {
      const uint4* p = reinterpret_cast<const uint4*>(payload + id * kD + group * 32);
      v[0] = p[0];
      v[1] = p[1];
      sc = scales[id * (kD / 32) + group];
    }
    const float s = __int_as_float(static_cast<int>(sc << 23));  // ue8m0: the byte is the float's exponent field
    const uint8_t* b = reinterpret_cast<const uint8_t*>(v);
    uint4 o[4];
    uint32_t* w = reinterpret_cast<uint32_t*>(o);
#pragma unroll
    for (int k = 0; k < 16; ++k)
      w[k] = owned ? pack2(fp8_e4m3_to_float(b[2 * k]) * s, fp8_e4m3_to_float(b[2 * k + 1]) * s) : 0u;
    uint4* dst = reinterpret_cast<uint4*>(out + row * kD + group * 32);
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[k] = o[k];
  }
}

}  // namespace

Result<ReferenceLaunch> launch_reference_lookup(const ReferenceLookupArgs& a, void* stream) {
  if (a.d != kD) return Status(Code::kInvalidArgument, "reference lookup: d " + std::to_string(a.d) + " (only 256)");
  if (a.rows < 0) return Status(Code::kInvalidArgument, "reference lookup: rows < 0");
  ReferenceLaunch l;
  if (a.rows == 0) return l;
  if (!a.payload || !a.scales || !a.ids || !a.out || reinterpret_cast<uintptr_t>(a.payload) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.out) % 16 != 0 || reinterpret_cast<uintptr_t>(a.ids) % 8 != 0)
    return Status(Code::kInvalidArgument, "reference lookup: null or misaligned payload, scales, ids or out");
  int cap = a.grid_cap;
  if (cap <= 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&cap, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(Code::kCuda, "reference lookup: SM count");
    }
  }
  l.tiles = (a.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  l.grid = static_cast<int>(l.tiles < cap ? l.tiles : cap);
  reference_split_lookup<<<l.grid, kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(a.payload, a.scales, a.table_rows,
                                                                                          a.ids, a.rows, a.out);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status(Code::kCuda, std::string("reference lookup launch: ") + cudaGetErrorString(e), e);
  return l;
}

}  // namespace engram::bench
