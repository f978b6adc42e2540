// `engram bench hash`: N-gram hashing time per engine step — the CUDA hash kernel (src/cuda/hash_kernel.cuh) against
// the CPU hasher as `engram run` and `replay` use it (NgramHasher::hash_chunk, one SequenceState per request, one
// thread, ids scattered into per-layer [tokens][heads] arrays) — for decode steps (one new token per request;
// default batches 64 and 512) and one prefill chunk (default 8192 tokens of one request), on the V4.1-Flash layout
// (2 Engram layers x 24 heads, real prime head sizes) with the DeepSeek-V3 compression table and real text.
//
// Steps: repetition k hashes step k (fresh tokens and look-back rows per repetition, the same step for every
// variant); variants interleaved in a shuffled order (measure.hpp). CPU: steady_clock around the hash_chunk calls
// and the scatter (states restored from the look-back rows before the clock starts). GPU: the step's batch is on
// the device before timing; CUDA events around the launches on a non-blocking stream (hash; hash + look-back
// update; hash with int32 ids), and the host time of the launch calls apart. Step 0's GPU ids are compared with
// the CPU reference (core/hash_batch.hpp) before the report: a mismatch fails the bench.
// Text: --tokens FILE, else <--data-dir>/common-licenses.tokens, else the default token file; when none exists the
// tokens are random ids of the table's vocabulary (said in a note). --cpu-only runs the CPU variant alone (GPU
// columns n/a): the only way to run this bench on a machine without a GPU, where it is otherwise waived.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "tools/engram/arg_checks.hpp"
#include "bench/gpu.hpp"
#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "host/token_io.hpp"

