// make_cuda_replay_backend (see cuda_backend_factory.hpp): adapts cuda::CudaBackend to ReplayBackend, or says
// kUnsupported when the library was built without CUDA.
#include "replay/cuda_backend_factory.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/units.hpp"

#if defined(ENGRAM_HAVE_CUDA)
#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#include "cuda/hot_cache.cuh"
#endif

namespace engram {

Status parse_cache_update(const std::string& text, EngineCacheConfig& c) {
  if (text == "off" || text == "0") {
    c.update_every = 0;
    return Status::ok();
  }
  auto bad = [&] {
    return Status(Code::kInvalidArgument, "--cache-update '" + text + "': expected every=K,rows=M (K, M >= 1) or off");
  };
  std::stringstream ss(text);
  std::string item;
  int every = c.update_every;
  int64_t rows = c.update_rows;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) return bad();
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* end = nullptr;
    const long long v = std::strtoll(val.c_str(), &end, 10);
    if (val.empty() || *end != '\0' || v < 1 || v > (int64_t{1} << 30)) return bad();
    if (key == "every") every = static_cast<int>(v);
    else if (key == "rows") rows = v;
    else return bad();
    any = true;
  }
  if (!any) return bad();
  c.update_every = every;
  c.update_rows = rows;
  return Status::ok();
}

#if defined(ENGRAM_HAVE_CUDA)

namespace {

// layer_us = 0: no synthetic compute (the lookups alone).
class NoCompute final : public LayerCompute {
 public:
  Status run_layer(int) override { return Status::ok(); }
  double layer_ns() const override { return 0; }
};

class CudaReplayBackend final : public ReplayBackend {
 public:
  explicit CudaReplayBackend(std::unique_ptr<cuda::CudaBackend> be) : be_(std::move(be)) {}
  PrefetchQueue& queue() override { return be_->engine_queue(); }
  LayerCompute& compute() override {
    if (be_->compute()) return *be_->compute();
    return none_;
  }
  Status synchronize() override { return be_->synchronize(); }
  nlohmann::json describe() const override {
    const auto& d = be_->device();
    const auto& r = be_->registration();
    nlohmann::json j = {{"backend", "cuda"},
                        {"device", {{"ordinal", d.ordinal}, {"name", d.name}, {"pci_bus_id", d.pci_bus_id},
                                    {"sm_count", d.sm_count}, {"driver_version", d.driver_version},
                                    {"runtime_version", d.runtime_version}}},
                        {"registration", {{"bytes", r.bytes}, {"chunks", r.chunks}, {"prefault_s", r.prefault_ns * 1e-9},
                                          {"register_s", r.register_ns * 1e-9},
                                          {"device_pointer_equals_host", r.device_equals_host}}},
                        {"grid_fraction", grid_fraction_}};
    nlohmann::json fp = nlohmann::json::array();
    for (size_t li = 0; be_->fast_lookup(static_cast<int>(li)) != nullptr; ++li) {
      auto* f = be_->fast_lookup(static_cast<int>(li));
      auto st = f->stats(be_->queue().prefetch_stream());
      nlohmann::json paths = nlohmann::json::object();
      nlohmann::json u = nullptr, h = nullptr;
      if (st.is_ok()) {
        for (const auto& [name, count] : st->paths) paths[name] = count;
        if (std::isfinite(st->unique_fraction())) u = st->unique_fraction();
        if (std::isfinite(st->cache_hit_rate())) h = st->cache_hit_rate();
      }
      fp.push_back({{"layer_index", li}, {"paths", paths}, {"unique_fraction", u}, {"cache_hit_rate", h},
                    {"last_plan", f->last_plan().path_name()}, {"last_why", f->last_plan().why},
                    {"costs_source", f->costs().source}, {"cache", cache_json(static_cast<int>(li))}});
    }
    j["fast_path"] = fp;
    j["fast_path_note"] = be_->fast_path_note().empty() ? nlohmann::json(nullptr) : nlohmann::json(be_->fast_path_note());
    if (auto* c = be_->compute())
      j["compute"] = {{"kind", "cublas bf16 gemm"}, {"n", c->gemm_n()}, {"gemms_per_layer", c->gemms_per_layer()},
                      {"layer_ns_calibrated", c->layer_ns()}};
    return j;
  }
  double grid_fraction_ = 0;

