// Decode replay loop and its report (see decode_replay.hpp). Statistics exclude warm-up steps; the serial-queue
// recurrence is replayed over the rank's measured lookups in submission order (analyze_timeline).
#include "replay/decode_replay.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_set>

#include "report/numbers.hpp"

namespace engram {

Result<DecodeReplayReport> run_decode_replay(const EngramLayout& layout, IdSource& source, PrefetchQueue& queue,
                                             LayerCompute& compute, const DecodeReplayOptions& opt) {
  if (opt.batch <= 0 || opt.steps <= 0 || opt.warmup_steps < 0)
    return Status(Code::kInvalidArgument, "replay: batch and steps must be > 0, warm-up >= 0");
  int decoder_layers = opt.decoder_layers;
  const int max_id = *std::max_element(layout.layer_ids.begin(), layout.layer_ids.end());
  if (decoder_layers <= 0) decoder_layers = max_id + 2;
  if (decoder_layers <= max_id)
    return Status(Code::kInvalidArgument, "replay: model has " + std::to_string(decoder_layers) +
                                              " layers but Engram layer " + std::to_string(max_id) + " is beyond it");
  auto clock = opt.clock_ns;
  if (!clock) {
    const auto origin = std::chrono::steady_clock::now();
    clock = [origin] { return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - origin).count(); };
  }
  std::vector<int> engram_index(static_cast<size_t>(decoder_layers), -1);
  for (int li = 0; li < layout.n_layers(); ++li) engram_index[static_cast<size_t>(layout.layer_ids[li])] = li;

  DecodeReplayReport rep;
  const int64_t total_steps = opt.warmup_steps + opt.steps;
  std::vector<std::vector<int64_t>> ids;

  // Compute-only baseline: same layers, same work, no lookups.
  if (opt.compute_only_baseline) {
    std::vector<double> base;
    for (int64_t step = 0; step < total_steps; ++step) {
      const double t0 = clock();
      for (int layer = 0; layer < decoder_layers; ++layer) ENGRAM_RETURN_IF_ERROR(compute.run_layer(layer));
      ENGRAM_RETURN_IF_ERROR(compute.synchronize());  // CUDA run_layer only enqueues
      if (step >= opt.warmup_steps) base.push_back(clock() - t0);
    }
    rep.compute_only_step_ns = Distribution::of(base);
  }

  std::vector<double> step_ns, host_ids;
  double distinct_sum = 0;
  int64_t distinct_n = 0;
  size_t timeline_mark = queue.timeline().rows().size();
  size_t step_mark = queue.timeline().steps().size();
  LookupStats before{};
  for (int64_t step = 0; step < total_steps; ++step) {
    if (step == opt.warmup_steps) {
      timeline_mark = queue.timeline().rows().size();
      step_mark = queue.timeline().steps().size();
      before = queue.totals();
    }
    // Ids are hashed before the step's clock starts: an engine hashes on the host ahead of the step, and the
    // real-text source also keeps statistics here, which must not count as step time.
    const double h0 = clock();
    ENGRAM_RETURN_IF_ERROR(source.next_step(step, opt.batch, ids));
    const double t0 = clock();
    if (step >= opt.warmup_steps) host_ids.push_back(t0 - h0);
    queue.begin_step(step);
    if (opt.mode == PrefetchMode::kEarly && opt.prepare_step) {
      ENGRAM_RETURN_IF_ERROR(opt.prepare_step(step, ids));
    } else if (opt.mode == PrefetchMode::kEarly) {
      for (int li = 0; li < layout.n_layers(); ++li) ENGRAM_RETURN_IF_ERROR(queue.prepare(li, ids[li].data(), opt.batch));
    }
    for (int layer = 0; layer < decoder_layers; ++layer) {
      const int li = engram_index[static_cast<size_t>(layer)];
      if (li >= 0) {
        if (opt.mode == PrefetchMode::kOnDemand) ENGRAM_RETURN_IF_ERROR(queue.prepare(li, ids[li].data(), opt.batch));
        auto staging = queue.consume(li);
        if (!staging.is_ok()) return staging.status();
      }
      ENGRAM_RETURN_IF_ERROR(compute.run_layer(layer));
    }
    ENGRAM_RETURN_IF_ERROR(queue.end_step());
    const double t1 = clock();
    if (opt.after_step) ENGRAM_RETURN_IF_ERROR(opt.after_step(step, step >= opt.warmup_steps, ids));
    if (step >= opt.warmup_steps) {
      step_ns.push_back(t1 - t0);
      for (auto& v : ids) {
        std::unordered_set<int64_t> u(v.begin(), v.end());
        distinct_sum += static_cast<double>(u.size()) / static_cast<double>(v.size());
        ++distinct_n;
      }
    }
  }
  const LookupStats after = queue.totals();
  rep.measured_steps = opt.steps;
  rep.first_measured_row = timeline_mark;
  rep.first_measured_step = step_mark;
  rep.rows_looked_up = after.rows - before.rows;
  rep.dead_rows = after.dead_rows - before.dead_rows;
  rep.invalid_ids = after.invalid_ids - before.invalid_ids;
  rep.step_ns = Distribution::of(step_ns);
  rep.host_ids_ns = Distribution::of(host_ids);
  if (std::isfinite(rep.step_ns.median) && rep.step_ns.median > 0)
    rep.tokens_per_s = opt.batch / (rep.step_ns.median * 1e-9);
  if (distinct_n) rep.distinct_id_fraction = distinct_sum / static_cast<double>(distinct_n);

