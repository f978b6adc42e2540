// FastLookup (see fast_lookup.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/cuda_status.cuh"
#include "cuda/fast_lookup.cuh"
#include "plan/served_batch.hpp"

namespace engram::cuda {

namespace {

__global__ void accumulate_kernel(const unsigned long long* count, unsigned long long* stats, int add_probes,
                                  int bucket) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    stats[0] += *count;
    if (add_probes) stats[2] += *count;
    if (bucket >= 0) stats[3 + bucket] += *count;
  }
}

}  // namespace

bool FastLookup::capturing(void* stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

FastGatherArgs FastLookup::table_gather() const {
  const TableView& v = table_->host_view();
  FastGatherArgs g;
  g.rows_base = v.data + table_->uniform_delta();
  g.scales_base = v.scales ? v.scales + table_->uniform_delta() : nullptr;
  g.stride = v.stride_bytes;
  g.d = v.d;
  g.fused = v.format == RowFormat::kFused;
  return g;
}

double FastLookupStats::unique_fraction() const {
  return dedup_rows > 0 ? static_cast<double>(unique_rows) / static_cast<double>(dedup_rows) : plan::kUnknown;
}
double FastLookupStats::cache_hit_rate() const {
  return cache_probes > 0 ? static_cast<double>(cache_hits) / static_cast<double>(cache_probes) : plan::kUnknown;
}

Result<std::unique_ptr<FastLookup>> FastLookup::create(const UvaTable* table, const FastLookupOptions& o) {
  if (!table) return Status(Code::kInvalidArgument, "fast lookup: no table");
  if (const LayerSlice& sl = table->host_view().slice; sl.sliced())
    return Status(Code::kUnsupported, "fast lookup: a tensor-parallel slice (heads " + std::to_string(sl.head_begin) +
                                          "-" + std::to_string(sl.head_begin + sl.held_heads()) + " of " +
                                          std::to_string(sl.heads) + ") runs the plain kernel, without the hot-row cache");
  if (!table->uniform())
    return Status(Code::kUnsupported, "fast lookup: the table's registered chunks have different device offsets "
                                      "(per-chunk translation); the plain kernel serves it");
  if (o.max_rows <= 0 || o.max_rows >= INT32_MAX)
    return Status(Code::kInvalidArgument, "fast lookup: max_rows outside [1, 2^31)");
  std::unique_ptr<FastLookup> f(new FastLookup());
  f->table_ = table;
  f->opt_ = o;
  f->learner_ = plan::CostLearner(o.learner);
  const int d = table->host_view().d;
  ENGRAM_ASSIGN_OR_RETURN(f->dedup_, DeviceDedup::create(o.max_rows));
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&f->sanitized_, 8 * o.max_rows), "fast lookup: ids buffer");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&f->compact_, 2 * static_cast<size_t>(d) * o.max_rows), "fast lookup: compact rows");
  constexpr size_t kDevStatBytes = 3 * kStatWords * sizeof(unsigned long long);
  constexpr size_t kPinStatBytes = 2 * kStatWords * sizeof(unsigned long long);
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&f->dev_stats_, kDevStatBytes), "fast lookup: stats");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemset(f->dev_stats_, 0, kDevStatBytes), "fast lookup: stats");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&f->pin_stats_, kPinStatBytes), "fast lookup: pinned stats");
  std::memset(f->pin_stats_, 0, kPinStatBytes);
  cudaEvent_t e = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "fast lookup: event");
  f->ev_snapshot_ = e;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "fast lookup: event");
  f->ev_cut_ = e;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "fast lookup: event");
  f->ev_fork_ = e;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "fast lookup: event");
  f->ev_join_ = e;
  for (TimedBatch& t : f->ring_) {  // timing events (the only ones here that record time)
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e), "fast lookup: timing event");
    t.start = e;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e), "fast lookup: timing event");
    t.end = e;
  }
  cudaStream_t side = nullptr;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "fast lookup: side stream");
  f->side_stream_ = side;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "fast lookup: stats stream");
  f->stats_stream_ = side;
  if (o.host_threads > 0) {
    ENGRAM_ASSIGN_OR_RETURN(f->host_, HostGather::create(table->host_view(), o.max_rows, o.host_threads));
  }
  return std::move(f);
}

