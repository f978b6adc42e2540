// Options shared by `engram replay` and `engram experiment`: the table, the backend, the model shape that sizes
// the synthetic layer compute, the workload (arrivals, lengths) and the scheduler. One place so that an
// experiment's arms and a single replay are configured with the same words.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>

#include "core/units.hpp"
#include "engram/layout.hpp"
#include "replay/cuda_backend_factory.hpp"
#include "replay/experiment.hpp"
#include "replay/serving.hpp"
#include "replay/hot_profile.hpp"

namespace engram::cli {

// GPU hot-row cache options (issue #8) shared by `engram run`, `engram replay` and `engram experiment`.
struct CacheArgs {
  std::string size = "5%";
  std::string format = "fp8";
  std::string profile;        // --cache-profile FILE (engram profile)
  int warmup = -1;            // -1: the command's default
  std::string update = "every=4,rows=256";
};

inline void add_cache_options(CLI::App& sub, CacheArgs& c, const std::string& warmup_default) {
  sub.add_option("--cache-size", c.size,
                 "CUDA GPU hot-row cache per Engram layer (issue #8): bytes (256MiB), a share of the layer's table "
                 "(default 5%), or off; capped at half the free HBM. CUDA-only: the cpu backend says so and runs without it");
  sub.add_option("--cache-format", c.format, "Cache rows as fp8 (default: records as stored) or bf16 (decoded once)")
      ->check(CLI::IsMember({"fp8", "bf16"}));
  sub.add_option("--cache-profile", c.profile,
                 "Fill the cache at start-up from this profile (engram profile) instead of a warm-up window");
  sub.add_option("--cache-warmup", c.warmup,
                 "Warm-up window: the cache is filled from the ids of the first N steps, which run without it (default " +
                     warmup_default + ")")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--cache-update", c.update,
                 "Online update: every=K,rows=M swaps at most M rows per layer every K steps (hottest uncached ids of "
                 "a decayed LFU count vs the coldest of a sampled set of cached rows), or off (default every=4,rows=256)");
}

// Resolves the cache options (reads the profile, checked against the layout). `default_warmup` when --cache-warmup
// is not given.
inline Result<EngineCacheConfig> resolve_cache(const CacheArgs& c, const EngramLayout& layout, int default_warmup) {
  EngineCacheConfig k;
  k.size = c.size;
  k.format = c.format;
  k.warmup_steps = c.warmup > 0 ? c.warmup : std::max(1, default_warmup);
  ENGRAM_RETURN_IF_ERROR(parse_cache_update(c.update, k));
  if (!k.off()) {  // a bad size fails before minutes of table building, on either backend
    for (int li = 0; li < layout.n_layers(); ++li) {
      ENGRAM_ASSIGN_OR_RETURN(int64_t b, parse_cache_size_text(k.size, layout.table_bytes(li)));
      (void)b;
    }
  }
  if (!c.profile.empty()) {
    auto p = replay::read_hot_profile(c.profile);
    if (!p.is_ok()) return p.status().with_context("--cache-profile");
    ENGRAM_RETURN_IF_ERROR(replay::check_hot_profile_layout(*p, layout).with_context("--cache-profile"));
    for (const auto& l : p->layers) k.profile.push_back(l.id_counts);
    k.profile_source = "profile " + c.profile + " (" + std::to_string(p->tokens) + " tokens)";
  }
  return k;
}

// Default warm-up window of the hot-row cache for serving replays: live steps (the harness's own warm-up steps,
// a repeated first chunk, are not counted).
inline constexpr int kServingCacheWarmup = 8;

struct ServingArgs {
  std::string layout = "v41-flash-mini";
  std::string table_size = "512MiB";
  std::string row_layout = "fused";
  std::string backing = "memfd";
  std::string placement = "none";
  std::string backend = "auto";
  int threads = 0;
  double grid_fraction = 0.5;
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
  bool checked = false;
  std::string fast_path = "planner";
  CacheArgs cache;
};

