// The hot-row cache's engine side of CudaBackend (see backend.cuh): the queue's hooks (id counting during the
// warm-up window, cache creation from counts or a profile, online updates: span enqueue and collection) and the
// per-layer cache report. Kept apart from backend.cpp, which builds and tears down the backend: they share the class.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "cuda/backend.cuh"
#include "cuda/cuda_status.cuh"
#include "plan/hot_cache_sizing.hpp"

namespace engram::cuda {

Result<bool> CudaBackend::prefetch_capturing() const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(static_cast<cudaStream_t>(queue_->prefetch_stream()), &capture),
                              "hot-row cache: capture status of the prefetch stream");
  return capture != cudaStreamCaptureStatusNone;
}

bool CudaBackend::counting_now() const {
  if (!counts_ || step_ < 0) return false;  // no counting, or a harness warm-up step (numbered < 0): not traffic
  return !caches_created_ || cache_opt_.update_every > 0;
}

void CudaBackend::on_prepare(int li, const int64_t* ids, int64_t tokens) {
  if (counting_now()) counts_->submit(li, ids, tokens * heads_);
}

Status CudaBackend::on_prepare_device(int li, int64_t tokens) {
  if (!counting_now() || tokens <= 0) return Status::ok();
  auto ps = static_cast<cudaStream_t>(queue_->prefetch_stream());
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, prefetch_capturing());
  if (capturing) return Status::ok();  // a captured step is replayed without the host
  if (device_ids_.empty()) device_ids_.resize(tables_.size());
  DeviceIdCopy& c = device_ids_.at(static_cast<size_t>(li));
  const int64_t n = tokens * heads_;
  if (c.n > 0) ENGRAM_RETURN_IF_ERROR(submit_device_counts());  // a second prepare of the layer in one step
  if (n > c.capacity) {
    if (c.host) ENGRAM_CUDA_RETURN_IF_ERROR(cudaFreeHost(c.host), "cache counting: free pinned ids");
    c.host = nullptr;
    c.capacity = 0;
    void* p = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, static_cast<size_t>(n) * sizeof(int64_t)),
                                "cache counting: pinned ids buffer");
    c.host = static_cast<int64_t*>(p);
    c.capacity = n;
  }
  if (!c.done) {
    cudaEvent_t ev = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cache counting: event");
    c.done = ev;
  }
  // From the queue's copy of the ids, on the prefetch stream after the lookup that reads them: the copy never
  // delays that lookup, and the caller may reuse ids_device at once.
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.host, queue_->ids_buffer(li), static_cast<size_t>(n) * sizeof(int64_t),
                                              cudaMemcpyDeviceToHost, ps),
                              "cache counting: copy device ids");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(c.done), ps), "cache counting: record");
  c.n = n;
  return Status::ok();
}

Status CudaBackend::submit_device_counts() {
  for (size_t li = 0; li < device_ids_.size(); ++li) {
    DeviceIdCopy& c = device_ids_[li];
    if (c.n <= 0) continue;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(c.done)), "cache counting: wait copy");
    counts_->submit(static_cast<int>(li), c.host, c.n);  // submit() copies the ids
    c.n = 0;
  }
  return Status::ok();
}

Status CudaBackend::on_end_step() {
  if (!device_ids_.empty() && counts_) ENGRAM_RETURN_IF_ERROR(submit_device_counts());
  if (!cache_wanted_ || step_ < 0) return Status::ok();
  ++counted_steps_;
  if (cache_opt_.step_series) ENGRAM_RETURN_IF_ERROR(record_step_series());
  if (!caches_created_ && counted_steps_ >= cache_opt_.warmup_steps) return create_caches(/*from_profile=*/false);
  return Status::ok();
}

