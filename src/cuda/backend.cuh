// CudaBackend: the engine's cuda backend (engine::Backend and its engine::DeviceQueue extension), everything a
// rank needs to serve Engram lookups from host memory on one GPU.
//
// Two steps, because the shared-table protocol registers the memory before the rank's queue exists:
//  1. TableRegistration::create() registers every distinct host range of the rank's tables for UVA (chunked,
//     prefaulted, rolled back on failure: registration.cuh) on one device: the protocol's "register" step. It is
//     the engine's Registration.
//  2. make_cuda_backend() selects the device, creates (or adopts) the consumer's main stream, describes each
//     Engram layer's table to the kernel (UvaTable), builds each layer's lookup path (FastLookup with the planner,
//     or the plain kernel), and creates the serial prefetch queue (CudaPrefetchQueue) with those paths and, when
//     layer_us > 0, the calibrated GEMM layer compute on the main stream (CudaLayerCompute).
// queue() is that one CudaPrefetchQueue and compute() that compute; lookup() is a direct lookup on the caller's
// stream through the layer's path; the DeviceQueue calls (ids on the device, graph-replay id refills, the caller's
// events, the streams, the launch shape, step hashing on the device: StepHasher) run on the queue and the device;
// describe() writes the typed reports (device, registration, per layer the fast path and the hot-row cache) as
// JSON, one to_json each (backend_report.cpp). The table memory is never copied to the device. src/engine/'s
// registry entry (cuda_backend.cpp) is the only caller: consumers get a backend through the Engine.
//
// Hot-row cache: with a fast path and a non-zero cache budget, the queue calls the cache's host side through its
// hooks (QueueHooks, which this backend implements): prepare() hands a copy of the step's ids to a counting thread (plan::HotCountsWorker: never blocks; a batch
// larger than its backlog's room is counted from a weighted sample), and end_step() (a) after the step's host sync, so nothing of the
// step is in flight, closes the warm-up window: after `warmup_steps` counted steps (numbered >= 0) it creates
// each layer's HotRowCache from the hottest counted ids (or at start-up from `profile`), and (b) before that
// sync, while the step's compute still runs on the GPU, so that the serving thread's maintenance time overlaps
// the step instead of delaying the next one, keeps the online update moving without waiting for anything (each
// of its enqueues lands after the step's lookups, which are all enqueued by then): every `update_every` steps it
// asks the counting thread for a plan of at most `update_rows` swaps per layer (planned there, ahead of the ids still
// waiting to be counted); each step it takes at most one slice of planned swaps (`update_slice_rows`, raised to
// update_rows / update_every so that an update is applied within its period: plan::UpdateBudget::slice_for), stages them (host fill of those rows, H2D on a
// low-priority maintenance stream: HotRowCache::stage) and, at a later step once that copy is done (an event
// query), commits them on the prefetch stream (row copy + map edits, ordered before the next step's lookups, so
// lookups stay bit-identical). The serving thread's cost per step and layer is bounded by one slice staged and one
// committed. Updates are pipelined: the next plan is asked for while the previous one's last slices are still being
// applied; an update is deferred (counted once per update that came due, and per step it waited) only while the
// previous plan is not computed yet or a whole update's swaps still wait to be staged. Each stage and commit is
// a span in the timeline's "cache maintenance" lane (on the lookups' time base) when the timeline is recorded.
// Ids already on the device (prepare_device: a hasher on the GPU, torch tensors) are counted too: after the
// lookup is enqueued, the ids are copied into a pinned host buffer on the prefetch stream, and end_step() hands
// them to the counting thread once that copy is done; a step under CUDA graph capture is not counted.
// Without a cache the hooks do nothing, and queue() is the bare queue (graph capture, benches). The queue's calls may
// also return the cache's errors (creation, update). No CUDA types in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/compute.cuh"
#include "cuda/device.cuh"
#include "cuda/fast_lookup.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/prefetch.cuh"
#include "cuda/registration.cuh"
#include "cuda/step_hasher.cuh"
#include "engine/backend.hpp"
#include "engram/table.hpp"
#include "plan/hot_counts.hpp"
#include "plan/update_budget.hpp"
#include "engram/prefetch_queue.hpp"

