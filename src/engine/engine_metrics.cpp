// EngineMetrics and MeteredQueue (see engine_metrics.hpp). Family names and help texts are here and in
// docs/metrics.md only; a name, once published, keeps its meaning and unit.
#include "engine/engine_metrics.hpp"

#include <cmath>
#include <map>

#include "engine/backend.hpp"

namespace engram::engine {
namespace {

constexpr double kNsToS = 1e-9;

MetricLabels with(MetricLabels base, const std::string& k, const std::string& v) {
  base.emplace_back(k, v);
  return base;
}

int64_t json_int(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : -1;
}

double json_double(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

}  // namespace

EngineMetrics::EngineMetrics() {
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c) {
    if (c == static_cast<int>(Code::kOk)) {
      errors_.push_back(nullptr);
      continue;
    }
    errors_.push_back(registry_.counter("engram_errors_total",
                                        "Errors returned by the engine's queue, direct lookups, device hashing and "
                                        "group admissions, by Status code",
                                        {{"kind", code_name(static_cast<Code>(c))}}));
  }
}

void EngineMetrics::init(const HostTable& table, const EngineOptions& o, const char* backend, bool has_queue,
                         bool timeline, double load_s, int group_world) {
  const EngramLayout& layout = table.layout();
  rank_label_ = {{"rank", std::to_string(o.rank)}};
  layer_ids_ = layout.layer_ids;
  source_bytes_per_row_ = layout.source_bytes_per_row();
  int64_t total = 0;
  for (int li = 0; li < table.n_layers(); ++li) {
    const MetricLabels l = {{"layer", std::to_string(layout.layer_ids[static_cast<size_t>(li)])}};
    const int64_t bytes = table.layer_bytes(li) * table.n_replicas();
    total += bytes;
    registry_.gauge("engram_table_bytes", "Bytes of an Engram layer's table in host memory (every replica)", l)
        ->set(static_cast<double>(bytes));
  }
  registry_
      .gauge("engram_table_info",
             "The table's backing, placement policy, row layout and the rank's lookup backend (value 1)",
             {{"backing", o.table.backing.to_string()}, {"placement", o.table.placement.to_string()},
              {"row_layout", row_format_name(layout.format)}, {"backend", backend}})
      ->set(1);
  if (load_s >= 0) {
    registry_.gauge("engram_table_load_seconds", "Time to write the table's content (synthetic rows, checkpoint or "
                                                 "model directory) into host memory")
        ->set(load_s);
    if (load_s > 0)
      registry_.gauge("engram_table_load_bytes_per_second", "Table bytes written per second of the content load")
          ->set(static_cast<double>(total) / load_s);
  }
  if (group_world > 0) set_group_ranks(group_world);
  if (!has_queue) return;
  steps_ =
      registry_.counter("engram_steps_total", "Steps ended on the engine's prefetch queue (end_step)", rank_label_);
  if (!timeline) return;
  const std::vector<double> buckets = metrics::duration_buckets_seconds();
  for (int li = 0; li < table.n_layers(); ++li) {
    const MetricLabels l = with(rank_label_, "layer", std::to_string(layout.layer_ids[static_cast<size_t>(li)]));
    Layer m;
    m.lookups = registry_.counter("engram_lookups_total", "Lookups of an Engram layer served by the prefetch queue", l);
    m.rows = registry_.counter("engram_lookup_rows_total", "Rows looked up (tokens x staging heads)", l);
    m.source_bytes = registry_.counter("engram_lookup_source_bytes_total",
                                       "B_source of the rows looked up: rows x (d + d/32) bytes, what a plain gather "
                                       "reads from host memory",
                                       l);
    m.lookup_s = registry_.histogram("engram_lookup_duration_seconds", "Lookup time L = f - s on the prefetch queue",
                                     l, buckets);
    m.exposed_s = registry_.histogram("engram_exposed_wait_seconds",
                                      "Exposed wait E = max(0, f - c): lookup time the consumer was not hidden from",
                                      l, buckets);
    m.queue_s = registry_.histogram("engram_queue_seconds", "Queue time s - r: ids ready to lookup start", l, buckets);
    m.wait_s = registry_.histogram("engram_consumer_wait_seconds",
                                   "Time the consumer waited for the lookup (wait end - c), as it saw it", l, buckets);
    m.last_lookup_s = registry_.gauge("engram_lookup_last_duration_seconds",
                                      "Lookup time L of the layer's last lookup (measured time of the chosen path)", l);
    layers_.push_back(m);
  }
}

void EngineMetrics::set_censuses(const std::vector<PageCensus>& censuses) {
  for (metrics::Gauge* g : census_gauges_) g->clear();
  census_gauges_.clear();
  if (censuses.empty()) return;
  const CensusPoint last = censuses.back().point;
  std::map<int, uint64_t> per_node;
  uint64_t not_resident = 0;
  for (const PageCensus& c : censuses) {
    if (c.point != last) continue;
    if (!c.known) return;  // one backing unknown: the point's totals are not measured
    for (const auto& [node, pages] : c.pages_per_node) per_node[node] += pages * c.stride_pages;
    not_resident += c.not_resident * c.stride_pages;
  }
  const std::string point = census_point_name(last);
  for (const auto& [node, pages] : per_node) {
    metrics::Gauge* g = registry_.gauge(
        "engram_table_resident_pages",
        "Table pages resident on a NUMA node at the last census (every backing; sampled censuses scaled by their stride)",
        {{"node", std::to_string(node)}, {"point", point}});
    g->set(static_cast<double>(pages));
    census_gauges_.push_back(g);
  }
  metrics::Gauge* g = registry_.gauge("engram_table_not_resident_pages",
                                      "Table pages not resident (never touched, or the shared zero page) at the last "
                                      "census",
                                      {{"point", point}});
  g->set(static_cast<double>(not_resident));
  census_gauges_.push_back(g);
}

void EngineMetrics::set_group_ranks(int world) {
  if (!group_ranks_)
    group_ranks_ = registry_.gauge("engram_group_ranks",
                                   "Ranks of the shared group attached to the table, the leader included (the last "
                                   "admitted round's world size)");
  group_ranks_->set(world);
}

void EngineMetrics::add_peers_attached(int peers) {
  if (!peers_attached_)
    peers_attached_ = registry_.counter("engram_group_peers_attached_total", "Peers the leader admitted to the table");
  peers_attached_->add(peers);
}

void EngineMetrics::count_error(const Status& s) {
  const auto c = static_cast<size_t>(s.code());
  if (c < errors_.size() && errors_[c]) errors_[c]->add(1);
}

void EngineMetrics::fold_timeline(const Timeline& timeline) {
  const auto& rows = timeline.rows();
  if (rows.size() < folded_rows_) folded_rows_ = rows.size();  // the owner cleared it
  for (size_t i = folded_rows_; i < rows.size(); ++i) {
    const LayerTiming& t = rows[i];
    if (t.layer_index < 0 || t.layer_index >= static_cast<int>(layers_.size())) continue;
    Layer& m = layers_[static_cast<size_t>(t.layer_index)];
    m.lookups->add(1);
    m.rows->add(static_cast<double>(t.rows));
    m.source_bytes->add(static_cast<double>(t.rows * source_bytes_per_row_));
    // Histogram::observe ignores NaN: a timestamp that was not recorded is not a measurement.
    const double l = t.lookup_ns() * kNsToS;
    m.lookup_s->observe(l);
    if (std::isfinite(l)) m.last_lookup_s->set(l);
    m.exposed_s->observe(std::isfinite(t.f_ns) && std::isfinite(t.c_ns) ? t.exposed_wait_ns() * kNsToS : std::nan(""));
    m.queue_s->observe(t.queue_ns() * kNsToS);
    m.wait_s->observe(t.measured_wait_ns() * kNsToS);
  }
  folded_rows_ = rows.size();
  if (steps_) steps_->add(1);
}

void EngineMetrics::observe_device_hash_seconds(double s) {
  if (!device_hash_s_)
    device_hash_s_ = registry_.histogram("engram_device_hash_seconds",
                                         "GPU time of one step's N-gram hashing on the device (every Engram layer)",
                                         rank_label_, metrics::duration_buckets_seconds());
  device_hash_s_->observe(s);
}

void EngineMetrics::fold_describe(const nlohmann::json& d) {
  if (!d.is_object() || d.value("backend", nlohmann::json(nullptr)) != "cuda") return;
  if (d.contains("registration") && d["registration"].is_object()) {
    const auto& r = d["registration"];
    const int64_t bytes = json_int(r, "bytes");
    if (bytes >= 0)
      registry_.gauge("engram_table_registered_bytes", "Table bytes registered with the GPU (cudaHostRegister)",
                      rank_label_)
          ->set(static_cast<double>(bytes));
    const double s = json_double(r, "register_s");
    if (std::isfinite(s))
      registry_.gauge("engram_table_register_seconds", "Time of the table's registration with the GPU", rank_label_)
          ->set(s);
  }
  if (!d.contains("fast_path") || !d["fast_path"].is_array()) return;
  for (const auto& f : d["fast_path"]) {
    const int li = f.value("layer_index", -1);
    if (li < 0 || li >= static_cast<int>(layer_ids_.size())) continue;
    const MetricLabels l = with(rank_label_, "layer", std::to_string(layer_ids_[static_cast<size_t>(li)]));
    if (f.contains("paths") && f["paths"].is_object())
      for (auto it = f["paths"].begin(); it != f["paths"].end(); ++it)
        if (it.value().is_number())
          registry_.counter("engram_path_batches_total", "Batches the lookup planner ran on each path",
                            with(l, "path", it.key()))
              ->raise_to(it.value().get<double>());
    const double predicted_us = json_double(f, "last_predicted_us");
    if (std::isfinite(predicted_us))
      registry_.gauge("engram_plan_predicted_seconds", "The planner's predicted time of its last plan", l)
          ->set(predicted_us * 1e-6);
    const double plain_us = json_double(f, "last_plain_us");
    if (std::isfinite(plain_us))
      registry_.gauge("engram_plan_plain_predicted_seconds",
                      "The planner's predicted time of the plain gather for its last batch", l)
          ->set(plain_us * 1e-6);
    if (!f.contains("cache") || !f["cache"].is_object()) continue;
    const auto& c = f["cache"];
    if (c.value("state", std::string()) == "off") continue;
    auto counter = [&](const char* name, const char* help, const char* key) {
      const int64_t v = json_int(c, key);
      if (v >= 0) registry_.counter(name, help, l)->raise_to(static_cast<double>(v));
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      if (std::isfinite(v)) registry_.gauge(name, help, l)->set(v);
    };
    counter("engram_cache_probes_total", "Rows probed in the GPU hot-row cache", "probes");
    counter("engram_cache_hits_total", "Probed rows found in the GPU hot-row cache", "hits");
    counter("engram_cache_link_bytes_avoided_total",
            "Bytes not read over the host link because the row was cached: hits x (d + d/32)", "link_bytes_avoided");
    counter("engram_cache_updates_total", "Online updates of the hot-row cache", "updates");
    counter("engram_cache_rows_swapped_total", "Cache rows replaced by online updates", "rows_swapped");
    counter("engram_cache_updates_due_total", "Online updates of the hot-row cache that came due", "update_attempts");
    counter("engram_cache_updates_deferred_total",
            "Online updates not planned at the step they came due (previous plan not computed, or a whole update "
            "still waiting)",
            "updates_deferred");
    counter("engram_cache_count_batches_sampled_total",
            "Id batches the counting thread counted from a weighted sample (backlog full; all layers)", "sampled_batches");
    counter("engram_cache_count_batches_dropped_total",
            "Id batches the counting thread dropped (backlog past twice its limit; all layers)", "dropped_batches");
    gauge("engram_cache_rows", "Rows held in the GPU hot-row cache", static_cast<double>(json_int(c, "rows_cached")));
    gauge("engram_cache_slots", "Row slots of the GPU hot-row cache", static_cast<double>(json_int(c, "slots")));
    gauge("engram_cache_hbm_bytes", "GPU memory of the hot-row cache", static_cast<double>(json_int(c, "hbm_bytes")));
    gauge("engram_cache_update_host_seconds_mean", "Serving-thread time per online-update slice, mean",
          json_double(c, "update_host_us_mean") * 1e-6);
    gauge("engram_cache_update_host_seconds_max", "Serving-thread time per online-update slice, max",
          json_double(c, "update_host_us_max") * 1e-6);
  }
}

Status MeteredQueue::prepare(int layer_index, const int64_t* ids, int64_t tokens) {
  Status s = inner_.prepare(layer_index, ids, tokens);
  if (!s.is_ok()) metrics_.count_error(s);
  return s;
}

Result<StagingView> MeteredQueue::consume(int layer_index) {
  auto r = inner_.consume(layer_index);
  if (!r.is_ok()) metrics_.count_error(r.status());
  return r;
}

Status MeteredQueue::end_step() {
  Status s = inner_.end_step();
  if (!s.is_ok()) metrics_.count_error(s);
  metrics_.fold_timeline(inner_.timeline());
  if (device_hashed_ && device_ && s.is_ok()) {
    // end_step synchronised the step, so reading the hashing events waits for nothing.
    auto h = device_->last_device_hash(false);
    if (h.is_ok()) metrics_.observe_device_hash_seconds(h->gpu_ns * kNsToS);
  }
  device_hashed_ = false;
  return s;
}

}  // namespace engram::engine
