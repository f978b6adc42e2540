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
#include <string>
#include <utility>
#include <vector>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "sched/layer_compute.hpp"
#include "sched/prefetch_queue.hpp"

namespace engram {

// The engine's GPU hot-row cache (issue #8, src/cuda/hot_cache.cuh), one per Engram layer, attached to the layer's
// fast path (needs fast_path). Filled from `profile` when given (an offline `engram profile`), else from the ids
// of the first `warmup_steps` steps numbered >= 0 that the engine sees (counted on a host thread: the warm-up
// window; those steps run without the cache and are marked in the report); then, every `update_every` steps, at
// most `update_rows` rows per layer are swapped in (hottest uncached ids of a decayed LFU count of the ids seen,
// for the coldest of a sampled set of cached rows), enqueued on the prefetch stream between steps.
struct EngineCacheConfig {
  // Per layer: bytes ("256MiB"), a share of the layer's table ("5%"), or "0"/"off". Off here (library users and
  // `engram run --ranks` keep their behaviour); `engram run` / `replay` / `experiment` default to 5%.
  std::string size = "off";
  std::string format = "fp8";   // fp8 (records as stored, ~1.9x the rows per byte) | bf16 (decoded once)
  double hbm_fraction = 0.5;    // all layers' caches together take at most this share of the free HBM
  int warmup_steps = 4;         // warm-up window (ignored when a profile is given); >= 1
  std::vector<std::vector<std::pair<int64_t, int64_t>>> profile;  // per layer (id, count), hottest first
  std::string profile_source;   // where `profile` came from (report)
  int update_every = 4;         // steps between online updates; 0 = no online update
  int64_t update_rows = 256;    // most rows swapped per layer and update
  bool off() const { return size == "0" || size == "off" || size.empty(); }
};

// Cache sizes are parsed by parse_cache_size_text (core/units.hpp).

// "every=K,rows=M" or "off" (K >= 1, M >= 1; either key may be left out and keeps its value).
Status parse_cache_update(const std::string& text, EngineCacheConfig& config);

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
  EngineCacheConfig cache;        // hot-row cache of each layer (only with fast_path)
};

class ReplayBackend {
 public:
  virtual ~ReplayBackend() = default;
  virtual PrefetchQueue& queue() = 0;
  virtual LayerCompute& compute() = 0;
  // Waits for everything enqueued (main and prefetch streams).
  virtual Status synchronize() = 0;
  // Device, registration (bytes, chunks, seconds), GEMM calibration, grid: for the report's conditions block.
  // Includes per layer "fast_path" (paths taken, unique fraction, cache: size, rows, format, HBM, hit rate, link
  // bytes avoided, online updates): call it after the run for the run's figures (it synchronises the streams).
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
