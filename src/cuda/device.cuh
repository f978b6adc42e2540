// CUDA device discovery: is there a usable GPU, and what is it? The only answer a machine without
// a GPU gets is kUnsupported with the runtime's reason, never a crash.
#pragma once

#include <string>

#include "engram/status.hpp"

namespace engram::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string pci_bus_id;       // "0000:3b:00.0"
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  long long total_memory_bytes = 0;
  int l2_bytes = 0;
  int driver_version = 0;       // e.g. 13000
  int runtime_version = 0;
  bool can_use_host_pointer_for_registered_mem = false;
  bool unified_addressing = false;
};

// Info about device `ordinal`. kUnsupported when no device/driver is present (message says why).
Result<DeviceInfo> device_info(int ordinal = 0);
// Number of visible devices; 0 when there is no driver or device.
int device_count();
// The calling thread's current device (-1 when none can be read).
int current_device();
// On device `device`: `stream` waits on the GPU for `event` (a cudaEvent_t); `consumer` waits for what was
// enqueued on `producer` so far (nothing when they are the same stream; 1 = the legacy default stream, as in
// DLPack). Streams are cudaStream_t; nothing blocks the host.
Status stream_wait_event(void* stream, void* event, int device);
Status stream_wait_stream(void* consumer, void* producer, int device);

// Makes `device` current for a scope and restores the caller's device after (PyTorch keeps its own).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int prev_;
};

}  // namespace engram::cuda
