// The cpu entry of the backend registry: CPU threads gather and decode rows into host staging (src/cpu). Host
// memory needs no registration; the queue is the CPU worker queue; the synthetic compute is calibrated
// arithmetic on the driving thread. Direct lookups run on a pool of the same size as the queue's, so a Python
// lookup and a queued one cost the same. There is no hot-row cache on the CPU: when one is asked for, describe()
// says so once (cache_note).
#include <algorithm>
#include <mutex>
#include <thread>

#include "cpu/compute.hpp"
#include "cpu/lookup.hpp"
#include "cpu/prefetch.hpp"
#include "cpu/thread_pool.hpp"
#include "engine/backend.hpp"
#include "engine/harness.hpp"

namespace engram::engine {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::unique_ptr<cpu::CpuPrefetchQueue> q, std::vector<TableView> views, const EngineOptions& o)
      : queue_(std::move(q)), compute_(engine_harness(o).layer_us), views_(std::move(views)), threads_(queue_->lookup_threads()),
        heads_(0), cache_requested_(!o.cache.size.off()) {}
  void set_heads(int h) { heads_ = h; }

  PrefetchQueue& queue() override { return *queue_; }
  LayerCompute& compute() override { return compute_; }
  Result<LookupResult> lookup(int li, const int64_t* ids, int64_t tokens, uint16_t* out, const LookupCall& call) override {
    const bool checked = call.checked;
    if (li < 0 || li >= static_cast<int>(views_.size()))
      return Status(Code::kInvalidArgument, "lookup: layer index " + std::to_string(li) + " out of range [0, " +
                                                std::to_string(views_.size()) + ")");
    LookupRequest req;
    req.ids = ids;
    req.tokens = tokens;
    req.heads = heads_;
    req.out = out;
    req.checked = checked;
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (threads_ > 1 && !pool_) pool_ = std::make_unique<ThreadPool>(threads_);
    ENGRAM_ASSIGN_OR_RETURN(LookupStats st, cpu::lookup(views_[static_cast<size_t>(li)], req, threads_ > 1 ? pool_.get() : nullptr));
    LookupResult r;
    r.stats = st;
    r.launch.rows = st.rows;
    r.launch.path = "cpu";
    return r;
  }
  Status synchronize() override { return Status::ok(); }
  nlohmann::json describe() const override {
    nlohmann::json j = {{"backend", "cpu"},
                        {"lookup_threads", threads_},
                        {"compute_layer_us", compute_.layer_ns() / 1e3},
                        {"compute_iterations_per_layer", compute_.iterations_per_layer()}};
    j["cache_note"] = cache_requested_
                          ? nlohmann::json("hot-row cache: CUDA-only; the cpu backend runs without it "
                                           "(a cache size of off silences this)")
                          : nlohmann::json(nullptr);
    return j;
  }

 private:
  std::unique_ptr<cpu::CpuPrefetchQueue> queue_;
  cpu::CpuLayerCompute compute_;
  std::vector<TableView> views_;
  int threads_;
  int heads_;
  bool cache_requested_;
  std::mutex pool_mu_;
  std::unique_ptr<ThreadPool> pool_;
};

Status cpu_probe(const EngineOptions&) { return Status::ok(); }

Result<std::shared_ptr<Registration>> cpu_register(const EngramLayout&, const std::vector<TableView>&,
                                                   const EngineOptions&, bool) {
  return std::shared_ptr<Registration>();
}

Result<std::unique_ptr<Backend>> cpu_create(const EngramLayout& layout, const std::vector<TableView>& views,
                                            std::shared_ptr<Registration>, const EngineOptions& o) {
  cpu::CpuPrefetchOptions q;
  q.rank = o.rank;
  q.lookup_threads = o.lookup_threads;
  q.checked = o.checked;
  q.record_timeline = o.record_timeline;
  q.clock_ns = o.clock_ns;
  ENGRAM_ASSIGN_OR_RETURN(auto queue, cpu::CpuPrefetchQueue::create(views, layout.layer_ids, layout.heads(), q));
  auto be = std::make_unique<CpuBackend>(std::move(queue), views, o);
  be->set_heads(layout.heads());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace

const BackendEntry& cpu_backend_entry() {
  static const BackendEntry e{BackendKind::kCpu, "cpu", &cpu_probe, &cpu_register, &cpu_create};
  return e;
}

}  // namespace engram::engine
