// TableRegistration, make_cuda_backend and the engine's calls on CudaBackend (see backend.cuh): direct lookups,
// the DeviceQueue calls and the compute. Destruction runs in reverse dependency order: the step hasher, the
// counting thread, the queue (its kernels read the tables and its events live on the streams), the compute, the
// fast paths, the UVA tables, the registration (when this backend holds the last reference), the stream. The
// hot-row cache's engine side (the queue's hooks: warm-up window, online updates) is in backend_cache.cpp, the
// reports' JSON in backend_report.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "cuda/backend.cuh"
#include "cuda/cuda_status.cuh"

namespace engram::cuda {

std::vector<HostRange> host_ranges_of(const TableView& v) {
  std::vector<HostRange> out;
  if (!v.data || v.rows <= 0 || v.d <= 0) return out;
  if (v.format == RowFormat::kFused) {
    out.push_back({v.data, v.rows * v.stride_bytes, v.stride_bytes});
  } else if (v.scales == v.data + v.rows * v.d) {
    // Offsets that are multiples of d are row boundaries of both arrays (d/32 divides d and rows * d).
    out.push_back({v.data, v.rows * v.d + v.rows * (v.d / 32), v.d});
  } else {
    out.push_back({v.data, v.rows * v.d, v.d});
    out.push_back({v.scales, v.rows * (v.d / 32), v.d / 32});
  }
  return out;
}

Result<std::shared_ptr<TableRegistration>> TableRegistration::create(int device, const std::vector<TableView>& views,
                                                                      const std::vector<int>& layer_ids,
                                                                      const RegistrationOptions& options) {
  if (views.empty()) return Status(Code::kInvalidArgument, "cuda registration: no table");
  ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, device_info(device));
  (void)info;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cuda registration: cudaSetDevice(" + std::to_string(device) + ")");
  auto reg = std::make_shared<TableRegistration>();
  reg->device_ = device;
  for (size_t li = 0; li < views.size(); ++li) {
    for (const HostRange& r : host_ranges_of(views[li])) {
      bool done = false;
      for (const auto& x : reg->regs_) done = done || x.covers(r.ptr, r.bytes);
      if (done) continue;
      RegistrationOptions ro = options;
      ro.boundary_bytes = r.boundary_bytes;
      auto hr = HostRegistration::register_range(r.ptr, r.bytes, ro);
      if (!hr.is_ok()) {
        const int id = li < layer_ids.size() ? layer_ids[li] : static_cast<int>(li);
        return hr.status().with_context("table of Engram layer " + std::to_string(id));
      }
      auto& rep = reg->report_;
      rep.bytes += hr->bytes();
      rep.chunks += static_cast<int>(hr->chunks().size());
      rep.prefault_ns += hr->prefault_ns();
      rep.register_ns += hr->register_ns();
      rep.device_equals_host = rep.device_equals_host && hr->device_equals_host();
      reg->regs_.push_back(std::move(*hr));
    }
  }
  return reg;
}

std::vector<const HostRegistration*> TableRegistration::ranges() const {
  std::vector<const HostRegistration*> out;
  for (const auto& r : regs_) out.push_back(&r);
  return out;
}

bool TableRegistration::covers(const TableView& view) const {
  for (const HostRange& r : host_ranges_of(view)) {
    bool in = false;
    for (const auto& x : regs_) in = in || x.covers(r.ptr, r.bytes);
    if (!in) return false;
  }
  return true;
}

