// The engine's serving metrics (docs/metrics.md): what the engine feeds into its metrics registry and when.
//
//   build      table families (bytes per layer, backing/placement info, load time and rate, pages per NUMA node of
//              the last census, group ranks), and the per-layer lookup families when the queue records a timeline
//   end_step   MeteredQueue folds the timeline rows recorded since the last step end (lookups, rows, B_source bytes,
//              L, E, queue and consumer-wait histograms; the last L) -- relaxed atomic adds through pointers resolved
//              at build, no lock or allocation on the serving thread; device hashing time of the step (CUDA)
//   errors     every non-ok Status the queue, a direct lookup or device hashing returns, by code
//   describe() the CUDA fast path's device counters (paths taken, cache probes and hits, link bytes avoided, online
//              updates, the last plan's predicted time), read where describe() already synchronises; on the cpu
//              backend these families do not exist
// Internal to src/engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/engine.hpp"
#include "engram/metrics.hpp"
#include "metrics/registry.hpp"
#include "engram/prefetch_queue.hpp"

namespace engram::engine {

class DeviceQueue;

class EngineMetrics {
 public:
  EngineMetrics();
  metrics::Registry& registry() { return registry_; }
  MetricsSnapshot snapshot() const { return registry_.snapshot(); }

  // Table and group families; with a queue (`has_queue`) the step counter, and the lookup families of each layer
  // when its timeline is recorded. Called once the engine is built (serve_group: without a backend or queue).
  void init(const HostTable& table, const EngineOptions& options, const char* backend, bool has_queue, bool timeline,
            double load_s, int group_world);
  // Pages per node (summed over the table's backings) of the latest census point among `censuses`; an unknown
  // census clears them (not measured, not 0).
  void set_censuses(const std::vector<PageCensus>& censuses);
  void set_group_ranks(int world);
  void add_peers_attached(int peers);
  void count_error(const Status& status);
  // Folds rows [folded, rows.size()) of `timeline` and counts the step (the serving thread, at end_step).
  void fold_timeline(const Timeline& timeline);
  void observe_device_hash_seconds(double s);
  // The CUDA fast path's and cache's figures from a backend's describe() JSON (fast_path[], registration).
  void fold_describe(const nlohmann::json& details);

 private:
  struct Layer {
    metrics::Counter* lookups = nullptr;
    metrics::Counter* rows = nullptr;
    metrics::Counter* source_bytes = nullptr;
    metrics::Histogram* lookup_s = nullptr;
    metrics::Histogram* exposed_s = nullptr;
    metrics::Histogram* queue_s = nullptr;
    metrics::Histogram* wait_s = nullptr;
    metrics::Gauge* last_lookup_s = nullptr;
  };
  metrics::Registry registry_;
  MetricLabels rank_label_;
  std::vector<int> layer_ids_;
  int64_t source_bytes_per_row_ = 0;
  std::vector<Layer> layers_;  // by layer index
  size_t folded_rows_ = 0;
  metrics::Counter* steps_ = nullptr;
  metrics::Histogram* device_hash_s_ = nullptr;
  std::vector<metrics::Counter*> errors_;  // by Code
  std::vector<metrics::Gauge*> census_gauges_;  // set by the last set_censuses (cleared first by the next)
  metrics::Gauge* group_ranks_ = nullptr;
  metrics::Counter* peers_attached_ = nullptr;
};

// The engine's queue as consumers see it (Engine::queue()): forwards to the backend's queue, counts the errors
// it returns, and at end_step folds the step's timeline rows into the metrics.
class MeteredQueue final : public PrefetchQueue {
 public:
  // device: the backend's device extension (null without one): the step hashing's GPU time.
  MeteredQueue(PrefetchQueue& inner, EngineMetrics& metrics, DeviceQueue* device)
      : inner_(inner), metrics_(metrics), device_(device) {}
  void begin_step(int64_t step) override { inner_.begin_step(step); }
  Status prepare(int layer_index, const int64_t* ids, int64_t tokens) override;
  Result<StagingView> consume(int layer_index) override;
  Status end_step() override;
  const Timeline& timeline() const override { return inner_.timeline(); }
  LookupStats totals() const override { return inner_.totals(); }
  const char* backend_name() const override { return inner_.backend_name(); }
  // Device hashing ran this step (Engine::hash_and_prepare): end_step observes its GPU time.
  void note_device_hash() { device_hashed_ = true; }

 private:
  PrefetchQueue& inner_;
  EngineMetrics& metrics_;
  DeviceQueue* device_;
  bool device_hashed_ = false;
};

}  // namespace engram::engine