FastLookup::~FastLookup() {
  for (void* st : {side_stream_, stats_stream_})
    if (st) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(st));
  for (void* ev : {ev_snapshot_, ev_cut_, ev_fork_, ev_join_})
    if (ev) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  for (TimedBatch& t : ring_) {
    if (t.pending) (void)cudaEventSynchronize(static_cast<cudaEvent_t>(t.end));
    for (void* ev : {t.start, t.end})
      if (ev) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  }
  for (void* st : {side_stream_, stats_stream_})
    if (st) (void)cudaStreamDestroy(static_cast<cudaStream_t>(st));
  for (void* p : {static_cast<void*>(sanitized_), static_cast<void*>(compact_),
                  static_cast<void*>(dev_stats_)})
    if (p) (void)cudaFree(p);
  if (pin_stats_) (void)cudaFreeHost(pin_stats_);
  (void)cudaGetLastError();
}

int64_t FastLookup::device_bytes() const {
  return dedup_->device_bytes() + 8 * opt_.max_rows + 2 * int64_t{table_->host_view().d} * opt_.max_rows +
         (cache_ ? cache_->hbm_bytes() : 0);
}

void FastLookup::set_cache(std::unique_ptr<HotRowCache> cache) {
  cache_ = std::move(cache);
  opt_.planner.cache_present = cache_ != nullptr;
  // Hit rates of another cache say nothing about this one: restart the measurement (the prior takes over).
  ema_hit_ = plan::kUnknown;
  discard_hit_intervals_ = (snapshot_pending_ ? 1 : 0) + (counted_since_cut_ ? 1 : 0);
  explore_.since_cache = 0;
}