 private:
  static nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
  nlohmann::json cache_json(int li) const {
    auto r = be_->cache_report(li);
    if (!r.is_ok()) return {{"state", "unknown"}, {"note", r.status().message()}};
    const cuda::EngineCacheReport& c = *r;
    return {{"state", c.state},
            {"note", c.note.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.note)},
            {"source", c.source.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.source)},
            {"format", cuda::cache_format_name(c.format)},
            {"budget_bytes", c.budget_bytes},
            {"slots", c.slots},
            {"rows_cached", c.filled},
            {"hbm_bytes", c.hbm_bytes},
            {"created_after_step", c.created_after_step},
            {"create_ms", num(c.create_ms)},
            {"profile_coverage", num(c.profile_coverage)},
            {"probes", c.probes},
            {"hits", c.hits},
            {"hit_rate", num(c.hit_rate)},
            {"rows_since_create", c.rows_since_create},
            {"link_bytes_avoided", c.link_bytes_avoided},
            {"link_bytes_avoided_per_token", num(c.link_bytes_avoided_per_token)},
            {"updates", c.updates},
            {"updates_waited_counter", c.updates_waited_counter}, {"updates_deferred", c.updates_deferred},
            {"rows_swapped", c.rows_swapped},
            {"map_rebuilds", c.map_rebuilds},
            {"update_host_us_max", num(c.update_host_us_max)},
            {"update_host_us_mean", num(c.update_host_us_mean)},
            {"counted_batches", c.counted_batches},
            {"dropped_batches", c.dropped_batches}};
  }

  std::unique_ptr<cuda::CudaBackend> be_;
  NoCompute none_;
};

}  // namespace

bool cuda_backend_built() { return true; }

Result<std::unique_ptr<ReplayBackend>> make_cuda_replay_backend(const EngramLayout& layout,
                                                                const std::vector<TableView>& tables,
                                                                const CudaReplayOptions& o) {
  cuda::CudaBackendOptions c;
  c.device = o.device;
  if (o.wrap_device && cuda::device_count() > 0) c.device = o.device % cuda::device_count();
  c.registration.read_only = o.read_only_tables;
  c.rank = o.rank;
  c.layer_ids = layout.layer_ids;
  c.heads = layout.heads();
  c.max_tokens = o.max_tokens;
  c.grid_fraction = o.grid_fraction;
  c.record_timeline = o.record_timeline;
  c.checked = o.checked;
  c.layer_us = o.layer_us;
  c.fast_path = o.fast_path;
  c.planner = o.planner;
  // Hot-row cache: one budget per layer from the size text (a share is of that layer's table).
  const EngineCacheConfig& k = o.cache;
  if (k.format != "fp8" && k.format != "bf16")
    return Status(Code::kInvalidArgument, "cache format must be fp8 or bf16, not '" + k.format + "'");
  c.cache.format = k.format == "bf16" ? cuda::CacheFormat::kBf16 : cuda::CacheFormat::kFp8;
  for (int li = 0; li < layout.n_layers(); ++li) {
    ENGRAM_ASSIGN_OR_RETURN(int64_t b, parse_cache_size_text(k.off() ? "0" : k.size, layout.table_bytes(li)));
    c.cache.budget_bytes.push_back(b);
  }
  c.cache.hbm_fraction = k.hbm_fraction;
  c.cache.warmup_steps = k.warmup_steps;
  c.cache.profile = k.profile;
  c.cache.profile_source = k.profile_source;
  c.cache.update_every = k.update_every;
  c.cache.update_rows = k.update_rows;
  ENGRAM_ASSIGN_OR_RETURN(auto be, cuda::make_cuda_backend(c, tables));
  auto r = std::make_unique<CudaReplayBackend>(std::move(be));
  r->grid_fraction_ = o.grid_fraction;
  return std::unique_ptr<ReplayBackend>(std::move(r));
}

#else  // built without the CUDA toolkit

bool cuda_backend_built() { return false; }

Result<std::unique_ptr<ReplayBackend>> make_cuda_replay_backend(const EngramLayout&, const std::vector<TableView>&,
                                                                const CudaReplayOptions&) {
  return Status(Code::kUnsupported, "the CUDA backend was not built (configure with a CUDA toolkit, ENGRAM_CUDA=ON)");
}

#endif

}  // namespace engram
