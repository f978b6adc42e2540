// CudaPrefetchQueue (see prefetch.cuh): one prefetch stream, per-layer persistent buffers and events.
//
// Ordering argument. The only cross-stream edges are event waits: prefetch waits main's `r` (ids copied), main
// waits prefetch's `f` (staging written). So a lookup can never read ids before their copy, and the consumer can
// never read staging before the lookup that wrote it; the host is never involved. Reuse of a layer's buffers
// across steps is safe because end_step() synchronises once per step (and write_ids()/prepare() wait for the
// previous eager copy out of the pinned id buffer before overwriting it). Under stream capture the same calls
// build the graph's fork/join edges; the host-side waits are skipped there, since nothing is executed yet.
// The owner's hooks (QueueHooks) run where prefetch.cuh says, with the queue's device current.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/cuda_status.cuh"
#include "cuda/device.cuh"
#include "cuda/prefetch.cuh"

namespace engram::cuda {

struct CudaPrefetchQueue::Slot {
  int64_t* ids_pinned = nullptr;  // host, [max_tokens][heads]
  int64_t* ids_dev = nullptr;     // device, [max_tokens][heads]
  uint16_t* staging = nullptr;    // device, [max_tokens][heads][d]
  // Timed events (timeline on) and their cudaEventDisableTiming twins for r and f (timeline off, or capture).
  cudaEvent_t ev_r = nullptr, ev_s = nullptr, ev_f = nullptr, ev_c = nullptr, ev_w = nullptr;
  cudaEvent_t ev_r_plain = nullptr, ev_f_plain = nullptr;
  cudaEvent_t ev_f_used = nullptr;      // the f event of the current submission (what consume waits for)
  cudaEvent_t ev_ids_copied = nullptr;  // eager copies only: guards the pinned buffer's reuse
  bool ids_copy_pending = false;
  bool pending = false;          // prepared, not yet consumed
  bool timed = false;            // r/s/f recorded eagerly with timing this step
  bool consume_timed = false;    // c/wait_end recorded eagerly with timing this step
  int64_t tokens = 0;
  LaunchInfo launch;
  LayerTiming timing;
};

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

Result<bool> is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

class NvtxRange {
 public:
  NvtxRange(const char* what, int layer_id) {
    char name[64];
    std::snprintf(name, sizeof name, "engram %s L%d", what, layer_id);
    nvtxRangePushA(name);
  }
  ~NvtxRange() { nvtxRangePop(); }
};

double elapsed_ns(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();
    return kNotRecorded;
  }
  return static_cast<double>(ms) * 1e6;
}

}  // namespace