Result<std::unique_ptr<CudaBackend>> make_cuda_backend(CudaBackendOptions opt,
                                                       const std::vector<TableView>& views) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "cuda backend: " + m); };
  if (views.empty() || views.size() != opt.layer_ids.size())
    return bad("need one table per Engram layer (got " + std::to_string(views.size()) + " tables, " +
               std::to_string(opt.layer_ids.size()) + " layer ids)");
  if (opt.heads <= 0) return bad("heads must be > 0");
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };
  ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, device_info(opt.device));
  if (!info.unified_addressing)
    return Status(Code::kUnsupported, "cuda backend: device " + std::to_string(opt.device) + " (" + info.name +
                                          ") has no unified addressing");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaSetDevice(opt.device), "cuda backend: cudaSetDevice(" + std::to_string(opt.device) + ")");

  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = info;
  be->heads_ = opt.heads;
  be->queue_rank_ = opt.queue.rank;
  be->grid_cap_ = opt.queue.grid_cap;
  be->fast_path_mode_ = !opt.fast_path ? FastPathMode::kOff : opt.planner ? FastPathMode::kPlanner : FastPathMode::kPlain;
  be->layer_ids_ = opt.layer_ids;
  if (opt.registered) {
    if (opt.registered->device() != opt.device && !opt.registered->report().device_equals_host)
      return bad("the tables were registered for device " + std::to_string(opt.registered->device()) +
                 " with device addresses that differ from host addresses; device " + std::to_string(opt.device) +
                 " cannot reuse them");
    for (const TableView& v : views)
      if (!opt.registered->covers(v)) return bad("the given registration does not cover every table");
    be->registered_ = opt.registered;
  } else {
    ENGRAM_ASSIGN_OR_RETURN(be->registered_,
                            TableRegistration::create(opt.device, views, opt.layer_ids, opt.registration));
  }
  if (opt.main_stream) {
    be->main_stream_ = opt.main_stream;
  } else {
    cudaStream_t s = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda backend: main stream");
    be->main_stream_ = s;
    be->owns_stream_ = true;
  }
  const std::vector<const HostRegistration*> regs = be->registered_->ranges();
  for (size_t li = 0; li < views.size(); ++li) {
    auto t = UvaTable::make(views[li], regs, opt.force_segment_translation);
    if (!t.is_ok()) return t.status().with_context("table of Engram layer " + std::to_string(opt.layer_ids[li]));
    be->tables_.push_back(std::move(*t));
  }
  std::vector<const UvaTable*> tables;
  for (const auto& t : be->tables_) tables.push_back(&t);

  if (opt.fast_path) {
    for (auto& t : be->tables_) {
      FastLookupOptions fo;
      fo.max_rows = opt.queue.max_tokens * opt.heads;
      fo.planner.enabled = opt.planner;
      fo.learn = opt.learn;
      auto f = FastLookup::create(&t, fo);
      if (!f.is_ok()) {
        if (f.status().code() != Code::kUnsupported) return f.status().with_context("fast path");
        be->fast_note_ = f.status().message();
        be->fast_.clear();
        break;
      }
      be->fast_.push_back(std::move(*f));
    }
    // Start-up calibration: the planner prices paths with costs measured on this machine and table, not the
    // defaults; once, on the first layer's table, copied to the others (same host memory, same registration
    // kind); up to the batch size this backend was created for. A failure keeps the defaults and says so.
    if (opt.planner && !be->fast_.empty()) {
      const auto t_cal = clock::now();
      const Status cs = be->fast_[0]->calibrate(be->main_stream_);
      be->calibration_ms_ = ms_since(t_cal);
      if (cs.is_ok()) {
        for (size_t i = 1; i < be->fast_.size(); ++i) be->fast_[i]->costs() = be->fast_[0]->costs();
      } else {
        be->fast_note_ = "start-up calibration failed, planner uses default costs: " + cs.to_string();
      }
    }
  } else {
    be->fast_note_ = "fast path off (requested)";
  }

  CudaPrefetchOptions qo = opt.queue;
  qo.fast_paths.clear();
  for (auto& f : be->fast_) qo.fast_paths.push_back(f.get());
  ENGRAM_ASSIGN_OR_RETURN(be->queue_, CudaPrefetchQueue::create(tables, opt.layer_ids, opt.heads, be->main_stream_, qo));
  be->queue_->set_hooks(be.get());  // the hot-row cache's side (backend_cache.cpp); nothing to do without a cache
  if (opt.layer_us > 0) {
    ENGRAM_ASSIGN_OR_RETURN(be->compute_, CudaLayerCompute::create(be->main_stream_, opt.layer_us));
  }

  // Hot-row caches (engine side).
  // The options' profile (every layer's records, hundreds of MB for a large one) moves into the backend and is
  // dropped once the caches are filled from it.
  be->cache_opt_ = std::move(opt.cache);
  const EngineCacheOptions& ko = be->cache_opt_;
  be->cache_.resize(views.size());
  bool any_budget = false;
  for (size_t li = 0; li < views.size(); ++li) {
    const int64_t b = li < ko.budget_bytes.size() ? ko.budget_bytes[li] : 0;
    be->cache_[li].budget = std::max<int64_t>(0, b);
    be->cache_[li].rep.budget_bytes = be->cache_[li].budget;
    be->cache_[li].rep.format = ko.format;
    any_budget = any_budget || b > 0;
  }
  if (!any_budget) {
    for (auto& c : be->cache_) c.rep.note = "no cache (size 0 / off)";
  } else if (be->fast_.empty()) {
    for (auto& c : be->cache_)
      c.rep.note = "no cache: it runs inside the fast path, which is off (" + be->fast_note_ + ")";
  } else if (!opt.planner) {
    for (auto& c : be->cache_) c.rep.note = "no cache: the planner is off (the fast path runs the plain gather)";
  } else {
    if (!ko.profile.empty() && ko.profile.size() != views.size())
      return bad("cache profile has " + std::to_string(ko.profile.size()) + " layers, the table " +
                 std::to_string(views.size()));
    if (ko.profile.empty() && ko.warmup_steps < 1) return bad("cache warm-up window must be >= 1 step");
    if (ko.update_every < 0 || ko.update_rows < 0) return bad("cache update every/rows must be >= 0");
    be->cache_wanted_ = true;
    const bool counting = ko.profile.empty() || ko.update_every > 0;
    if (counting) {
      plan::HotCountsOptions co = ko.counts;
      co.id_limit = views[0].rows;
      for (const auto& v : views) co.id_limit = std::min(co.id_limit, v.rows);
      const plan::UpdateBudget budget(ko.update_rows, ko.update_slice_rows, ko.update_burst);
      co.pool_size = budget.candidate_pool();
      for (auto& c : be->cache_) c.update_budget = budget;
      be->counts_ = std::make_unique<plan::HotCountsWorker>(static_cast<int>(views.size()), co, ko.max_pending_ids);
    }
    if (ko.update_every > 0) {
      if (ko.update_slice_rows < 1) return bad("cache update slice must be >= 1 row");
      int least = 0, greatest = 0;
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cache maintenance: priorities");
      cudaStream_t ms = nullptr;
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&ms, cudaStreamNonBlocking, least),
                                  "cache maintenance: create stream");
      be->maint_stream_ = ms;
    }
    if (!ko.profile.empty()) {
      const auto t_fill = clock::now();
      ENGRAM_RETURN_IF_ERROR(be->create_caches(/*from_profile=*/true));
      std::vector<std::vector<std::pair<int64_t, int64_t>>>().swap(be->cache_opt_.profile);
      be->cache_fill_ms_ = ms_since(t_fill);
    } else {
      for (auto& c : be->cache_)
        if (c.budget > 0) c.rep.state = "warming up";
    }
  }
  return be;
}

