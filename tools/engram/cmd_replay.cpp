// `engram replay`: serving replay with client metrics (src/replay/serving.hpp). Requests arrive on the replay's
// real clock (Poisson at --rate, lengths from distributions or --trace-file); a continuous-batching scheduler
// with chunked prefill and a token budget forms the steps; every scheduled token's Engram ids go through the real
// backend's prefetch queue; synthetic layer compute is sized by --model. Reports TTFT, ITL, goodput, rejection
// (client side) and step time, lookup and wait (engine side, separately). --record saves the token batches;
// --batches replays a recorded file, so that two configurations compare the same batches.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "command.hpp"
#include "core/git_rev.hpp"
#include "host/conditions.hpp"
#include "progress_args.hpp"
#include "replay/serving_hashing.hpp"
#include "named_tables.hpp"
#include "report.hpp"
#include "serving_args.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace {

struct ReplayArgs {
  ServingArgs s;
  std::string prefetch = "early";
  std::string hash = "auto";  // where real-text ids are hashed: auto | cpu | gpu
  std::string progress = "auto";  // --progress (progress_args.hpp)
  std::string record, batches, timeline = "none";
  bool timeline_absolute = false;
  bool json = false;
};

std::string us3(const Distribution& d) {
  return fmt_num(d.median / 1e3, "%.1f") + " / " + fmt_num(d.p95 / 1e3, "%.1f") + " / " + fmt_num(d.p99 / 1e3, "%.1f");
}