Result<std::unique_ptr<CudaPrefetchQueue>> CudaPrefetchQueue::create(std::vector<const UvaTable*> tables,
                                                                     std::vector<int> layer_ids, int heads,
                                                                     void* main_stream,
                                                                     const CudaPrefetchOptions& options) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "cuda prefetch: " + m); };
  if (tables.empty() || tables.size() != layer_ids.size())
    return bad("need one table per Engram layer (got " + std::to_string(tables.size()) + " tables, " +
               std::to_string(layer_ids.size()) + " layer ids)");
  if (heads <= 0) return bad("heads must be > 0");
  if (options.max_tokens <= 0) return bad("max_tokens must be > 0");
  for (const UvaTable* t : tables)
    if (!t) return bad("null table");
  const int d = tables.front()->host_view().d;
  const int out_heads = tables.front()->host_view().slice.out_heads(heads);
  for (const UvaTable* t : tables) {
    if (t->host_view().d != d) return bad("tables differ in d");
    if (t->host_view().slice.out_heads(heads) != out_heads) return bad("tables are sliced differently");
  }
  if (!options.fast_paths.empty() && options.fast_paths.size() != tables.size())
    return bad("fast paths: " + std::to_string(options.fast_paths.size()) + " given for " +
               std::to_string(tables.size()) + " tables");

  std::unique_ptr<CudaPrefetchQueue> q(new CudaPrefetchQueue());
  q->tables_ = std::move(tables);
  q->layer_ids_ = std::move(layer_ids);
  q->heads_ = heads;
  q->out_heads_ = out_heads;
  q->d_ = d;
  q->opt_ = options;
  q->main_stream_ = main_stream;
  int dev = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev), "cuda prefetch: cudaGetDevice");
  q->device_ = dev;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&q->sm_count_, cudaDevAttrMultiProcessorCount, dev),
                              "cuda prefetch: SM count");
  cudaStream_t ps = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking), "cuda prefetch: create stream");
  q->prefetch_stream_ = ps;

  q->record_timeline_ = options.record_timeline;
  auto make_event = [](void** out, unsigned flags) -> Status {
    cudaEvent_t e = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, flags), "cuda prefetch: create event");
    *out = e;
    return Status::ok();
  };
  ENGRAM_RETURN_IF_ERROR(make_event(&q->ev_first_origin_, cudaEventDefault));
  ENGRAM_RETURN_IF_ERROR(make_event(&q->ev_step_origin_, cudaEventDefault));
  ENGRAM_RETURN_IF_ERROR(make_event(&q->ev_prefetch_done_, cudaEventDisableTiming));
  // The end of the step is a timed event when the timeline is recorded: the step span ends there.
  ENGRAM_RETURN_IF_ERROR(make_event(&q->ev_end_, q->record_timeline_ ? cudaEventDefault : cudaEventDisableTiming));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&q->counters_dev_, 2 * sizeof(unsigned long long)),
                              "cuda prefetch: counters");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemset(q->counters_dev_, 0, 2 * sizeof(unsigned long long)),
                              "cuda prefetch: counters");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&q->counters_host_, 2 * sizeof(unsigned long long), cudaHostAllocDefault),
                              "cuda prefetch: pinned counters");
  q->counters_host_[0] = q->counters_host_[1] = 0;

  const size_t ids_bytes = static_cast<size_t>(options.max_tokens) * heads * sizeof(int64_t);
  const size_t staging_bytes = static_cast<size_t>(options.max_tokens) * out_heads * d * sizeof(uint16_t);
  for (size_t li = 0; li < q->tables_.size(); ++li) {
    auto slot = std::make_unique<Slot>();
    const std::string which = " (Engram layer " + std::to_string(q->layer_ids_[li]) + ")";
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&slot->ids_pinned, ids_bytes, cudaHostAllocDefault),
                                "cuda prefetch: pinned ids " + std::to_string(ids_bytes) + " B" + which);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&slot->ids_dev, ids_bytes),
                                "cuda prefetch: device ids " + std::to_string(ids_bytes) + " B" + which);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&slot->staging, staging_bytes),
                                "cuda prefetch: staging " + std::to_string(staging_bytes) + " B" + which);
    void* e = nullptr;
    for (cudaEvent_t* ev : {&slot->ev_r, &slot->ev_s, &slot->ev_f, &slot->ev_c, &slot->ev_w}) {
      ENGRAM_RETURN_IF_ERROR(make_event(&e, cudaEventDefault));
      *ev = as_event(e);
    }
    for (cudaEvent_t* ev : {&slot->ev_r_plain, &slot->ev_f_plain, &slot->ev_ids_copied}) {
      ENGRAM_RETURN_IF_ERROR(make_event(&e, cudaEventDisableTiming));
      *ev = as_event(e);
    }
    q->slots_.push_back(std::move(slot));
  }
  return std::move(q);  // C++17: no implicit move into Result<T>(T)
}

CudaPrefetchQueue::~CudaPrefetchQueue() {
  if (prefetch_stream_) (void)cudaStreamSynchronize(as_stream(prefetch_stream_));
  for (auto& s : slots_) {
    if (s->ids_copy_pending) (void)cudaEventSynchronize(s->ev_ids_copied);
    for (cudaEvent_t e : {s->ev_r, s->ev_s, s->ev_f, s->ev_c, s->ev_w, s->ev_r_plain, s->ev_f_plain, s->ev_ids_copied})
      if (e) (void)cudaEventDestroy(e);
    if (s->ids_pinned) (void)cudaFreeHost(s->ids_pinned);
    if (s->ids_dev) (void)cudaFree(s->ids_dev);
    if (s->staging) (void)cudaFree(s->staging);
  }
  for (void* e : {ev_first_origin_, ev_step_origin_, ev_prefetch_done_, ev_end_})
    if (e) (void)cudaEventDestroy(as_event(e));
  if (counters_dev_) (void)cudaFree(counters_dev_);
  if (counters_host_) (void)cudaFreeHost(counters_host_);
  if (prefetch_stream_) (void)cudaStreamDestroy(as_stream(prefetch_stream_));
  (void)cudaGetLastError();
}