// Runs while the step's work is still on the GPU (its lookups and compute are enqueued, the host has not waited
// yet): the slice's host fill and enqueues overlap the step. A commit lands on the prefetch stream after this
// step's lookups and before the next step's, where it would land after the sync too. Host ids reach the counting
// thread at prepare(); ids on the device only after the sync, so a plan asked for here counts those of this step
// from the next plan on.
Status CudaBackend::before_end_sync() {
  if (!cache_wanted_ || step_ < 0 || !caches_created_) return Status::ok();
  // Under capture end_step() fails next and nothing may be enqueued into the graph.
  ENGRAM_ASSIGN_OR_RETURN(const bool capturing, prefetch_capturing());
  if (capturing) return Status::ok();
  collect_spans(/*all=*/false);
  if (cache_opt_.update_every > 0 && ++since_update_ >= cache_opt_.update_every) {
    since_update_ = 0;
    for (size_t li = 0; li < cache_.size(); ++li) {
      CacheState& st = cache_[li];
      if (!fast_[li] || !fast_[li]->cache()) continue;  // no cache on this layer: nothing to update
      ++st.rep.update_attempts;
      if (st.update_due) {  // the previous one still waits: this one merges into it, deferred too
        ++st.rep.updates_deferred;
        st.due_deferred = true;
      } else {
        st.update_due = true;
        st.due_deferred = false;
      }
    }
  }
  return maintain_caches();
}

// The step's probes and hits per layer: the device totals now minus those at the previous step's end.
Status CudaBackend::record_step_series() {
  for (size_t li = 0; li < cache_.size(); ++li) {
    CacheState& st = cache_[li];
    FastLookup* f = fast_[li].get();
    int64_t probes = 0, hits = 0;
    if (f && f->cache()) {
      ENGRAM_ASSIGN_OR_RETURN(FastLookupStats fs, f->stats(queue_->prefetch_stream()));
      probes = fs.cache_probes - st.series_probes;
      hits = fs.cache_hits - st.series_hits;
      st.series_probes = fs.cache_probes;
      st.series_hits = fs.cache_hits;
    }
    st.rep.step_probes.push_back(probes);
    st.rep.step_hits.push_back(hits);
  }
  return Status::ok();
}

