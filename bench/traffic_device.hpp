// The CUDA resources of `engram bench traffic` behind an interface without CUDA types (bench/traffic_device.cu, CUDA
// builds only; elsewhere open_traffic_device() answers kUnsupported), so that the bench's engine-driving code
// (bench/traffic_run.cpp) is plain C++20: the bench's stream and events, the 256 MiB L2-flush buffer, every call's ids
// in device memory, one device output and its pinned host copy, and the split table's registration with the two
// arms that read it (the reference-style kernel and the project's plain kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "bench/reference_lookup.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::bench {

class TrafficDevice {
 public:
  virtual ~TrafficDevice() = default;
  virtual int sm_count() const = 0;
  virtual void* stream() const = 0;  // cudaStream_t of the bench (non-blocking)
  // Registers the split table (`view`'s payload array followed by its scale array, `bytes` in all) for
  // launch_reference and launch_plain_split. Returns the seconds it took. kUnsupported when the registered chunks
  // need per-chunk translation (the reference kernel reads through one offset).
  virtual Result<double> register_split(const TableView& view, int64_t bytes) = 0;
  // Ids of call `call` ([n] int64) copied to the device (synchronous).
  virtual Status upload_ids(int call, const int64_t* ids, int64_t n) = 0;
  virtual const int64_t* device_ids(int call) const = 0;
  virtual uint16_t* device_out() const = 0;  // [max_ids][d] bf16 bits
  // The 256 MiB memset that flushes L2, enqueued on `stream` (a cudaStream_t; another engine's stream too).
  virtual Status flush(void* stream, int value) = 0;
  // Flush on the bench's stream, then CUDA events around launch(stream) on it; waits and returns the elapsed ns.
  virtual Result<double> time_launch(const std::function<Status(void* stream)>& launch) = 0;
  virtual Result<ReferenceLaunch> launch_reference(void* stream, int call, int64_t rows) = 0;
  virtual Result<int> launch_plain_split(void* stream, int call, int64_t tokens, int heads) = 0;  // the grid
  // Copies `bytes` from the device address `src` into the pinned host buffer (synchronous) and returns it.
  virtual Result<const uint16_t*> copy_out(const void* src, size_t bytes) = 0;
};

// Buffers for `calls` calls of at most `max_ids` ids and rows of d = `d` values. kUnsupported without a usable GPU;
// kCuda / kOutOfMemory for an allocation.
Result<std::unique_ptr<TrafficDevice>> open_traffic_device(int64_t max_ids, int calls, int d);

}  // namespace engram::bench