void FastLookup::read_snapshot() {
  if (!snapshot_pending_) return;
  if (cudaEventQuery(static_cast<cudaEvent_t>(ev_snapshot_)) != cudaSuccess) {
    (void)cudaGetLastError();  // cudaErrorNotReady is not sticky, but clear it anyway
    // Once the batches before the cut have completed, the copy behind them takes microseconds: wait for it, so
    // that a caller who synchronised its stream sees those batches' statistics in its next batch.
    if (cudaEventQuery(static_cast<cudaEvent_t>(ev_cut_)) != cudaSuccess ||
        cudaEventSynchronize(static_cast<cudaEvent_t>(ev_snapshot_)) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
  }
  snapshot_pending_ = false;
  // One set was copied at the cut; the other has not been counted into since its own copy.
  auto total = [&](int w) { return static_cast<int64_t>(pin_stats_[w] + pin_stats_[kStatWords + w]); };
  const int64_t uniq = total(0);
  const int64_t hits = total(1);
  const int64_t probes = total(2) + snap_probes_host_;
  read_seq_ = cut_seq_;
  // The interval since the previous snapshot: the statistics of the timed batches whose counts it holds (all of
  // them when it holds one batch, as when the caller synchronises between batches).
  std::array<double, plan::kSizeBuckets> interval_unique;
  interval_unique.fill(plan::kUnknown);
  for (int b = 0; b < plan::kSizeBuckets; ++b) {
    const auto i = static_cast<size_t>(b);
    const int64_t drows = snap_dedup_rows_b_[i] - used_dedup_rows_b_[i];
    const int64_t ub = total(3 + b);
    if (drows > 0) {
      learner_.observe_unique(plan::bucket_rows(b).first, drows, ub - used_unique_b_[i]);
      interval_unique[i] = static_cast<double>(ub - used_unique_b_[i]) / static_cast<double>(drows);
    }
    used_dedup_rows_b_[i] = snap_dedup_rows_b_[i];
    used_unique_b_[i] = ub;
  }
  const double interval_hit = probes - used_probes_ > 0 ? static_cast<double>(hits - used_hits_) /
                                                             static_cast<double>(probes - used_probes_)
                                                       : plan::kUnknown;
  if (discard_hit_intervals_ > 0) {
    --discard_hit_intervals_;  // (partly) another cache's hits: not this cache's rate
  } else if (std::isfinite(interval_hit)) {
    ema_hit_ = std::isfinite(ema_hit_) ? 0.5 * ema_hit_ + 0.5 * interval_hit : interval_hit;
  }
  for (TimedBatch& t : ring_)
    if (t.pending && t.stats_seq == read_seq_) {
      t.unique = interval_unique[static_cast<size_t>(plan::size_bucket(t.rows))];
      t.hit = interval_hit;
    }
  used_dedup_rows_ = snap_dedup_rows_;
  used_unique_ = uniq;
  used_probes_ = probes;
  used_hits_ = hits;
}

Status FastLookup::snapshot(void* stream) {
  if (snapshot_pending_) return Status::ok();  // the pending copy will be read first; totals keep growing
  // The copy runs on the stats stream once the batches enqueued so far have completed, so the lookup stream holds
  // one event record, not a device-to-host copy. Later batches count into the other set meanwhile; the next snapshot
  // switches back only after this one was read (its copy completed).
  const auto stats = static_cast<cudaStream_t>(stats_stream_);
  const int set = active_stats_;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_cut_), static_cast<cudaStream_t>(stream)),
                              "fast lookup: snapshot cut");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stats, static_cast<cudaEvent_t>(ev_cut_), 0),
                              "fast lookup: snapshot wait");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pin_stats_ + set * kStatWords, dev_stats_ + set * kStatWords,
                                              kStatWords * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stats),
                              "fast lookup: stats snapshot");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_snapshot_), stats),
                              "fast lookup: snapshot event");
  active_stats_ = 1 - set;
  ++cut_seq_;
  counted_since_cut_ = false;
  snap_dedup_rows_ = totals_.dedup_rows;
  snap_dedup_rows_b_ = dedup_rows_b_;
  snap_probes_host_ = host_probes_;
  snapshot_pending_ = true;
  return Status::ok();
}

plan::BatchStats FastLookup::batch_stats(int64_t rows) const {
  plan::BatchStats b;
  b.rows = rows;
  b.unique_fraction = learner_.unique_fraction(rows);
  b.cache_hit_fraction = ema_hit_;
  b.cache_hit_prior = cache_ ? cache_->profile_coverage() : plan::kUnknown;
  return b;
}

void FastLookup::harvest_timings() {
  // Oldest first (the ring fills in launch order from ring_next_); the first pair not complete ends the pass: the
  // batches after it were launched later, normally on the same stream, so one query usually says all (this runs on
  // the serving thread after every served batch is enqueued).
  for (int i = 0; i < kTimingRing; ++i) {
    TimedBatch& t = ring_[static_cast<size_t>((ring_next_ + i) % kTimingRing)];
    if (!t.pending) continue;
    if (t.stats_seq > read_seq_) break;  // its own counts have not been read yet
    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(t.end));
    if (q == cudaErrorNotReady) break;
    t.pending = false;
    float ms = 0;
    if (q != cudaSuccess || cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(t.start),
                                                 static_cast<cudaEvent_t>(t.end)) != cudaSuccess) {
      (void)cudaGetLastError();  // an unreadable pair is dropped, not learned from
      continue;
    }
    // The model's price with the batch's own unique fraction and hit rate (those of the snapshot interval that
    // holds its counts; the running estimates where the interval has none), so that the correction learns the
    // model's error, not the difference between this batch's ids and the estimate it was planned with (a prefill
    // of another language hits the cache far less than the average).
    plan::Plan shape;
    shape.dedup = t.dedup;
    shape.sort = t.sort;
    shape.cache = t.cache;
    shape.host_share = t.host_share;
    plan::BatchStats own = batch_stats(t.rows);
    if (std::isfinite(t.unique)) own.unique_fraction = t.unique;
    if (std::isfinite(t.hit)) own.cache_hit_fraction = t.hit;
    const double model = plan::model_price(shape, own, opt_.costs, cache_ != nullptr);
    learner_.observe(t.key, t.rows, model, 1e3 * static_cast<double>(ms), t.predicted_us);
  }
}

