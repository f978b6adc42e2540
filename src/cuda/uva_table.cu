// UvaTable (see lookup_kernel.cuh): a registered host table as the lookup kernels address it. make() checks the
// view, collects the registered chunks that hold its rows and scales, and decides between one host->device
// offset and a per-chunk segment table in device memory. Host code only; the kernels that read through it and
// their launchers are in lookup_kernel.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/cuda_status.cuh"
#include "cuda/lookup_kernel.cuh"

namespace engram::cuda {

void UvaTable::DeviceFree::operator()(UvaSegment* p) const {
  if (p) (void)cudaFree(p);
}

Status check_uva_view(const TableView& v) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "UVA table: " + m); };
  if (v.d <= 0 || v.d % 32 != 0) return bad("d = " + std::to_string(v.d) + " is not a positive multiple of 32");
  const LayerSlice& sl = v.slice;
  if (sl.sliced()) {
    if (sl.heads <= 0 || sl.head_begin < 0 || sl.row_begin < 0 || sl.rows() != v.rows || sl.row_end > sl.layer_rows)
      return bad("TP slice of rows [" + std::to_string(sl.row_begin) + ", " + std::to_string(sl.row_end) + ") of " +
                 std::to_string(sl.layer_rows) + " does not describe the view's " + std::to_string(v.rows) + " rows");
    if (v.rows == 0) return Status::ok();  // a rank without heads: nothing is ever read
  }
  if (!v.data) return bad("null data pointer");
  if (v.rows <= 0) return bad("rows " + std::to_string(v.rows) + " (must be > 0)");
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) return bad("payload base is not 16-byte aligned");
  if (v.format == RowFormat::kFused) {
    if (v.stride_bytes < v.d + v.d / 32 || v.stride_bytes % 16 != 0)
      return bad("fused stride " + std::to_string(v.stride_bytes) + " B must be >= d + d/32 and a multiple of 16");
  } else {
    if (v.stride_bytes != v.d) return bad("split stride " + std::to_string(v.stride_bytes) + " B must equal d");
    if (!v.scales) return bad("split layout without a scale array");
  }
  return Status::ok();
}

namespace {

// Whether [p, p + n) is covered by the union of the (sorted, possibly adjacent) segments.
bool covered(const std::vector<UvaSegment>& segs, uint64_t p, uint64_t n) {
  uint64_t at = p;
  const uint64_t end = p + n;
  bool progress = true;
  while (at < end && progress) {
    progress = false;
    for (const auto& s : segs) {
      if (at >= s.host_begin && at < s.host_end) {
        at = s.host_end;
        progress = true;
        break;
      }
    }
  }
  return at >= end;
}

}  // namespace

Result<UvaTable> UvaTable::make(const TableView& host_view, const std::vector<const HostRegistration*>& regs,
                                bool force_segments) {
  ENGRAM_RETURN_IF_ERROR(check_uva_view(host_view));
  UvaTable t;
  t.view_ = host_view;
  for (const HostRegistration* r : regs) {
    if (!r) continue;
    for (const auto& c : r->chunks()) {
      UvaSegment s;
      s.host_begin = reinterpret_cast<uint64_t>(c.host);
      s.host_end = s.host_begin + static_cast<uint64_t>(c.bytes);
      s.delta = static_cast<int64_t>(reinterpret_cast<uint64_t>(c.device) - s.host_begin);
      t.segments_.push_back(s);
    }
  }
  std::sort(t.segments_.begin(), t.segments_.end(),
            [](const UvaSegment& a, const UvaSegment& b) { return a.host_begin < b.host_begin; });
  const auto& v = host_view;
  const uint64_t payload_bytes = static_cast<uint64_t>(v.rows) * static_cast<uint64_t>(v.stride_bytes);
  if (!covered(t.segments_, reinterpret_cast<uint64_t>(v.data), payload_bytes))
    return Status(Code::kInvalidArgument, "UVA table: the " + std::to_string(payload_bytes) +
                                              " B of rows are not wholly inside registered host memory");
  if (v.format == RowFormat::kSplit &&
      !covered(t.segments_, reinterpret_cast<uint64_t>(v.scales), static_cast<uint64_t>(v.rows) * (v.d / 32)))
    return Status(Code::kInvalidArgument, "UVA table: the scale array is not wholly inside registered host memory");
  // Only the segments this table touches matter for uniformity.
  std::vector<UvaSegment> used;
  for (const auto& s : t.segments_) {
    const uint64_t a = reinterpret_cast<uint64_t>(v.data);
    const bool hits_payload = s.host_end > a && s.host_begin < a + payload_bytes;
    bool hits_scales = false;
    if (v.format == RowFormat::kSplit) {
      const uint64_t b = reinterpret_cast<uint64_t>(v.scales);
      hits_scales = s.host_end > b && s.host_begin < b + static_cast<uint64_t>(v.rows) * (v.d / 32);
    }
    if (hits_payload || hits_scales) used.push_back(s);
  }
  t.segments_ = used;
  if (t.segments_.empty()) return std::move(t);  // a TP rank without heads: no memory, nothing to translate
  if (t.segments_.size() > 4096) return Status(Code::kInvalidArgument, "UVA table: more than 4096 chunks");
  t.uniform_ = !force_segments;
  for (const auto& s : t.segments_)
    if (s.delta != t.segments_.front().delta) t.uniform_ = false;
  t.delta_ = t.uniform_ ? t.segments_.front().delta : 0;
  if (t.uniform_ && t.delta_ % 16 != 0)
    return Status(Code::kInvalidArgument, "UVA table: device offset is not 16-byte aligned");
  for (const auto& s : t.segments_)
    if (s.delta % 16 != 0) return Status(Code::kInvalidArgument, "UVA table: a chunk's device offset is not 16-byte aligned");
  if (!t.uniform_) {
    UvaSegment* dev = nullptr;
    const size_t bytes = sizeof(UvaSegment) * t.segments_.size();
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&dev, bytes), "UVA table: cudaMalloc(segment table)");
    t.dev_segments_.reset(dev);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(dev, t.segments_.data(), bytes, cudaMemcpyHostToDevice),
                                "UVA table: copy segment table");
  }
  return std::move(t);  // C++17: no implicit move into Result<T>(T)
}

}  // namespace engram::cuda