int replay(const ReplayArgs& a) {
  auto say = [&](const std::string& m) {
    if (!a.json) std::fprintf(stderr, "engram replay: %s\n", m.c_str());
  };
  auto setup = resolve_serving(a.s, say);
  if (!setup.is_ok()) return report_failure("replay", setup.status());
  ServingSetup& s = *setup;
  s.serving.mode = a.prefetch == "early" ? PrefetchMode::kEarly : PrefetchMode::kOnDemand;
  ServingSchedule recorded;
  const bool from_file = !a.batches.empty();
  if (from_file) {
    auto sch = ServingSchedule::load(a.batches);
    if (!sch.is_ok()) return report_failure("replay", sch.status().with_context("--batches"));
    recorded = std::move(*sch);
  }
  auto ids = s.make_ids();
  if (!ids.is_ok()) return report_failure("replay", ids.status());
  say("building " + s.layout.name + " table (" + format_bytes(s.layout.total_bytes()) + ", " +
      s.engine.table.backing.to_string() + ", placement " + s.engine.table.placement.to_string() + ") and the " +
      backend_kind_name(s.engine.backend) + " backend ...");
  show_load_progress(s.engine, progress_display(a.progress));
  sweep_before_named_table("replay", s.engine.table);
  auto rig = Engine::create_local(s.layout, s.engine);
  if (!rig.is_ok()) return report_failure("replay", rig.status());
  Engine& engine = **rig;
  auto hash_place = parse_hash_place(a.hash);
  if (!hash_place.is_ok()) return report_failure("replay", hash_place.status().with_context("--hash"));
  // The device keeps a look-back slot per request in flight and room for the largest step (the warm-up's chunk
  // fits the token budget).
  const SchedulerOptions& so = s.serving.scheduler;
  const int max_requests = from_file ? serving_slots_needed(recorded) : so.max_running;
  const int64_t max_tokens = from_file ? std::max(serving_max_step_tokens(recorded), so.token_budget) : so.token_budget;
  auto hashing = std::make_shared<DeviceHashingReport>();
  ServingOptions wired;
  if (Status st = wire_serving_device_hashing(*hash_place, engine, **ids, from_file ? recorded.requests : s.requests,
                                              max_requests, max_tokens, s.serving, wired, hashing);
      !st.is_ok())
    return report_failure("replay", st.with_context("--hash"));
  if (!hashing->note.empty() && *hash_place == HashPlace::kAuto && engine.backend() == BackendKind::kCuda)
    say(hashing->note);
  say(std::string(from_file ? "replaying " + std::to_string(recorded.steps.size()) + " recorded steps" :
                              "serving " + std::to_string(s.requests.size()) + " requests live") +
      (hashing->used == HashPlace::kGpu ? ", ids hashed on the GPU and verified against the CPU hasher" : "") + " ...");
  Result<ServingReport> rep = from_file
      ? run_serving_recorded(s.layout, recorded, **ids, engine.queue(), engine.compute(), wired)
      : run_serving_live(s.layout, s.requests, **ids, engine.queue(), engine.compute(), wired, &recorded);
  if (!rep.is_ok()) return report_failure("replay", rep.status());
  if (!a.record.empty()) {
    Status st = recorded.save(a.record);
    if (!st.is_ok()) return report_failure("replay", st);
  }
  if (a.timeline != "none") {
    std::ofstream f(a.timeline);
    if (!f) return report_failure("replay", Status(Code::kIo, "cannot write timeline '" + a.timeline + "'"));
    f << engine.queue().timeline().to_chrome_trace({sys::process_id(), a.timeline_absolute}).dump() << "\n";
  }
  const ServingReport& r = *rep;
  // The backend's figures after the run (paths taken, cache hit rates).
  const nlohmann::json details = engine.describe();
  const auto conditions = collect_conditions(git_revision());
  nlohmann::json j = r.to_json();
  j["schema"] = "engram.replay/2";
  j["command"] = "replay";
  j["conditions"] = conditions;
  j["census"] = nlohmann::json::array();
  for (const auto& c : engine.censuses()) j["census"].push_back(c.to_json());
  j["config"] = {{"backend", engine.backend_name()},
                 {"backend_note", s.backend_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.backend_note)},
                 {"backend_details", details},
                 {"fast_path", a.s.engine.fast_path},
                 {"planner_learn", s.engine.planner_learn},
                 {"cache_requested", cache_requested_json(a.s.engine.cache, s.engine)},
                 {"cache_note", details.contains("cache_note") ? details["cache_note"] : nlohmann::json(nullptr)},
                 {"table", {{"layout", s.layout.name}, {"bytes", s.layout.total_bytes()},
                            {"backing", s.engine.table.backing.to_string()},
                            {"placement", s.engine.table.placement.to_string()}}},
                 {"prefetch", prefetch_mode_name(s.serving.mode)},
                 {"model", s.serving.model.name},
                 {"model_note", s.serving.model.note},
                 {"compute_tflops", s.serving.rates.tflops},
                 {"weight_gbps", s.serving.rates.weight_gbps},
                 {"unit_us", s.serving.rates.unit_us},
                 {"ids", (*ids)->describe()},
                 {"ids_note", s.ids_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.ids_note)},
                 {"schedule", from_file ? "recorded file " + a.batches : "live (scheduled on the real clock)"},
                 {"rate_rps", a.s.rate},
                 {"prompt", a.s.prompt},
                 {"output", a.s.output},
                 {"token_budget", a.s.token_budget},
                 {"prefill_chunk", a.s.prefill_chunk},
                 {"slo_ttft_ms", a.s.slo_ttft_ms},
                 {"slo_itl_ms", a.s.slo_itl_ms}};
  j["hash"] = hash_report_json(*hashing, a.hash, r.host_ids_ns);
  j["record"] = a.record.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.record);
  j["timeline"] = a.timeline == "none" ? nlohmann::json(nullptr) : nlohmann::json(a.timeline);
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("engram replay — %s\n", conditions_summary(conditions).c_str());
  std::printf("Config    %s backend, %s table %s, %s prefetch, ids %s\n", engine.backend_name(), s.layout.name.c_str(),
              format_bytes(s.layout.total_bytes()).c_str(), prefetch_mode_name(s.serving.mode), (*ids)->describe().c_str());
  std::printf("          model %s; schedule %s\n", s.serving.model.note.c_str(), j["config"]["schedule"].get<std::string>().c_str());
  for (const auto& line : engine.describe_lines()) std::printf("%s\n", line.c_str());
  std::printf("\nClient    %lld requests: %lld completed, %lld rejected (%s), %lld met both SLOs (TTFT <= %.0f ms, mean ITL <= %.0f ms)\n",
              static_cast<long long>(r.requests), static_cast<long long>(r.completed), static_cast<long long>(r.rejected),
              fmt_num(100 * r.rejection_rate, "%.1f%%").c_str(), static_cast<long long>(r.good), a.s.slo_ttft_ms, a.s.slo_itl_ms);
  std::printf("          goodput %s req/s, %s output tokens/s over %s s\n", fmt_num(r.goodput_rps, "%.3f").c_str(),
              fmt_num(r.throughput_tokens_per_s, "%.1f").c_str(), fmt_num(r.duration_s, "%.2f").c_str());
  // mean / p50 / p95 / p99 in ms, read from the report's client block so that text and JSON agree.
  auto ms4 = [&j](const char* metric) {
    const auto& c = j["client"];
    std::string o;
    for (const char* stat : {"mean", "median", "p95", "p99"}) {
      const auto& v = c[std::string(stat) + "_" + metric + "_ms"];
      o += (o.empty() ? "" : " / ") + (v.is_number() ? fmt_num(v.get<double>(), "%.2f") : std::string("n/a"));
    }
    return o;
  };
  std::printf("          mean/p50/p95/p99 [ms]: TTFT %s; TPOT %s; ITL %s; E2EL %s\n", ms4("ttft").c_str(),
              ms4("tpot").c_str(), ms4("itl").c_str(), ms4("e2el").c_str());
  std::printf("\nEngine    %lld steps, %lld tokens (%lld prefill, %lld decode); waited %.2f s for arrivals\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.scheduled_tokens), static_cast<long long>(r.prefill_tokens),
              static_cast<long long>(r.decode_tokens), r.idle_wait_s);
  std::printf("          step p50/p95/p99 %s us (decode-only %s, with prefill %s)\n", us3(r.step_ns).c_str(),
              us3(r.decode_step_ns).c_str(), us3(r.mixed_step_ns).c_str());
  std::printf("          main compute per step (step - consumer waits) p50/p95/p99 %s us\n", us3(r.main_compute_ns).c_str());
  std::printf("Lookup    %lld rows, %s rows/s; L %s us; queue %s us; exposed wait E %s us (p50/p95/p99)\n",
              static_cast<long long>(r.rows_looked_up), fmt_num(r.rows_per_s / 1e6, "%.2f M").c_str(), us3(r.lookup_ns).c_str(),
              us3(r.queue_ns).c_str(), us3(r.exposed_wait_ns).c_str());
  if (hashing->used == HashPlace::kGpu) {
    const Distribution g = Distribution::of(hashing->gpu_ns);
    std::printf("Hash      GPU %s us/step median (p95 %s; staging copy, hash, look-back), %lld ids verified against the "
                "CPU hasher; host hash for the check %s us/step, off the replay's clock\n",
                fmt_num(g.median / 1e3, "%.1f").c_str(), fmt_num(g.p95 / 1e3, "%.1f").c_str(),
                static_cast<long long>(hashing->verified_ids), fmt_num(r.host_ids_ns.median / 1e3, "%.1f").c_str());
  } else {
    std::printf("Hash      host %s us/step median (id source, before each step: on the client clock, not in the step "
                "time)%s\n",
                fmt_num(r.host_ids_ns.median / 1e3, "%.1f").c_str(),
                hashing->note.empty() || engine.backend() != BackendKind::kCuda ? "" : ("; " + hashing->note).c_str());
  }
  if (!a.record.empty()) std::printf("Recorded  token batches in %s (replay them with --batches)\n", a.record.c_str());
  if (a.timeline != "none") std::printf("Timeline  %s (engram trace analyze %s)\n", a.timeline.c_str(), a.timeline.c_str());
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<ReplayArgs>();
  add_serving_options(sub, a->s);
  sub.add_option("--prefetch", a->prefetch, "early (default: submit at step start) or on_demand (at the consuming layer)")
      ->check(CLI::IsMember({"early", "on_demand"}));
  sub.add_option("--hash", a->hash,
                 "Where real-text ids are hashed: auto (default: the GPU on the cuda backend with early prefetch, else "
                 "the CPU), cpu, or gpu (each step's chunks hashed on the device; every id is checked against the CPU "
                 "hasher after its step, off the replay's clock)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  add_progress_option(sub, a->progress);
  sub.add_option("--record", a->record, "Write the token batches the scheduler formed to this JSON file")
      ->check(output_file());
  sub.add_option("--batches", a->batches, "Replay a recorded batches file instead of scheduling live (same batches for A/B)")
      ->check(input_file());
  sub.add_option("--timeline", a->timeline, "Chrome trace of the lookups ('none' default) for engram trace analyze")
      ->check(output_file({"none"}));
  sub.add_flag("--timeline-absolute", a->timeline_absolute,
               "Trace timestamps in microseconds since the Unix epoch (to line up with a torch profiler trace)");
  sub.add_flag("--json", a->json, "Print the report as JSON on stdout");
  refuse_with_value(sub, sub.get_option("--timeline-absolute"), sub.get_option("--timeline"), &a->timeline, {"none"},
                    "no trace is written");
  refuse_workload_with_batches(sub, sub.get_option("--batches"));
  refuse_with_value(sub, sub.get_option("--hash"), sub.get_option("--ids"), &a->s.ids, {"zipf"}, "only text ids are hashed");
  sub.footer(
      "Example: engram replay --rate 8 --requests 64 --prompt lognormal:1024,0.5 --output 128 --record b.json\n"
      "         engram replay --batches b.json --prefetch on_demand --json\n"
      "TTFT: arrival (send) -> end of the step that finishes the prompt; TPOT: (end - first token) / (output tokens\n"
      "- 1) per request; ITL: gaps between a request's token steps; E2EL: arrival -> last token. JSON: vLLM's\n"
      "benchmark_serving names (mean_/median_/std_/p95_/p99_ttft_ms, ..., request_throughput, output_throughput,\n"
      "request_goodput);\n"
      "goodput: requests meeting TTFT and mean-ITL SLOs per second (first arrival -> last completion). Layer time:\n"
      "max(params*2 B / weight-gbps, 2*T*params / compute-tflops), run as calibrated units (GEMMs / CPU work).");
  return [a] { return replay(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(replay, "replay", "Serving replay: Poisson arrivals, continuous batching, Engram lookups; TTFT/ITL/goodput", engram::cli::setup);