namespace engram::cuda {

// The engine's hot-row caches (see the file comment). No cache when every budget is 0 or fast_path is off.
struct EngineCacheOptions {
  std::vector<int64_t> budget_bytes;  // per Engram layer (HBM for rows + map); empty or 0: no cache for it
  CacheFormat format = CacheFormat::kFp8;
  double hbm_fraction = 0.5;          // all budgets together are capped at this share of the free HBM
  int warmup_steps = 4;               // warm-up window in counted steps (>= 1); unused with a profile
  std::vector<std::vector<std::pair<int64_t, int64_t>>> profile;  // per layer (id, count) hottest first; empty:
                                                                  // fill from the warm-up window
  std::string profile_source;         // report: where the profile came from
  int update_every = 4;               // counted steps between online updates; 0 = none
  int64_t update_rows = 256;          // most rows swapped per layer and update
  int64_t update_slice_rows = 64;     // rows staged per layer and step (the per-step maintenance budget), raised
                                      // to ceil(update_rows / update_every) when smaller
  // While plans come back full, rows and slice grow up to this factor (plan::UpdateBudget); 1 = the base only.
  // The engine passes CacheUpdate::burst.
  int64_t update_burst = 1;
  plan::HotCountsOptions counts;      // decay, pool, sampled victims (id_limit is set per table)
  int64_t max_pending_ids = int64_t{1} << 22;  // counting backlog before batches are sampled (dropped past 2x)
  // Record every step's probes and hits per layer (EngineCacheReport::step_*): reads the device counters at each
  // step's end, which waits for the prefetch stream there (a measurement mode: a serving run leaves it off).
  bool step_series = false;
};

// Per layer, what the cache did. Rates are of the probes since the cache was created (NaN: none).
struct EngineCacheReport {
  std::string state = "off";          // off | warming up | on
  std::string note;                   // why off / how it was filled / budget capped
  std::string source;                 // "warm-up window (steps 0..W-1)" or the profile's source
  CacheFormat format = CacheFormat::kFp8;
  int64_t budget_bytes = 0, slots = 0, filled = 0;
  int64_t hbm_bytes = 0;              // every device buffer of the cache (rows, map, staging): <= budget_bytes
  int64_t staging_rows = 0;           // rows one staged slice may hold (counted in hbm_bytes)
  int64_t created_after_step = -1;    // the cache serves lookups from step created_after_step + 1 on
  double create_ms = std::numeric_limits<double>::quiet_NaN();
  std::string fill;                   // where the initial rows were read: "gpu" (from the registered table) | "host"
  double profile_coverage = std::numeric_limits<double>::quiet_NaN();  // in-sample share of the profile's ids
  // What the planner prices a row served from this cache at (FastLookup::calibrate_cache); NaN: not measured.
  double hit_ns_per_row = std::numeric_limits<double>::quiet_NaN();
  int64_t probes = 0, hits = 0;
  double hit_rate = std::numeric_limits<double>::quiet_NaN();
  int64_t rows_since_create = 0;      // rows looked up by the layer since creation (all paths)
  int64_t link_bytes_avoided = 0;     // hits x (d + d/32): PCIe reads the cache replaced
  double link_bytes_avoided_per_token = std::numeric_limits<double>::quiet_NaN();
  // Updates that came due (one every update_every counted steps), plans asked for, updates deferred (not asked for
  // at the step they came due: asked for later, or merged into the next one), and the steps they waited in all.
  int64_t update_attempts = 0, updates = 0, updates_deferred = 0, update_deferred_steps = 0;
  int64_t rows_swapped = 0, map_rebuilds = 0;
  int64_t update_slice_rows = 0;      // the base slice applied per step (EngineCacheOptions' raised to the period)
  int64_t slices = 0;                 // stage/commit pairs that applied the updates' rows
  int64_t burst_updates = 0;          // updates that asked for more than the base rows (plan::UpdateBudget)
  int64_t update_scale_max = 1;       // the largest factor over the base rows and slice
  // Serving-thread time per slice (stage + commit enqueue, including the host fill of the slice's rows).
  double update_host_us_max = std::numeric_limits<double>::quiet_NaN();
  double update_host_us_mean = std::numeric_limits<double>::quiet_NaN();
  // Planning time on the counting thread (all layers).
  double plan_us_max = std::numeric_limits<double>::quiet_NaN();
  double plan_us_mean = std::numeric_limits<double>::quiet_NaN();
  int64_t counted_batches = 0, dropped_batches = 0;  // of all layers (one counting thread)
  int64_t sampled_batches = 0, sampled_out_ids = 0;  // batches counted from a sample; ids left out of the samples
  // With EngineCacheOptions::step_series: the probes and hits of each counted step (index 0 = step 0; a step
  // before the cache existed has 0 probes). Empty otherwise.
  std::vector<int64_t> step_probes, step_hits;
};

struct CudaRegistrationReport {
  int64_t bytes = 0;        // registered (whole pages)
  int chunks = 0;
  double prefault_ns = 0;
  double register_ns = 0;   // cudaHostRegister + cudaHostGetDevicePointer, all chunks
  bool device_equals_host = true;
};

// The host memory of a rank's tables registered for one device (see the file comment). Every distinct host range
// of `views` is registered once. Shared by the backends built over it (several queues of one process).
class TableRegistration final : public engine::Registration {
 public:
  // Errors: kUnsupported (no GPU / driver), kInvalidArgument (empty views), registration's errors naming the
  // chunk and the table of `layer_ids[i]`.
  static Result<std::shared_ptr<TableRegistration>> create(int device, const std::vector<TableView>& views,
                                                           const std::vector<int>& layer_ids,
                                                           const RegistrationOptions& options);
  int device() const { return device_; }
  const CudaRegistrationReport& report() const { return report_; }
  std::vector<const HostRegistration*> ranges() const;
  // Whether every host range of `view` lies inside this registration.
  bool covers(const TableView& view) const;
  // The report and the device: {bytes, chunks, prefault_s, register_s, device_pointer_equals_host, device}.
  nlohmann::json describe() const override;

