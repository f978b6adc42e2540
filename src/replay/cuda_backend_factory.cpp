// make_cuda_replay_backend (see cuda_backend_factory.hpp): adapts cuda::CudaBackend to ReplayBackend, or says
// kUnsupported when the library was built without CUDA.
#include "replay/cuda_backend_factory.hpp"

#if defined(ENGRAM_HAVE_CUDA)
#include "cuda/backend.cuh"
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
  c.rank = o.rank;
  c.layer_ids = layout.layer_ids;
  c.heads = layout.heads();
  c.max_tokens = o.max_tokens;
  c.grid_fraction = o.grid_fraction;
  c.record_timeline = o.record_timeline;
  c.checked = o.checked;
  c.layer_us = o.layer_us;
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
