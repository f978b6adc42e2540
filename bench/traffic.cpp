// `engram bench traffic`: the fast path under real traffic. The whole engine (planner, hot-row cache filled from an
// `engram profile` of a training split, driven through its prefetch queue) against a reference-style kernel and the
// project's own plain kernel, on held-out text of the profile's domain ("same": documentation) and of another
// domain ("other": C headers), for 8K-token prefill windows and decode batches of 64 and 256 sequences advancing one
// token per call, on one Engram layer of a >= 32 GiB table.
//
// Arms (--arms): engine (Engine, fast_path planner, cache, its queue: begin_step/prepare/consume/end_step; the time
// is the queue's own L = f - s), plain (a second Engine over the same table with the fast path off: its direct
// lookup is src/cuda/lookup_kernel's launch_lookup, every SM, on the bench's stream), reference (a persistent-grid
// split-row kernel in the style of the serving engine's Engram kernel: bench/reference_lookup.cu, every SM, on a
// split copy of the table: same rows, payload and scale arrays apart), plain-split (launch_lookup on that split
// table: the project's kernel on the reference's memory). Every call is preceded by a 256 MiB device memset (L2
// flush) and reads token positions no other call of the process reads (bench/traffic_plan.hpp): a repeated lookup is
// faster even after the flush (translation caches). Repetitions run the arms in a shuffled order (measure.hpp).
//
// Reported: per workload and arm median and p5/p95 time, ratios paired per repetition (reference / arm, plain /
// engine), the engine's cache hit rate and paths, the planner's predicted time against the measured one, and the
// check: every timed call's output compared with the CPU decoder on --check-rows sampled rows, then one shared call
// per workload run by every arm on the same ids and compared bit for bit between arms and with the CPU decoder.
// A mismatch fails the bench (exit 1), the error naming each arm's count and first mismatch.
//
// Without a GPU (or without CUDA) the bench is waived with the reason (exit 77 when asked for alone); options are
// checked first on every machine (exit 2). --smoke: a 256 MiB table, prefill 256, decode 8 and 32.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <unordered_set>

#include "bench/gpu.hpp"
#include "bench/lookup.hpp"
#include "bench/registry.hpp"
#include "bench/traffic_device.hpp"
#include "bench/traffic_gpu.hpp"
#include "bench/traffic_plan.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/units.hpp"
#include "host/hot_profile.hpp"
#include "host/token_io.hpp"
#include "sys/affinity.hpp"
#include "tools/engram/arg_checks.hpp"

namespace engram::bench {

#if !ENGRAM_HAVE_CUDA
// Without the CUDA backend the device part does not exist (bench/traffic_device.cu); gpu_waiver() says why first.
Result<std::unique_ptr<TrafficDevice>> open_traffic_device(int64_t, int, int) {
  return Status(Code::kUnsupported, "built without CUDA (ENGRAM_CUDA=OFF or no nvcc at configure time)");
}
#endif

namespace {

TrafficOptions g_traffic;

std::string data_dir_of(const Context& ctx) {
  return ctx.data_dir.empty() ? std::filesystem::path(default_token_file_path()).parent_path().string() : ctx.data_dir;
}

// The token file of a domain: the option's, else the default under the data directory.
std::string text_path(const TrafficOptions& o, const std::string& domain, const Context& ctx) {
  const std::string& given = domain == "same" ? o.same_tokens : o.other_tokens;
  if (!given.empty()) return given;
  return data_dir_of(ctx) + (domain == "same" ? "/corpus-doc/corpus-test.tokens" : "/corpus-h/corpus-test.tokens");
}

const char* kTokenizeHint =
    "scripts/tokenize-corpus build/data/corpus-doc (same domain) and scripts/tokenize-corpus build/data/corpus-h --ext .h "
    "--test-percent 50 /usr/include/linux ... (other domain) write them; engram bench traffic --help";

// The training split counted for the cache when no profile is given.
std::string train_path(const TrafficOptions& o, const Context& ctx) {
  return o.train_tokens.empty() ? data_dir_of(ctx) + "/corpus-doc/corpus-train.tokens" : o.train_tokens;
}

bool counts_profile_here(const TrafficOptions& o) {
  const bool engine = std::find(o.arms.begin(), o.arms.end(), "engine") != o.arms.end();
  auto cs = parse_cache_size(o.cache_size);
  return engine && cs.is_ok() && !cs->off() && o.cache_profile.empty();
}

std::optional<std::string> traffic_filter(const Context& ctx) {
  if (auto w = gpu_waiver()) return "needs a GPU: " + *w;
  std::vector<std::string> need;
  for (const auto& d : g_traffic.domains) need.push_back(text_path(g_traffic, d, ctx));
  if (counts_profile_here(g_traffic)) need.push_back(train_path(g_traffic, ctx));
  for (const auto& p : need)
    if (!std::filesystem::exists(p)) return p + " missing (" + kTokenizeHint + ")";
  return std::nullopt;
}

Result<Report> run_traffic(Context& ctx) {
  TrafficOptions o = g_traffic;
  if (ctx.smoke) {
    o.table_size = "256MiB";
    o.prefill_tokens = 256;
    o.decode = {8, 32};
  }
  ENGRAM_RETURN_IF_ERROR(check_traffic_options(o));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t table_bytes, parse_size_bytes(o.table_size));
  TrafficRun run;
  run.options = o;
  run.layout = bench_layout(table_bytes, RowFormat::kFused, 256);
  run.warmup = std::max(ctx.warmup, 1);
  run.reps = ctx.reps;
  const int arms = static_cast<int>(o.arms.size());
  const int calls = traffic_calls(run.warmup + run.reps, arms);