  const int64_t nh = static_cast<int64_t>(opt.batch) * layout.heads();
  rep.b_source_bytes_per_step = nh * layout.source_bytes_per_row() * layout.n_layers();
  rep.b_staging_bytes_per_step = 2 * nh * layout.d * layout.n_layers();

  // Lookup busy time and rates over measured rows only.
  const auto& all = queue.timeline().rows();
  std::vector<LayerTiming> measured(all.begin() + static_cast<std::ptrdiff_t>(timeline_mark), all.end());
  for (const auto& t : measured) rep.lookup_busy_ns += t.lookup_ns();
  if (rep.lookup_busy_ns > 0) {
    const double sec = rep.lookup_busy_ns * 1e-9;
    rep.rows_per_s = static_cast<double>(rep.rows_looked_up) / sec;
    rep.source_gbps = static_cast<double>(rep.rows_looked_up) * static_cast<double>(layout.source_bytes_per_row()) / sec / 1e9;
    rep.staging_gbps = static_cast<double>(rep.rows_looked_up) * 2.0 * layout.d / sec / 1e9;
  }
  // Per-layer distributions and the serial-queue model over this rank's measured lookups.
  Timeline mt;
  for (const auto& t : measured) mt.add(t);
  for (const auto& a : analyze_timeline(mt)) {
    LayerReport lr;
    lr.layer_id = a.layer_id;
    lr.exposed_wait_ns = a.exposed_wait_ns;
    lr.measured_wait_ns = a.measured_wait_ns;
    lr.lookup_ns = a.lookup_ns;
    lr.queue_ns = a.queue_ns;
    lr.residual_s_ns = a.residual_s_ns;
    rep.layers.push_back(lr);
  }
  return rep;
}

double DecodeReplayReport::slowdown() const {
  if (!std::isfinite(step_ns.median) || !std::isfinite(compute_only_step_ns.median) || compute_only_step_ns.median <= 0)
    return kNotRecorded;
  return step_ns.median / compute_only_step_ns.median;
}

void add_replay_json(const DecodeReplayReport& r, nlohmann::json& j) {
  using report::json_num;
  j["lookup"] = {{"rows", r.rows_looked_up},
                 {"dead_rows", r.dead_rows},
                 {"invalid_ids", r.invalid_ids},
                 {"busy_ns", json_num(r.lookup_busy_ns)},
                 {"rows_per_s", json_num(r.rows_per_s)},
                 {"source_gbps", json_num(r.source_gbps)},
                 {"staging_gbps", json_num(r.staging_gbps)},
                 {"distinct_id_fraction", json_num(r.distinct_id_fraction)}};
  j["bytes"] = {{"b_source_per_step", r.b_source_bytes_per_step}, {"b_staging_per_step", r.b_staging_bytes_per_step}};
  j["steps"] = {{"step_ns", r.step_ns.to_json()},
                {"compute_only_step_ns", r.compute_only_step_ns.to_json()},
                {"slowdown", json_num(r.slowdown())},
                {"tokens_per_s", json_num(r.tokens_per_s)}};
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"layer_id", l.layer_id},
                      {"exposed_wait_ns", l.exposed_wait_ns.to_json()},
                      {"measured_wait_ns", l.measured_wait_ns.to_json()},
                      {"lookup_ns", l.lookup_ns.to_json()},
                      {"queue_ns", l.queue_ns.to_json()},
                      {"residual_s_ns", l.residual_s_ns.to_json()}});
  j["layers"] = layers;
}

}  // namespace engram