 private:
  int device_ = 0;
  std::vector<HostRegistration> regs_;
  CudaRegistrationReport report_;
};

struct CudaBackendOptions {
  int device = 0;                  // CUDA ordinal; made current on the calling thread
  std::vector<int> layer_ids;      // model layer of each Engram layer (one per table)
  int heads = 0;                   // heads per Engram layer
  // The prefetch queue's options as given to CudaPrefetchQueue::create (rank, max_tokens: also the fast paths'
  // capacity, grid_cap, record_timeline, checked); its fast_paths are this backend's and are filled in here.
  CudaPrefetchOptions queue;
  double layer_us = 0;             // > 0: create a CudaLayerCompute calibrated to this many microseconds
  RegistrationOptions registration;  // boundary_bytes is set per table (row stride); used when `registered` is null
  std::shared_ptr<TableRegistration> registered;  // the tables' registration (protocol step); null: register here
  bool force_segment_translation = false;  // tests: per-chunk address translation even when not needed
  void* main_stream = nullptr;     // adopt this cudaStream_t as the main stream; nullptr: create one
  // Fast path (fast_lookup.cuh): each layer's queue slot runs a FastLookup driven by the planner.
  bool fast_path = true;
  bool planner = true;             // false: the FastLookup runs the plain gather (experiments)
  bool learn = true;               // the planner corrects its costs with measured batch times
  EngineCacheOptions cache;        // hot-row caches (need fast_path)
};

class CudaBackend final : public engine::Backend, public engine::DeviceQueue, private QueueHooks {
 public:
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // engine::Backend. compute(): the GEMM compute, or one that does nothing when layer_us == 0.
  CudaPrefetchQueue& queue() override { return *queue_; }
  LayerCompute& compute() override;
  // A direct lookup on call.stream through the layer's path (FastLookup unless checked, else the plain kernel);
  // the launch shape with the path's name.
  Result<LookupResult> lookup(int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out,
                              const LookupCall& call) override;
  Status synchronize() override;  // waits for the main and prefetch streams
  nlohmann::json describe() const override;
  engine::DeviceQueue* device_queue() override { return this; }

