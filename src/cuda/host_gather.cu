// Host gather + DMA (see host_gather.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/dedup.cuh"
#include "cuda/host_gather.cuh"

namespace engram::cuda {

Result<std::unique_ptr<HostGather>> HostGather::create(const TableView& v, int64_t max_rows, int threads,
                                                       int64_t chunk_rows) {
  if (!v.data || v.rows <= 0 || v.d <= 0 || v.d % 32 != 0 || max_rows <= 0 || chunk_rows <= 0)
    return Status(Code::kInvalidArgument, "host gather: malformed view or sizes");
  std::unique_ptr<HostGather> h(new HostGather());
  h->view_ = v;
  h->max_rows_ = max_rows;
  h->chunk_ = std::min(chunk_rows, max_rows);
  h->rec_ = (v.d + v.d / 32 + 15) / 16 * 16;
  h->pool_ = std::make_unique<ThreadPool>(threads);
  for (int b = 0; b < 2; ++b) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h->pinned_[b], static_cast<size_t>(h->chunk_ * h->rec_)),
                                "host gather: pinned staging");
    cudaEvent_t e = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "host gather: event");
    h->ev_[b] = e;
  }
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&h->d_records_, static_cast<size_t>(max_rows * h->rec_)),
                              "host gather: device records");
  return std::move(h);
}

HostGather::~HostGather() {
  for (int b = 0; b < 2; ++b) {
    if (ev_[b]) {
      (void)cudaEventSynchronize(static_cast<cudaEvent_t>(ev_[b]));
      (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev_[b]));
    }
    if (pinned_[b]) (void)cudaFreeHost(pinned_[b]);
  }
  if (d_records_) (void)cudaFree(d_records_);
  (void)cudaGetLastError();
}

Status HostGather::run(const int64_t* ids, int64_t n, uint16_t* out, int cap_blocks, void* stream) {
  if (n <= 0) return Status::ok();
  if (n > max_rows_)
    return Status(Code::kInvalidArgument, "host gather: " + std::to_string(n) + " rows > capacity " + std::to_string(max_rows_));
  const auto s = static_cast<cudaStream_t>(stream);
  const int d = view_.d;
  const bool fused_contig = view_.format == RowFormat::kFused && view_.stride_bytes == rec_;
  for (int64_t c0 = 0, c = 0; c0 < n; c0 += chunk_, ++c) {
    const int b = static_cast<int>(c & 1);
    if (ev_used_[b])  // the copy out of this buffer (two chunks ago) must be done before it is refilled
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_[b])), "host gather: wait buffer");
    const int64_t m = std::min(chunk_, n - c0);
    uint8_t* dst = pinned_[b];
    pool_->parallel_for(m, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t id = ids[c0 + i];
        uint8_t* r = dst + i * rec_;
        if (id < 0 || id >= view_.rows) {
          std::memset(r, 0, static_cast<size_t>(rec_));
        } else if (fused_contig) {
          std::memcpy(r, view_.payload_of(id), static_cast<size_t>(rec_));
        } else {
          std::memcpy(r, view_.payload_of(id), static_cast<size_t>(d));
          std::memcpy(r + d, view_.scales_of(id), static_cast<size_t>(d / 32));
          std::memset(r + d + d / 32, 0, static_cast<size_t>(rec_ - d - d / 32));
        }
      }
    });
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_records_ + c0 * rec_, dst, static_cast<size_t>(m * rec_),
                                                cudaMemcpyHostToDevice, s),
                                "host gather: H2D copy");
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_[b]), s), "host gather: record");
    ev_used_[b] = true;
  }
  FastGatherArgs g;
  g.rows_base = d_records_;
  g.stride = rec_;
  g.d = d;
  g.fused = true;
  g.ids = nullptr;
  g.n = n;
  g.out = out;
  g.cap = cap_blocks;
  return launch_fast_gather(g, stream);
}

}  // namespace engram::cuda
