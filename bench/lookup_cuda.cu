// CUDA side of `engram bench lookup` (see gpu.hpp): registration of the host table, device id sets, the timed
// lookup / plain-gather launches with the translation scrub and L2 flush of the former engram_bench_lookup_gpu
// (so figures stay comparable with docs/results/2026-11-29-h200-cuda.md), the pinned-copy link ceiling, and the
// host-gather + DMA path. Also gpu_waiver(), shared by every GPU bench.
#include <cuda_runtime.h>

#include <cstring>
#include <random>

#include "bench/gpu.hpp"
#include "cpu/lookup.hpp"
#include "cpu/thread_pool.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/device.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"

namespace engram::bench {
namespace {

using cuda::cuda_status;
#define BENCH_CK(call) ENGRAM_RETURN_IF_ERROR(cuda_status((call), #call))

class Session final : public GpuLookupSession {
 public:
  ~Session() override {
    if (stream_) cudaStreamSynchronize(stream_);
    uva_.reset();
    if (reg_) (void)reg_->release();
    for (void* p : {static_cast<void*>(ids_), static_cast<void*>(out_), static_cast<void*>(gout_),
                    static_cast<void*>(scrub_ids_), static_cast<void*>(scrub_out_), flush_, devbuf_})
      if (p) cudaFree(p);
    if (pinned_) cudaFreeHost(pinned_);
    if (staging_) cudaFreeHost(staging_);
    if (e0_) cudaEventDestroy(e0_);
    if (e1_) cudaEventDestroy(e1_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status open(const TableView& view, int64_t table_bytes, int64_t max_rows, int sets, int64_t scrub_rows,
              uint64_t seed) {
    view_ = view;
    max_rows_ = max_rows;
    sets_ = sets;
    auto dev = cuda::device_info(0);
    if (!dev.is_ok()) return dev.status();
    info_["device"] = {{"name", dev->name}, {"sm_count", dev->sm_count}, {"l2_bytes", dev->l2_bytes},
                       {"driver_version", dev->driver_version}, {"runtime_version", dev->runtime_version}};
    BENCH_CK(cudaSetDevice(0));
    BENCH_CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CK(cudaEventCreate(&e0_));
    BENCH_CK(cudaEventCreate(&e1_));
    // Link ceiling: 1 GiB pinned copies, median of 5 after one warm-up.
    const size_t copy_bytes = size_t{1} << 30;
    BENCH_CK(cudaMallocHost(&pinned_, copy_bytes));
    BENCH_CK(cudaMalloc(&devbuf_, copy_bytes));
    std::memset(pinned_, 0x3C, copy_bytes);
    ENGRAM_ASSIGN_OR_RETURN(h2d_, copy_gbps(devbuf_, pinned_, copy_bytes, cudaMemcpyHostToDevice));
    ENGRAM_ASSIGN_OR_RETURN(const double d2h, copy_gbps(pinned_, devbuf_, copy_bytes, cudaMemcpyDeviceToHost));
    // Registration of the table (prefault + cudaHostRegister, timed by the registration code).
    cuda::RegistrationOptions ro;
    ro.boundary_bytes = view.format == RowFormat::kFused ? view.stride_bytes : view.d;
    auto reg = cuda::HostRegistration::register_range(view.data, table_bytes, ro);
    if (!reg.is_ok()) return reg.status().with_context("register the table");
    reg_ = std::make_unique<cuda::HostRegistration>(std::move(*reg));
    auto uva = cuda::UvaTable::make(view, {reg_.get()});
    if (!uva.is_ok()) return uva.status();
    uva_ = std::make_unique<cuda::UvaTable>(std::move(*uva));
    const double gib = static_cast<double>(reg_->bytes()) / double(1ull << 30);
    const size_t from_table = static_cast<size_t>(std::min<int64_t>(copy_bytes, table_bytes));
    ENGRAM_ASSIGN_OR_RETURN(const double h2d_table, copy_gbps(devbuf_, view.data, from_table, cudaMemcpyHostToDevice));
    info_["ceilings"] = {{"h2d_pinned_gbps", json_num(h2d_)}, {"d2h_pinned_gbps", json_num(d2h)},
                         {"h2d_from_registered_table_gbps", json_num(h2d_table)}, {"copy_bytes", copy_bytes}};
    info_["registration"] = {{"bytes", reg_->bytes()},
                             {"chunks", reg_->chunks().size()},
                             {"prefault_s", reg_->prefault_ns() * 1e-9},
                             {"register_s", reg_->register_ns() * 1e-9},
                             {"register_s_per_gib", reg_->register_ns() * 1e-9 / gib},
                             {"device_equals_host", reg_->device_equals_host()}};
    // Device buffers.
    BENCH_CK(cudaMalloc(&ids_, static_cast<size_t>(max_rows) * sets * sizeof(int64_t)));
    BENCH_CK(cudaMalloc(&out_, static_cast<size_t>(max_rows) * view.d * 2));
    BENCH_CK(cudaMalloc(&gout_, static_cast<size_t>(max_rows) *
                                    cuda::plain_gather_out_stride(view, cuda::GatherBytes::kRowBytes)));
    BENCH_CK(cudaMalloc(&flush_, flush_bytes_));
    if (scrub_rows > 0) {
      scrub_rows_ = scrub_rows;
      std::vector<int64_t> h(static_cast<size_t>(scrub_rows));
      std::mt19937_64 r(seed + 7);
      for (auto& x : h) x = static_cast<int64_t>(r() % static_cast<uint64_t>(view.rows));
      BENCH_CK(cudaMalloc(&scrub_ids_, h.size() * 8));
      BENCH_CK(cudaMalloc(&scrub_out_, h.size() * static_cast<size_t>(cuda::plain_gather_out_stride(
                                                      view, cuda::GatherBytes::kPayloadOnly))));
      BENCH_CK(cudaMemcpy(scrub_ids_, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
    }
    // host-gather + DMA staging: pinned BF16 buffer of max_rows rows.
    BENCH_CK(cudaMallocHost(&staging_, static_cast<size_t>(max_rows) * view.d * 2));
    info_["method"] = {{"timer", "cudaEvent around one launch"}, {"l2_flush_bytes", flush_bytes_},
                       {"tlb_scrub_rows", scrub_rows}};
    return Status::ok();
  }

  nlohmann::json info() const override { return info_; }
  double h2d_pinned_gbps() const override { return h2d_; }

  Status set_ids(int set, const std::vector<int64_t>& ids) override {
    if (set < 0 || set >= sets_ || static_cast<int64_t>(ids.size()) > max_rows_)
      return Status(Code::kInvalidArgument, "bench lookup: id set out of range");
    BENCH_CK(cudaMemcpy(ids_ + static_cast<size_t>(set) * max_rows_, ids.data(), ids.size() * 8,
                        cudaMemcpyHostToDevice));
    return Status::ok();
  }

  Result<Sample> lookup(int set, int64_t tokens, int heads, double fraction) override {
    ENGRAM_RETURN_IF_ERROR(prepare(set));
    cuda::LookupArgs la;
    la.table = uva_.get();
    la.ids = ids_ + static_cast<size_t>(set) * max_rows_;
    la.tokens = tokens;
    la.heads = heads;
    la.out = out_;
    ENGRAM_ASSIGN_OR_RETURN(la.grid_cap, GridCap::of_fraction(fraction));
    BENCH_CK(cudaEventRecord(e0_, stream_));
    auto li = cuda::launch_lookup(la, stream_);
    if (!li.is_ok()) return li.status();
    return finish(*li);
  }

  Result<Sample> gather(int set, int64_t rows, bool payload_only) override {
    ENGRAM_RETURN_IF_ERROR(prepare(set));
    cuda::GatherArgs ga;
    ga.table = uva_.get();
    ga.ids = ids_ + static_cast<size_t>(set) * max_rows_;
    ga.rows = rows;
    ga.out = gout_;
    ga.what = payload_only ? cuda::GatherBytes::kPayloadOnly : cuda::GatherBytes::kRowBytes;
    BENCH_CK(cudaEventRecord(e0_, stream_));
    auto li = cuda::launch_plain_gather(ga, stream_);
    if (!li.is_ok()) return li.status();
    return finish(*li);
  }

  Result<Sample> host_gather_dma(const std::vector<int64_t>& ids, int64_t tokens, int heads,
                                 ThreadPool* pool) override {
    LookupRequest req;
    req.ids = ids.data();
    req.tokens = tokens;
    req.heads = heads;
    req.out = staging_;
    const double t0 = now_ns();
    auto st = cpu::lookup(view_, req, pool);
    if (!st.is_ok()) return st.status();
    BENCH_CK(cudaMemcpyAsync(out_, staging_, static_cast<size_t>(tokens) * heads * view_.d * 2,
                             cudaMemcpyHostToDevice, stream_));
    BENCH_CK(cudaStreamSynchronize(stream_));
    Sample s;
    s.ns = now_ns() - t0;
    return s;
  }

 private:
  Result<double> copy_gbps(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    std::vector<double> v;
    for (int i = 0; i < 6; ++i) {
      BENCH_CK(cudaEventRecord(e0_, stream_));
      BENCH_CK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
      BENCH_CK(cudaEventRecord(e1_, stream_));
      BENCH_CK(cudaEventSynchronize(e1_));
      float ms = 0;
      BENCH_CK(cudaEventElapsedTime(&ms, e0_, e1_));
      if (i > 0) v.push_back(static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
    }
    return stats::median(v);
  }

  // Translation scrub + L2 flush before the timed launch (both on the stream, outside the events).
  Status prepare(int set) {
    if (scrub_ids_) {
      cuda::GatherArgs sa;
      sa.table = uva_.get();
      sa.ids = scrub_ids_;
      sa.rows = scrub_rows_;
      sa.out = scrub_out_;
      sa.what = cuda::GatherBytes::kPayloadOnly;
      auto r = cuda::launch_plain_gather(sa, stream_);
      if (!r.is_ok()) return r.status().with_context("tlb scrub");
    }
    BENCH_CK(cudaMemsetAsync(flush_, set & 0xFF, flush_bytes_, stream_));
    return Status::ok();
  }

  Result<Sample> finish(const cuda::LaunchInfo& li) {
    BENCH_CK(cudaEventRecord(e1_, stream_));
    BENCH_CK(cudaEventSynchronize(e1_));
    float ms = 0;
    BENCH_CK(cudaEventElapsedTime(&ms, e0_, e1_));
    Sample s;
    s.ns = static_cast<double>(ms) * 1e6;
    s.grid = li.grid;
    s.tiles = li.tiles;
    return s;
  }

  TableView view_{};
  int64_t max_rows_ = 0;
  int sets_ = 0;
  int64_t scrub_rows_ = 0;
  size_t flush_bytes_ = size_t{256} << 20;
  double h2d_ = stats::kNaN;
  nlohmann::json info_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  std::unique_ptr<cuda::HostRegistration> reg_;
  std::unique_ptr<cuda::UvaTable> uva_;
  int64_t* ids_ = nullptr;
  uint16_t* out_ = nullptr;
  uint8_t* gout_ = nullptr;
  int64_t* scrub_ids_ = nullptr;
  uint8_t* scrub_out_ = nullptr;
  void* flush_ = nullptr;
  void* devbuf_ = nullptr;
  void* pinned_ = nullptr;
  uint16_t* staging_ = nullptr;
};

}  // namespace

std::optional<std::string> gpu_waiver() {
  auto d = cuda::device_info(0);
  if (!d.is_ok()) return d.status().message();  // says "no usable CUDA device: <runtime reason>"
  return std::nullopt;
}

Result<std::unique_ptr<GpuLookupSession>> open_gpu_lookup(const TableView& view, int64_t table_bytes,
                                                          int64_t max_rows, int sets, int64_t tlb_scrub_rows,
                                                          uint64_t seed) {
  auto s = std::make_unique<Session>();
  ENGRAM_RETURN_IF_ERROR(s->open(view, table_bytes, max_rows, sets, tlb_scrub_rows, seed));
  return std::unique_ptr<GpuLookupSession>(std::move(s));
}

}  // namespace engram::bench