  // engine::DeviceQueue (engram/engine.hpp says what each does).
  Status prepare_device(int layer_index, const int64_t* ids_device, int64_t tokens) override;
  Status write_ids(int layer_index, const int64_t* ids, int64_t tokens) override;
  Status main_wait_event(void* cuda_event) override;
  Result<LaunchShape> last_launch(int layer_index) const override;
  void* main_stream() const override { return main_stream_; }  // cudaStream_t
  void* prefetch_stream() const override;
  int device() const override { return device_.ordinal; }
  Status enable_device_hashing(const NgramHashParams& params, int max_requests, int64_t max_tokens) override;
  Status hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n_requests) override;
  Status hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                 const uint8_t* new_sequence, int n_chunks) override;
  Result<DeviceHashStep> last_device_hash(bool with_ids) const override;

  const UvaTable& table(int layer_index) const { return tables_.at(layer_index); }
  const CudaRegistrationReport& registration() const { return registered_->report(); }
  // The layer's fast-path engine; nullptr when fast_path is off or the table is not eligible (fast_path_note()).
  FastLookup* fast_lookup(int layer_index) const {
    return layer_index < static_cast<int>(fast_.size()) ? fast_[layer_index].get() : nullptr;
  }
  const std::string& fast_path_note() const { return fast_note_; }
  // The layer's cache figures (synchronises the prefetch stream). kInvalidArgument for a bad layer index.
  Result<EngineCacheReport> cache_report(int layer_index) const;

 private:
  friend Result<std::unique_ptr<CudaBackend>> make_cuda_backend(CudaBackendOptions,
                                                                const std::vector<TableView>&);
  CudaBackend() = default;
  class NoCompute final : public LayerCompute {
   public:
    Status run_layer(int) override { return Status::ok(); }
    double layer_ns() const override { return 0; }
  };
  struct CacheState {
    EngineCacheReport rep;
    int64_t budget = 0;
    int64_t rows_at_create = 0, hits_at_create = 0, probes_at_create = 0;
    double update_host_us_sum = 0;
    int64_t host_timed = 0;   // slices whose serving-thread time is in update_host_us_sum
    bool update_due = false;  // an update is due and its plan has not been requested yet
    bool due_deferred = false;  // the due update has been counted as deferred
    bool budget_fed = true;   // the last computed plan's size was given to update_budget
    int64_t series_probes = 0, series_hits = 0;  // step series: the device totals at the last step's end
    plan::UpdateBudget update_budget;  // rows and slice of the next online update
  };
  struct PendingSpan {         // a maintenance span whose events have not completed yet
    MaintenanceSpan span;
    void* ev_begin = nullptr;  // cudaEvent_t
    void* ev_end = nullptr;
  };
  // QueueHooks: the hot-row cache's host side (backend_cache.cpp).
  void on_begin_step(int64_t step) override { step_ = step; }
  void on_prepare(int layer_index, const int64_t* ids, int64_t tokens) override;  // counts host ids
  Status on_prepare_device(int layer_index, int64_t tokens) override;  // copies device ids back for counting
  Status before_end_sync() override;  // end_step, before the host sync: the online update's maintenance
  Status on_end_step() override;      // end_step, after the host sync: counting, warm-up window, hit-rate series
  bool counting_now() const;
  Result<bool> prefetch_capturing() const;  // the prefetch stream is being captured into a CUDA graph
  Status submit_device_counts();  // end_step: the device ids copied this step go to the counting thread
  Status create_caches(bool from_profile);
  Status maintain_caches();
  Status record_step_series();
  void collect_spans(bool all);
  // Records a timed event pair around `enqueue` on `stream` when the timeline is on; host time goes in the span.
  Status enqueue_span(int layer_index, const char* what, void* stream, const std::function<Result<int64_t>()>& enqueue,
                      int64_t* rows, double* host_us);
  DeviceInfo device_;
  void* main_stream_ = nullptr;
  bool owns_stream_ = false;
  std::shared_ptr<TableRegistration> registered_;
  std::vector<UvaTable> tables_;
  std::unique_ptr<CudaPrefetchQueue> queue_;
  std::unique_ptr<CudaLayerCompute> compute_;
  NoCompute no_compute_;
  std::vector<std::unique_ptr<FastLookup>> fast_;
  std::string fast_note_;
  // Where make_cuda_backend's time went (milliseconds; NaN: the step did not run): the start-up calibration of the
  // planner and the hot-row caches' fill from a profile (every layer). The whole is the engine's assembly.backend_s.
  double calibration_ms_ = std::numeric_limits<double>::quiet_NaN();
  double cache_fill_ms_ = std::numeric_limits<double>::quiet_NaN();
  // hot-row cache (engine side)
  EngineCacheOptions cache_opt_;
  std::vector<CacheState> cache_;
  std::unique_ptr<plan::HotCountsWorker> counts_;
  void* maint_stream_ = nullptr;  // cudaStream_t, lowest priority: the online update's staging copies
  std::vector<PendingSpan> spans_;
  struct DeviceIdCopy {           // one layer's device ids of this step, copied back for counting
    int64_t* host = nullptr;      // pinned
    int64_t capacity = 0;         // ids
    int64_t n = 0;                // ids copied this step; 0: none pending
    void* done = nullptr;         // cudaEvent_t after the copy
  };
  std::vector<DeviceIdCopy> device_ids_;
  bool cache_wanted_ = false, caches_created_ = false;
  int heads_ = 0;
  int queue_rank_ = 0;
  GridCap grid_cap_;           // the queue's (describe)
  FastPathMode fast_path_mode_ = FastPathMode::kPlanner;  // as asked for (describe)
  std::unique_ptr<StepHasher> hasher_;  // device hashing, when enabled
  std::vector<int> layer_ids_;
  int64_t step_ = 0, counted_steps_ = 0, since_update_ = 0;
};

// tables[i]: Engram layer i (layer_ids[i]); all with opt.heads heads and one d. Memory shared by several views is
// registered once (or taken from opt.registered, which must cover every view and be for opt.device).
// Errors: kUnsupported (no GPU / driver: the reason), kInvalidArgument (options, views, a registration that does
// not cover them), registration's errors (naming the chunk), kOutOfMemory / kCuda.
Result<std::unique_ptr<CudaBackend>> make_cuda_backend(CudaBackendOptions opt,
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