  // The cache profile: made for this table (rows per head) with this hash seed.
  ENGRAM_ASSIGN_OR_RETURN(const CacheSize cache_size, parse_cache_size(o.cache_size));
  const bool engine = std::find(o.arms.begin(), o.arms.end(), "engine") != o.arms.end();
  Report rep;
  rep.key = "traffic";
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(default_compression_table_path()));
  NgramHashOptions ho;
  ho.seed = o.hash_seed;
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(run.layout, table, ho));
  if (counts_profile_here(o)) {
    // The profile `engram profile --layout bench` would write for the training split, counted here: the hottest ids,
    // twice as many as the cache can hold (fused FP8 record + 24 B of map per slot).
    const std::string path = train_path(o, ctx);
    ENGRAM_ASSIGN_OR_RETURN(TokenFile train, read_token_file(path));
    ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(train, table, default_compression_table_path()));
    host::HotProfileOptions po;
    po.seq_len = o.seq_len;
    po.seed = o.hash_seed;
    po.top = std::max<int64_t>(1, 2 * cache_size.bytes_for(run.layout.table_bytes(0)) /
                                      (EngramLayout::fused_record_bytes(run.layout.d) + 24));
    std::vector<int64_t> docs;
    if (ctx.smoke)
      for (int64_t d = 0; d < std::min<int64_t>(16, static_cast<int64_t>(train.documents.size())); ++d) docs.push_back(d);
    const double t0 = now_ns();
    ENGRAM_ASSIGN_OR_RETURN(host::HotProfile p, host::compute_hot_profile(hasher, {{&train, docs}}, po));
    run.profile_lookups = p.layers[0].lookups;
    run.profile = std::move(p.layers[0].id_counts);
    run.profile_source = fmt::format("{} counted here ({} tokens, top {} ids, {:.1f} s)", path, p.tokens, po.top,
                                     (now_ns() - t0) * 1e-9);
  } else if (engine && !cache_size.off()) {
    auto read = host::read_hot_profile(o.cache_profile);
    if (!read.is_ok()) return read.status().with_context("--cache-profile");
    const Status st = host::check_hot_profile_layout(*read, run.layout);
    if (!st.is_ok())
      return Status(Code::kInvalidArgument, "--cache-profile " + o.cache_profile + ": " + st.message() +
                                                "; make one for this table with: engram profile --layout bench --table-size " +
                                                o.table_size + " --tokens TRAIN.tokens --out FILE");
    if (read->seed != o.hash_seed)
      return Status(Code::kInvalidArgument, fmt::format("--cache-profile {} was hashed with seed {}, the bench hashes with --hash-seed {}",
                                                        o.cache_profile, read->seed, o.hash_seed));
    if (read->seq_len != o.seq_len)
      rep.notes.push_back(fmt::format("the profile cut sequences every {} tokens, the bench every {} (--seq-len)", read->seq_len, o.seq_len));
    for (const auto& s : read->sources)
      for (const auto& d : o.domains)
        if (std::filesystem::path(s.path).filename() == std::filesystem::path(text_path(o, d, ctx)).filename() &&
            std::filesystem::path(s.path).parent_path().filename() ==
                std::filesystem::path(text_path(o, d, ctx)).parent_path().filename())
          rep.notes.push_back("the profile counted " + s.path + ", named like the measured " + d +
                              "-domain text: its hit rates may be in-sample");
    run.profile_lookups = read->layers[0].lookups;
    run.profile = std::move(read->layers[0].id_counts);
    run.profile_source = fmt::format("{} ({} tokens)", o.cache_profile, read->tokens);
  }

  // Held-out text: one id stream per domain, the plan's positions, every call's ids.
  const auto workloads = traffic_workloads(o);
  const int heads = run.layout.heads();
  for (const auto& domain : o.domains) {
    const std::string path = text_path(o, domain, ctx);
    ENGRAM_ASSIGN_OR_RETURN(TokenFile tf, read_token_file(path));
    ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(tf, table, default_compression_table_path()));
    ENGRAM_ASSIGN_OR_RETURN(TrafficPlan plan, TrafficPlan::make(static_cast<int64_t>(tf.ids.size()), workloads, calls,
                                                                domain + "-domain text " + path));
    const double t0 = now_ns();
    ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> stream, hash_token_stream(hasher, tf, o.seq_len, sys::threads_or_auto(ctx.threads)));
    rep.notes.push_back(fmt::format("{}-domain text {}: {} tokens, {} documents, hashed in {:.1f} s", domain, path,
                                    tf.ids.size(), tf.documents.size(), (now_ns() - t0) * 1e-9));
    for (size_t w = 0; w < workloads.size(); ++w) {
      TrafficWorkloadIds wi{domain, path, workloads[w], {}, {}};
      for (int c = 0; c < calls; ++c) wi.calls.push_back(gather_stream_ids(stream, heads, plan.positions(w, c)));
      run.workloads.push_back(std::move(wi));
    }
  }
  // Ids that earlier repetitions and workloads read (run order): each call's share of them.
  {
    std::unordered_set<int64_t> seen;
    for (auto& wl : run.workloads) {
      wl.seen_share.assign(wl.calls.size(), 0.0);
      const int reps_total = run.warmup + run.reps;
      for (int r = 0; r <= reps_total; ++r) {  // r == reps_total: the shared check call
        const int first = r < reps_total ? traffic_call(r, 0, arms) : calls - 1;
        const int last = r < reps_total ? traffic_call(r, arms - 1, arms) : calls - 1;
        for (int c = first; c <= last; ++c) {
          const auto& ids = wl.calls[static_cast<size_t>(c)];
          int64_t hit = 0;
          for (int64_t id : ids) hit += seen.count(id) ? 1 : 0;
          wl.seen_share[static_cast<size_t>(c)] = ids.empty() ? 0.0 : static_cast<double>(hit) / static_cast<double>(ids.size());
        }
        for (int c = first; c <= last; ++c) seen.insert(wl.calls[static_cast<size_t>(c)].begin(), wl.calls[static_cast<size_t>(c)].end());
      }
    }
  }
  const Status st = run_traffic_gpu(run, ctx, rep);
  if (st.code() == Code::kUnsupported) {
    rep.waived = true;
    rep.waived_reason = "needs a GPU: " + st.message();
    return rep;
  }
  ENGRAM_RETURN_IF_ERROR(st);
  return rep;
}