Result<LaunchInfo> FastLookup::launch(const LookupArgs& a, void* stream) {
  if (a.checked) return launch_lookup(a, stream);  // validation needs the plain kernel's pre-pass
  const bool cap = capturing(static_cast<cudaStream_t>(stream));
  auto li = forced_.use ? launch_plan(a, forced_.plan, stream)  // counted, neither timed nor learned from
                        : serve(a, cap, stream);
  // The timings of completed batches are read once this batch is enqueued, while the GPU runs it, so their event
  // queries stay out of its window; its plan used what was learned up to the batch before.
  if (!cap) harvest_timings();
  return li;
}

Result<LaunchInfo> FastLookup::serve(const LookupArgs& a, bool cap, void* stream) {
  served_ = true;  // launch_plan() learns from this batch
  struct Unmark {
    bool& f;
    ~Unmark() { f = false; }
  } unmark{served_};
  const int64_t rows = a.tokens * a.heads;
  if (!cap) read_snapshot();  // the statistics of the batches completed so far price this one
  const plan::BatchStats b = batch_stats(rows);
  plan::PlannerOptions po = opt_.planner;
  po.background_grid_cap = a.grid_cap;
  po.cache_present = cache_ != nullptr;
  if (!host_ || !a.ids_host) po.allow_hybrid = false;
  // Learned corrections and explorations (plan/served_batch.hpp); while capturing nothing is measured and no
  // learner exploration is baked into the graph.
  const plan::Plan p =
      plan::plan_served_batch(b, opt_.costs, po, opt_.learn ? &learner_ : nullptr, explore_, opt_.serve, cap);
  return launch_plan(a, p, stream);
}

Result<LaunchInfo> FastLookup::launch_plan(const LookupArgs& a, const plan::Plan& p_in, void* stream) {
  plan::Plan p = p_in;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = a.tokens * a.heads;
  if (n > opt_.max_rows)
    return Status(Code::kInvalidArgument, "fast lookup: batch of " + std::to_string(n) + " rows > capacity " +
                                              std::to_string(opt_.max_rows));
  if (p.cache && !cache_) {
    p.cache = false;
    p.notes |= plan::kNoteCacheMissing;
  }
  if (p.host_share > 0 && (!host_ || !a.ids_host)) {
    p.host_share = 0;
    p.notes |= plan::kNoteHybridNoHost;
  }
  // A share that gives the host no token is the device-only path (counted and learned as that).
  if (p.host_share > 0 && std::llround(p.host_share * static_cast<double>(a.tokens)) == 0) p.host_share = 0;
  const bool cap = capturing(s);
  if (!cap && !served_) read_snapshot();  // forced plans' and direct calls' batches are observations too
  if (p.host_share > 0 && cap) {
    p.host_share = 0;
    p.notes |= plan::kNoteHybridCaptured;
  }
  last_plan_ = p;
  counted_now_ = false;
  totals_.batches += 1;
  totals_.rows += n;
  if (!calibrating_) ++path_batches_[p.path_key()];
  cur_bucket_ = plan::size_bucket(n);

  // Timing of a served batch: an event pair around its launches on this stream (the hybrid joins its side stream
  // back before the end event), read later by harvest_timings(). Not while capturing or calibrating, nor when the
  // ring slot's previous batch has not completed yet (no waiting).
  TimedBatch* timed = nullptr;
  // launch() harvested the completed pairs. A batch run to measure something (exploration, retry) is always timed;
  // another of a path measured steadily, on a share of its batches (LearnerOptions::time_every).
  if (!cap && served_ && !calibrating_ && opt_.learn && n > 0 &&
      ((p.notes & plan::kMeasuringNotes) != 0 || learner_.wants_timing(plan::learn_key(p), n))) {
    TimedBatch& t = ring_[static_cast<size_t>(ring_next_)];
    if (!t.pending) {
      timed = &t;
      ring_next_ = (ring_next_ + 1) % kTimingRing;
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(t.start), s), "fast lookup: timing start");
    }
  }
  if (!timed && served_ && !calibrating_ && n > 0) ++untimed_batches_;
  auto li = run_plan(a, p, cap, stream);
  if (timed && li.is_ok()) {
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(timed->end), s), "fast lookup: timing end");
    // The batch's record, written once its launches are enqueued (the GPU runs them meanwhile).
    TimedBatch& t = *timed;
    t.key = plan::learn_key(p);
    t.rows = n;
    t.dedup = p.dedup;
    t.sort = p.sort;
    t.cache = p.cache;
    t.host_share = p.host_share;
    t.predicted_us = plan::model_price(p, batch_stats(n), opt_.costs, cache_ != nullptr) *
                     learner_.correction(t.key, n).factor;
    t.unique = t.hit = plan::kUnknown;
    t.stats_seq = 0;
    t.pending = true;
    ++timed_batches_;
  }
  // The device counters' copy for the next read_snapshot(), after the end event: a timed batch's window holds its
  // launches only, as a plain batch's does (the copy itself is off this stream). A batch counted while a copy was
  // pending is cut by the next batch, of whatever path.
  if (li.is_ok() && !cap && counted_since_cut_) ENGRAM_RETURN_IF_ERROR(snapshot(stream));
  // A dedup or cache batch is learned from once the snapshot holding its counts is read: this cut, or the next.
  // (A plan whose device part was empty counted nothing: it needs no snapshot.)
  if (timed && li.is_ok() && counted_now_) timed->stats_seq = cut_seq_ + (counted_since_cut_ ? 1 : 0);
  return li;
}