void CudaPrefetchQueue::begin_step(int64_t step) {
  ScopedDevice scoped(device_);
  if (hooks_) hooks_->on_begin_step(step);
  step_ = step;
  step_order_.clear();
  step_origin_recorded_ = false;
  auto cap = is_capturing(as_stream(main_stream_));
  if (!cap.is_ok() || *cap || !record_timeline_) return;
  if (!have_first_origin_) {
    if (cudaEventRecord(as_event(ev_first_origin_), as_stream(main_stream_)) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    have_first_origin_ = true;
    // The host's wall clock when the origin event was enqueued: the trace's absolute time base (the event runs
    // when the main stream reaches it; at the first step of a replay that stream is idle, so within microseconds).
    timeline_.origin_unix_ns =
        std::chrono::duration<double, std::nano>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  if (cudaEventRecord(as_event(ev_step_origin_), as_stream(main_stream_)) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  step_origin_recorded_ = true;
}

Status CudaPrefetchQueue::copy_ids_to_pinned(Slot& slot, const int64_t* ids, int64_t tokens, bool capturing) {
  // The previous eager H2D copy out of this pinned buffer must be done before it is overwritten (normally it
  // finished long ago: end_step synchronised). Not during capture: nothing has run, and syncing is not allowed.
  if (slot.ids_copy_pending && !capturing) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.ev_ids_copied), "cuda prefetch: wait for id buffer");
    slot.ids_copy_pending = false;
  }
  const size_t n = static_cast<size_t>(tokens) * static_cast<size_t>(heads_);
  if (n) std::memcpy(slot.ids_pinned, ids, n * sizeof(int64_t));
  return Status::ok();
}

Status CudaPrefetchQueue::prepare(int layer_index, const int64_t* ids, int64_t tokens) {
  ScopedDevice scoped(device_);
  ENGRAM_RETURN_IF_ERROR(prepare_host(layer_index, ids, tokens));
  if (hooks_) hooks_->on_prepare(layer_index, ids, tokens);  // after the lookup is enqueued: off its critical path
  return Status::ok();
}

Status CudaPrefetchQueue::prepare_host(int layer_index, const int64_t* ids, int64_t tokens) {
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) + " out of range");
  if (tokens < 0 || tokens > opt_.max_tokens || (tokens > 0 && !ids))
    return Status(Code::kInvalidArgument, "cuda prefetch: tokens " + std::to_string(tokens) + " not in [0, " +
                                              std::to_string(opt_.max_tokens) + "] or null ids");
  Slot& slot = *slots_[layer_index];
  if (slot.pending)
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) +
                                              " prepared twice without consume");
  const int64_t n = tokens * heads_;
  if (opt_.checked) {
    const int64_t rows = tables_[layer_index]->host_view().id_limit();
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] >= rows)
        return Status(Code::kInvalidArgument, "cuda prefetch (checked): id " + std::to_string(ids[i]) + " at position " +
                                                  std::to_string(i) + " >= table rows " + std::to_string(rows));
  }
  NvtxRange range("prepare", layer_ids_[layer_index]);
  const cudaStream_t ms = as_stream(main_stream_);
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, is_capturing(ms));
  ENGRAM_RETURN_IF_ERROR(copy_ids_to_pinned(slot, ids, tokens, capturing));
  if (n) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.ids_dev, slot.ids_pinned, static_cast<size_t>(n) * sizeof(int64_t),
                                                cudaMemcpyHostToDevice, ms),
                                "cuda prefetch: H2D copy of ids");
    if (!capturing) {
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.ev_ids_copied, ms), "cuda prefetch: record ids-copied");
      slot.ids_copy_pending = true;
    }
  }
  return submit(layer_index, tokens, capturing);
}

Status CudaPrefetchQueue::prepare_device(int layer_index, const int64_t* ids_device, int64_t tokens) {
  ScopedDevice scoped(device_);
  ENGRAM_RETURN_IF_ERROR(prepare_on_device(layer_index, ids_device, tokens));
  return hooks_ ? hooks_->on_prepare_device(layer_index, tokens) : Status::ok();
}

