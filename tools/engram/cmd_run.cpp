// `engram run`: the main job. Builds (or loads) an Engram table, replays decode steps with Engram lookups on a
// serial prefetch queue overlapped with synthetic layer compute, and reports lookup throughput, exposed wait per
// layer, byte accounting and the timeline file. With no arguments it runs a 512 MiB V4.1-Flash-shaped table.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "command.hpp"
#include "core/units.hpp"
#include "cpu/compute.hpp"
#include "cpu/prefetch.hpp"
#include "engram/table.hpp"
#include "host/conditions.hpp"
#include "replay/decode_replay.hpp"
#include "report.hpp"

namespace engram::cli {
namespace {

struct RunArgs {
  std::string layout = "v41-flash-mini";
  std::string table_size = "512MiB";
  std::string row_layout = "fused";
  uint64_t seed = 1;
  int batch = 64;
  int steps = 32;
  int warmup = 4;
  int model_layers = 0;
  std::string prefetch = "early";
  double layer_us = 200;
  std::string ids = "zipf";
  double zipf_alpha = 1.0;
  int threads = 0;
  bool checked = false;
  std::string timeline = "engram-run.trace.json";
  std::string backend = "cpu";
  bool json = false;
  bool no_baseline = false;
};

nlohmann::json dist_json(const Distribution& d) {
  return {{"median", json_num(d.median)}, {"p5", json_num(d.p5)}, {"p95", json_num(d.p95)},
          {"p99", json_num(d.p99)}, {"n", d.n}};
}

int run(const RunArgs& a) {
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return report_failure("run", size.status().with_context("--table-size"));
  auto fmt = parse_row_format(a.row_layout);
  if (!fmt.is_ok()) return report_failure("run", fmt.status().with_context("--row-layout"));
  auto layout = make_preset_layout(a.layout, *size, *fmt);
  if (!layout.is_ok()) return report_failure("run", layout.status().with_context("--layout"));
  const PrefetchMode mode = a.prefetch == "early" ? PrefetchMode::kEarly : PrefetchMode::kOnDemand;

  if (!a.json)
    std::fprintf(stderr, "engram run: building %s table (%s, %s rows) ...\n", layout->name.c_str(),
                 format_bytes(layout->total_bytes()).c_str(), row_format_name(layout->format));
  auto table = HostTable::allocate(*layout);
  if (!table.is_ok()) return report_failure("run", table.status());
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  (*table)->fill_synthetic(a.seed, static_cast<int>(hw));

  std::unique_ptr<IdSource> source;
  if (a.ids == "uniform") {
    source = make_uniform_id_source(*layout, a.seed);
  } else {
    auto z = make_zipf_id_source(*layout, a.zipf_alpha, a.seed);
    if (!z.is_ok()) return report_failure("run", z.status().with_context("--zipf-alpha"));
    source = std::move(*z);
  }

  std::vector<TableView> views;
  for (int li = 0; li < layout->n_layers(); ++li) views.push_back((*table)->view(li));
  cpu::CpuPrefetchOptions qopt;
  qopt.lookup_threads = a.threads;
  qopt.checked = a.checked;
  auto queue = cpu::CpuPrefetchQueue::create(views, layout->layer_ids, layout->heads(), qopt);
  if (!queue.is_ok()) return report_failure("run", queue.status());
  cpu::CpuLayerCompute compute(a.layer_us);

  DecodeReplayOptions ropt;
  ropt.batch = a.batch;
  ropt.steps = a.steps;
  ropt.warmup_steps = a.warmup;
  ropt.model_layers = a.model_layers;
  ropt.mode = mode;
  ropt.compute_only_baseline = !a.no_baseline;
  if (!a.json) std::fprintf(stderr, "engram run: replaying %d+%d decode steps ...\n", a.warmup, a.steps);
  auto rep = run_decode_replay(*layout, *source, **queue, compute, ropt);
  if (!rep.is_ok()) return report_failure("run", rep.status());

  std::string timeline_path = a.timeline;
  if (timeline_path != "none") {
    std::ofstream f(timeline_path);
    if (!f) return report_failure("run", Status(Code::kIo, "cannot write timeline file '" + timeline_path + "'"));
    f << (*queue)->timeline().to_chrome_trace().dump() << "\n";
  }

  const auto conditions = collect_conditions(ENGRAM_GIT_REV);
  const auto& r = *rep;
  const double slowdown = (std::isfinite(r.step_ns.median) && std::isfinite(r.compute_only_step_ns.median) &&
                           r.compute_only_step_ns.median > 0)
                              ? r.step_ns.median / r.compute_only_step_ns.median
                              : kNotRecorded;
  nlohmann::json j;
  j["command"] = "run";
  j["conditions"] = conditions;
  j["table"] = {{"layout", layout->name},
                {"row_layout", row_format_name(layout->format)},
                {"d", layout->d},
                {"engram_layers", layout->layer_ids},
                {"heads", layout->heads()},
                {"rows", layout->total_rows()},
                {"rows_per_layer", layout->rows(0)},
                {"row_stride_bytes", layout->row_stride_bytes()},
                {"source_bytes_per_row", layout->source_bytes_per_row()},
                {"bytes", layout->total_bytes()},
                {"content", "synthetic(seed=" + std::to_string(a.seed) + ")"},
                {"backing", "private anonymous"}};
  j["workload"] = {{"backend", "cpu"},
                   {"lookup_threads", a.threads > 0 ? a.threads : std::max(1, static_cast<int>(hw) - 1)},
                   {"batch", a.batch},
                   {"steps", a.steps},
                   {"warmup_steps", a.warmup},
                   {"model_layers", a.model_layers > 0 ? a.model_layers
                                                        : *std::max_element(layout->layer_ids.begin(), layout->layer_ids.end()) + 2},
                   {"prefetch", prefetch_mode_name(mode)},
                   {"ids", source->describe()},
                   {"layer_us", a.layer_us}};
  j["lookup"] = {{"rows", r.rows_looked_up},
                 {"dead_rows", r.dead_rows},
                 {"invalid_ids", r.invalid_ids},
                 {"busy_ns", json_num(r.lookup_busy_ns)},
                 {"rows_per_s", json_num(r.rows_per_s)},
                 {"source_gbps", json_num(r.source_gbps)},
                 {"staging_gbps", json_num(r.staging_gbps)},
                 {"distinct_id_fraction", json_num(r.distinct_id_fraction)}};
  j["bytes"] = {{"b_source_per_step", r.b_source_bytes_per_step}, {"b_staging_per_step", r.b_staging_bytes_per_step}};
  j["steps"] = {{"step_ns", dist_json(r.step_ns)},
                {"compute_only_step_ns", dist_json(r.compute_only_step_ns)},
                {"slowdown", json_num(slowdown)},
                {"tokens_per_s", json_num(r.tokens_per_s)}};
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"layer_id", l.layer_id},
                      {"exposed_wait_ns", dist_json(l.exposed_wait_ns)},
                      {"measured_wait_ns", dist_json(l.measured_wait_ns)},
                      {"lookup_ns", dist_json(l.lookup_ns)},
                      {"queue_ns", dist_json(l.queue_ns)},
                      {"model_residual_s_ns", dist_json(l.residual_s_ns)}});
  j["layers"] = layers;
  j["timeline"] = timeline_path == "none" ? nlohmann::json(nullptr) : nlohmann::json(timeline_path);

  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("engram run — %s\n", conditions_summary(conditions).c_str());
  std::printf("\nTable     %s, %s rows of d=%d (%lld B stride), %d Engram layers %s x %d heads, %s, %s\n",
              layout->name.c_str(), row_format_name(layout->format), layout->d,
              static_cast<long long>(layout->row_stride_bytes()), layout->n_layers(),
              j["table"]["engram_layers"].dump().c_str(), layout->heads(), format_bytes(layout->total_bytes()).c_str(),
              j["table"]["content"].get<std::string>().c_str());
  std::printf("Workload  cpu backend, batch %d, %d steps (+%d warm-up), %s prefetch, ids %s, %.0f us/layer x %s layers\n",
              a.batch, a.steps, a.warmup, prefetch_mode_name(mode), source->describe().c_str(), a.layer_us,
              j["workload"]["model_layers"].dump().c_str());
  std::printf("\nLookup    %s rows/s, source %s GB/s, staging %s GB/s (separate paths; not summed)\n",
              fmt_num(r.rows_per_s / 1e6, "%.2f M").c_str(), fmt_num(r.source_gbps, "%.2f").c_str(),
              fmt_num(r.staging_gbps, "%.2f").c_str());
  std::printf("          %lld rows, %lld dead, %lld invalid; distinct ids per batch %s\n",
              static_cast<long long>(r.rows_looked_up), static_cast<long long>(r.dead_rows),
              static_cast<long long>(r.invalid_ids), fmt_num(r.distinct_id_fraction * 100, "%.1f%%").c_str());
  std::printf("Bytes     per step: B_source = N*H*(d+d/32) = %s, B_staging = 2*N*H*d = %s\n",
              format_bytes(r.b_source_bytes_per_step).c_str(), format_bytes(r.b_staging_bytes_per_step).c_str());
  std::printf("Steps     median %s us (p5 %s, p95 %s); compute only %s us; slowdown x%s; %s tokens/s\n",
              fmt_num(r.step_ns.median / 1e3, "%.1f").c_str(), fmt_num(r.step_ns.p5 / 1e3, "%.1f").c_str(),
              fmt_num(r.step_ns.p95 / 1e3, "%.1f").c_str(), fmt_num(r.compute_only_step_ns.median / 1e3, "%.1f").c_str(),
              fmt_num(slowdown, "%.3f").c_str(), fmt_num(r.tokens_per_s, "%.0f").c_str());
  std::printf("\n%-8s %14s %14s %14s %14s %14s\n", "layer", "E med (us)", "E p95 (us)", "L med (us)", "queue med (us)",
              "model resid (us)");
  for (const auto& l : r.layers)
    std::printf("%-8d %14s %14s %14s %14s %14s\n", l.layer_id, fmt_num(l.exposed_wait_ns.median / 1e3, "%.1f").c_str(),
                fmt_num(l.exposed_wait_ns.p95 / 1e3, "%.1f").c_str(), fmt_num(l.lookup_ns.median / 1e3, "%.1f").c_str(),
                fmt_num(l.queue_ns.median / 1e3, "%.1f").c_str(), fmt_num(l.residual_s_ns.median / 1e3, "%.1f").c_str());
  std::printf("\nE = max(0, f - c): exposed wait of the consumer; L = f - s: lookup time; queue = s - r.\n");
  std::printf("Timeline  %s (Chrome trace JSON: open in https://ui.perfetto.dev)\n",
              timeline_path == "none" ? "not written (--timeline none)" : timeline_path.c_str());
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<RunArgs>();
  sub.add_option("--layout", a->layout, "Layout preset: v41-flash-mini (default), v41-flash, tiny")
      ->check(CLI::IsMember(preset_names()));
  sub.add_option("--table-size", a->table_size,
                 "Total table bytes for v41-flash-mini, e.g. 512MiB (default), 2GiB, 1GB (GB = 1e9 B, GiB = 2^30 B)");
  sub.add_option("--row-layout", a->row_layout, "Row layout in memory: fused (payload|scales record, default) or split")
      ->check(CLI::IsMember({"fused", "split"}));
  sub.add_option("--seed", a->seed, "Seed of the synthetic table content and of the ids (default 1)");
  sub.add_option("--batch", a->batch, "Sequences per decode step, one new token each (default 64)")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--steps", a->steps, "Measured decode steps (default 32)")->check(CLI::Range(1, 1 << 24));
  sub.add_option("--warmup", a->warmup, "Warm-up steps, not measured (default 4)")->check(CLI::Range(0, 1 << 20));
  sub.add_option("--model-layers", a->model_layers, "Decoder layers of the synthetic model (default: last Engram layer + 2)")
      ->check(CLI::Range(0, 100000));
  sub.add_option("--prefetch", a->prefetch,
                 "early: submit each Engram layer's lookup when its ids are ready (step start); on_demand: submit at "
                 "the consuming layer (the B1 pair)")
      ->check(CLI::IsMember({"early", "on_demand"}));
  sub.add_option("--layer-us", a->layer_us, "Synthetic compute per decoder layer in microseconds (default 200)")
      ->check(CLI::Range(0.0, 1e7));
  sub.add_option("--ids", a->ids, "Id distribution: zipf (default) or uniform")->check(CLI::IsMember({"zipf", "uniform"}));
  sub.add_option("--zipf-alpha", a->zipf_alpha, "Zipf exponent for --ids zipf (default 1.0)")->check(CLI::Range(1e-6, 100.0));
  sub.add_option("--threads", a->threads, "CPU lookup threads (default: cores - 1, at least 1)")->check(CLI::Range(0, 4096));
  sub.add_flag("--checked", a->checked, "Validate every id before each lookup (an out-of-range id fails the run)");
  sub.add_option("--timeline", a->timeline, "Chrome trace output file (default engram-run.trace.json; 'none' to skip)");
  sub.add_option("--backend", a->backend, "Lookup backend: cpu (default)")->check(CLI::IsMember({"cpu"}));
  sub.add_flag("--no-baseline", a->no_baseline, "Skip the compute-only pass (slowdown becomes n/a)");
  sub.add_flag("--json", a->json, "Print the report as JSON on stdout");
  sub.footer(
      "Example: engram run --batch 128 --steps 64 --prefetch on_demand --json\n"
      "Each step: ids for every sequence are hashed (r), early mode submits all Engram layers' lookups to one serial\n"
      "queue, then layers run in order; an Engram layer waits for its own lookup (c -> wait end) before its compute.");
  return [a] { return run(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(run, "run", "Main job: decode replay with Engram lookups on a prefetch queue; reports throughput and exposed wait", engram::cli::setup);