ENGRAM_BENCH(traffic,
             {.key = "traffic",
              .description = "Whole engine (planner, profile cache, prefetch queue) vs a reference-style split-row "
                             "kernel and the plain kernel on held-out text: prefill windows and decode batches",
              .add_options =
                  [](CLI::App& s) {
                    TrafficOptions& o = g_traffic;
                    s.footer(
                        "Arms: engine = the whole engine (fast path planner, hot-row cache filled from --cache-profile)\n"
                        "through its prefetch queue, timed by the queue's own L = f - s; plain = the project's plain\n"
                        "kernel (launch_lookup) on the same fused table; reference = a persistent-grid split-row kernel in\n"
                        "the style of the serving engine's Engram kernel (payload and scale arrays apart, 16 rows per\n"
                        "block iteration, every SM); plain-split = the project's kernel on that split table. Every call\n"
                        "follows a 256 MiB L2 flush and reads token positions no other call of the process reads (a\n"
                        "repeated lookup stays faster after a flush: translation caches). Ratios are paired per repetition.\n"
                        "Outputs: every call's sampled rows vs the CPU decoder, and one shared call per workload compared\n"
                        "bit for bit between arms; a mismatch fails the bench (exit 1).\n"
                        "Data (Node.js is needed to tokenize; the GPU machine has none, so tokenize elsewhere and carry):\n"
                        "  scripts/tokenize-corpus build/data/corpus-doc                 (same domain: /usr/share/doc)\n"
                        "  scripts/tokenize-corpus build/data/corpus-h --ext .h --max-file-bytes 65536 --test-percent 50 \\\n"
                        "    /usr/include/linux /usr/include/x86_64-linux-gnu /usr/include/openssl  (other domain)\n"
                        "  engram profile --layout bench --table-size 32GiB --tokens build/data/corpus-doc/corpus-train.tokens \\\n"
                        "    --top 8000000 --out /tmp/train.profile\n"
                        "  engram bench traffic --cache-profile /tmp/train.profile --reps 15 --json-out traffic.json\n"
                        "Memory: the fused table and its split copy (about 2 x --table-size of RAM, both registered).\n"
                        "Exit: 0 ok, 1 failure or an output mismatch, 2 bad arguments, 77 waived here (no GPU; reason printed).");
                    auto token_file = cli::parsed_by([](const std::string& path) {
                      ENGRAM_RETURN_IF_ERROR(sys::check_input_path(path, sys::InputKind::kFile));
                      return read_token_file(path).status();
                    });
                    s.add_option("--same-tokens", o.same_tokens,
                                 "Held-out text of the profile's domain (default DATA/corpus-doc/corpus-test.tokens: "
                                 "scripts/tokenize-corpus of /usr/share/doc)")
                        ->check(token_file);
                    s.add_option("--other-tokens", o.other_tokens,
                                 "Held-out text of another domain (default DATA/corpus-h/corpus-test.tokens: "
                                 "scripts/tokenize-corpus --ext .h /usr/include)")
                        ->check(token_file);
                    s.add_option("--cache-profile", o.cache_profile,
                                 "Hot-row profile of a training split for the engine's cache: engram profile --layout "
                                 "bench --table-size SAME --tokens TRAIN.tokens --out FILE (default: --train-tokens "
                                 "counted here the same way)")
                        ->check(cli::input_file());
                    s.add_option("--train-tokens", o.train_tokens,
                                 "Training split counted for the cache when there is no --cache-profile (default "
                                 "DATA/corpus-doc/corpus-train.tokens)")
                        ->check(token_file);
                    s.add_option("--table-size", o.table_size,
                                 "Bytes of the fused layer table (the split copy has the same rows; default 32GiB: "
                                 "both tables need about twice this in RAM)")
                        ->check(cli::size_in(int64_t{1} << 20, int64_t{1} << 50));
                    s.add_option("--cache-size", o.cache_size, "Engine's hot-row cache: bytes, share of the table (5%) or off")
                        ->check(cli::parsed_by([](const std::string& t) { return parse_cache_size(t).status(); }));
                    s.add_option("--prefill-tokens", o.prefill_tokens, "Tokens of one prefill window (0 = no prefill; default 8192)")
                        ->check(cli::range(int64_t{0}, int64_t{8192}));
                    s.add_option("--decode", o.decode, "Decode batches: sequences advancing one token per call (default 64,256)")
                        ->delimiter(',')
                        ->check(cli::range(int64_t{1}, int64_t{8192}));
                    s.add_option("--arms", o.arms, "Arms: engine,plain,reference,plain-split (default all four)")
                        ->delimiter(',')
                        ->check(CLI::IsMember(traffic_arm_names()));
                    s.add_option("--domains", o.domains, "Held-out texts: same,other (default both)")
                        ->delimiter(',')
                        ->check(CLI::IsMember({"same", "other"}));
                    s.add_option("--engine-grid-fraction", o.engine_grid_fraction,
                                 "Grid cap of the engine's prefetch queue as a fraction of the SMs (default 0.5, the "
                                 "engine's; the planner takes every SM where a lookup cannot hide)");
                    s.add_option("--hash-seed", o.hash_seed, "Hash seed of the text ids (the profile's; default 0)")
                        ->check(cli::range(int64_t{0}, int64_t{1} << 62));
                    s.add_option("--seq-len", o.seq_len, "Sequences cut every this many tokens in a document (default 2048, engram profile's)")
                        ->check(cli::range(int64_t{1}, int64_t{1} << 30));
                    s.add_option("--check-rows", o.check_rows,
                                 "Rows of every timed call compared with the CPU decoder (default 512; the shared check "
                                 "call compares every row between arms)")
                        ->check(cli::range(0, 1 << 24));
                  },
              .check = [](const Context&) { return check_traffic_options(g_traffic); },
              .filter = traffic_filter,
              .run = run_traffic,
              .order = 35});

}  // namespace
}  // namespace engram::bench
