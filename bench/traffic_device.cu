// See traffic_device.hpp.
#include <cuda_runtime.h>

#include <string>

#include "bench/gpu.hpp"
#include "bench/traffic_device.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"

namespace engram::bench {
namespace {

using cuda::cuda_status;
#define TD_CK(call) ENGRAM_RETURN_IF_ERROR(cuda_status((call), #call))

constexpr size_t kFlushBytes = size_t{256} << 20;

class CudaTrafficDevice final : public TrafficDevice {
 public:
  ~CudaTrafficDevice() override {
    if (s_) (void)cudaStreamSynchronize(s_);
    uva_.reset();
    if (reg_) (void)reg_->release();
    for (void* p : {flush_, static_cast<void*>(d_ids_), static_cast<void*>(d_out_)})
      if (p) (void)cudaFree(p);
    if (h_out_) (void)cudaFreeHost(h_out_);
    if (e0_) (void)cudaEventDestroy(e0_);
    if (e1_) (void)cudaEventDestroy(e1_);
    if (s_) (void)cudaStreamDestroy(s_);
  }

  Status init(int64_t max_ids, int calls, int d) {
    max_ids_ = max_ids;
    calls_ = calls;
    out_bytes_ = 2 * static_cast<size_t>(d) * static_cast<size_t>(max_ids);
    TD_CK(cudaSetDevice(0));
    TD_CK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, 0));
    TD_CK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    TD_CK(cudaEventCreate(&e0_));
    TD_CK(cudaEventCreate(&e1_));
    TD_CK(cudaMalloc(&flush_, kFlushBytes));
    TD_CK(cudaMalloc(&d_ids_, 8 * static_cast<size_t>(max_ids) * static_cast<size_t>(calls)));
    TD_CK(cudaMalloc(&d_out_, out_bytes_));
    TD_CK(cudaMallocHost(&h_out_, out_bytes_));
    return Status::ok();
  }

  int sm_count() const override { return sm_count_; }
  void* stream() const override { return s_; }

  Result<double> register_split(const TableView& view, int64_t bytes) override {
    cuda::RegistrationOptions ro;
    ro.boundary_bytes = view.d;  // the scale array follows the payload array: chunk ends fall on payload rows
    const double t0 = now_ns();
    auto reg = cuda::HostRegistration::register_range(view.data, bytes, ro);
    if (!reg.is_ok()) return reg.status().with_context("traffic: register the split table");
    reg_ = std::make_unique<cuda::HostRegistration>(std::move(*reg));
    auto uva = cuda::UvaTable::make(view, {reg_.get()});
    if (!uva.is_ok()) return uva.status().with_context("traffic: split table");
    uva_ = std::make_unique<cuda::UvaTable>(std::move(*uva));
    if (!uva_->uniform())
      return Status(Code::kUnsupported, "traffic: the split table's registered chunks have different device offsets "
                                        "(no cudaDevAttrCanUseHostPointerForRegisteredMem): the reference arm needs one");
    view_ = view;
    return (now_ns() - t0) * 1e-9;
  }

  Status upload_ids(int call, const int64_t* ids, int64_t n) override {
    if (call < 0 || call >= calls_ || n > max_ids_) return Status(Code::kInternal, "traffic: ids out of the device buffer");
    TD_CK(cudaMemcpyAsync(d_ids_ + static_cast<int64_t>(call) * max_ids_, ids, 8 * static_cast<size_t>(n),
                          cudaMemcpyHostToDevice, s_));
    TD_CK(cudaStreamSynchronize(s_));
    return Status::ok();
  }
  const int64_t* device_ids(int call) const override { return d_ids_ + static_cast<int64_t>(call) * max_ids_; }
  uint16_t* device_out() const override { return d_out_; }

  Status flush(void* stream, int value) override {
    TD_CK(cudaMemsetAsync(flush_, value & 0xFF, kFlushBytes, static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }

  Result<double> time_launch(const std::function<Status(void* stream)>& launch) override {
    ENGRAM_RETURN_IF_ERROR(flush(s_, ++flushes_));
    TD_CK(cudaEventRecord(e0_, s_));
    ENGRAM_RETURN_IF_ERROR(launch(s_));
    TD_CK(cudaEventRecord(e1_, s_));
    TD_CK(cudaEventSynchronize(e1_));
    float ms = 0;
    TD_CK(cudaEventElapsedTime(&ms, e0_, e1_));
    return static_cast<double>(ms) * 1e6;
  }

  Result<ReferenceLaunch> launch_reference(void* stream, int call, int64_t rows) override {
    if (!uva_) return Status(Code::kInternal, "traffic: the split table is not registered");
    ReferenceLookupArgs a;
    a.payload = view_.data + uva_->uniform_delta();
    a.scales = view_.scales + uva_->uniform_delta();
    a.table_rows = view_.rows;
    a.d = view_.d;
    a.ids = device_ids(call);
    a.rows = rows;
    a.out = d_out_;
    a.grid_cap = sm_count_;
    return launch_reference_lookup(a, stream);
  }

  Result<int> launch_plain_split(void* stream, int call, int64_t tokens, int heads) override {
    if (!uva_) return Status(Code::kInternal, "traffic: the split table is not registered");
    cuda::LookupArgs a;
    a.table = uva_.get();
    a.ids = device_ids(call);
    a.tokens = tokens;
    a.heads = heads;
    a.out = d_out_;
    a.grid_cap = GridCap::all_sms();
    a.sm_count = sm_count_;
    ENGRAM_ASSIGN_OR_RETURN(const cuda::LaunchInfo li, cuda::launch_lookup(a, stream));
    return li.grid;
  }

  Result<const uint16_t*> copy_out(const void* src, size_t bytes) override {
    if (bytes > out_bytes_) return Status(Code::kInternal, "traffic: output larger than the host buffer");
    TD_CK(cudaMemcpy(h_out_, src, bytes, cudaMemcpyDeviceToHost));
    return static_cast<const uint16_t*>(h_out_);
  }

 private:
  cudaStream_t s_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  void* flush_ = nullptr;
  int64_t* d_ids_ = nullptr;
  uint16_t* d_out_ = nullptr;
  uint16_t* h_out_ = nullptr;
  size_t out_bytes_ = 0;
  int64_t max_ids_ = 0;
  int calls_ = 0;
  int sm_count_ = 0;
  int flushes_ = 0;
  TableView view_;
  std::unique_ptr<cuda::HostRegistration> reg_;
  std::unique_ptr<cuda::UvaTable> uva_;
};

}  // namespace

Result<std::unique_ptr<TrafficDevice>> open_traffic_device(int64_t max_ids, int calls, int d) {
  if (auto w = gpu_waiver()) return Status(Code::kUnsupported, *w);
  auto dev = std::make_unique<CudaTrafficDevice>();
  ENGRAM_RETURN_IF_ERROR(dev->init(max_ids, calls, d));
  return std::unique_ptr<TrafficDevice>(std::move(dev));
}

}  // namespace engram::bench