Status CudaPrefetchQueue::prepare_on_device(int layer_index, const int64_t* ids_device, int64_t tokens) {
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) + " out of range");
  if (tokens < 0 || tokens > opt_.max_tokens || (tokens > 0 && !ids_device))
    return Status(Code::kInvalidArgument, "cuda prefetch: tokens out of range or null device ids");
  Slot& slot = *slots_[layer_index];
  if (slot.pending)
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) +
                                              " prepared twice without consume");
  NvtxRange range("prepare", layer_ids_[layer_index]);
  const cudaStream_t ms = as_stream(main_stream_);
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, is_capturing(ms));
  const int64_t n = tokens * heads_;
  // Copy into the layer's own buffer on the main stream, so that the caller may reuse ids_device right after.
  if (n)
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.ids_dev, ids_device, static_cast<size_t>(n) * sizeof(int64_t),
                                                cudaMemcpyDeviceToDevice, ms),
                                "cuda prefetch: D2D copy of ids");
  return submit(layer_index, tokens, capturing);
}

Status CudaPrefetchQueue::submit(int layer_index, int64_t tokens, bool capturing) {
  Slot& slot = *slots_[layer_index];
  const cudaStream_t ms = as_stream(main_stream_);
  const cudaStream_t ps = as_stream(prefetch_stream_);
  const bool timed = record_timeline_ && step_origin_recorded_ && !capturing;
  const cudaEvent_t ev_r = timed ? slot.ev_r : slot.ev_r_plain;
  const cudaEvent_t ev_f = timed ? slot.ev_f : slot.ev_f_plain;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev_r, ms), "cuda prefetch: record r");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(ps, ev_r, 0), "cuda prefetch: wait r");
  if (timed) ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.ev_s, ps), "cuda prefetch: record s");
  LookupArgs a;
  a.table = tables_[layer_index];
  a.ids = slot.ids_dev;
  a.tokens = tokens;
  a.heads = heads_;
  a.out = slot.staging;
  a.counters = counters_dev_;
  a.grid_cap = opt_.grid_cap;
  a.sm_count = sm_count_;
  a.checked = false;  // checked mode was done on the host in prepare(); device-side checking would synchronise
  FastLookup* path = opt_.fast_paths.empty() ? nullptr : opt_.fast_paths[static_cast<size_t>(layer_index)];
  if (path) {
    ENGRAM_ASSIGN_OR_RETURN(slot.launch, path->launch(a, ps));
  } else {
    ENGRAM_ASSIGN_OR_RETURN(slot.launch, launch_lookup(a, ps));
  }
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev_f, ps), "cuda prefetch: record f");
  slot.ev_f_used = ev_f;

  slot.pending = true;
  slot.tokens = tokens;
  slot.timed = timed;
  slot.consume_timed = false;
  slot.timing = LayerTiming{};
  slot.timing.rank = opt_.rank;
  slot.timing.step = step_;
  slot.timing.layer_index = layer_index;
  slot.timing.layer_id = layer_ids_[layer_index];
  slot.timing.rows = tokens * out_heads_;
  rows_total_ += tokens * out_heads_;
  step_order_.push_back(layer_index);
  return Status::ok();
}

Result<StagingView> CudaPrefetchQueue::consume(int layer_index) {
  ScopedDevice scoped(device_);
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) + " out of range");
  Slot& slot = *slots_[layer_index];
  if (!slot.pending)
    return Status(Code::kInvalidArgument, "cuda prefetch: consume of layer index " + std::to_string(layer_index) +
                                              " that was not prepared");
  NvtxRange range("consume", layer_ids_[layer_index]);
  const cudaStream_t ms = as_stream(main_stream_);
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, is_capturing(ms));
  const bool timed = slot.timed && !capturing;
  if (timed) ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.ev_c, ms), "cuda prefetch: record c");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(ms, slot.ev_f_used, 0), "cuda prefetch: wait f");
  if (timed) ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.ev_w, ms), "cuda prefetch: record wait_end");
  slot.pending = false;
  slot.consume_timed = timed;
  return StagingView{slot.staging, slot.tokens, out_heads_, d_, true};
}