Status CudaBackend::create_caches(bool from_profile) {
  using clock = std::chrono::steady_clock;
  caches_created_ = true;
  if (!from_profile && counts_) counts_->drain();  // the whole warm-up window is counted
  // Cap: all budgets together within hbm_fraction of the free HBM now.
  size_t free_b = 0, total_b = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b), "hot cache: cudaMemGetInfo");
  int64_t sum = 0;
  for (const auto& c : cache_) sum += c.budget;
  const double cap = cache_opt_.hbm_fraction * static_cast<double>(free_b);
  const double scale = sum > 0 && static_cast<double>(sum) > cap ? cap / static_cast<double>(sum) : 1.0;
  for (size_t li = 0; li < cache_.size(); ++li) {
    CacheState& st = cache_[li];
    if (st.budget <= 0) continue;
    const auto t0 = clock::now();
    const int64_t budget = static_cast<int64_t>(std::floor(static_cast<double>(st.budget) * scale));
    const TableView& v = tables_[li].host_view();
    HotCacheOptions ho;
    ho.budget_bytes = budget;
    ho.format = cache_opt_.format;
    ho.device_source = &tables_[li];  // the initial rows gathered on the GPU from the registered table
    // Staging for the largest slice an update applies per step (counted in the budget, as rows and map are).
    ho.staging_rows = cache_opt_.update_every > 0 ? st.update_budget.max_slice_for(cache_opt_.update_every) : 1;
    // Slots this budget holds (as HotRowCache::create computes them): ask the counts for that many ids.
    const plan::HotCacheSizing sizing =
        plan::hot_cache_sizing(budget, plan::hot_cache_row_bytes(v.d, cache_opt_.format), v.rows, ho.staging_rows);
    const int64_t want = std::max<int64_t>(1, sizing.slots);
    std::vector<int64_t> hot;
    std::vector<std::pair<int64_t, int64_t>> counts_pairs;
    double coverage = std::numeric_limits<double>::quiet_NaN();
    if (from_profile) {
      const auto& p = cache_opt_.profile[li];
      hot.reserve(std::min<size_t>(p.size(), static_cast<size_t>(want)));
      for (const auto& [id, n] : p) {
        if (static_cast<int64_t>(hot.size()) >= want) break;
        hot.push_back(id);
      }
      st.rep.source = cache_opt_.profile_source.empty() ? "profile" : cache_opt_.profile_source;
    } else {
      double total = 0, held = 0;
      counts_->with(static_cast<int>(li), [&](plan::HotCounts& c) {
        total = c.total();
        for (const auto& [id, n] : c.hottest(want)) {
          hot.push_back(id);
          held += n;
        }
      });
      if (total > 0) coverage = held / total;
      st.rep.source = "warm-up window (counted steps 0.." + std::to_string(cache_opt_.warmup_steps - 1) +
                      ", run without the cache)";
    }
    auto c = HotRowCache::create(v, hot, ho);
    if (!c.is_ok()) {
      if (c.status().code() == Code::kInvalidArgument) {  // budget too small for one row: say so, run without
        st.rep.note = c.status().message();
        st.rep.state = "off";
        continue;
      }
      return c.status().with_context("hot-row cache of Engram layer " + std::to_string(li));
    }
    // The cache took its ids from the profile's first hot.size() records: only those can be cached.
    if (from_profile) coverage = (*c)->coverage_of(cache_opt_.profile[li], static_cast<int64_t>(hot.size()));
    (*c)->set_profile_coverage(coverage);
    st.rep.state = "on";
    st.rep.fill = (*c)->filled_on_device() ? "gpu" : "host";
    st.rep.budget_bytes = budget;
    st.rep.slots = (*c)->slots();
    st.rep.filled = (*c)->filled();
    st.rep.hbm_bytes = (*c)->hbm_bytes();
    st.rep.staging_rows = (*c)->staging_rows();
    // The slice an update applies per step: its share of the period, within the staging the budget left room for.
    st.rep.update_slice_rows = cache_opt_.update_every > 0
                                   ? std::min(st.update_budget.slice_for(cache_opt_.update_every), (*c)->staging_rows())
                                   : 0;
    st.rep.profile_coverage = coverage;
    st.rep.created_after_step = from_profile ? -1 : step_;
    if (scale < 1.0)
      st.rep.note = "budget capped to " + std::to_string(static_cast<int>(100 * cache_opt_.hbm_fraction)) +
                    "% of the free HBM (" + std::to_string(free_b >> 20) + " MiB free)";
    if (counts_) {
      const std::vector<int64_t>& slot_ids = (*c)->slot_ids();
      counts_->with(static_cast<int>(li), [&](plan::HotCounts& h) { h.set_slots(slot_ids); });
    }
    FastLookup* f = fast_[li].get();
    f->set_cache(std::move(*c));
    ENGRAM_RETURN_IF_ERROR(f->warm_cache_kernels(queue_->prefetch_stream()));
    // The planner's price of a cached row: the start-up calibration ran before any cache existed.
    if (f->planner_options().enabled) {
      const Status cs = f->calibrate_cache(queue_->prefetch_stream());
      if (cs.is_ok() && f->costs().cache_hit_ns_per_row > 0) {
        st.rep.hit_ns_per_row = f->costs().cache_hit_ns_per_row;
      } else if (!cs.is_ok()) {
        st.rep.note += std::string(st.rep.note.empty() ? "" : "; ") +
                       "cached rows not priced (the planner takes them as free): " + cs.to_string();
      }
    }
    ENGRAM_ASSIGN_OR_RETURN(FastLookupStats fs, f->stats(queue_->prefetch_stream()));
    st.rows_at_create = fs.rows;
    st.hits_at_create = fs.cache_hits;
    st.probes_at_create = fs.cache_probes;
    st.series_probes = fs.cache_probes;
    st.series_hits = fs.cache_hits;
    st.rep.create_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  }
  return Status::ok();
}