CudaBackend::~CudaBackend() {
  hasher_.reset();
  if (main_stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(main_stream_));
  if (maint_stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(maint_stream_));
  collect_spans(/*all=*/true);
  if (queue_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(queue_->prefetch_stream()));
  for (auto& c : device_ids_) {
    if (c.host) (void)cudaFreeHost(c.host);
    if (c.done) (void)cudaEventDestroy(static_cast<cudaEvent_t>(c.done));
  }
  counts_.reset();
  queue_.reset();
  compute_.reset();
  fast_.clear();
  tables_.clear();
  registered_.reset();
  if (owns_stream_ && main_stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(main_stream_));
  if (maint_stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(maint_stream_));
  (void)cudaGetLastError();
}

Status CudaBackend::synchronize() {
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(main_stream_)),
                              "cuda backend: synchronize main stream");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(queue_->prefetch_stream())),
                              "cuda backend: synchronize prefetch stream");
  return Status::ok();
}

LayerCompute& CudaBackend::compute() {
  if (compute_) return *compute_;
  return no_compute_;
}

Result<LookupResult> CudaBackend::lookup(int li, const int64_t* ids, int64_t tokens, uint16_t* out,
                                         const LookupCall& call) {
  const int layers = static_cast<int>(tables_.size());
  if (li < 0 || li >= layers)
    return Status(Code::kInvalidArgument, "lookup: layer index " + std::to_string(li) + " out of range [0, " +
                                              std::to_string(layers) + ")");
  LookupArgs a;
  a.table = &tables_[static_cast<size_t>(li)];
  a.ids = ids;
  a.tokens = tokens;
  a.heads = heads_;
  a.out = out;
  a.sm_count = device_.sm_count;
  a.grid_cap = call.grid_cap;
  a.checked = call.checked;
  void* s = call.stream;  // the caller's stream; null is the legacy default stream, never an engine stream
  ScopedDevice scope(device_.ordinal);
  FastLookup* f = fast_lookup(li);
  LookupResult r;
  ENGRAM_ASSIGN_OR_RETURN(r.launch, f ? f->launch(a, s) : launch_lookup(a, s));
  r.stats.rows = r.launch.rows;
  r.launch.path = f && !call.checked ? f->last_plan().path_name() : std::string("plain-uva");
  return r;
}