Status CudaPrefetchQueue::end_step() {
  ScopedDevice scoped(device_);
  if (hooks_) ENGRAM_RETURN_IF_ERROR(hooks_->before_end_sync());
  ENGRAM_RETURN_IF_ERROR(end_step_sync());
  return hooks_ ? hooks_->on_end_step() : Status::ok();
}

Status CudaPrefetchQueue::end_step_sync() {
  nvtxRangePushA("engram end_step");
  struct Pop {
    ~Pop() { nvtxRangePop(); }
  } pop;
  const cudaStream_t ms = as_stream(main_stream_);
  const cudaStream_t ps = as_stream(prefetch_stream_);
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, is_capturing(ms));
  if (capturing)
    return Status(Code::kInvalidArgument, "cuda prefetch: end_step while the main stream is capturing (end the capture first)");
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i]->pending)
      return Status(Code::kInvalidArgument, "cuda prefetch: step ended with layer index " + std::to_string(i) +
                                                " prepared but not consumed");
  // Join the prefetch stream into main, read the counters, and synchronise once.
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(ev_prefetch_done_), ps), "cuda prefetch: end_step record");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(ms, as_event(ev_prefetch_done_), 0), "cuda prefetch: end_step wait");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counters_host_, counters_dev_, 2 * sizeof(unsigned long long),
                                              cudaMemcpyDeviceToHost, ms),
                              "cuda prefetch: read counters");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(as_event(ev_end_), ms), "cuda prefetch: end_step record");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(as_event(ev_end_)),
                              "cuda prefetch: step " + std::to_string(step_) + " (a lookup or the consumer failed)");
  totals_.rows = rows_total_;
  totals_.dead_rows = static_cast<int64_t>(counters_host_[0]);
  totals_.invalid_ids = static_cast<int64_t>(counters_host_[1]);

  if (record_timeline_) {
    const cudaEvent_t origin = as_event(ev_step_origin_);
    const double base = step_origin_recorded_ ? elapsed_ns(as_event(ev_first_origin_), origin) : kNotRecorded;
    for (int li : step_order_) {
      Slot& slot = *slots_[li];
      LayerTiming t = slot.timing;
      if (step_origin_recorded_ && slot.timed) {
        t.r_ns = base + elapsed_ns(origin, slot.ev_r);
        t.s_ns = base + elapsed_ns(origin, slot.ev_s);
        t.f_ns = base + elapsed_ns(origin, slot.ev_f);
        if (slot.consume_timed) {
          t.c_ns = base + elapsed_ns(origin, slot.ev_c);
          t.wait_end_ns = base + elapsed_ns(origin, slot.ev_w);
        }
      }
      timeline_.add(t);
    }
    if (step_origin_recorded_) timeline_.add_step({opt_.rank, step_, base, base + elapsed_ns(origin, as_event(ev_end_)), false});
  }
  step_order_.clear();
  return Status::ok();
}

Status CudaPrefetchQueue::write_ids(int layer_index, const int64_t* ids, int64_t tokens) {
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cuda prefetch: layer index " + std::to_string(layer_index) + " out of range");
  if (tokens < 0 || tokens > opt_.max_tokens || (tokens > 0 && !ids))
    return Status(Code::kInvalidArgument, "cuda prefetch: write_ids tokens out of range or null ids");
  ScopedDevice scoped(device_);
  return copy_ids_to_pinned(*slots_[layer_index], ids, tokens, false);
}

const LaunchInfo& CudaPrefetchQueue::last_launch(int layer_index) const { return slots_.at(layer_index)->launch; }

const int64_t* CudaPrefetchQueue::ids_buffer(int layer_index) const { return slots_.at(layer_index)->ids_dev; }

const uint16_t* CudaPrefetchQueue::staging_buffer(int layer_index) const { return slots_.at(layer_index)->staging; }

Status CudaPrefetchQueue::set_record_timeline(bool on) {
  if (!step_order_.empty())
    return Status(Code::kInvalidArgument, "cuda prefetch: set_record_timeline inside a step (call it before begin_step)");
  record_timeline_ = on;
  return Status::ok();
}

}  // namespace engram::cuda