Status CudaBackend::enqueue_span(int li, const char* what, void* stream, const std::function<Result<int64_t>()>& enqueue,
                                 int64_t* rows, double* host_us) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto s = static_cast<cudaStream_t>(stream);
  const bool timed = queue_->record_timeline() && queue_->time_origin_event() != nullptr;
  PendingSpan p;
  if (timed) {
    cudaEvent_t b = nullptr, e = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b), "cache maintenance: span event");
    if (cudaEventCreate(&e) != cudaSuccess) {
      (void)cudaEventDestroy(b);
      (void)cudaGetLastError();
      return Status(Code::kCuda, "cache maintenance: span event");
    }
    p.ev_begin = b;
    p.ev_end = e;
    (void)cudaEventRecord(b, s);
  }
  auto r = enqueue();
  if (timed) (void)cudaEventRecord(static_cast<cudaEvent_t>(p.ev_end), s);
  *host_us = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
  *rows = r.is_ok() ? *r : 0;
  if (timed) {
    p.span.rank = queue_rank_;
    p.span.step = step_;
    p.span.layer_index = li;
    p.span.layer_id = li < static_cast<int>(layer_ids_.size()) ? layer_ids_[static_cast<size_t>(li)] : li;
    p.span.what = what;
    p.span.rows = *rows;
    p.span.host_us = *host_us;
    spans_.push_back(std::move(p));
  }
  return r.is_ok() ? Status::ok() : r.status();
}

void CudaBackend::collect_spans(bool all) {
  const auto origin = static_cast<cudaEvent_t>(queue_ ? queue_->time_origin_event() : nullptr);
  auto ns_of = [&](void* ev) {
    float ms = 0;
    if (!origin || cudaEventElapsedTime(&ms, origin, static_cast<cudaEvent_t>(ev)) != cudaSuccess) {
      (void)cudaGetLastError();
      return kNotRecorded;
    }
    return static_cast<double>(ms) * 1e6;
  };
  size_t kept = 0;
  for (size_t i = 0; i < spans_.size(); ++i) {
    PendingSpan& p = spans_[i];
    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(p.ev_end));
    if (q == cudaErrorNotReady && !all) {
      spans_[kept++] = std::move(p);
      continue;
    }
    if (q == cudaSuccess && queue_) {
      p.span.start_ns = ns_of(p.ev_begin);
      p.span.end_ns = ns_of(p.ev_end);
      queue_->add_maintenance(p.span);
    }
    (void)cudaGetLastError();
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(p.ev_begin));
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(p.ev_end));
  }
  spans_.resize(kept);
}

