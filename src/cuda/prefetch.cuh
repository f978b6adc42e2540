// CudaPrefetchQueue: a rank's serial lookup queue on the GPU.
//
// One CUDA stream (the prefetch stream) runs the lookups of every Engram layer of the rank in submission order.
// prepare(layer, ids) copies the host ids into the layer's pinned buffer, enqueues their H2D copy on the main
// stream and records the layer's `r` event there (hash ids ready in main-stream order); the prefetch stream waits
// for `r` on the GPU (the host never blocks), records `s`, launches the lookup kernel and records `f`.
// consume(layer) records `c` on the main stream, makes it wait for that layer's `f` only, records `wait_end`, and
// returns the layer's staging. Mode early/on_demand is the caller's call order (prepare at step start, or right
// before consume: the B1 pair, same kernel, same grid, same staging), as in the CPU queue and the decode replay.
//
// Staging and ids buffers are persistent per layer (allocated once for max_tokens), so a whole step can be
// captured into a CUDA graph and replayed: nothing inside prepare/consume synchronises the host or allocates
// while the main stream is capturing. A captured step's H2D copies read the layers' pinned id buffers when the
// graph runs; write_ids() refills them before a replay. Every prepared layer must be consumed before the capture
// ends (the prefetch stream has to join the main stream again).
//
// Timeline: r, s, f, c, wait_end are CUDA events on one time base: each step's times are elapsed times from that
// step's origin event (recorded at begin_step) plus the elapsed time from the first origin to the step's origin,
// so intra-step differences keep the events' ~0.5 us resolution over long runs. They are read in end_step after
// its single host synchronisation; no synchronisation is added per stage. With record_timeline off the queue
// records only the dependency events (cudaEventDisableTiming twins) and adds no rows; it can be switched between
// steps (set_record_timeline), so its overhead is measured in one run. Steps captured into a
// graph add rows whose times are NaN (not recorded): captured event records are graph dependencies, not times.
// `submit` (a host time) is never on the events' time base and stays NaN.
//
// Hooks: the queue's owner may add work around the calls (QueueHooks: the CUDA backend's hot-row cache counts the
// ids after each prepare and maintains the caches around end_step's host synchronisation). Without hooks, or with
// hooks that have nothing to do (no cache), the queue is the bare one (graph capture, benches).
// Every call runs with the queue's device current (a caller such as PyTorch may have another one current).
//
// NVTX3 ranges (visible in Nsight Systems): "engram prepare L<id>", "engram consume L<id>", "engram end_step".
// Thread safety: one driving thread per queue (as PrefetchQueue). No CUDA types in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/fast_lookup.cuh"
#include "cuda/lookup_kernel.cuh"
#include "engram/prefetch_queue.hpp"

namespace engram::cuda {

struct CudaPrefetchOptions {
  int rank = 0;
  int64_t max_tokens = 8192;   // capacity of each layer's ids and staging buffers, in tokens
  GridCap grid_cap = GridCap::background_default();  // grid cap of the lookups (EngineOptions::grid_cap)
  bool record_timeline = true;
  // Reject ids >= table rows in prepare() before anything is enqueued (host-side pass over the ids, ~1 ns per id;
  // no synchronisation). Off: such ids give zero rows and are counted in totals().invalid_ids.
  bool checked = false;
  // The lookup path of each layer, fixed when the queue is built: FastLookup (planner, dedup, cache, hybrid) or
  // nullptr for the plain kernel. Empty: every layer plain. Not owned; must outlive the queue.
  std::vector<FastLookup*> fast_paths;
};

// Work a queue's owner adds around the queue's calls; each runs with the queue's device current, on the driving
// thread. The queue calls them in this order: on_begin_step at the start of begin_step; on_prepare after a host
// prepare's lookup is enqueued (off its critical path; `ids` are the caller's, valid during the call);
// on_prepare_device after a device prepare's lookup is enqueued (the ids are in ids_buffer(layer_index)); end_step
// calls before_end_sync first (before its checks and its host synchronisation: the step's work is still on the
// GPU) and on_end_step after a successful synchronisation. A hook's error is the call's error.
class QueueHooks {
 public:
  virtual ~QueueHooks() = default;
  virtual void on_begin_step(int64_t step) = 0;
  virtual void on_prepare(int layer_index, const int64_t* ids, int64_t tokens) = 0;
  virtual Status on_prepare_device(int layer_index, int64_t tokens) = 0;
  virtual Status before_end_sync() = 0;
  virtual Status on_end_step() = 0;
};

class CudaPrefetchQueue final : public PrefetchQueue {
 public:
  // tables[i] is Engram layer i's table (layer_ids[i]); every table has `heads` heads and the same d (ids are
  // [tokens][heads]; the staging has the tables' out heads: a TP slice's local heads, alike for all). The tables
  // and `main_stream` (a cudaStream_t; the consumer's stream) must outlive the queue. Uses the current device.
  // Errors: kInvalidArgument (sizes, counts, d mismatch); kOutOfMemory / kCuda for buffers, events, the stream.
  static Result<std::unique_ptr<CudaPrefetchQueue>> create(std::vector<const UvaTable*> tables,
                                                            std::vector<int> layer_ids, int heads, void* main_stream,
                                                            const CudaPrefetchOptions& options);
  ~CudaPrefetchQueue() override;

