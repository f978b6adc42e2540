// The cuda entry of the backend registry, over src/cuda's CudaBackend: registration (TableRegistration, the
// protocol's "register" step), then the rank's stack (UVA tables, each layer's lookup path — FastLookup with the
// planner and the hot-row cache, or the plain kernel — fixed when the queue is built, the prefetch stream and the
// calibrated GEMM compute). Its Backend is also the engine's DeviceQueue (the CUDA-only calls: device ids, graph
// refills, events, streams, launch shape, step hashing), and its reports (device, registration, hot-row cache) go
// to JSON through one to_json each. This file has no CUDA API calls; it is compiled with and without the toolkit,
// and without it the entry does not exist (cuda_backend_entry() is null, so `auto` takes cpu and says why).
#include "engine/backend.hpp"
#include "engine/harness.hpp"

#if defined(ENGRAM_HAVE_CUDA)
#include <algorithm>
#include <chrono>
#include <cmath>

#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#include "cuda/hot_cache.cuh"
#include "cuda/step_hasher.cuh"
#include "report/numbers.hpp"
#endif

#if defined(ENGRAM_HAVE_CUDA)
// The CUDA backend's typed reports as JSON: one function per report (nlohmann's to_json, found by argument-dependent
// lookup), so describe() and the registration holder write them the same way. A figure that could not be taken
// (NaN) and an empty text are null.
namespace engram::cuda {

static nlohmann::json text_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

static void to_json(nlohmann::json& j, const DeviceInfo& d) {
  j = {{"ordinal", d.ordinal},         {"name", d.name},
       {"pci_bus_id", d.pci_bus_id},   {"sm_count", d.sm_count},
       {"driver_version", d.driver_version}, {"runtime_version", d.runtime_version}};
}

static void to_json(nlohmann::json& j, const CudaRegistrationReport& r) {
  j = {{"bytes", r.bytes}, {"chunks", r.chunks}, {"prefault_s", r.prefault_ns * 1e-9},
       {"register_s", r.register_ns * 1e-9}, {"device_pointer_equals_host", r.device_equals_host}};
}

static void to_json(nlohmann::json& j, const EngineCacheReport& c) {
  using report::json_num;
  auto series = [](const std::vector<int64_t>& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  j = {{"state", c.state},
       {"note", text_or_null(c.note)},
       {"source", text_or_null(c.source)},
       {"format", cache_format_name(c.format)},
       {"budget_bytes", c.budget_bytes},
       {"slots", c.slots},
       {"rows_cached", c.filled},
       {"hbm_bytes", c.hbm_bytes},
       {"staging_rows", c.staging_rows},
       {"created_after_step", c.created_after_step},
       {"create_ms", json_num(c.create_ms)},
       {"profile_coverage", json_num(c.profile_coverage)},
       {"probes", c.probes},
       {"hits", c.hits},
       {"hit_rate", json_num(c.hit_rate)},
       {"rows_since_create", c.rows_since_create},
       {"link_bytes_avoided", c.link_bytes_avoided},
       {"link_bytes_avoided_per_token", json_num(c.link_bytes_avoided_per_token)},
       {"update_attempts", c.update_attempts},
       {"updates", c.updates},
       {"updates_deferred", c.updates_deferred},
       {"update_deferred_steps", c.update_deferred_steps},
       {"update_slice_rows", c.update_slice_rows},
       {"slices", c.slices},
       {"burst_updates", c.burst_updates},
       {"update_scale_max", c.update_scale_max},
       {"plan_us_mean", json_num(c.plan_us_mean)},
       {"plan_us_max", json_num(c.plan_us_max)},
       {"rows_swapped", c.rows_swapped},
       {"map_rebuilds", c.map_rebuilds},
       {"update_host_us_max", json_num(c.update_host_us_max)},
       {"update_host_us_mean", json_num(c.update_host_us_mean)},
       {"counted_batches", c.counted_batches},
       {"dropped_batches", c.dropped_batches},
       {"sampled_batches", c.sampled_batches},
       {"sampled_out_ids", c.sampled_out_ids},
       {"step_probes", series(c.step_probes)},
       {"step_hits", series(c.step_hits)}};
}

}  // namespace engram::cuda
#endif

namespace engram::engine {

#if defined(ENGRAM_HAVE_CUDA)

namespace {

using report::json_num;

// layer_us = 0: no synthetic compute (the lookups alone).
class NoCompute final : public LayerCompute {
 public:
  Status run_layer(int) override { return Status::ok(); }
  double layer_ns() const override { return 0; }
};

LaunchShape shape_of(const cuda::LaunchInfo& l) {
  LaunchShape s;
  s.rows = l.rows;
  s.tiles = l.tiles;
  s.grid = l.grid;
  s.cap = l.cap;
  s.block_threads = l.block_threads;
  s.tile_rows = l.tile_rows;
  s.lanes_per_row = l.lanes_per_row;
  s.rows_in_flight = l.rows_in_flight;
  return s;
}

int device_of(const EngineOptions& o) {
  const int n = cuda::device_count();
  if (o.device >= 0) return o.device;
  return n > 0 ? o.rank % n : 0;
}

class CudaRegistrationHold final : public Registration {
 public:
  explicit CudaRegistrationHold(std::shared_ptr<cuda::TableRegistration> r) : reg(std::move(r)) {}
  nlohmann::json describe() const override {
    nlohmann::json j = reg->report();
    j["device"] = reg->device();
    return j;
  }
  std::shared_ptr<cuda::TableRegistration> reg;
};

// The cuda entry's Backend and its DeviceQueue extension over src/cuda's CudaBackend (which holds every CUDA
// resource): direct lookups, the layer's launch shape and path, device hashing (StepHasher) and describe().
class CudaEngineBackend final : public Backend, public DeviceQueue {
 public:
  CudaEngineBackend(std::unique_ptr<cuda::CudaBackend> be, const EngineOptions& o) : be_(std::move(be)), opt_(o) {}
  PrefetchQueue& queue() override { return be_->engine_queue(); }
  LayerCompute& compute() override {
    if (be_->compute()) return *be_->compute();
    return none_;
  }
  Result<LookupResult> lookup(int li, const int64_t* ids, int64_t tokens, uint16_t* out, const LookupCall& call) override {
    if (li < 0 || li >= layers())
      return Status(Code::kInvalidArgument, "lookup: layer index " + std::to_string(li) + " out of range [0, " +
                                                std::to_string(layers()) + ")");
    cuda::LookupArgs a;
    a.table = &be_->table(li);
    a.ids = ids;
    a.tokens = tokens;
    a.heads = heads_;
    a.out = out;
    a.sm_count = be_->device().sm_count;
    a.grid_cap = call.grid_cap;
    a.checked = call.checked;
    void* s = call.stream;  // the caller's stream; null is the legacy default stream, never an engine stream
    cuda::ScopedDevice scope(be_->device().ordinal);
    cuda::FastLookup* f = be_->fast_lookup(li);
    ENGRAM_ASSIGN_OR_RETURN(cuda::LaunchInfo info, f ? f->launch(a, s) : cuda::launch_lookup(a, s));
    LookupResult r;
    r.stats.rows = info.rows;
    r.launch = shape_of(info);
    r.launch.path = f && !call.checked ? f->last_plan().path_name() : std::string("plain-uva");
    return r;
  }
  Status prepare_device(int li, const int64_t* ids, int64_t tokens) override {
    cuda::ScopedDevice scope(be_->device().ordinal);
    return be_->prepare_device(li, ids, tokens);
  }
  Status write_ids(int li, const int64_t* ids, int64_t tokens) override {
    cuda::ScopedDevice scope(be_->device().ordinal);
    return be_->queue().write_ids(li, ids, tokens);
  }
  Status main_wait_event(void* ev) override { return cuda::stream_wait_event(be_->main_stream(), ev, be_->device().ordinal); }
  Result<LaunchShape> last_launch(int li) const override {
    if (li < 0 || li >= layers_) return Status(Code::kInvalidArgument, "last_launch: layer index out of range");
    LaunchShape l = shape_of(be_->queue().last_launch(li));
    const cuda::FastLookup* f = be_->fast_lookup(li);
    l.path = f ? f->last_plan().path_name() : std::string("plain-uva");
    return l;
  }
  void* main_stream() const override { return be_->main_stream(); }
  void* prefetch_stream() const override { return be_->queue().prefetch_stream(); }
  int device() const override { return be_->device().ordinal; }
  Status enable_device_hashing(const NgramHashParams& params, int max_requests, int64_t max_tokens) override {
    ENGRAM_ASSIGN_OR_RETURN(hasher_, cuda::StepHasher::create(params, max_requests, be_->device().ordinal, max_tokens));
    return Status::ok();
  }
  Status hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n) override {
    if (!hasher_) return Status(Code::kInvalidArgument, "hash_and_prepare: device hashing is not enabled");
    cuda::ScopedDevice scope(be_->device().ordinal);
    ENGRAM_RETURN_IF_ERROR(hasher_->hash_decode_step(tokens, new_sequence, n, be_->main_stream()));
    for (int li = 0; li < layers_; ++li) ENGRAM_RETURN_IF_ERROR(be_->prepare_device(li, hasher_->ids(li), n));
    return Status::ok();
  }
  Status hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                 const uint8_t* new_sequence, int n_chunks) override {
    if (!hasher_) return Status(Code::kInvalidArgument, "hash_chunks_and_prepare: device hashing is not enabled");
    cuda::ScopedDevice scope(be_->device().ordinal);
    ENGRAM_RETURN_IF_ERROR(hasher_->hash_step(tokens, counts, slots, new_sequence, n_chunks, be_->main_stream()));
    const int64_t t = hasher_->last_tokens();
    for (int li = 0; li < layers_; ++li) ENGRAM_RETURN_IF_ERROR(be_->prepare_device(li, hasher_->ids(li), t));
    return Status::ok();
  }
  Result<DeviceHashStep> last_device_hash(bool with_ids) const override {
    if (!hasher_) return Status(Code::kInvalidArgument, "last_device_hash: device hashing is not enabled");
    DeviceHashStep s;
    ENGRAM_ASSIGN_OR_RETURN(s.gpu_ns, hasher_->last_step_ns());
    if (with_ids) ENGRAM_RETURN_IF_ERROR(hasher_->read_back(s.ids, &s.errors));
    return s;
  }
  Status synchronize() override { return be_->synchronize(); }
  DeviceQueue* device_queue() override { return this; }
  nlohmann::json describe() const override {
    const auto& d = be_->device();
    nlohmann::json j = {{"backend", "cuda"},
                        {"device", d},
                        {"registration", be_->registration()},
                        {"grid_fraction", opt_.grid_cap.in_blocks() ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(opt_.grid_cap.fraction())},
                        {"grid_blocks", opt_.grid_cap.in_blocks() ? nlohmann::json(opt_.grid_cap.blocks())
                                                                  : nlohmann::json(nullptr)},
                        {"grid_cap_blocks", opt_.grid_cap.blocks_for(d.sm_count)},
                        {"fast_path_mode", fast_path_mode_name(opt_.fast_path)}};
    nlohmann::json fp = nlohmann::json::array();
    for (int li = 0; be_->fast_lookup(li) != nullptr; ++li) {
      cuda::FastLookup* f = be_->fast_lookup(li);
      auto st = f->stats(be_->queue().prefetch_stream());
      nlohmann::json paths = nlohmann::json::object();
      nlohmann::json u = nullptr, h = nullptr, predicted = nullptr, plain = nullptr;
      if (st.is_ok()) {
        for (const auto& [name, count] : st->paths) paths[name] = count;
        u = json_num(st->unique_fraction());
        h = json_num(st->cache_hit_rate());
        if (st->batches > 0) {  // a plan exists: its predictions are the planner's, not defaults
          predicted = json_num(f->last_plan().predicted_us);
          plain = json_num(f->last_plan().plain_us);
        }
      }
      fp.push_back({{"layer_index", li}, {"paths", paths}, {"unique_fraction", u}, {"cache_hit_rate", h},
                    {"last_plan", f->last_plan().path_name()},
                    {"last_predicted_us", predicted}, {"last_plain_us", plain},
                    {"last_why", plan::explain(f->last_plan(), f->costs().source)},
                    {"costs_source", f->costs().source}, {"cache", cache_json(li)}});
    }
    j["fast_path"] = fp;
    j["fast_path_note"] = be_->fast_path_note().empty() ? nlohmann::json(nullptr) : nlohmann::json(be_->fast_path_note());
    if (auto* c = be_->compute())
      j["compute"] = {{"kind", "cublas bf16 gemm"}, {"n", c->gemm_n()}, {"gemms_per_layer", c->gemms_per_layer()},
                      {"layer_ns_calibrated", c->layer_ns()}};
    return j;
  }
  void set_shape(int layers, int heads) {
    layers_ = layers;
    heads_ = heads;
  }

