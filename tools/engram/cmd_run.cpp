// `engram run`: the main job. Builds (or loads) an Engram table, replays decode steps with Engram lookups on a
// serial prefetch queue overlapped with synthetic layer compute, and reports lookup throughput, exposed wait per
// layer, byte accounting, the page census and the timeline file. With no arguments it runs a 512 MiB
// V4.1-Flash-shaped table in a memfd, real text (when scripts/setup tokenized it), on the GPU when there is one.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "command.hpp"
#include "default_paths.hpp"
#include "core/units.hpp"
#include "fast_path_report.hpp"
#include "serving_args.hpp"
#include "host/census.hpp"
#include "host/checkpoint.hpp"
#include "replay/cuda_backend_factory.hpp"
#include "replay/text_id_source.hpp"
#include "cpu/compute.hpp"
#include "cpu/prefetch.hpp"
#include "engram/table.hpp"
#include "host/conditions.hpp"
#include "replay/decode_replay.hpp"
#include "report.hpp"
#include "run_ranks.hpp"

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
  std::string ids = "auto";
  std::string tokens;        // token file for --ids text (default: the setup's default text)
  std::string checkpoint;    // load the table from this safetensors file instead of synthesising it
  std::string backing = "memfd";
  std::string placement = "none";
  double grid_fraction = 0.5;
  double zipf_alpha = 1.0;
  int threads = 0;
  bool checked = false;
  std::string timeline = default_output_path("engram-run.trace.json");
  std::string backend = "auto";
  bool json = false;
  bool no_baseline = false;
  int ranks = 1;             // > 1: rank processes sharing one table (run_ranks.hpp)
  std::string fast_path = "planner";  // planner | plain | off (issue #8)
  CacheArgs cache;                    // GPU hot-row cache (issue #8); warm-up window default: --warmup steps
};

nlohmann::json dist_json(const Distribution& d) {
  return {{"median", json_num(d.median)}, {"p5", json_num(d.p5)}, {"p95", json_num(d.p95)},
          {"p99", json_num(d.p99)}, {"n", d.n}};
}

// --ranks N > 1: N rank processes replay on ONE shared table (src/replay/multi_rank.hpp); each rank uses
// the backend asked for (auto: its GPU when usable, rank r on device r % visible devices).
int run_ranks(const RunArgs& a) {
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return report_failure("run", size.status().with_context("--table-size"));
  RanksCliArgs r;
  r.job = {.layout = a.layout, .table_bytes = *size, .row_layout = a.row_layout, .checkpoint = a.checkpoint,
           .seed = a.seed, .batch = a.batch, .steps = a.steps, .warmup = a.warmup, .model_layers = a.model_layers,
           .prefetch = a.prefetch, .layer_us = a.layer_us, .ids = a.ids, .tokens = a.tokens,
           .zipf_alpha = a.zipf_alpha, .threads = a.threads, .checked = a.checked,
           .compute_only_baseline = !a.no_baseline, .timeline = a.timeline};
  r.job.backend = a.backend;
  r.job.grid_fraction = a.grid_fraction;
  r.options.ranks = a.ranks;
  r.options.backing = a.backing;
  r.options.placement = a.placement;
  r.json = a.json;
  return run_ranks_cli(r);
}

