// make_cuda_replay_backend (see cuda_backend_factory.hpp): adapts cuda::CudaBackend to ReplayBackend, or says
// kUnsupported when the library was built without CUDA.
#include "replay/cuda_backend_factory.hpp"

#include <cmath>

#if defined(ENGRAM_HAVE_CUDA)
#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#endif

namespace engram {

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
  PrefetchQueue& queue() override { return be_->queue(); }
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
                    {"costs_source", f->costs().source}});
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
