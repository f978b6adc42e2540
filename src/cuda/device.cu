// Device discovery for the CUDA backend (see device.cuh).
#include <cuda_runtime.h>

#include "cuda/cuda_status.cuh"
#include "cuda/device.cuh"

namespace engram::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

namespace {
cudaStream_t canonical(void* s) {
  // DLPack / CUDA array interface numbers: 1 is the legacy default stream, 2 the per-thread one.
  return reinterpret_cast<uintptr_t>(s) == 1 ? nullptr : static_cast<cudaStream_t>(s);
}

}  // namespace

ScopedDevice::ScopedDevice(int device) : prev_(current_device()) {
  if (prev_ != device && cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
}

ScopedDevice::~ScopedDevice() {
  if (prev_ >= 0 && current_device() != prev_ && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
}

Status stream_wait_event(void* stream, void* event, int device) {
  if (!event) return Status(Code::kInvalidArgument, "stream wait: the event was never recorded (null handle)");
  ScopedDevice scoped(device);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(canonical(stream), static_cast<cudaEvent_t>(event), 0),
                              "cudaStreamWaitEvent");
  return Status::ok();
}

Status stream_wait_stream(void* consumer, void* producer, int device) {
  if (canonical(consumer) == canonical(producer)) return Status::ok();
  ScopedDevice scoped(device);
  cudaEvent_t ev = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "stream ordering: cudaEventCreate");
  cudaError_t e = cudaEventRecord(ev, canonical(producer));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(canonical(consumer), ev, 0);
  (void)cudaEventDestroy(ev);  // released once the wait is resolved
  ENGRAM_CUDA_RETURN_IF_ERROR(e, "stream ordering: record/wait");
  return Status::ok();
}

Result<DeviceInfo> device_info(int ordinal) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(Code::kUnsupported, std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" +
                                          cudaGetErrorString(err) + ")", static_cast<int>(err));
  }
  if (ordinal < 0 || ordinal >= n)
    return Status(Code::kUnsupported, "CUDA device " + std::to_string(ordinal) + " requested, " +
                                          std::to_string(n) + " visible");
  cudaDeviceProp p{};
  err = cudaGetDeviceProperties(&p, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(Code::kCuda, std::string("cudaGetDeviceProperties: ") + cudaGetErrorName(err), static_cast<int>(err));
  }
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = p.name;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess) info.pci_bus_id = bus;
  info.sm_count = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.total_memory_bytes = static_cast<long long>(p.totalGlobalMem);
  info.l2_bytes = p.l2CacheSize;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, ordinal) == cudaSuccess)
    info.can_use_host_pointer_for_registered_mem = v != 0;
  info.unified_addressing = p.unifiedAddressing != 0;
  return info;
}

}  // namespace engram::cuda