namespace engram::bench {
namespace {

struct HashOptions {
  std::vector<int64_t> decode_batches{64, 512};
  int64_t prefill_tokens = 8192;
  std::string tokens_path;
  bool cpu_only = false;
};
HashOptions g_hash;

constexpr double kNaN = stats::kNaN;

struct Workload {
  std::vector<int64_t> text;
  std::string source;
  bool random = false;
};

Result<Workload> load_text(const Context& ctx, const CompressionTable& table, int64_t need, uint64_t seed) {
  const int64_t vocab = table.vocab_size();
  Workload w;
  const std::string path = !g_hash.tokens_path.empty() ? g_hash.tokens_path
                           : !ctx.data_dir.empty()     ? ctx.data_dir + "/common-licenses.tokens"
                                                       : default_token_file_path();
  auto f = read_token_file(path);
  if (f.is_ok()) {
    ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(*f, table, default_compression_table_path()));
    w.text.assign(f->ids.begin(), f->ids.end());
    w.source = fmt::format("{} ({} tokens, {})", path, f->ids.size(), f->tokenizer);
  } else if (g_hash.tokens_path.empty() && f.status().code() == Code::kNotFound) {
    w.random = true;
    w.source = fmt::format("random ids < {} ({} missing: scripts/setup writes it)", vocab, path);
  } else {
    return f.status();
  }
  // Random ids: enough for distinct windows per request; a text shorter than the longest chunk: padded (noted).
  const int64_t want = w.random ? std::max<int64_t>(need, int64_t{1} << 16) : need;
  if (static_cast<int64_t>(w.text.size()) < want) {
    if (!w.random) w.source += fmt::format(", padded with random ids to {} tokens", want);
    std::mt19937_64 rng(seed);
    while (static_cast<int64_t>(w.text.size()) < want) w.text.push_back(static_cast<int64_t>(rng() % vocab));
  }
  return w;
}

// Step k of a case: `requests` requests of `each` new tokens; request r's step hashes text[s + lead, s + lead + each)
// behind the look-back text[s + lead - (N-1), s + lead), at an offset s that differs per request and step.
constexpr int64_t kLead = 64;
std::vector<HashBenchStep> make_steps(const std::vector<int64_t>& text, int32_t requests, int64_t each, int sets, int w) {
  std::vector<HashBenchStep> steps;
  const uint64_t room = static_cast<uint64_t>(static_cast<int64_t>(text.size()) - kLead - each + 1);  // >= 1
  for (int k = 0; k < sets; ++k) {
    HashBenchStep st;
    st.query_start_loc.push_back(0);
    st.lookback.resize(static_cast<size_t>(requests) * static_cast<size_t>(w));
    for (int32_t r = 0; r < requests; ++r) {
      const int64_t s = static_cast<int64_t>((static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(k) * 7919u) % room);
      lookback_of_prefix(text.data() + s, kLead, w, st.lookback.data() + static_cast<size_t>(r) * w);
      st.tokens.insert(st.tokens.end(), text.begin() + s + kLead, text.begin() + s + kLead + each);
      st.query_start_loc.push_back(static_cast<int32_t>(st.tokens.size()));
    }
    steps.push_back(std::move(st));
  }
  return steps;
}

HashBatch host_batch(const HashBenchStep& st) {
  HashBatch b;
  b.n_requests = static_cast<int32_t>(st.query_start_loc.size()) - 1;
  b.max_tokens = static_cast<int64_t>(st.tokens.size());
  b.query_start_loc = st.query_start_loc.data();
  b.tokens = st.tokens.data();
  b.lookback = st.lookback.data();
  b.lookback_rows = b.n_requests;
  return b;
}

// The CPU hasher on one step: states from the look-back rows (untimed), then hash_chunk per request and the
// scatter into [layers][tokens][heads] (timed).
Result<Sample> cpu_step(const NgramHasher& h, const HashBenchStep& st, std::vector<int64_t>& ids) {
  const EngramLayout& l = h.layout();
  const int w = l.max_ngram - 1;
  const size_t heads = static_cast<size_t>(l.heads());
  const int32_t requests = static_cast<int32_t>(st.query_start_loc.size()) - 1;
  std::vector<SequenceState> states;
  states.reserve(static_cast<size_t>(requests));
  for (int32_t r = 0; r < requests; ++r) {
    SequenceSnapshot snap{w, std::vector<int64_t>(static_cast<size_t>(w))};
    ENGRAM_RETURN_IF_ERROR(h.compress(std::span<const int64_t>(st.lookback.data() + static_cast<size_t>(r) * w, w), snap.tail));
    ENGRAM_ASSIGN_OR_RETURN(SequenceState s, h.restore(snap));
    states.push_back(std::move(s));
  }
  const size_t n_tokens = st.tokens.size();
  ids.resize(static_cast<size_t>(l.n_layers()) * n_tokens * heads);
  std::vector<int64_t> one;
  const double t0 = now_ns();
  for (int32_t r = 0; r < requests; ++r) {
    const size_t first = static_cast<size_t>(st.query_start_loc[static_cast<size_t>(r)]);
    const size_t n = static_cast<size_t>(st.query_start_loc[static_cast<size_t>(r) + 1]) - first;
    one.resize(static_cast<size_t>(l.n_layers()) * n * heads);
    ENGRAM_RETURN_IF_ERROR(h.hash_chunk(states[static_cast<size_t>(r)], std::span<const int64_t>(st.tokens).subspan(first, n), one));
    for (int li = 0; li < l.n_layers(); ++li)
      std::copy_n(one.begin() + static_cast<std::ptrdiff_t>(li * n * heads), n * heads,
                  ids.begin() + static_cast<std::ptrdiff_t>((li * n_tokens + first) * heads));
  }
  Sample s;
  s.ns = now_ns() - t0;
  return s;
}

struct CaseSpec {
  std::string name;
  int32_t requests;
  int64_t each;
};

Result<Report> run_hash_bench(Context& ctx) {
  std::vector<CaseSpec> specs;
  const std::vector<int64_t> decode = ctx.smoke ? std::vector<int64_t>{8, 64} : g_hash.decode_batches;
  const int64_t prefill = ctx.smoke ? 512 : g_hash.prefill_tokens;
  for (int64_t b : decode) specs.push_back({fmt::format("decode b={}", b), static_cast<int32_t>(b), 1});
  if (prefill > 0) specs.push_back({fmt::format("prefill {}", prefill), 1, prefill});

  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(default_compression_table_path()));
  ENGRAM_ASSIGN_OR_RETURN(EngramLayout layout, make_preset_layout("v41-flash"));
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(layout, table));
  const int w = layout.max_ngram - 1;
  const int sets = ctx.warmup + ctx.reps;
  int64_t need = 0;  // text make_steps needs for the longest chunk
  for (const auto& c : specs) need = std::max(need, kLead + c.each);
  ENGRAM_ASSIGN_OR_RETURN(Workload text, load_text(ctx, table, need, ctx.seed));

  Report rep;
  rep.key = "hash";
  rep.method = {{"warmup", ctx.warmup},
                {"reps", ctx.reps},
                {"order", "variants shuffled per repetition; repetition k hashes step k (fresh tokens and look-back)"},
                {"cpu", "steady_clock around NgramHasher::hash_chunk per request + scatter, one thread"},
                {"gpu", "CUDA events around the launches, batch already on the device, non-blocking stream"},
                {"launch_call", "host time of the launch calls of the 'gpu' variant"}};
  rep.setup = {{"layout", "v41-flash"}, {"layers", layout.n_layers()}, {"heads", layout.heads()},
               {"max_ngram", layout.max_ngram}, {"tokenizer", table.tokenizer}, {"text", text.source},
               {"cpu_only", g_hash.cpu_only}};
  if (text.random) rep.notes.push_back("no token file: random ids of the tokenizer's vocabulary (" + text.source + ")");
  Table t;
  t.key = "hash_step_us";
  t.title = "Hash time per step [us]: CPU hasher vs GPU kernel, median [p5, p95]; V4.1-Flash layout, 2 layers x 24 heads";
  t.columns = {{"case", 0},           {"requests", 0},        {"tokens", 0},           {"CPU [us]", 1},
               {"CPU p5", 1},         {"CPU p95", 1},         {"GPU [us]", 2},         {"GPU p5", 2},
               {"GPU p95", 2},        {"GPU+update [us]", 2}, {"GPU int32 [us]", 2},   {"launch call [us]", 2},
               {"CPU/GPU", 1},        {"GPU = CPU", 0}};
  t.label_columns = 3;  // case, requests, tokens
  plot::Figure fig;
  fig.style = plot::Style::kBars;
  fig.title = "N-gram hash time per step (median)";
  fig.x_label = "step";
  fig.y_label = "time [us]";
  fig.y_from_zero = false;
  fig.log_y = true;
  plot::Series fc{"CPU hasher", {}, {}, {}, {}}, fg{"GPU kernel", {}, {}, {}, {}};
  nlohmann::json cases = nlohmann::json::array();

  for (const CaseSpec& c : specs) {
    const std::vector<HashBenchStep> steps = make_steps(text.text, c.requests, c.each, sets, w);
    std::unique_ptr<GpuHashSession> gpu;
    if (!g_hash.cpu_only) {
      ENGRAM_ASSIGN_OR_RETURN(gpu, open_gpu_hash(ngram_hash_params(hasher, HashIdKind::kGlobalRow), steps));
      if (rep.data["gpu"].is_null()) rep.data["gpu"] = gpu->info();
    }
    std::vector<int64_t> cpu_ids;
    std::vector<double> launch_ns;
    std::vector<Variant> variants{{"cpu", [&](int k) { return cpu_step(hasher, steps[static_cast<size_t>(k)], cpu_ids); }}};
    if (gpu) {
      variants.push_back({"gpu", [&](int k) -> Result<Sample> {
                            double host = 0;
                            ENGRAM_ASSIGN_OR_RETURN(Sample s, gpu->hash(k, false, false, &host));
                            if (k >= ctx.warmup) launch_ns.push_back(host);
                            return s;
                          }});
      variants.push_back({"gpu+update", [&](int k) { return gpu->hash(k, false, true, nullptr); }});
      if (gpu->has_int32()) variants.push_back({"gpu-int32", [&](int k) { return gpu->hash(k, true, false, nullptr); }});
    }
    ENGRAM_ASSIGN_OR_RETURN(auto times, time_variants(variants, ctx.warmup, ctx.reps, ctx.rng));
    auto summary_of = [&](const std::string& name) {
      for (const auto& v : times)
        if (v.name == name) return v.summary();
      return stats::summarize({});
    };
    const stats::Summary cpu = summary_of("cpu"), g = summary_of("gpu"), gu = summary_of("gpu+update"),
                         g32 = summary_of("gpu-int32"), lc = stats::summarize(launch_ns);
    std::string same = "-";
    if (gpu) {
      // Step 0 on the GPU against the CPU reference of the batch API, bit for bit.
      std::vector<int64_t> want(static_cast<size_t>(layout.n_layers()) * steps[0].tokens.size() * layout.heads());
      ENGRAM_RETURN_IF_ERROR(hash_batch_reference(hasher, host_batch(steps[0]), HashIdKind::kGlobalRow, want.data()));
      ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> got, gpu->ids(0));
      if (got != want)
        return Status(Code::kInternal, "bench hash: " + c.name + ": GPU ids differ from the CPU reference (step 0)");
      same = "yes";
    }
    const int64_t tokens = c.requests * c.each;
    const double ratio = std::isfinite(g.median) && g.median > 0 ? cpu.median / g.median : kNaN;
    t.rows.push_back({c.name, c.requests, tokens, cpu.median / 1e3, cpu.p5 / 1e3, cpu.p95 / 1e3, g.median / 1e3,
                      g.p5 / 1e3, g.p95 / 1e3, gu.median / 1e3, g32.median / 1e3, lc.median / 1e3, ratio, same});
    fig.categories.push_back(c.name);
    fc.y.push_back(cpu.median / 1e3);
    fg.y.push_back(g.median / 1e3);
    cases.push_back({{"case", c.name},
                     {"requests", c.requests},
                     {"tokens", tokens},
                     {"cpu_ns", summary_json(cpu)},
                     {"gpu_ns", summary_json(g)},
                     {"gpu_update_ns", summary_json(gu)},
                     {"gpu_int32_ns", summary_json(g32)},
                     {"launch_call_ns", summary_json(lc)},
                     {"cpu_over_gpu", json_num(ratio)},
                     {"ids_equal", gpu ? nlohmann::json(true) : nlohmann::json(nullptr)}});
  }
  if (g_hash.cpu_only) t.notes.push_back("--cpu-only: GPU columns not measured (n/a)");
  t.notes.push_back("CPU/GPU = CPU median / GPU median; launch call = host time to enqueue the GPU step (no graph)");
  rep.tables.push_back(std::move(t));
  fig.series = {fc};
  if (!g_hash.cpu_only) fig.series.push_back(fg);
  rep.figures.push_back(fig);
  rep.data["cases"] = cases;
  return rep;
}

}  // namespace

