// The cuda entry of the backend registry: its probe (a device with unified addressing), its registration step
// (cuda::TableRegistration, the protocol's "register", with progress over the whole table) and its constructor,
// which turns EngineOptions into CudaBackendOptions and builds cuda::CudaBackend: the engine's Backend and
// DeviceQueue itself (src/cuda/backend.cuh). This file has no CUDA API calls; it is compiled with and without the
// toolkit, and without it the entry does not exist (cuda_backend_entry() is null, so `auto` takes cpu and says why).
#include "engine/backend.hpp"
#include "engine/harness.hpp"

#if defined(ENGRAM_HAVE_CUDA)
#include <algorithm>
#include <chrono>

#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#endif

namespace engram::engine {

#if defined(ENGRAM_HAVE_CUDA)

namespace {

int device_of(const EngineOptions& o) {
  const int n = cuda::device_count();
  if (o.device >= 0) return o.device;
  return n > 0 ? o.rank % n : 0;
}

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
  return std::shared_ptr<Registration>(std::move(reg));
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
  c.learn = o.planner_learn;
  c.registered = std::dynamic_pointer_cast<cuda::TableRegistration>(registration);
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
  ENGRAM_ASSIGN_OR_RETURN(auto be, cuda::make_cuda_backend(std::move(c), views));
  return std::unique_ptr<Backend>(std::move(be));
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
