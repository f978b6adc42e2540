// CudaBackend: everything a rank needs to serve Engram lookups from host memory on one GPU, made in one call.
//
// make_cuda_backend() selects the device, creates (or adopts) the consumer's main stream, registers the tables'
// host memory for UVA (chunked, prefaulted, rolled back on failure: registration.cuh), describes each Engram
// layer's table to the kernel (UvaTable), and creates the serial prefetch queue (CudaPrefetchQueue) and, when
// layer_us > 0, the calibrated GEMM layer compute on the main stream (CudaLayerCompute). The queue and compute
// implement the backend-neutral PrefetchQueue / LayerCompute, so the decode replay drives them as it drives the
// CPU backend. The table memory is never copied to the device.
//
// Usage:
//   CudaBackendOptions o; o.layer_ids = layout.layer_ids; o.heads = layout.heads(); o.layer_us = 200;
//   std::vector<TableView> views; for (int i = 0; i < table.n_layers(); ++i) views.push_back(table.view(i));
//   ENGRAM_ASSIGN_OR_RETURN(auto be, make_cuda_backend(o, views));
//   run_decode_replay(layout, ids, be->queue(), *be->compute(), ...);
// The HostTable (or other backing) must outlive the backend. No CUDA types in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/compute.cuh"
#include "cuda/device.cuh"
#include "cuda/fast_lookup.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/prefetch.cuh"
#include "cuda/registration.cuh"
#include "engram/table.hpp"

namespace engram::cuda {

struct CudaBackendOptions {
  int device = 0;                  // CUDA ordinal; made current on the calling thread
  int rank = 0;                    // timeline rank
  std::vector<int> layer_ids;      // model layer of each Engram layer (one per table)
  int heads = 0;                   // heads per Engram layer
  int64_t max_tokens = 8192;       // per-layer ids/staging capacity in tokens
  double grid_fraction = 0.5;      // background grid cap of the prefetch queue's lookups
  bool record_timeline = true;
  bool checked = false;            // reject out-of-range ids in prepare() (host-side pass)
  double layer_us = 0;             // > 0: create a CudaLayerCompute calibrated to this many microseconds
  RegistrationOptions registration;  // boundary_bytes is set per table (row stride)
  bool force_segment_translation = false;  // tests: per-chunk address translation even when not needed
  void* main_stream = nullptr;     // adopt this cudaStream_t as the main stream; nullptr: create one
  // Fast path (issue #8, fast_lookup.cuh): a FastLookup hook on every table, driven by the planner.
  bool fast_path = true;
  bool planner = true;             // false: the hook runs the plain gather (experiments)
};

struct CudaRegistrationReport {
  int64_t bytes = 0;        // registered (whole pages)
  int chunks = 0;
  double prefault_ns = 0;
  double register_ns = 0;   // cudaHostRegister + cudaHostGetDevicePointer, all chunks
  bool device_equals_host = true;
};

class CudaBackend {
 public:
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  CudaPrefetchQueue& queue() { return *queue_; }
  CudaLayerCompute* compute() { return compute_.get(); }  // nullptr when layer_us == 0
  void* main_stream() const { return main_stream_; }     // cudaStream_t
  const DeviceInfo& device() const { return device_; }
  const UvaTable& table(int layer_index) const { return tables_.at(layer_index); }
  const CudaRegistrationReport& registration() const { return reg_report_; }
  // The layer's fast-path engine; nullptr when fast_path is off or the table is not eligible (fast_path_note()).
  FastLookup* fast_lookup(int layer_index) const {
    return layer_index < static_cast<int>(fast_.size()) ? fast_[layer_index].get() : nullptr;
  }
  const std::string& fast_path_note() const { return fast_note_; }
  Status synchronize();  // waits for the main and prefetch streams

 private:
  friend Result<std::unique_ptr<CudaBackend>> make_cuda_backend(const CudaBackendOptions&,
                                                                const std::vector<TableView>&);
  CudaBackend() = default;
  DeviceInfo device_;
  void* main_stream_ = nullptr;
  bool owns_stream_ = false;
  std::vector<HostRegistration> regs_;
  std::vector<UvaTable> tables_;
  std::unique_ptr<CudaPrefetchQueue> queue_;
  std::unique_ptr<CudaLayerCompute> compute_;
  std::vector<std::unique_ptr<FastLookup>> fast_;
  std::string fast_note_;
  CudaRegistrationReport reg_report_;
};

// tables[i]: Engram layer i (layer_ids[i]); all with opt.heads heads and one d. Memory shared by several views is
// registered once. Errors: kUnsupported (no GPU / driver: the reason), kInvalidArgument (options, views),
// registration's errors (naming the chunk), kOutOfMemory / kCuda.
Result<std::unique_ptr<CudaBackend>> make_cuda_backend(const CudaBackendOptions& opt,
                                                       const std::vector<TableView>& tables);

// The host ranges (page-aligned start, bytes, row boundary) that hold a table view's rows: one for fused or for a
// split table whose scale array directly follows its payload array (HostTable's layout), two otherwise.
struct HostRange {
  const void* ptr = nullptr;
  int64_t bytes = 0;
  int64_t boundary_bytes = 1;
};
std::vector<HostRange> host_ranges_of(const TableView& view);

}  // namespace engram::cuda
