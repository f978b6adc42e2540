// The CUDA backend for replays behind a CUDA-free interface, so that `engram run --backend cuda|auto` compiles the
// same way with and without the CUDA toolkit (ENGRAM_HAVE_CUDA): without it, or without a usable GPU, the factory
// answers kUnsupported with the reason (a skip, never a silent fallback).
//
// The backend registers the tables' host memory for UVA (never copied to the device), runs lookups on one
// prefetch stream (CudaPrefetchQueue: events r/s/f/c/wait_end, one host sync per step in end_step) and the
// synthetic layer compute as calibrated cuBLAS GEMMs on the main stream (CudaLayerCompute). CUDA compute is
// asynchronous: run_layer() only enqueues, so a compute-only baseline step must end with synchronize() before
// its clock is read (a step with lookups ends with queue().end_step(), which synchronises).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "sched/layer_compute.hpp"
#include "sched/prefetch_queue.hpp"

namespace engram {

struct CudaReplayOptions {
  int device = 0;
  int rank = 0;
  int64_t max_tokens = 8192;   // largest batch (tokens) of one prepare()
  double grid_fraction = 0.5;  // background grid cap of the lookups (fraction of the SMs)
  bool record_timeline = true;
  bool checked = false;        // reject ids >= rows in prepare() (host-side pass)
  double layer_us = 200;       // synthetic compute per model layer; 0 = none
  bool fast_path = true;       // issue #8: dedup / cache / planner hook on the lookups (FastLookup)
  bool planner = true;         // false: the hook keeps the plain gather (experiments)
  bool read_only_tables = false;  // the tables are PROT_READ mappings: register with cudaHostRegisterReadOnly
  bool wrap_device = false;       // device index taken modulo the number of visible devices (ranks > GPUs)
};

class ReplayBackend {
 public:
  virtual ~ReplayBackend() = default;
  virtual PrefetchQueue& queue() = 0;
  virtual LayerCompute& compute() = 0;
  // Waits for everything enqueued (main and prefetch streams).
  virtual Status synchronize() = 0;
  // Device, registration (bytes, chunks, seconds), GEMM calibration, grid: for the report's conditions block.
  virtual nlohmann::json describe() const = 0;
};

// True when the library was built with the CUDA backend.
bool cuda_backend_built();

// tables[i] is Engram layer i of `layout` (HostTable::view(i)); they must outlive the backend.
// Errors: kUnsupported (built without CUDA, no GPU or driver: the message says which), kInvalidArgument,
// registration errors naming the chunk, kOutOfMemory / kCuda.
Result<std::unique_ptr<ReplayBackend>> make_cuda_replay_backend(const EngramLayout& layout,
                                                                const std::vector<TableView>& tables,
                                                                const CudaReplayOptions& options);

}  // namespace engram