 private:
  int layers() const { return layers_; }
  nlohmann::json cache_json(int li) const {
    auto r = be_->cache_report(li);
    if (!r.is_ok()) return {{"state", "unknown"}, {"note", r.status().message()}};
    return *r;
  }

  std::unique_ptr<cuda::CudaBackend> be_;
  EngineOptions opt_;
  NoCompute none_;
  int layers_ = 0, heads_ = 0;
  std::unique_ptr<cuda::StepHasher> hasher_;  // device hashing, when enabled
};

Status cuda_probe(const EngineOptions& o) {
  if (cuda::device_count() <= 0) {
    auto info = cuda::device_info(0);
    return info.is_ok() ? Status(Code::kUnsupported, "no CUDA device is visible") : info.status();
  }
  auto info = cuda::device_info(device_of(o));
  if (!info.is_ok()) return info.status();
  if (!info->unified_addressing)
    return Status(Code::kUnsupported, "device " + std::to_string(info->ordinal) + " (" + info->name +
                                          ") has no unified addressing");
  return Status::ok();
}

Result<std::shared_ptr<Registration>> cuda_register(const EngramLayout& layout, const std::vector<TableView>& views,
                                                    const EngineOptions& o, bool read_only) {
  cuda::RegistrationOptions ro;
  ro.read_only = read_only;
  // Progress over the whole table: the registration reports each host range's bytes; ranges follow one another,
  // so a range that reaches its end adds its bytes to those before it.
  struct Tally {
    int64_t total = 0, before = 0;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  };
  auto tally = std::make_shared<Tally>();
  if (o.on_register_progress) {
    std::vector<const void*> seen;
    for (const TableView& v : views)
      for (const cuda::HostRange& r : cuda::host_ranges_of(v))
        if (std::find(seen.begin(), seen.end(), r.ptr) == seen.end()) {
          seen.push_back(r.ptr);
          tally->total += r.bytes;
        }
    auto fn = o.on_register_progress;
    ro.on_progress = [tally, fn](int64_t done, int64_t range_bytes) {
      const int64_t now = std::min(tally->total, tally->before + done);
      if (done >= range_bytes) tally->before = now;
      if (now < tally->total) fn(now, tally->total, tally->elapsed());
    };
  }
  ENGRAM_ASSIGN_OR_RETURN(auto reg, cuda::TableRegistration::create(device_of(o), views, layout.layer_ids, ro));
  if (o.on_register_progress) o.on_register_progress(tally->total, tally->total, tally->elapsed());
  return std::shared_ptr<Registration>(std::make_shared<CudaRegistrationHold>(std::move(reg)));
}

Result<std::unique_ptr<Backend>> cuda_create(const EngramLayout& layout, const std::vector<TableView>& views,
                                             std::shared_ptr<Registration> registration, const EngineOptions& o) {
  cuda::CudaBackendOptions c;
  c.device = device_of(o);
  c.layer_ids = layout.layer_ids;
  c.heads = layout.heads();
  c.queue.rank = o.rank;
  c.queue.max_tokens = o.max_tokens;
  c.queue.grid_cap = o.grid_cap;
  c.queue.record_timeline = o.record_timeline;
  c.queue.checked = o.checked;
  c.layer_us = engine_harness(o).layer_us;
  c.main_stream = o.main_stream;
  c.fast_path = o.fast_path != FastPathMode::kOff;
  c.planner = o.fast_path == FastPathMode::kPlanner;
  if (auto* hold = dynamic_cast<CudaRegistrationHold*>(registration.get())) c.registered = hold->reg;
  // Hot-row cache: one budget per layer (a share is of that layer's table).
  const CacheOptions& k = o.cache;
  c.cache.format = k.format;
  for (int li = 0; li < layout.n_layers(); ++li) c.cache.budget_bytes.push_back(k.size.bytes_for(layout.table_bytes(li)));
  c.cache.hbm_fraction = k.hbm_fraction;
  c.cache.warmup_steps = k.warmup_steps;
  c.cache.profile = k.profile;
  c.cache.profile_source = k.profile_source;
  c.cache.update_every = k.update.every;
  c.cache.update_rows = k.update.rows;
  c.cache.update_slice_rows = k.update.slice;
  c.cache.update_burst = k.update.burst;
  c.cache.step_series = k.step_series;
  ENGRAM_ASSIGN_OR_RETURN(auto be, cuda::make_cuda_backend(c, views));
  auto out = std::make_unique<CudaEngineBackend>(std::move(be), o);
  out->set_shape(layout.n_layers(), layout.heads());
  return std::unique_ptr<Backend>(std::move(out));
}

}  // namespace

const BackendEntry* cuda_backend_entry() {
  static const BackendEntry e{BackendKind::kCuda, "cuda", &cuda_probe, &cuda_register, &cuda_create};
  return &e;
}

#else  // built without the CUDA toolkit

const BackendEntry* cuda_backend_entry() { return nullptr; }

#endif

}  // namespace engram::engine

namespace engram {

Status cuda_stream_wait(void* consumer, void* producer, int device) {
#if defined(ENGRAM_HAVE_CUDA)
  return cuda::stream_wait_stream(consumer, producer, device);
#else
  (void)consumer, (void)producer, (void)device;
  return Status(Code::kUnsupported, "the CUDA backend was not built");
#endif
}

}  // namespace engram
