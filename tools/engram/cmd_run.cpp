// `engram run`: the main job. Builds (or loads) an Engram table, replays decode steps with Engram lookups on a
// serial prefetch queue overlapped with synthetic layer compute, and reports lookup throughput, exposed wait per
// layer, byte accounting, the page census and the timeline file. With no arguments it runs a 512 MiB
// V4.1-Flash-shaped table in a memfd, real text (when scripts/setup tokenized it), on the GPU when there is one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "args.hpp"
#include "command.hpp"
#include "default_paths.hpp"
#include "core/git_rev.hpp"
#include "core/units.hpp"
#include "engine/harness.hpp"
#include "engine_args.hpp"
#include "metrics_serve.hpp"
#include "named_tables.hpp"
#include "progress_args.hpp"
#include "engram/engine.hpp"
#include "engram/census.hpp"
#include "host/checkpoint.hpp"
#include "host/conditions.hpp"
#include "replay/decode_run.hpp"
#include "replay/text_id_source.hpp"
#include "report.hpp"
#include "run_ranks.hpp"

namespace engram::cli {
namespace {

struct RunArgs {
  std::string layout = "v41-flash-mini";
  std::string table_size = "512MiB";
  const CLI::Option* table_size_option = nullptr;  // given on the command line: it must apply
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
  std::string switch_tokens;  // from step switch_at on, the text of this token file (a change of traffic)
  int64_t switch_at = 0;
  std::string checkpoint;    // load the table from this safetensors file instead of synthesising it
  std::string model;         // ... or from this Hugging Face model directory
  std::string tensor_names;  // model: "WEIGHT,SCALE" ("" = the released names)
  bool keep_page_cache = false;  // --checkpoint / --model: leave the files' pages in the page cache
  std::string hash = "auto";  // where real-text ids are hashed: auto | cpu | gpu
  double zipf_alpha = 1.0;
  std::string timeline = default_output_path("engram-run.trace.json");
  bool timeline_absolute = false;  // trace timestamps since the Unix epoch
  bool json = false;
  MetricsArgs metrics;       // --metrics-port, --metrics-file
  std::string progress = "auto";   // --progress (progress_args.hpp)
  bool no_baseline = false;
  int ranks = 1;             // > 1: rank processes sharing one table (run_ranks.hpp)
  EngineArgs engine;         // backend, table memory, fast path, GPU hot-row cache (warm-up default: --warmup steps)
};


// The hit rate of every step over all layers' caches (sum of hits / sum of probes; null where nothing probed) from
// the backend's per-step counters (CacheOptions::step_series).
nlohmann::json cache_step_series_json(const nlohmann::json& details, int64_t switch_at) {
  std::vector<int64_t> probes, hits;
  for (const auto& layer : details.value("fast_path", nlohmann::json::array())) {
    const auto& c = layer.value("cache", nlohmann::json::object());
    if (!c.contains("step_probes") || c["step_probes"].is_null()) continue;
    const auto p = c["step_probes"].get<std::vector<int64_t>>(), h = c["step_hits"].get<std::vector<int64_t>>();
    probes.resize(std::max(probes.size(), p.size()), 0);
    hits.resize(probes.size(), 0);
    for (size_t i = 0; i < p.size() && i < h.size(); ++i) probes[i] += p[i], hits[i] += h[i];
  }
  if (probes.empty())  // no GPU cache recorded a series (cpu backend, cache off): not measured
    return {{"switch_at", switch_at}, {"first_step", 0}, {"hit_rate", nullptr}, {"probes", nullptr}, {"hits", nullptr}};
  nlohmann::json rate = nlohmann::json::array();
  for (size_t i = 0; i < probes.size(); ++i)
    rate.push_back(probes[i] > 0 ? nlohmann::json(static_cast<double>(hits[i]) / static_cast<double>(probes[i]))
                                 : nlohmann::json(nullptr));
  return {{"switch_at", switch_at}, {"first_step", 0}, {"hit_rate", rate}, {"probes", probes}, {"hits", hits}};
}

// --ranks N > 1: N rank processes replay on ONE shared table (src/replay/multi_rank.hpp); each rank uses
// the backend asked for (auto: its GPU when usable, rank r on device r % visible devices).
// An option that cannot apply is an error, never silently ignored: --table-size sizes v41-flash-mini only.
Status check_table_size_applies(const RunArgs& a) {
  if (!a.table_size_option || a.table_size_option->count() == 0) return Status::ok();
  if (!a.checkpoint.empty())
    return Status(Code::kInvalidArgument, "--table-size " + a.table_size + " cannot apply with --checkpoint (the file fixes the size)");
  if (!a.model.empty())
    return Status(Code::kInvalidArgument, "--table-size " + a.table_size + " cannot apply with --model (its config.json fixes the size)");
  if (a.layout != "v41-flash-mini")
    return Status(Code::kInvalidArgument, "--table-size " + a.table_size + " cannot apply to --layout " + a.layout +
                                              " (its size is fixed; --table-size sizes v41-flash-mini)");
  return Status::ok();
}

// The run's table and workload as one job: what a rank group's leader hands its ranks, and what the one-process
// run replays (decode_run_spec), so that both paths read the same options the same way.
Result<RankJob> run_job(const RunArgs& a) {
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return size.status().with_context("--table-size");
  RankJob job;
  job.layout = a.layout;
  job.table_bytes = *size;
  job.row_layout = a.row_layout;
  job.checkpoint = a.checkpoint;
  job.model_dir = a.model;
  job.tensor_names = a.tensor_names;
  job.seed = a.seed;
  job.batch = a.batch;
  job.steps = a.steps;
  job.warmup = a.warmup;
  job.decoder_layers = a.model_layers;
  job.prefetch = a.prefetch;
  job.layer_us = a.layer_us;
  job.ids = a.ids;
  job.tokens = a.tokens;
  job.zipf_alpha = a.zipf_alpha;
  job.compute_only_baseline = !a.no_baseline;
  job.timeline = a.timeline;
  job.timeline_absolute = a.timeline_absolute;
  job.engine = lookup_option_text(a.engine, a.warmup);
  return job;
}

int run_ranks(const RunArgs& a, const RankJob& job) {
  RanksCliArgs r;
  r.job = job;
  r.options.ranks = a.ranks;
  r.options.backing = a.engine.backing;
  r.options.shm_dir = a.engine.shm_dir;
  r.options.placement = a.engine.placement;
  r.json = a.json;
  r.progress = progress_display(a.progress);
  return run_ranks_cli(r);
}

int run(const RunArgs& a) {
  if (Status st = check_table_size_applies(a); !st.is_ok()) return report_failure("run", st);
  if (Status st = check_metrics_args(a.metrics); !st.is_ok()) return report_failure("run", st);
  if (a.ranks > 1 && (a.metrics.port >= 0 || !a.metrics.file.empty()))
    return report_failure("run", Status(Code::kInvalidArgument,
                                        "--metrics-port/--metrics-file: each rank of --ranks is a process of its own "
                                        "with its own engine; metrics are served by one-rank runs"));
  if (a.ranks > 1 && !a.switch_tokens.empty())
    return report_failure("run", Status(Code::kInvalidArgument, "--switch-tokens: the ranks of --ranks replay one text"));
  if (!a.switch_tokens.empty() && a.switch_at >= a.warmup + a.steps)
    return report_failure("run", Status(Code::kInvalidArgument,
                                        "--switch-at " + std::to_string(a.switch_at) + ": the run has " +
                                            std::to_string(a.warmup + a.steps) + " steps (--warmup " +
                                            std::to_string(a.warmup) + " + --steps " + std::to_string(a.steps) +
                                            ", numbered from 0): the text would never switch"));
  if (a.keep_page_cache && a.model.empty() && a.checkpoint.empty())
    return report_failure("run", Status(Code::kInvalidArgument, "--keep-page-cache: needs --checkpoint or --model"));
  if (a.keep_page_cache && a.ranks > 1)
    return report_failure("run", Status(Code::kInvalidArgument, "--keep-page-cache: the shared group's leader loads for --ranks"));
  if (a.ranks > 1 && a.hash == "gpu")
    return report_failure("run", Status(Code::kInvalidArgument, "--hash gpu: the ranks of --ranks hash on the CPU"));
  if (a.ranks > 1) {
    TableOptions tp_check;
    if (Status st = apply_tp_args(a.engine.tp, tp_check); !st.is_ok()) return report_failure("run", st);
    if (!tp_check.tp.whole())
      return report_failure("run", Status(Code::kInvalidArgument, "--tp-size " + a.engine.tp.size +
                                                                      " with --ranks: a rank group shares one whole table"));
  }
  auto job = run_job(a);
  if (!job.is_ok()) return report_failure("run", job.status());
  // The default timeline's directory is made only by a run about to write there.
  if (a.timeline == default_output_path("engram-run.trace.json"))
    if (Status st = ensure_default_output_dir(); !st.is_ok()) return report_failure("run", st);
  if (a.ranks > 1) return run_ranks(a, *job);
  TableContent content = job->content();
  content.drop_page_cache = !a.keep_page_cache;
  // --layout is one of the presets and --row-layout fused or split (both checked when parsed): a preset that
  // refuses is refusing the size; a checkpoint or model that cannot be read names its option.
  Result<EngramLayout> layout = job_layout(*job);
  if (!layout.is_ok())
    return report_failure("run", layout.status().with_context(content.kind == TableContent::Kind::kSynthetic ? "--table-size"
                                                              : a.model.empty()                            ? "--checkpoint"
                                                                                                           : "--model"));
  const PrefetchMode mode = a.prefetch == "early" ? PrefetchMode::kEarly : PrefetchMode::kOnDemand;
  auto say = [&](const std::string& m) {
    if (!a.json) std::fprintf(stderr, "engram run: %s\n", m.c_str());
  };
  // Options are checked (and a cache profile read) before the table is built. The cache's warm-up window is the
  // run's warm-up steps, so that the measured steps all run with the cache.
  EngineOptions eo;
  eo.table.group = "run";
  eo.max_tokens = a.batch;
  mutable_engine_harness(eo).layer_us = a.layer_us;
  eo.prefetch = mode;
  eo.content = content;
  show_load_progress(eo, progress_display(a.progress));
  if (Status st = apply_engine_args(a.engine, *layout, a.warmup, eo); !st.is_ok()) return report_failure("run", st);
  // The library allows more ranks than heads (vLLM does: the ranks past the heads hold nothing); one process of
  // such a group measures an empty slice, so the CLI refuses it.
  if (eo.table.tp.size > layout->heads())
    return report_failure("run", Status(Code::kInvalidArgument,
                                        "--tp-size " + std::to_string(eo.table.tp.size) + ": the table has " +
                                            std::to_string(layout->heads()) + " heads per layer; a tensor-parallel "
                                            "group of more ranks than heads leaves ranks with no rows"));

  DecodeRunSpec spec = decode_run_spec(*job);
  spec.ids.switch_tokens = a.switch_tokens;
  spec.ids.switch_at = a.switch_at;
  auto hash_place = parse_hash_place(a.hash);
  if (!hash_place.is_ok()) return report_failure("run", hash_place.status().with_context("--hash"));
  spec.hash = *hash_place;
  // Ids first: a missing token file should fail before minutes of table building.
  std::string ids_note;
  auto made = make_decode_id_source(*layout, spec.ids, &ids_note);
  if (!made.is_ok()) return report_failure("run", made.status());
  std::unique_ptr<IdSource> source = std::move(*made);
  if (!ids_note.empty()) say(ids_note);
  if (!a.switch_tokens.empty()) eo.cache.step_series = true;  // the hit rate of every step is what a switching run is for

  say("building " + layout->name + " table (" + format_bytes(layout->total_bytes()) + ", " +
      row_format_name(layout->format) + " rows, " + eo.table.backing.to_string() + " backing, placement " +
      eo.table.placement.to_string() + ")" + (content.kind == TableContent::Kind::kSynthetic ? "" : " and loading " + content.to_string()) + " ...");
  sweep_before_named_table("run", eo.table);
  auto built = Engine::create_local(*layout, eo);
  if (!built.is_ok()) return report_failure("run", built.status());
  Engine& engine = **built;
  const std::string backend_name = engine.backend_name();
  const std::string& backend_note = engine.backend_note();
  if (!backend_note.empty()) say(backend_note);
  auto metrics_server = start_metrics_server("run", a.metrics, [&engine] { return prometheus_text(engine.metrics()); });
  if (!metrics_server.is_ok()) return report_failure("run", metrics_server.status());

  bool started = false;  // run_decode fails before on_start only while wiring the hashing that --hash asked for
  spec.on_start = [&](const DeviceHashingReport& hashing) {
    started = true;
    if (!hashing.note.empty() && spec.hash == HashPlace::kAuto && engine.backend() == BackendKind::kCuda)
      say(hashing.note);
    say("replaying " + std::to_string(a.warmup) + "+" + std::to_string(a.steps) + " decode steps on the " +
        backend_name + " backend" +
        (hashing.used == HashPlace::kGpu ? ", ids hashed on the GPU and verified against the CPU hasher" : "") + " ...");
  };
  auto run = run_decode(engine, *source, spec);
  if (!run.is_ok()) return report_failure("run", started ? run.status() : run.status().with_context("--hash"));
  const std::shared_ptr<DeviceHashingReport>& hashing = run->hashing;
  engine.add_censuses(engine.census(CensusPoint::kAfterReplay));
  const std::vector<PageCensus>& censuses = engine.censuses();
  const nlohmann::json details = engine.describe();  // after the run: paths taken, cache figures
  if (Status st = write_metrics_file(a.metrics, prometheus_text(engine.metrics())); !st.is_ok())
    return report_failure("run", st);
  const std::string timeline_path = a.timeline;

  const auto conditions = collect_conditions(git_revision());
  const auto& r = run->replay;
  const double slowdown = r.slowdown();
  nlohmann::json j;
  j["schema"] = "engram.run/1";
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
                {"content", eo.content.to_string()},
                {"backing", eo.table.backing.to_string()},
                {"placement_requested", eo.table.placement.to_string()},
                {"tp", details.value("tp", nlohmann::json(nullptr))}};  // null: the whole table
  nlohmann::json cj = nlohmann::json::array();
  for (const auto& c : censuses) cj.push_back(c.to_json());
  j["census"] = cj;
  const bool on_cuda = engine.backend() == BackendKind::kCuda;
  j["workload"] = {{"backend", backend_name},
                   {"backend_requested", a.engine.backend},
                   {"backend_note", backend_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(backend_note)},
                   {"backend_details", on_cuda ? details : nlohmann::json(nullptr)},
                   {"lookup_threads", details.contains("lookup_threads") ? details["lookup_threads"] : nlohmann::json(nullptr)},
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
                   {"fast_path", a.engine.fast_path},
                   {"planner_learn", eo.planner_learn},
                   {"cache_requested", cache_requested_json(a.engine.cache, eo)},
                   {"cache_note", details.contains("cache_note") ? details["cache_note"] : nlohmann::json(nullptr)}};
  add_replay_json(r, j);
  const Distribution gpu_hash = Distribution::of(hashing->gpu_ns);
  j["hash"] = hash_report_json(*hashing, a.hash, r.host_ids_ns);
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
  if (!a.switch_tokens.empty()) j["cache_series"] = cache_step_series_json(details, a.switch_at);

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
  std::printf("Memory    %s backing, placement %s\n", eo.table.backing.to_string().c_str(),
              eo.table.placement.to_string().c_str());
  for (const auto& c : censuses) {
    if (c.point != CensusPoint::kAfterReplay) continue;
    std::string nodes;
    for (auto& [node, pages] : c.pages_per_node)
      nodes += " N" + std::to_string(node) + "=" + fmt_num(100.0 * c.fraction_on(node), "%.1f%%");
    std::printf("          census after replay, layer %d: %s%s (%llu pages%s)\n", c.table.layer_id,
                c.known ? "" : ("unknown: " + c.reason).c_str(), nodes.c_str(),
                static_cast<unsigned long long>(c.pages_sampled),
                c.not_resident ? (", " + std::to_string(c.not_resident) + " not resident").c_str() : "");
  }
  // The id source names its file (an absolute path): on a line of its own, so no report line runs past ~120 columns.
  std::printf("Workload  %s backend, batch %d, %d steps (+%d warm-up), %s prefetch, %.0f us/layer x %s layers\n"
              "          ids %s\n",
              backend_name.c_str(), a.batch, a.steps, a.warmup, prefetch_mode_name(mode), a.layer_us,
              j["workload"]["model_layers"].dump().c_str(), source->describe().c_str());
  for (const auto& line : engine.describe_lines()) std::printf("%s\n", line.c_str());
  std::printf("\nLookup    %s rows/s, source %s GB/s, staging %s GB/s (separate paths; not summed)\n",
              fmt_num(r.rows_per_s / 1e6, "%.2f M").c_str(), fmt_num(r.source_gbps, "%.2f").c_str(),
              fmt_num(r.staging_gbps, "%.2f").c_str());
  std::printf("          %lld rows, %lld dead, %lld invalid; distinct ids per batch %s\n",
              static_cast<long long>(r.rows_looked_up), static_cast<long long>(r.dead_rows),
              static_cast<long long>(r.invalid_ids), fmt_num(r.distinct_id_fraction * 100, "%.1f%%").c_str());
  if (hashing->used == HashPlace::kGpu) {
    std::printf("Hash      GPU %s us/step median (p95 %s; token copy, hash, look-back), %lld ids verified against the "
                "CPU hasher; host source %s us/step (CPU hash + statistics, kept for the check)\n",
                fmt_num(gpu_hash.median / 1e3, "%.1f").c_str(), fmt_num(gpu_hash.p95 / 1e3, "%.1f").c_str(),
                static_cast<long long>(hashing->verified_ids), fmt_num(r.host_ids_ns.median / 1e3, "%.1f").c_str());
  } else {
    std::printf("Hash      host %s us/step median (id source, before each step; not in the step time)%s\n",
                fmt_num(r.host_ids_ns.median / 1e3, "%.1f").c_str(),
                hashing->note.empty() || engine.backend() != BackendKind::kCuda ? "" : ("; " + hashing->note).c_str());
  }
  std::printf("Bytes     per step: B_source = N*H*(d+d/32) = %s, B_staging = 2*N*H*d = %s\n",
              format_bytes(r.b_source_bytes_per_step).c_str(), format_bytes(r.b_staging_bytes_per_step).c_str());
  const std::string slowdown_text = std::isfinite(slowdown) ? "x" + fmt_num(slowdown, "%.3f") : "n/a";
  std::printf("Steps     median %s us (p5 %s, p95 %s); compute only %s us; slowdown %s; %s tokens/s\n",
              fmt_num(r.step_ns.median / 1e3, "%.1f").c_str(), fmt_num(r.step_ns.p5 / 1e3, "%.1f").c_str(),
              fmt_num(r.step_ns.p95 / 1e3, "%.1f").c_str(), fmt_num(r.compute_only_step_ns.median / 1e3, "%.1f").c_str(),
              slowdown_text.c_str(), fmt_num(r.tokens_per_s, "%.0f").c_str());
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
  CLI::Option* layout_opt = sub.add_option("--layout", a->layout, "Layout preset: v41-flash-mini (default), v41-flash, tiny")
      ->check(CLI::IsMember(preset_names()));
  a->table_size_option = sub.add_option("--table-size", a->table_size,
                 "Total table bytes for v41-flash-mini, e.g. 512MiB (default), 2GiB, 1GB (GB = 1e9 B, GiB = 2^30 B)")
      ->check(size_in(1, int64_t{1} << 50));
  sub.add_option("--row-layout", a->row_layout, "Row layout in memory: fused (payload|scales record, default) or split")
      ->check(CLI::IsMember({"fused", "split"}));
  sub.add_option("--seed", a->seed, "Seed of the synthetic table content and of the ids (default 1)")->check(unsigned_integer());
  sub.add_option("--batch", a->batch, "Sequences per decode step, one new token each (default 64)")->check(range(1, 1 << 20));
  sub.add_option("--steps", a->steps, "Measured decode steps (default 32)")->check(range(1, 1 << 24));
  sub.add_option("--warmup", a->warmup, "Warm-up steps, not measured (default 4)")->check(range(0, 1 << 20));
  sub.add_option("--model-layers", a->model_layers, "Decoder layers of the synthetic model (default: last Engram layer + 2)")
      ->check(range(0, 100000));
  sub.add_option("--prefetch", a->prefetch,
                 "early: submit each Engram layer's lookup when its ids are ready (step start); on_demand: submit at "
                 "the consuming layer (the B1 pair)")
      ->check(CLI::IsMember({"early", "on_demand"}));
  sub.add_option("--layer-us", a->layer_us, "Synthetic compute per decoder layer in microseconds (default 200)")
      ->check(range(0.0, 1e7));
  sub.add_option("--ids", a->ids,
                 "Ids: text (real text hashed with the reference N-gram hash), zipf, uniform, or auto (default: text "
                 "when the default token file exists, else zipf, saying so)")
      ->check(CLI::IsMember({"auto", "text", "zipf", "uniform"}));
  sub.add_option("--tokens", a->tokens, "Token file for --ids text (default: the text tokenized by scripts/setup)")
      ->check(input_file());
  CLI::Option* switch_at = sub.add_option("--switch-at", a->switch_at,
                                          "With --switch-tokens: the step (warm-up included, from 0) from which the "
                                          "text changes")
                               ->check(range(int64_t{1}, int64_t{1} << 24));
  sub.add_option("--switch-tokens", a->switch_tokens,
                 "Token file of the text from --switch-at on (every sequence restarts in it): a change of traffic; "
                 "the JSON gets the cache's hit rate of every step (cache_series)")
      ->check(input_file())
      ->needs(switch_at);
  switch_at->needs("--switch-tokens");
  CLI::Option* ckpt = sub.add_option("--checkpoint", a->checkpoint,
                                     "Load the table from this safetensors checkpoint (engram table create)")
                          ->check(input_file())
                          ->excludes(layout_opt);
  CLI::Option* model = sub.add_option("--model", a->model,
                                      "Load the table from this Hugging Face model directory (config.json, index, "
                                      "shards, tokenizer.json): its layout from config.json, its ids hashed with the "
                                      "directory's compression table (its engram.compress.bin, else built from its "
                                      "tokenizer.json and cached)")
                           ->excludes(ckpt)
                           ->excludes(layout_opt);
  sub.add_option("--hash", a->hash,
                 "Where real-text ids are hashed: auto (default: the GPU on the cuda backend with text ids and "
                 "early prefetch, else the CPU), cpu, gpu. GPU ids are compared with the CPU hasher's after every "
                 "step; the hot-row cache counts the ids the GPU made")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  sub.add_option("--tensor-names", a->tensor_names,
                 "With --model: Engram tensor names WEIGHT,SCALE with {L} for the layer id (default "
                 "layers.{L}.engram.embed.weight,layers.{L}.engram.embed.scale)")
      ->check(non_empty())
      ->needs(model);
  sub.add_flag("--keep-page-cache", a->keep_page_cache,
               "With --checkpoint or --model: leave the files' pages in the page cache (by default the readers "
               "drop them behind them, so loading does not evict the rest of memory)");
  add_table_memory_options(sub, a->engine);
  add_tp_options(sub, a->engine.tp);
  sub.add_option("--ranks", a->ranks,
                 "Rank processes sharing ONE table (default 1); > 1: the parent is the shared group's leader and "
                 "each rank replays on its own engine (its backend, queue and lookup path) over the shared mapping")
      ->check(range(1, 1024));
  sub.add_option("--zipf-alpha", a->zipf_alpha, "Zipf exponent for --ids zipf (default 1.0)")->check(range(1e-6, 100.0));
  sub.add_option("--timeline", a->timeline, "Chrome trace output file, 'none' to skip (default " +
                  default_output_help("engram-run.trace.json") + "; with --ranks N: <file>.rank<r>.json for ranks r = 0..N-1)")
      ->check(output_file({"none"}));
  sub.add_flag("--timeline-absolute", a->timeline_absolute,
               "Trace timestamps in microseconds since the Unix epoch, so the trace lines up with a torch profiler "
               "trace of the same run in Perfetto (default: from the run's start)");
  add_backend_options(sub, a->engine);
  add_cache_options(sub, a->engine.cache, "the --warmup steps");
  add_progress_option(sub, a->progress);
  sub.add_flag("--no-baseline", a->no_baseline, "Skip the compute-only pass (slowdown becomes n/a)");
  add_metrics_options(sub, a->metrics);
  sub.add_flag("--json", a->json, "Print the report as JSON on stdout");
  // Options read only with some values of others are refused in the rest (option_rules.hpp).
  CLI::Option* ids = sub.get_option("--ids");
  refuse_with_value(sub, sub.get_option("--tokens"), ids, &a->ids, {"zipf", "uniform"}, "the token file is read for text ids only");
  refuse_with_value(sub, sub.get_option("--switch-tokens"), ids, &a->ids, {"zipf", "uniform"}, "the text changes for text ids only");
  refuse_with_value(sub, sub.get_option("--hash"), ids, &a->ids, {"zipf", "uniform"}, "only text ids are hashed");
  refuse_unless_value(sub, sub.get_option("--zipf-alpha"), ids, &a->ids, {"zipf", "auto"}, "it shapes zipf ids only");
  refuse_with_value(sub, sub.get_option("--timeline-absolute"), sub.get_option("--timeline"), &a->timeline, {"none"},
                    "no trace is written");
  add_engine_option_rules(sub, a->engine);
  check_derived_outputs(sub, sub.get_option("--timeline"), [a] {
    std::vector<std::string> paths;
    if (a->ranks > 1 && a->timeline != "none")
      for (int r = 0; r < a->ranks; ++r) paths.push_back(a->timeline + ".rank" + std::to_string(r) + ".json");
    return paths;
  });
  sub.footer(
      "Example: engram run --batch 128 --steps 64 --prefetch on_demand --json\n"
      "Each step: ids for every sequence are hashed (r), early mode submits all Engram layers' lookups to one serial\n"
      "queue, then layers run in order; an Engram layer waits for its own lookup (c -> wait end) before its compute.");
  return [a] { return run(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(run, "run", "Main job: decode replay with Engram lookups on a prefetch queue; reports throughput and exposed wait", engram::cli::setup);