Status CudaBackend::prepare_device(int li, const int64_t* ids_device, int64_t tokens) {
  return queue_->prepare_device(li, ids_device, tokens);  // the queue's hook counts the ids (backend_cache.cpp)
}

Status CudaBackend::write_ids(int li, const int64_t* ids, int64_t tokens) { return queue_->write_ids(li, ids, tokens); }

Status CudaBackend::main_wait_event(void* ev) { return stream_wait_event(main_stream_, ev, device_.ordinal); }

Result<LaunchShape> CudaBackend::last_launch(int li) const {
  if (li < 0 || li >= static_cast<int>(tables_.size()))
    return Status(Code::kInvalidArgument, "last_launch: layer index out of range");
  LaunchShape l = queue_->last_launch(li);
  const FastLookup* f = fast_lookup(li);
  l.path = f ? f->last_plan().path_name() : std::string("plain-uva");
  return l;
}

void* CudaBackend::prefetch_stream() const { return queue_->prefetch_stream(); }

Status CudaBackend::enable_device_hashing(const NgramHashParams& params, int max_requests, int64_t max_tokens) {
  ENGRAM_ASSIGN_OR_RETURN(hasher_, StepHasher::create(params, max_requests, device_.ordinal, max_tokens));
  return Status::ok();
}

Status CudaBackend::hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n) {
  if (!hasher_) return Status(Code::kInvalidArgument, "hash_and_prepare: device hashing is not enabled");
  ScopedDevice scope(device_.ordinal);
  ENGRAM_RETURN_IF_ERROR(hasher_->hash_decode_step(tokens, new_sequence, n, main_stream_));
  for (int li = 0; li < static_cast<int>(tables_.size()); ++li)
    ENGRAM_RETURN_IF_ERROR(queue_->prepare_device(li, hasher_->ids(li), n));
  return Status::ok();
}

Status CudaBackend::hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                            const uint8_t* new_sequence, int n_chunks) {
  if (!hasher_) return Status(Code::kInvalidArgument, "hash_chunks_and_prepare: device hashing is not enabled");
  ScopedDevice scope(device_.ordinal);
  ENGRAM_RETURN_IF_ERROR(hasher_->hash_step(tokens, counts, slots, new_sequence, n_chunks, main_stream_));
  const int64_t t = hasher_->last_tokens();
  for (int li = 0; li < static_cast<int>(tables_.size()); ++li)
    ENGRAM_RETURN_IF_ERROR(queue_->prepare_device(li, hasher_->ids(li), t));
  return Status::ok();
}

Result<DeviceHashStep> CudaBackend::last_device_hash(bool with_ids) const {
  if (!hasher_) return Status(Code::kInvalidArgument, "last_device_hash: device hashing is not enabled");
  DeviceHashStep s;
  ENGRAM_ASSIGN_OR_RETURN(s.gpu_ns, hasher_->last_step_ns());
  if (with_ids) ENGRAM_RETURN_IF_ERROR(hasher_->read_back(s.ids, &s.errors));
  return s;
}

}  // namespace engram::cuda