ENGRAM_BENCH(hash, {.key = "hash",
                    .description = "N-gram hash time per step: GPU kernel vs CPU hasher, decode batch 64/512 and an "
                                   "8K-token prefill (--cpu-only: the CPU hasher alone)",
                    .add_options =
                        [](CLI::App& s) {
                          s.add_option("--decode-batches", g_hash.decode_batches, "Requests per decode step (1 token each)")
                              ->delimiter(',')
                              ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                          s.add_option("--prefill-tokens", g_hash.prefill_tokens, "Tokens of the prefill step (0 = none)")
                              ->check(cli::range(int64_t{0}, int64_t{1} << 24));
                          s.add_option("--tokens", g_hash.tokens_path, "Token file of the text (default: the default text)")
                              ->check(cli::parsed_by([](const std::string& path) {
                                // A regular file first (a FIFO would block the read), then a token file.
                                ENGRAM_RETURN_IF_ERROR(sys::check_input_path(path, sys::InputKind::kFile));
                                return read_token_file(path).status();
                              }));
                          s.add_flag("--cpu-only", g_hash.cpu_only, "Time the CPU hasher only (runs without a GPU)");
                        },
                    .filter = [](const Context&) -> std::optional<std::string> {
                      if (g_hash.cpu_only) return std::nullopt;
                      return gpu_waiver();
                    },
                    .run = run_hash_bench,
                    .order = 45});

}  // namespace engram::bench
