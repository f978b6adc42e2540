// Device discovery for the CUDA backend (see device.cuh).
#include <cuda_runtime.h>

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

void clear_pending_error() { (void)cudaGetLastError(); }

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