  void begin_step(int64_t step) override;
  // ids: host [tokens][heads] int64, copied before return; tokens <= max_tokens. kInvalidArgument: bad layer,
  // tokens out of range, layer already prepared and not consumed, (checked) an id >= rows.
  Status prepare(int layer_index, const int64_t* ids, int64_t tokens) override;
  // The staging is device memory [tokens][out heads][d] bf16, valid on the main stream after this call and until the
  // next prepare of the layer.
  Result<StagingView> consume(int layer_index) override;
  // One host synchronisation; then the step's timeline rows and the invalid/dead counters become final.
  // kInvalidArgument while the main stream is capturing or when a prepared layer was not consumed.
  Status end_step() override;
  const Timeline& timeline() const override { return timeline_; }
  LookupStats totals() const override { return totals_; }
  const char* backend_name() const override { return "cuda"; }

  // CUDA extension: ids already in device memory (ids_device [tokens][heads], written in main-stream order).
  Status prepare_device(int layer_index, const int64_t* ids_device, int64_t tokens);
  // Refills layer's pinned id buffer (what a captured step's H2D copy reads when the graph is replayed) without
  // enqueuing anything. Waits until the last eager copy out of the buffer has completed.
  Status write_ids(int layer_index, const int64_t* ids, int64_t tokens);
  // Rows, tiles and grid of the layer's last launch.
  const LaunchInfo& last_launch(int layer_index) const;
  void* prefetch_stream() const { return prefetch_stream_; }
  void* main_stream() const { return main_stream_; }
  int64_t max_tokens() const { return opt_.max_tokens; }
  // Device address of layer's id buffer ([max_tokens][heads] int64): the last prepared ids, valid on the prefetch
  // stream after that layer's lookup until the layer is prepared again.
  const int64_t* ids_buffer(int layer_index) const;
  // Device address of layer's persistent staging buffer ([max_tokens][out heads][d] bf16).
  const uint16_t* staging_buffer(int layer_index) const;
  // Turns the timeline on or off between steps (e.g. to measure its own overhead in one run: off uses
  // cudaEventDisableTiming events for r and f and records nothing else). kInvalidArgument inside a step.
  Status set_record_timeline(bool on);
  bool record_timeline() const { return record_timeline_; }
  // The timeline's time base (cudaEvent_t of the first step's origin; nullptr before the first step), and a
  // span of other work on it (the engine's cache maintenance), for its lane in the trace.
  void* time_origin_event() const { return have_first_origin_ ? ev_first_origin_ : nullptr; }
  void add_maintenance(const MaintenanceSpan& span) { timeline_.add_maintenance(span); }
  // The owner's hooks (not owned; null: none). Set between steps; they must outlive the queue or be reset first.
  void set_hooks(QueueHooks* hooks) { hooks_ = hooks; }

 private:
  struct Slot;
  CudaPrefetchQueue() = default;
  // prepare, prepare_device and end_step without the hooks.
  Status prepare_host(int layer_index, const int64_t* ids, int64_t tokens);
  Status prepare_on_device(int layer_index, const int64_t* ids_device, int64_t tokens);
  Status end_step_sync();
  Status submit(int layer_index, int64_t tokens, bool capturing);
  Status copy_ids_to_pinned(Slot& slot, const int64_t* ids, int64_t tokens, bool capturing);

  std::vector<const UvaTable*> tables_;
  std::vector<int> layer_ids_;
  int heads_ = 0;      // ids' heads per token
  int out_heads_ = 0;  // staging's heads per token (heads_, or a TP slice's local heads)
  int d_ = 0;
  int sm_count_ = 0;
  int device_ = 0;                 // the CUDA ordinal current at create(), made current by every call
  QueueHooks* hooks_ = nullptr;
  CudaPrefetchOptions opt_;
  void* main_stream_ = nullptr;
  void* prefetch_stream_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int> step_order_;           // layers prepared this step, in submission order
  void* ev_first_origin_ = nullptr;       // cudaEvent_t of the first step's origin
  void* ev_step_origin_ = nullptr;
  void* ev_prefetch_done_ = nullptr;
  void* ev_end_ = nullptr;
  bool have_first_origin_ = false;
  bool record_timeline_ = true;
  bool step_origin_recorded_ = false;
  int64_t step_ = 0;
  unsigned long long* counters_dev_ = nullptr;   // [dead, invalid], accumulated by every launch
  unsigned long long* counters_host_ = nullptr;  // pinned copy read in end_step
  int64_t rows_total_ = 0;
  Timeline timeline_;
  LookupStats totals_;
};

}  // namespace engram::cuda
