// Options shared by `engram replay` and `engram experiment`: the table, the backend, the model shape that sizes
// the synthetic layer compute, the workload (arrivals, lengths) and the scheduler. One place so that an
// experiment's arms and a single replay are configured with the same words.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>

#include "core/units.hpp"
#include "args.hpp"
#include "engine/harness.hpp"
#include "engine_args.hpp"
#include "option_rules.hpp"
#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "replay/experiment.hpp"
#include "replay/serving.hpp"

namespace engram::cli {

// Default warm-up window of the hot-row cache for serving replays: live steps (the harness's own warm-up steps,
// a repeated first chunk, are not counted).
inline constexpr int kServingCacheWarmup = 8;

struct ServingArgs {
  std::string layout = "v41-flash-mini";
  std::string table_size = "512MiB";
  std::string row_layout = "fused";
  EngineArgs engine;
  std::string model = "v41-flash";
  double tflops = 400, weight_gbps = 4000, unit_us = 50;
  double rate = 4;
  int requests = 32;
  std::string prompt = "lognormal:512,0.6", output = "lognormal:64,0.5";
  std::string trace_file;
  uint64_t seed = 1;
  int64_t token_budget = 2048, prefill_chunk = 512;
  int max_running = 64, max_waiting = 256;
  double slo_ttft_ms = 2000, slo_itl_ms = 100;
  std::string ids = "auto", tokens;
  double zipf_alpha = 1.0;
  int warmup = 2;
};

inline void add_serving_options(CLI::App& sub, ServingArgs& a) {
  sub.add_option("--layout", a.layout, "Table layout preset: v41-flash-mini (default), v41-flash, tiny")->check(CLI::IsMember(preset_names()));
  sub.add_option("--table-size", a.table_size, "Table bytes for v41-flash-mini (default 512MiB; GiB = 2^30 B)")
      ->check(size_in(1, int64_t{1} << 50));
  sub.add_option("--row-layout", a.row_layout, "fused (default) or split")->check(CLI::IsMember({"fused", "split"}));
  add_table_memory_options(sub, a.engine);
  add_backend_options(sub, a.engine);
  sub.add_option("--model", a.model, "Model shape that sizes the layer compute: v41-flash (default, assumed shape), tiny")
      ->check(CLI::IsMember(ModelShape::preset_names()));
  sub.add_option("--compute-tflops", a.tflops, "Assumed GEMM rate: layer time = max(weights/weight-gbps, 2*T*params/rate) (default 400)")
      ->check(range(1e-6, 1e6));
  sub.add_option("--weight-gbps", a.weight_gbps, "Assumed weight read rate in GB/s (default 4000)")->check(range(1e-3, 1e7));
  sub.add_option("--unit-us", a.unit_us, "Calibrated compute unit a layer repeats (default 50 us)")->check(range(1.0, 1e6));
  sub.add_option("--rate", a.rate, "Poisson arrival rate, requests per second (default 4)")->check(range(1e-6, 1e7));
  sub.add_option("--requests", a.requests, "Requests to send (default 32)")->check(range(1, 10000000));
  sub.add_option("--prompt", a.prompt, "Prompt length: N, uniform:MIN-MAX, lognormal:MEDIAN,SIGMA (default lognormal:512,0.6)");
  sub.add_option("--output", a.output, "Output length, same forms (default lognormal:64,0.5)");
  sub.add_option("--trace-file", a.trace_file, "CSV of requests 'prompt_tokens,output_tokens[,arrival_s]' instead of the distributions")
      ->check(input_file());
  sub.add_option("--seed", a.seed, "Seed of arrivals, lengths, text offsets, zipf ids and the table content (default 1)")->check(unsigned_integer());
  sub.add_option("--token-budget", a.token_budget, "Tokens per step, decode + prefill (default 2048)")->check(range(1, 1 << 20));
  sub.add_option("--prefill-chunk", a.prefill_chunk, "Most prompt tokens of one request per step (default 512)")->check(range(1, 1 << 20));
  sub.add_option("--max-running", a.max_running, "Requests holding a batch slot (default 64)")->check(range(1, 1 << 20));
  sub.add_option("--max-waiting", a.max_waiting, "Waiting queue size; arrivals beyond it are rejected (default 256)")->check(range(0, 1 << 24));
  sub.add_option("--slo-ttft-ms", a.slo_ttft_ms, "TTFT SLO in ms for goodput (default 2000)")->check(range(0.0, 1e9));
  sub.add_option("--slo-itl-ms", a.slo_itl_ms, "Mean ITL SLO in ms for goodput (default 100)")->check(range(0.0, 1e9));
  sub.add_option("--ids", a.ids, "Ids: auto (default: real text when tokenized, else zipf, saying so), text, zipf")
      ->check(CLI::IsMember({"auto", "text", "zipf"}));
  sub.add_option("--tokens", a.tokens, "Token file for text ids (default: scripts/tokenize-setup's)")->check(input_file());
  sub.add_option("--zipf-alpha", a.zipf_alpha, "Zipf exponent (default 1.0)")->check(range(1e-6, 100.0));
  sub.add_option("--warmup", a.warmup, "Warm-up steps before the clock starts (default 2)")->check(range(0, 1000));
  add_cache_options(sub, a.engine.cache, std::to_string(kServingCacheWarmup) + " live steps");
  // Options read only with some values of others are refused in the rest (option_rules.hpp).
  CLI::Option* ids = sub.get_option("--ids");
  refuse_with_value(sub, sub.get_option("--tokens"), ids, &a.ids, {"zipf"}, "the token file is read for text ids only");
  refuse_with_value(sub, sub.get_option("--zipf-alpha"), ids, &a.ids, {"text"}, "it shapes zipf ids only");
  refuse_with(sub, sub.get_option("--prompt"), sub.get_option("--trace-file"), "the trace file gives each request's lengths");
  refuse_with(sub, sub.get_option("--output"), sub.get_option("--trace-file"), "the trace file gives each request's lengths");
  refuse_unless_value(sub, sub.get_option("--table-size"), sub.get_option("--layout"), &a.layout, {"v41-flash-mini"},
                      "the named layout fixes its size; --table-size sizes v41-flash-mini");
  add_engine_option_rules(sub, a.engine);
}

// With a recorded batches file (`--batches`, of replay and experiment) the requests are the file's: the options
// that make a live workload are refused.
inline void refuse_workload_with_batches(CLI::App& sub, CLI::Option* batches) {
  for (const char* name : {"--rate", "--requests", "--prompt", "--output", "--trace-file"})
    refuse_with(sub, sub.get_option(name), batches, "the recorded batches file fixes the requests");
}

struct ServingSetup {
  EngramLayout layout;
  std::vector<ServingRequest> requests;
  ServingOptions serving;
  EngineOptions engine;  // the table and backend of the replay (backend resolved: auto already decided)
  std::string ids_note, backend_note;
  std::function<Result<std::unique_ptr<ServingIdSource>>()> make_ids;
};

// Resolves the arguments. `say` prints progress/notes (stderr, not in --json).
inline Result<ServingSetup> resolve_serving(const ServingArgs& a, const std::function<void(const std::string&)>& say) {
  ServingSetup s;
  ENGRAM_ASSIGN_OR_RETURN(RowFormat fmt, parse_row_format(a.row_layout));
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return size.status().with_context("--table-size");
  const uint64_t bytes = static_cast<uint64_t>(*size);
  ENGRAM_ASSIGN_OR_RETURN(s.layout, make_preset_layout(a.layout, static_cast<int64_t>(bytes), fmt));
  ENGRAM_ASSIGN_OR_RETURN(s.serving.model, ModelShape::preset(a.model));
  s.serving.rates = {a.tflops, a.weight_gbps, a.unit_us};
  s.serving.slo_ttft_ms = a.slo_ttft_ms;
  s.serving.slo_itl_ms = a.slo_itl_ms;
  s.serving.warmup_steps = a.warmup;
  s.serving.scheduler = {a.token_budget, a.prefill_chunk, a.max_running, a.max_waiting};
  // Ids: real text unless it is missing (then zipf, said out loud) or zipf was asked.
  int64_t text_tokens = 0;
  const EngramLayout layout = s.layout;
  if (a.ids != "zipf") {
    auto t = make_text_serving_ids(layout, a.tokens);
    if (t.is_ok()) {
      text_tokens = (*t)->text_tokens();
      const std::string tok = a.tokens;
      s.make_ids = [layout, tok]() { return make_text_serving_ids(layout, tok); };
    } else if (a.ids == "text" || !a.tokens.empty()) {
      return t.status().with_context("--ids text");
    } else {
      s.ids_note = "real text unavailable (" + t.status().message() + "); using zipf(alpha=" + std::to_string(a.zipf_alpha) + ")";
      say(s.ids_note);
    }
  }
  if (!s.make_ids) {
    const double alpha = a.zipf_alpha;
    const uint64_t seed = a.seed;
    s.make_ids = [layout, alpha, seed]() { return make_zipf_serving_ids(layout, alpha, seed); };
  }
  WorkloadOptions w;
  w.rate_rps = a.rate;
  w.n_requests = a.requests;
  w.seed = a.seed;
  w.trace_file = a.trace_file;
  auto prompt = LengthDist::parse(a.prompt);
  if (!prompt.is_ok()) return prompt.status().with_context("--prompt");
  w.prompt = *prompt;
  auto output = LengthDist::parse(a.output);
  if (!output.is_ok()) return output.status().with_context("--output");
  w.output = *output;
  ENGRAM_ASSIGN_OR_RETURN(s.requests, make_requests(w, text_tokens));
  for (const auto& r : s.requests)
    if (r.prompt_tokens + r.output_tokens > (int64_t{1} << 24))
      return Status(Code::kInvalidArgument, "a request longer than 16 M tokens");
  s.engine.table.group = "replay";
  s.engine.content.seed = a.seed;
  s.engine.max_tokens = a.token_budget;
  mutable_engine_harness(s.engine).layer_us = a.unit_us;
  ENGRAM_RETURN_IF_ERROR(apply_engine_args(a.engine, s.layout, kServingCacheWarmup, s.engine));
  // Backend: decided once (auto: cuda when usable, else cpu with the reason), so every arm uses the same one.
  ENGRAM_ASSIGN_OR_RETURN(s.engine.backend, Engine::resolve_backend(s.engine, &s.backend_note));
  if (!s.backend_note.empty()) say(s.backend_note);
  return s;
}

}  // namespace engram::cli