Status CudaBackend::maintain_caches() {
  for (size_t li = 0; li < cache_.size(); ++li) {
    CacheState& st = cache_[li];
    HotRowCache* c = fast_[li] ? fast_[li]->cache() : nullptr;
    if (!c || !counts_ || !maint_stream_) continue;
    const int layer = static_cast<int>(li);
    auto context = [&](const Status& s) {
      return s.with_context("online update of the hot-row cache of Engram layer " + std::to_string(li));
    };
    double host_us = 0;
    bool worked = false;
    // Commit the slice staged at an earlier step once its copy is done; never wait for it.
    if (c->has_staged() && c->stage_ready()) {
      int64_t rows = 0;
      double us = 0;
      const Status s = enqueue_span(layer, "commit", queue_->prefetch_stream(), [&] { return c->commit(queue_->prefetch_stream()); },
                                    &rows, &us);
      if (!s.is_ok()) return context(s);
      st.rep.rows_swapped += rows;
      ++st.rep.slices;
      host_us += us;
      worked = true;
    }
    // Stage the next slice of the planned swaps (at most one slice of host fill and copy: UpdateBudget::slice_for).
    if (!c->has_staged()) {
      const int64_t slice = std::min(st.update_budget.slice_for(cache_opt_.update_every), c->staging_rows());
      const std::vector<plan::CacheSwap> swaps = counts_->take_planned(layer, slice);
      if (!swaps.empty()) {
        std::vector<std::pair<int64_t, int64_t>> v;
        v.reserve(swaps.size());
        for (const auto& sw : swaps) v.emplace_back(sw.slot, sw.new_id);
        int64_t rows = 0;
        double us = 0;
        const Status s = enqueue_span(layer, "stage", maint_stream_, [&] { return c->stage(v, maint_stream_); }, &rows, &us);
        if (!s.is_ok()) return context(s);
        host_us += us;
        worked = true;
      }
    }
    // Ask for the next plan while the last slices of the previous one are still applied (pipelined): refused only
    // while that plan is not computed yet or a whole update's swaps still wait to be staged.
    if (st.update_due) {
      if (!st.budget_fed && !counts_->plan_queued(layer)) {
        st.update_budget.on_plan(counts_->last_plan_rows(layer));  // the previous plan's size, once
        st.budget_fed = true;
      }
      if (counts_->request_plan(layer, st.update_budget.rows())) {
        st.update_due = false;
        st.budget_fed = false;
        ++st.rep.updates;
        if (st.update_budget.scale() > 1) ++st.rep.burst_updates;
        st.rep.update_scale_max = std::max(st.rep.update_scale_max, st.update_budget.scale());
      } else {
        if (!st.due_deferred) ++st.rep.updates_deferred;
        st.due_deferred = true;
        ++st.rep.update_deferred_steps;
      }
    }
    if (worked) {
      ++st.host_timed;
      st.update_host_us_sum += host_us;
      st.rep.update_host_us_max =
          std::isfinite(st.rep.update_host_us_max) ? std::max(st.rep.update_host_us_max, host_us) : host_us;
    }
  }
  return Status::ok();
}

Result<EngineCacheReport> CudaBackend::cache_report(int li) const {
  if (li < 0 || li >= static_cast<int>(cache_.size()))
    return Status(Code::kInvalidArgument, "cache report: layer index " + std::to_string(li) + " out of range");
  const CacheState& st = cache_[static_cast<size_t>(li)];
  EngineCacheReport r = st.rep;
  if (counts_) {
    r.counted_batches = counts_->counted_batches();
    r.dropped_batches = counts_->dropped_batches();
    r.sampled_batches = counts_->sampled_batches();
    r.sampled_out_ids = counts_->sampled_out_ids();
  }
  if (st.host_timed > 0) r.update_host_us_mean = st.update_host_us_sum / static_cast<double>(st.host_timed);
  if (counts_) {
    const plan::HotCountsWorker::PlanTimes pt = counts_->plan_times();
    if (pt.plans > 0) {
      r.plan_us_mean = pt.sum_us / static_cast<double>(pt.plans);
      r.plan_us_max = pt.max_us;
    }
  }
  FastLookup* f = fast_lookup(li);
  HotRowCache* c = f ? f->cache() : nullptr;
  if (!c) return r;
  ENGRAM_ASSIGN_OR_RETURN(FastLookupStats fs, f->stats(queue_->prefetch_stream()));
  r.filled = c->filled();
  r.hbm_bytes = c->hbm_bytes();
  r.map_rebuilds = c->map_rebuilds();
  r.probes = fs.cache_probes - st.probes_at_create;
  r.hits = fs.cache_hits - st.hits_at_create;
  r.rows_since_create = fs.rows - st.rows_at_create;
  if (r.probes > 0) r.hit_rate = static_cast<double>(r.hits) / static_cast<double>(r.probes);
  r.link_bytes_avoided = r.hits * c->source_bytes_per_row();
  const int heads = heads_;
  if (r.rows_since_create > 0 && heads > 0)
    r.link_bytes_avoided_per_token = static_cast<double>(r.link_bytes_avoided) /
                                     (static_cast<double>(r.rows_since_create) / heads);
  return r;
}

}  // namespace engram::cuda