inline void add_serving_options(CLI::App& sub, ServingArgs& a) {
  sub.add_option("--layout", a.layout, "Table layout preset: v41-flash-mini (default), v41-flash, tiny")->check(CLI::IsMember(preset_names()));
  sub.add_option("--table-size", a.table_size, "Table bytes for v41-flash-mini (default 512MiB; GiB = 2^30 B)");
  sub.add_option("--row-layout", a.row_layout, "fused (default) or split")->check(CLI::IsMember({"fused", "split"}));
  sub.add_option("--backing", a.backing, "Table memory: memfd (default), shm, hugetlb, hugetlb-1g, anon-thp")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}));
  sub.add_option("--placement", a.placement, "NUMA placement before first touch (default none): bind:N, interleave:..., replica-per-node");
  sub.add_option("--backend", a.backend, "auto (default: cuda when usable, else cpu, saying why), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("--threads", a.threads, "CPU lookup threads (default cores - 1)")->check(CLI::Range(0, 4096));
  sub.add_option("--grid-fraction", a.grid_fraction, "CUDA background grid cap, fraction of the SMs (default 0.5)")->check(CLI::Range(0.01, 1.0));
  sub.add_option("--model", a.model, "Model shape that sizes the layer compute: v41-flash (default, assumed shape), tiny")
      ->check(CLI::IsMember(ModelShape::preset_names()));
  sub.add_option("--compute-tflops", a.tflops, "Assumed GEMM rate: layer time = max(weights/weight-gbps, 2*T*params/rate) (default 400)")
      ->check(CLI::Range(1e-6, 1e6));
  sub.add_option("--weight-gbps", a.weight_gbps, "Assumed weight read rate in GB/s (default 4000)")->check(CLI::Range(1e-3, 1e7));
  sub.add_option("--unit-us", a.unit_us, "Calibrated compute unit a layer repeats (default 50 us)")->check(CLI::Range(1.0, 1e6));
  sub.add_option("--rate", a.rate, "Poisson arrival rate, requests per second (default 4)")->check(CLI::Range(1e-6, 1e7));
  sub.add_option("--requests", a.requests, "Requests to send (default 32)")->check(CLI::Range(1, 10000000));
  sub.add_option("--prompt", a.prompt, "Prompt length: N, uniform:MIN-MAX, lognormal:MEDIAN,SIGMA (default lognormal:512,0.6)");
  sub.add_option("--output", a.output, "Output length, same forms (default lognormal:64,0.5)");
  sub.add_option("--trace-file", a.trace_file, "CSV of requests 'prompt_tokens,output_tokens[,arrival_s]' instead of the distributions");
  sub.add_option("--seed", a.seed, "Seed of arrivals, lengths, text offsets, zipf ids and the table content (default 1)")->check(unsigned_integer());
  sub.add_option("--token-budget", a.token_budget, "Tokens per step, decode + prefill (default 2048)")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--prefill-chunk", a.prefill_chunk, "Most prompt tokens of one request per step (default 512)")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--max-running", a.max_running, "Requests holding a batch slot (default 64)")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--max-waiting", a.max_waiting, "Waiting queue size; arrivals beyond it are rejected (default 256)")->check(CLI::Range(0, 1 << 24));
  sub.add_option("--slo-ttft-ms", a.slo_ttft_ms, "TTFT SLO in ms for goodput (default 2000)")->check(CLI::Range(0.0, 1e9));
  sub.add_option("--slo-itl-ms", a.slo_itl_ms, "Mean ITL SLO in ms for goodput (default 100)")->check(CLI::Range(0.0, 1e9));
  sub.add_option("--ids", a.ids, "Ids: auto (default: real text when tokenized, else zipf, saying so), text, zipf")
      ->check(CLI::IsMember({"auto", "text", "zipf"}));
  sub.add_option("--tokens", a.tokens, "Token file for text ids (default: scripts/tokenize-setup's)");
  sub.add_option("--zipf-alpha", a.zipf_alpha, "Zipf exponent (default 1.0)")->check(CLI::Range(1e-6, 100.0));
  sub.add_option("--warmup", a.warmup, "Warm-up steps before the clock starts (default 2)")->check(CLI::Range(0, 1000));
  sub.add_flag("--checked", a.checked, "Validate every id before each lookup");
  sub.add_option("--fast-path", a.fast_path,
                 "CUDA lookup path (issue #8): planner (default: dedup / sort / hot-row cache / plain per batch from "
                 "calibrated costs), plain (the hook runs the plain gather), off (no hook, no cache)")
      ->check(CLI::IsMember({"planner", "plain", "off"}));
  add_cache_options(sub, a.cache, std::to_string(kServingCacheWarmup) + " live steps");
}

struct ServingSetup {
  EngramLayout layout;
  std::vector<ServingRequest> requests;
  ServingOptions serving;
  RigOptions rig;
  std::string ids_note, backend_note;
  std::function<Result<std::unique_ptr<ServingIdSource>>()> make_ids;
};

// Resolves the arguments. `say` prints progress/notes (stderr, not in --json).
inline Result<ServingSetup> resolve_serving(const ServingArgs& a, const std::function<void(const std::string&)>& say) {
  ServingSetup s;
  ENGRAM_ASSIGN_OR_RETURN(RowFormat fmt, parse_row_format(a.row_layout));
  ENGRAM_ASSIGN_OR_RETURN(uint64_t bytes, parse_size_bytes(a.table_size));
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
  ENGRAM_ASSIGN_OR_RETURN(w.prompt, LengthDist::parse(a.prompt));
  ENGRAM_ASSIGN_OR_RETURN(w.output, LengthDist::parse(a.output));
  ENGRAM_ASSIGN_OR_RETURN(s.requests, make_requests(w, text_tokens));
  for (const auto& r : s.requests)
    if (r.prompt_tokens + r.output_tokens > (int64_t{1} << 24))
      return Status(Code::kInvalidArgument, "a request longer than 16 M tokens");
  s.rig.table.backing = a.backing;
  s.rig.table.placement = a.placement;
  s.rig.table.group = "replay";
  s.rig.table_seed = a.seed;
  s.rig.lookup_threads = a.threads;
  s.rig.grid_fraction = a.grid_fraction;
  s.rig.max_tokens = a.token_budget;
  s.rig.unit_us = a.unit_us;
  s.rig.checked = a.checked;
  s.rig.fast_path = a.fast_path != "off";
  s.rig.planner = a.fast_path == "planner";
  ENGRAM_ASSIGN_OR_RETURN(s.rig.cache, resolve_cache(a.cache, s.layout, kServingCacheWarmup));
  // Backend: cuda when asked or when auto finds it built (the rig reports a missing GPU as kUnsupported).
  s.rig.backend = a.backend == "auto" ? (cuda_backend_built() ? "cuda" : "cpu") : a.backend;
  if (a.backend == "auto" && !cuda_backend_built()) s.backend_note = "cuda not used: built without the CUDA backend";
  return s;
}

}  // namespace engram::cli