Result<LaunchInfo> FastLookup::run_plan(const LookupArgs& a, const plan::Plan& p, bool cap, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = a.tokens * a.heads;
  const TableView& v = table_->host_view();
  const int d = v.d;
  LookupArgs plain = a;
  plain.grid_cap = p.grid_cap;
  if (n == 0 || (!p.dedup && !p.cache && p.host_share == 0)) return launch_lookup(plain, stream);

  LaunchInfo li;
  li.rows = n;
  ENGRAM_ASSIGN_OR_RETURN(const int dev_sm, resolve_sm_count(a.sm_count));
  li.cap = p.grid_cap.blocks_for(dev_sm);
  li.grid = li.cap;

  if (p.host_share > 0) {
    // Split by token: the device reads the first tokens (plain gather, or dedup/cache when the plan has them), host
    // threads gather the rest, both at once.
    const int64_t host_tokens = std::clamp<int64_t>(std::llround(p.host_share * a.tokens), 0, a.tokens);
    const int64_t uva_tokens = a.tokens - host_tokens;
    const int64_t host_rows = host_tokens * a.heads;
    const auto side = static_cast<cudaStream_t>(side_stream_);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_fork_), s), "fast lookup: fork");
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, static_cast<cudaEvent_t>(ev_fork_), 0), "fast lookup: fork wait");
    if (uva_tokens > 0) {
      LookupArgs u = plain;
      u.tokens = uva_tokens;
      if (p.dedup || p.cache) {
        ENGRAM_RETURN_IF_ERROR(launch_device_path(u, p, li.cap, cap, stream));
      } else {
        ENGRAM_ASSIGN_OR_RETURN(li, launch_lookup(u, stream));
      }
    }
    if (host_rows > 0) {
      // Dead / invalid ids of the host share are counted on the GPU, as the plain kernel would; sanitized into the
      // buffer's own range of these rows, which the device part (rows before `off`) does not touch.
      const int64_t off = uva_tokens * a.heads;
      ENGRAM_RETURN_IF_ERROR(launch_sanitize_ids(a.ids + off, host_rows, v.rows, sanitized_ + off, a.counters, side_stream_));
      ENGRAM_RETURN_IF_ERROR(host_->run(a.ids_host + off, host_rows, a.out + off * d, li.cap, side_stream_));
      totals_.host_rows += host_rows;
    }
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_join_), side), "fast lookup: join");
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ev_join_), 0), "fast lookup: join wait");
    li.rows = n;
    return li;
  }
  ENGRAM_RETURN_IF_ERROR(launch_device_path(plain, p, li.cap, cap, stream));
  return li;
}