int run(const RunArgs& a) {
  if (a.ranks > 1) return run_ranks(a);
  auto fmt = parse_row_format(a.row_layout);
  if (!fmt.is_ok()) return report_failure("run", fmt.status().with_context("--row-layout"));
  Result<EngramLayout> layout = Status(Code::kInternal, "layout not set");
  if (!a.checkpoint.empty()) {
    layout = host::read_checkpoint_layout(a.checkpoint, *fmt);
    if (!layout.is_ok()) return report_failure("run", layout.status().with_context("--checkpoint"));
  } else {
    auto size = parse_size_bytes(a.table_size);
    if (!size.is_ok()) return report_failure("run", size.status().with_context("--table-size"));
    layout = make_preset_layout(a.layout, *size, *fmt);
    if (!layout.is_ok()) return report_failure("run", layout.status().with_context("--layout"));
  }
  const PrefetchMode mode = a.prefetch == "early" ? PrefetchMode::kEarly : PrefetchMode::kOnDemand;
  auto say = [&](const std::string& m) {
    if (!a.json) std::fprintf(stderr, "engram run: %s\n", m.c_str());
  };
  // Cache options are checked (and a profile read) before the table is built. Warm-up window: the run's warm-up
  // steps, so that the measured steps all run with the cache.
  auto cache = resolve_cache(a.cache, *layout, a.warmup);
  if (!cache.is_ok()) return report_failure("run", cache.status());

  // Ids first: a missing token file should fail before minutes of table building.
  std::unique_ptr<IdSource> source;
  std::string ids_note;
  if (a.ids == "text" || a.ids == "auto") {
    const std::string tok = a.tokens.empty() ? default_token_file_path() : a.tokens;
    auto t = make_text_id_source(*layout, tok, "", 0);
    if (t.is_ok()) {
      source = std::move(*t);
    } else if (a.ids == "text" || !a.tokens.empty()) {
      return report_failure("run", t.status().with_context("--ids text"));
    } else {
      ids_note = "real text unavailable (" + t.status().message() + "); using zipf(alpha=" +
                 fmt_num(a.zipf_alpha, "%.2f") + ")";
      say(ids_note);
    }
  }
  if (!source && a.ids == "uniform") source = make_uniform_id_source(*layout, a.seed);
  if (!source) {
    auto z = make_zipf_id_source(*layout, a.zipf_alpha, a.seed);
    if (!z.is_ok()) return report_failure("run", z.status().with_context("--zipf-alpha"));
    source = std::move(*z);
  }

  say("building " + layout->name + " table (" + format_bytes(layout->total_bytes()) + ", " +
      row_format_name(layout->format) + " rows, " + a.backing + " backing, placement " + a.placement + ") ...");
  TableOptions topt;
  topt.backing = a.backing;
  topt.placement = a.placement;
  topt.group = "run";
  auto table = HostTable::create(*layout, topt);
  if (!table.is_ok()) return report_failure("run", table.status());
  std::vector<host::PageCensus> censuses = (*table)->census(host::CensusPoint::kAfterPlacement);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::string content;
  if (!a.checkpoint.empty()) {
    say("loading " + a.checkpoint + " ...");
    host::LoadOptions lopt;
    Status st = host::load_checkpoint(a.checkpoint, **table, lopt);
    if (!st.is_ok()) return report_failure("run", st);
    content = "checkpoint " + a.checkpoint;
  } else {
    (*table)->fill_synthetic(a.seed, static_cast<int>(hw));
    content = "synthetic(seed=" + std::to_string(a.seed) + ")";
  }
  for (auto& c : (*table)->census(host::CensusPoint::kAfterLoad)) censuses.push_back(std::move(c));

  std::vector<TableView> views;
  for (int li = 0; li < layout->n_layers(); ++li) views.push_back((*table)->view(li));

  // Backend: cuda when asked, or when auto finds a usable GPU; the reason is reported either way.
  std::string backend_name = "cpu", backend_note;
  std::unique_ptr<ReplayBackend> cuda_backend;
  if (a.backend == "cuda" || a.backend == "auto") {
    CudaReplayOptions copt;
    copt.max_tokens = a.batch;
    copt.grid_fraction = a.grid_fraction;
    copt.checked = a.checked;
    copt.layer_us = a.layer_us;
    copt.fast_path = a.fast_path != "off";
    copt.planner = a.fast_path == "planner";
    copt.cache = *cache;
    auto b = make_cuda_replay_backend(*layout, views, copt);
    if (b.is_ok()) {
      cuda_backend = std::move(*b);
      backend_name = "cuda";
    } else if (a.backend == "cuda") {
      return report_failure("run", b.status().with_context("--backend cuda"));
    } else {
      backend_note = "cuda not used: " + b.status().message();
      say(backend_note);
    }
  }
  std::string cache_note;
  if (!cuda_backend) {
    cache_note = cpu_cache_note(*cache);
    // Said once: in the report (text) or as workload.cache_note (JSON).
  }
  std::unique_ptr<cpu::CpuPrefetchQueue> cpu_queue;
  std::unique_ptr<cpu::CpuLayerCompute> cpu_compute;
  PrefetchQueue* queue = nullptr;
  LayerCompute* compute = nullptr;
  if (cuda_backend) {
    queue = &cuda_backend->queue();
    compute = &cuda_backend->compute();
    for (auto& c : (*table)->census(host::CensusPoint::kAfterRegistration)) censuses.push_back(std::move(c));
  } else {
    cpu::CpuPrefetchOptions qopt;
    qopt.lookup_threads = a.threads;
    qopt.checked = a.checked;
    auto q = cpu::CpuPrefetchQueue::create(views, layout->layer_ids, layout->heads(), qopt);
    if (!q.is_ok()) return report_failure("run", q.status());
    cpu_queue = std::move(*q);
    cpu_compute = std::make_unique<cpu::CpuLayerCompute>(a.layer_us);
    queue = cpu_queue.get();
    compute = cpu_compute.get();
  }

  DecodeReplayOptions ropt;
  ropt.batch = a.batch;
  ropt.steps = a.steps;
  ropt.warmup_steps = a.warmup;
  ropt.model_layers = a.model_layers;
  ropt.mode = mode;
  ropt.compute_only_baseline = !a.no_baseline;
  say("replaying " + std::to_string(a.warmup) + "+" + std::to_string(a.steps) + " decode steps on the " + backend_name +
      " backend ...");
  auto rep = run_decode_replay(*layout, *source, *queue, *compute, ropt);
  if (!rep.is_ok()) return report_failure("run", rep.status());
  for (auto& c : (*table)->census(host::CensusPoint::kAfterReplay)) censuses.push_back(std::move(c));

  std::string timeline_path = a.timeline;
  if (timeline_path != "none") {
    std::ofstream f(timeline_path);
    if (!f) return report_failure("run", Status(Code::kIo, "cannot write timeline file '" + timeline_path + "'"));
    f << queue->timeline().to_chrome_trace().dump() << "\n";
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
                {"content", content},
                {"backing", a.backing},
                {"placement_requested", a.placement}};
  nlohmann::json cj = nlohmann::json::array();
  for (const auto& c : censuses) cj.push_back(c.to_json());
  j["census"] = cj;
  j["workload"] = {{"backend", backend_name},
                   {"backend_requested", a.backend},
                   {"backend_note", backend_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(backend_note)},
                   {"backend_details", cuda_backend ? cuda_backend->describe() : nlohmann::json(nullptr)},
                   {"lookup_threads", cuda_backend ? nlohmann::json(nullptr)
                                                   : nlohmann::json(a.threads > 0 ? a.threads : std::max(1, static_cast<int>(hw) - 1))},
                   {"batch", a.batch},
                   {"steps", a.steps},
                   {"warmup_steps", a.warmup},
                   {"model_layers", a.model_layers > 0 ? a.model_layers
                                                        : *std::max_element(layout->layer_ids.begin(), layout->layer_ids.end()) + 2},
                   {"prefetch", prefetch_mode_name(mode)},
                   {"ids", source->describe()},
                   {"ids_requested", a.ids},
                   {"ids_note", ids_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(ids_note)},
                   {"layer_us", a.layer_us},
                   {"fast_path", a.fast_path},
                   {"cache_requested", {{"size", a.cache.size}, {"format", a.cache.format},
                                        {"profile", a.cache.profile.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.cache.profile)},
                                        {"warmup_steps", cache->warmup_steps},
                                        {"update_every", cache->update_every}, {"update_rows", cache->update_rows}}},
                   {"cache_note", cache_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(cache_note)}};
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
  // N-gram statistics of real-text ids (per layer and order, averaged over the order's heads).
  if (auto* text = dynamic_cast<TextIdSource*>(source.get())) {
    const NgramStats st = text->stats(10);
    nlohmann::json ng = nlohmann::json::array();
    const int k = layout->heads_per_order;
    for (int li = 0; li < layout->n_layers(); ++li)
      for (int n = 2; n <= layout->max_ngram; ++n) {
        double distinct = 0, top = 0, repeat = 0;
        for (int jh = 0; jh < k; ++jh) {
          const auto& h = st.heads[li][(n - 2) * k + jh];
          distinct += static_cast<double>(h.distinct) / k;
          top += h.top_k_share / k;
          repeat += h.repeat_rate / k;
        }
        ng.push_back({{"layer_id", layout->layer_ids[li]}, {"order", n}, {"distinct_ids_per_head", distinct},
                      {"top10_share", json_num(top)}, {"repeat_rate_in_step", json_num(repeat)}});
      }
    j["ngram_stats"] = {{"batches", st.batches}, {"per_order", ng}};
  }
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
  std::printf("Memory    %s backing, placement %s\n", a.backing.c_str(), a.placement.c_str());
  for (const auto& c : censuses) {
    if (c.point != host::CensusPoint::kAfterReplay) continue;
    std::string nodes;
    for (auto& [node, pages] : c.pages_per_node)
      nodes += " N" + std::to_string(node) + "=" + fmt_num(100.0 * c.fraction_on(node), "%.1f%%");
    std::printf("          census after replay, layer %d: %s%s (%llu pages%s)\n", c.table.layer_id,
                c.known ? "" : ("unknown: " + c.reason).c_str(), nodes.c_str(),
                static_cast<unsigned long long>(c.pages_sampled),
                c.not_resident ? (", " + std::to_string(c.not_resident) + " not resident").c_str() : "");
  }
  std::printf("Workload  %s backend, batch %d, %d steps (+%d warm-up), %s prefetch, ids %s, %.0f us/layer x %s layers\n",
              backend_name.c_str(), a.batch, a.steps, a.warmup, prefetch_mode_name(mode), source->describe().c_str(), a.layer_us,
              j["workload"]["model_layers"].dump().c_str());
  if (cuda_backend) print_fast_path(j["workload"]["backend_details"], a.fast_path);
  if (!cache_note.empty()) std::printf("Cache     %s\n", cache_note.c_str());
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
  if (j.contains("ngram_stats")) {
    std::printf("\nN-gram ids of the text (per head, averaged over the order's heads, %lld decode steps):\n",
                static_cast<long long>(j["ngram_stats"]["batches"].get<int64_t>()));
    std::printf("%-8s %-6s %14s %12s %22s\n", "layer", "order", "distinct ids", "top-10 share", "repeat rate in a step");
    for (const auto& o : j["ngram_stats"]["per_order"])
      std::printf("%-8d %-6d %14.0f %12s %22s\n", o["layer_id"].get<int>(), o["order"].get<int>(),
                  o["distinct_ids_per_head"].get<double>(),
                  o["top10_share"].is_null() ? "n/a" : fmt_num(100 * o["top10_share"].get<double>(), "%.2f%%").c_str(),
                  o["repeat_rate_in_step"].is_null() ? "n/a" : fmt_num(100 * o["repeat_rate_in_step"].get<double>(), "%.2f%%").c_str());
  }
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
  sub.add_option("--ids", a->ids,
                 "Ids: text (real text hashed with the reference N-gram hash), zipf, uniform, or auto (default: text "
                 "when the default token file exists, else zipf, saying so)")
      ->check(CLI::IsMember({"auto", "text", "zipf", "uniform"}));
  sub.add_option("--tokens", a->tokens, "Token file for --ids text (default: the text tokenized by scripts/setup)");
  sub.add_option("--checkpoint", a->checkpoint, "Load the table from this safetensors checkpoint (engram table create)");
  sub.add_option("--backing", a->backing, "Table memory: memfd (default), shm, hugetlb, hugetlb-1g, anon-thp")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}));
  sub.add_option("--placement", a->placement,
                 "NUMA placement applied before first touch: none (default), local, bind:N, preferred:N, "
                 "interleave:N,M|all, weighted-interleave:N=w,..., replica-per-node");
  sub.add_option("--ranks", a->ranks,
                 "Rank processes sharing ONE table (default 1); > 1: the parent is the shared group's leader and "
                 "each rank replays on its own CPU prefetch queue over the shared mapping")
      ->check(CLI::Range(1, 1024));
  sub.add_option("--grid-fraction", a->grid_fraction, "CUDA: background grid cap as a fraction of the SMs (default 0.5)")
      ->check(CLI::Range(0.01, 1.0));
  sub.add_option("--zipf-alpha", a->zipf_alpha, "Zipf exponent for --ids zipf (default 1.0)")->check(CLI::Range(1e-6, 100.0));
  sub.add_option("--threads", a->threads, "CPU lookup threads (default: cores - 1, at least 1)")->check(CLI::Range(0, 4096));
  sub.add_flag("--checked", a->checked, "Validate every id before each lookup (an out-of-range id fails the run)");
  sub.add_option("--timeline", a->timeline, "Chrome trace output file, 'none' to skip (default " +
                  default_output_help("engram-run.trace.json") + "; with --ranks N: <file>.rank<r>.json)");
  sub.add_option("--backend", a->backend,
                 "Lookup backend: auto (default: cuda when a usable GPU is present, else cpu, saying why), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("--fast-path", a->fast_path,
                 "CUDA lookup path (issue #8): planner (default: per batch, dedup / sort / hot-row cache / plain from "
                 "calibrated costs, printed with its reasons), plain (the hook runs the plain gather), off (no hook)")
      ->check(CLI::IsMember({"planner", "plain", "off"}));
  add_cache_options(sub, a->cache, "the --warmup steps");
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