Status FastLookup::launch_device_path(const LookupArgs& a, const plan::Plan& p, int cap_blocks, bool cap,
                                      void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = a.tokens * a.heads;
  const TableView& v = table_->host_view();
  const int d = v.d;
  FastGatherArgs g = table_gather();
  g.n = n;
  g.out = a.out;
  g.cap = cap_blocks;
  if (p.dedup) {
    // The gather reads each distinct valid id once (dedup dropped dead and out-of-range ids and counted them) into
    // the compact buffer; the scatter writes the batch's rows from it.
    ENGRAM_RETURN_IF_ERROR(dedup_->run(a.ids, n, v.rows, p.sort ? DedupMethod::kSort : DedupMethod::kHash, a.counters,
                                       stream));
    g.ids = dedup_->unique_ids();
    g.n_device = dedup_->unique_count();
    g.out = compact_;
    // The per-size unique counts pair device sums with host row counts: a captured launch (replayed any number of
    // times, counted on the host once) adds to neither.
    accumulate_kernel<<<1, 32, 0, s>>>(g.n_device, counting_stats(cap), p.cache ? 1 : 0, cap ? -1 : cur_bucket_);
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "fast lookup: accumulate");
    totals_.dedup_batches += 1;
    totals_.dedup_rows += n;
    if (!cap) dedup_rows_b_[static_cast<size_t>(cur_bucket_)] += n;
  } else {
    // Sanitized in the gather's own pass.
    g.ids = a.ids;
    g.id_limit = v.rows;
    g.counters = a.counters;
    if (p.cache) host_probes_ += n;
  }
  // The cache is probed inside the gather: a cached row is read from HBM, the others over UVA, in one launch.
  if (p.cache) g.cache = cache_->map_view(counting_stats(cap) + 1);
  if (!cap && (p.dedup || p.cache)) counted_since_cut_ = counted_now_ = true;
  ENGRAM_RETURN_IF_ERROR(launch_fast_gather(g, stream));
  if (p.dedup) ENGRAM_RETURN_IF_ERROR(launch_scatter_rows(compact_, dedup_->inverse(), n, d, a.out, stream));
  return Status::ok();
}

Result<FastLookupStats> FastLookup::stats(void* stream) {
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "fast lookup: stats sync");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(side_stream_)), "fast lookup: stats sync");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stats_stream_)), "fast lookup: stats sync");
  unsigned long long h[3 * kStatWords];
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpy(h, dev_stats_, sizeof h, cudaMemcpyDeviceToHost), "fast lookup: stats read");
  auto total = [&](int w) { return static_cast<int64_t>(h[w] + h[kStatWords + w] + h[2 * kStatWords + w]); };
  FastLookupStats st = totals_;
  st.unique_rows = total(0);
  st.cache_hits = total(1);
  st.cache_probes = total(2) + host_probes_;
  for (const auto& [key, n] : path_batches_) st.paths[plan::path_name_of_key(key)] += n;
  read_snapshot();  // the stream is idle: the snapshot and every timed batch have completed
  if (counted_since_cut_) {
    // Batches counted while that copy was pending: cut and read them too, so that every timed batch is learned.
    ENGRAM_RETURN_IF_ERROR(snapshot(stream));
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stats_stream_)), "fast lookup: stats sync");
    read_snapshot();
  }
  harvest_timings();
  st.learned = learner_.paths();
  st.unique_by_bucket = learner_.unique_by_bucket();
  st.timed_batches = timed_batches_;
  st.untimed_batches = untimed_batches_;
  return st;
}

}  // namespace engram::cuda
