// `engram bench lookup`: lookup throughput swept over row layout (fused, split), d, table span (the VA range the
// ids cover), id distribution (uniform, Zipf alpha, real-text hashed ids), sorted vs unsorted ids, batch
// (decode batches and prefill chunks, tokens x 24 heads rows), grid cap (fraction of the SMs), placement policy
// and backend (cuda: UVA kernel; cpu: threads; host-dma: CPU gather into pinned staging + one H2D copy).
// Every case reports rows/s, source GB/s (rows x (d + d/32)) and staging GB/s (rows x 2d) separately, the
// launch shape (grid, tiles), and % of the two ceilings measured in the same run on the same ids: the link
// (pinned H2D copy) and the plain gather of the same bytes (GPU: 16-B vector gather; CPU: memcpy of the rows by
// the same threads).
//
// Method (kept from engram_bench_lookup_gpu so its figures stay comparable): one table of the largest span,
// random content with realistic scales, registered once; per case `warmup + reps` fresh id sets (set k is
// used by every variant in repetition k; variants shuffled per repetition); each GPU launch translation-cold
// (scrub) and L2-cold (flush), timed alone with events; CPU variants with steady_clock.
// The sweep is reusable: sweep_case() times any set of variants over the id sets of one case.
//
// Technique sections (CUDA builds with a GPU; bench/lookup_fast.cu): each fast-path technique on and off
// on one fused table of --table-size: calibration, prefill, decode with a hot-row cache, sort-threshold sweep
// (--sections picks, --techniques a subset of the variants). Text ids come from --tokens (e.g. the test part of
// scripts/tokenize-corpus) and the text cache from --cache-profile (an `engram profile --layout bench` of other
// text: held-out), else from a warm-up window of the measured text (in-sample). Without a GPU they are waived
// with the reason (a note; the whole bench is waived when only they were asked for).
#include "bench/lookup.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/gpu.hpp"
#include "core/parallel.hpp"
#include "cpu/lookup.hpp"
#include "cpu/thread_pool.hpp"
#include "engine/bare_table.hpp"
#include "engram/census.hpp"
#include "engram/layout.hpp"
#include "engram/options.hpp"
#include "engram/table.hpp"
#include "engram/units.hpp"
#include "host/hot_profile.hpp"
#include "host/token_io.hpp"
#include "replay/id_source.hpp"
#include "replay/text_id_source.hpp"
#include "sys/affinity.hpp"
#include "tools/engram/arg_checks.hpp"

namespace engram::bench {

EngramLayout bench_layout(int64_t bytes, RowFormat fmt, int d) {
  EngramLayout l;
  l.name = "v41-flash-rows";
  l.layer_ids = {1};
  l.max_ngram = 4;
  l.heads_per_order = 8;
  l.d = d;
  l.format = fmt;
  const int64_t stride = fmt == RowFormat::kFused ? EngramLayout::fused_record_bytes(d) : d + d / 32;
  const int64_t per_head = std::max<int64_t>(bytes / (24 * stride) + 1, 1009);
  l.vocab_size_per_order = {per_head, per_head, per_head};
  (void)l.finalize();
  return l;
}

void fill_table(const TableView& v, uint64_t seed, int threads) {
  threads = sys::threads_or_auto(threads);
  const int ns = v.d / 32;
  parallel_ranges(v.rows, threads, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      auto* p = const_cast<uint8_t*>(v.payload_of(r));
      uint64_t s = seed ^ (static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull);
      for (int k = 0; k + 8 <= v.d; k += 8) {
        const uint64_t z = splitmix64(s);
        std::memcpy(p + k, &z, 8);
      }
      // Realistic scales (codes 119..135, as synth_row): the decode takes the path real checkpoints take.
      uint8_t* sc = const_cast<uint8_t*>(v.scales_of(r));
      uint64_t z = splitmix64(s);
      for (int k = 0; k < ns; ++k) sc[k] = static_cast<uint8_t>(119 + ((z >> (5 * (k % 12))) & 0xFF) % 17);
      if (v.format == RowFormat::kFused)
        std::memset(sc + ns, 0, static_cast<size_t>(v.stride_bytes - v.d - ns));
    }
  });
}

Result<std::unique_ptr<IdSource>> make_ids(const std::string& dist, const EngramLayout& span_layout, double alpha,
                                           uint64_t seed, const std::string& data_dir, const std::string& tokens_path) {
  if (dist == "uniform") return make_uniform_id_source(span_layout, seed);
  if (dist == "zipf") return make_zipf_id_source(span_layout, alpha, seed);
  if (dist == "text") {
    const std::string tok = !tokens_path.empty() ? tokens_path
                            : data_dir.empty()   ? default_token_file_path()
                                                 : data_dir + "/common-licenses.tokens";
    return make_text_id_source(span_layout, tok, "", static_cast<int64_t>(seed));
  }
  return Status(Code::kInvalidArgument, "ids '" + dist + "': expected uniform, zipf or text");
}

Result<std::vector<std::vector<int64_t>>> make_id_sets(IdSource& src, int64_t tokens, int sets, bool sorted) {
  std::vector<std::vector<int64_t>> out;
  std::vector<std::vector<int64_t>> ids;
  for (int k = 0; k < sets; ++k) {
    ENGRAM_RETURN_IF_ERROR(src.next_step(k, static_cast<int>(tokens), ids));
    out.push_back(ids[0]);
    if (sorted) std::sort(out.back().begin(), out.back().end());
  }
  return out;
}

Result<CaseResult> sweep_case(const std::vector<Variant>& variants, const LookupShape& shape, const Ceilings& ceilings,
                              const std::string& gather_variant, int warmup, int reps, std::mt19937_64& rng) {
  ENGRAM_ASSIGN_OR_RETURN(auto times, time_variants(variants, warmup, reps, rng));
  CaseResult r;
  Ceilings c = ceilings;
  for (const auto& t : times)
    if (t.name == gather_variant) {
      const double med = t.summary().median;
      if (std::isfinite(med) && med > 0) c.gather_rows_per_s = static_cast<double>(shape.rows) / (med * 1e-9);
    }
  r.ceilings = c;
  for (const auto& t : times) r.figures.push_back(lookup_figures(t, shape, c));
  return r;
}

namespace {

struct LookupOptions {
  std::string backends = "auto";  // auto | cuda,cpu,host-dma
  std::vector<std::string> layouts{"fused", "split"};
  std::vector<int> d{256};
  std::vector<std::string> dists{"uniform", "zipf", "text"};
  double zipf_alpha = 1.0;
  std::vector<std::string> sorted{"no"};
  std::vector<int64_t> batches{1, 8, 64, 256, 512, 2048, 8192, 16384};
  std::vector<double> grid_fractions{1.0, 0.5};
  std::string table_size = "32GiB";
  std::vector<std::string> spans;  // "" = the table size only
  std::string placement = "none";
  std::string backing = "memfd";
  int64_t tlb_scrub_rows = 131072;
  std::string tokens;  // token file of the text ids ("" = the default text)
  // Technique sections.
  std::vector<std::string> sections{"sweep", "fast"};
  std::vector<std::string> techniques;
  std::vector<std::string> fast_ids{"text", "zipf", "uniform"};
  int64_t prefill_tokens = 8192;
  std::vector<int64_t> decode{64, 256, 512};
  std::vector<int64_t> sort_sweep{128, 512, 1536, 4096, 8192};
  std::string cache_size = "5%";
  std::string cache_profile;
  int warm_steps = 8;
  int host_threads = 0;
  int64_t hash_seed = 0;
};
LookupOptions g_opt;

double gib(int64_t b) { return static_cast<double>(b) / double(1ull << 30); }

// The cache budget of --cache-size on a table of `table_bytes`: off/0, a share ("5%", in (0, 100]) or bytes.
Result<int64_t> cache_bytes_of(const std::string& text, int64_t table_bytes) {
  if (text == "0" || text == "off") return int64_t{0};
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    const double p = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() - 1 || !(p > 0 && p <= 100))
      return Status(Code::kInvalidArgument, "'" + text + "': expected bytes (1GiB), a share (5%) or off");
    return static_cast<int64_t>(p / 100 * static_cast<double>(table_bytes));
  }
  return parse_size_bytes(text);
}

// The technique sections (bench/lookup_fast.cu) on one fused table of `table_bytes`: checks the options and the
// cache profile (on every machine), then runs them; without a GPU they are waived (a note, or the whole report when
// nothing else ran).
Status run_fast(const LookupOptions& o, const std::vector<std::string>& sections, int64_t table_bytes, Context& ctx,
                Report& rep, bool swept) {
  const int d = o.d.empty() ? 256 : o.d.front();
  const EngramLayout layout = bench_layout(table_bytes, RowFormat::kFused, d);
  FastSectionOptions fo;
  fo.sections.clear();
  for (const auto& x : sections)
    if (x != "sweep") fo.sections.push_back(x);
  fo.techniques = o.techniques;
  fo.ids = o.fast_ids;
  fo.prefill_tokens = o.prefill_tokens;
  fo.decode_tokens = o.decode;
  fo.sort_sweep_tokens = o.sort_sweep;
  fo.warm_steps = o.warm_steps;
  fo.host_threads = o.host_threads;
  fo.cache_size_text = o.cache_size;
  {
    auto bytes = cache_bytes_of(o.cache_size, layout.table_bytes(0));
    if (!bytes.is_ok()) return bytes.status().with_context("--cache-size");
    fo.cache_bytes = *bytes;
  }
  if (!o.cache_profile.empty()) {
    auto read = host::read_hot_profile(o.cache_profile);
    if (!read.is_ok()) return read.status().with_context("--cache-profile");
    host::HotProfile p = std::move(*read);
    const Status st = host::check_hot_profile_layout(p, layout);
    if (!st.is_ok())
      return Status(Code::kInvalidArgument,
                    "--cache-profile " + o.cache_profile + ": " + st.message() + "; make one for this table with: engram profile " +
                        "--layout bench --table-size " + o.table_size + " --d " + std::to_string(d) + " --tokens TRAIN.tokens --out FILE");
    if (p.seed != o.hash_seed)
      return Status(Code::kInvalidArgument, "--cache-profile " + o.cache_profile + " was hashed with seed " + std::to_string(p.seed) +
                                                ", the bench hashes text with --hash-seed " + std::to_string(o.hash_seed));
    const std::string measured = o.tokens.empty() ? default_token_file_path() : o.tokens;
    for (const auto& s : p.sources)
      if (std::filesystem::path(s.path).filename() == std::filesystem::path(measured).filename())
        rep.notes.push_back("--cache-profile " + o.cache_profile + " was counted on " + s.path +
                            ", a file named like the measured text " + measured + ": the text hit rates may be in-sample");
    fo.text_profile_lookups = p.layers[0].lookups;
    fo.text_profile = std::move(p.layers[0].id_counts);
    fo.text_profile_path = o.cache_profile;
  }
  // Options and the profile are checked first, so that a bad one is an error on every machine.
  if (const auto gw = gpu_waiver()) {
    rep.notes.push_back("technique sections (calibration, prefill, decode, sort-sweep) waived: " + *gw);
    if (!swept) {
      rep.waived = true;
      rep.waived_reason = *gw;
    }
    return Status::ok();
  }
  const std::string tokens = o.tokens;
  const double alpha = o.zipf_alpha;
  const uint64_t seed = ctx.seed;
  const int64_t hash_seed = o.hash_seed;
  const std::string data_dir = ctx.data_dir;
  fo.make_source = [layout, tokens, alpha, seed, hash_seed, data_dir](const std::string& dist) -> Result<std::unique_ptr<IdSource>> {
    if (dist == "text") return make_ids(dist, layout, alpha, static_cast<uint64_t>(hash_seed), data_dir, tokens);
    return make_ids(dist, layout, alpha, seed + (dist == "zipf" ? 3 : 5), data_dir, tokens);
  };
  TableOptions to;
  ENGRAM_RETURN_IF_ERROR(set_table_option(to, "--backing", o.backing));
  ENGRAM_RETURN_IF_ERROR(set_table_option(to, "--placement", o.placement));
  ENGRAM_ASSIGN_OR_RETURN(engine::BareTable built, engine::create_bare_table(layout, to));
  std::unique_ptr<HostTable>& table = built.table;
  const TableView view = table->view(0);
  const double t0 = now_ns();
  fill_table(view, ctx.seed, ctx.threads);
  rep.notes.push_back(fmt::format("technique sections: fused d={} table {:.2f} GiB ({} rows), filled in {:.1f} s; text ids {}, "
                                  "hash seed {}; cache {} ({})",
                                  d, gib(layout.table_bytes(0)), view.rows, (now_ns() - t0) * 1e-9,
                                  tokens.empty() ? default_token_file_path() : tokens, hash_seed, o.cache_size,
                                  o.cache_profile.empty() ? "text cache from a warm-up window: in-sample"
                                                          : "text cache from " + o.cache_profile));
  const Status st = run_fast_sections(view, layout.table_bytes(0), layout.heads(), fo, ctx, rep);
  if (st.code() == Code::kUnsupported) {
    rep.notes.push_back("technique sections waived: " + st.message());
    return Status::ok();
  }
  return st;
}

Result<Report> run_lookup(Context& ctx) {
  LookupOptions o = g_opt;
  // An option that cannot apply is refused, never replaced: --smoke fixes its own spans.
  if (ctx.smoke && !g_opt.spans.empty())
    return Status(Code::kInvalidArgument, "--spans cannot apply with --smoke (the smoke run fixes its sizes)");
  if (ctx.smoke) {
    o.table_size = "64MiB";
    o.batches = {1, 64, 512};
    o.spans = {"8MiB", ""};
    o.sorted = {"no", "yes"};
    o.tlb_scrub_rows = 4096;
    o.d = {256};
    o.prefill_tokens = 1024;
    o.decode = {64};
    o.sort_sweep = {64, 256};
    o.warm_steps = 2;
  }
  // --sections: "fast" stands for every technique section.
  std::vector<std::string> sections;
  for (const auto& x : o.sections) {
    if (x == "fast") {
      for (const char* y : {"calibration", "prefill", "decode", "sort-sweep"}) sections.push_back(y);
    } else if (x == "sweep" || x == "calibration" || x == "prefill" || x == "decode" || x == "sort-sweep") {
      sections.push_back(x);
    } else {
      return Status(Code::kInvalidArgument, "--sections '" + x + "': expected sweep, fast, calibration, prefill, decode or sort-sweep");
    }
  }
  for (const auto& t : o.techniques)
    if (std::find(fast_techniques().begin(), fast_techniques().end(), t) == fast_techniques().end())
      return Status(Code::kInvalidArgument, "--techniques '" + t + "': expected plain, dedup-hash, dedup-sort, cache-fp8, "
                                            "cache-bf16, hybrid, planner or planner-unsplit");
  const bool want_sweep = std::find(sections.begin(), sections.end(), "sweep") != sections.end();
  const bool want_fast = std::any_of(sections.begin(), sections.end(), [](const std::string& x) { return x != "sweep"; });
  ENGRAM_ASSIGN_OR_RETURN(const int64_t table_bytes_req, parse_size_bytes(o.table_size));
  std::vector<int64_t> spans;
  for (const auto& s : o.spans) {
    if (s.empty()) {
      spans.push_back(table_bytes_req);
      continue;
    }
    ENGRAM_ASSIGN_OR_RETURN(const int64_t b, parse_size_bytes(s));
    if (b > table_bytes_req)
      return Status(Code::kInvalidArgument, "--spans " + s + " is larger than the table (--table-size " + o.table_size +
                                                "): the ids cannot cover it");
    spans.push_back(b);
  }
  if (spans.empty()) spans.push_back(table_bytes_req);
  std::sort(spans.begin(), spans.end());
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());

  const std::optional<std::string> gw = gpu_waiver();
  bool use_cuda = false, use_cpu = false, use_dma = false;
  if (o.backends == "auto") {
    use_cuda = !gw;
    use_cpu = !use_cuda || ctx.smoke;
    use_dma = use_cuda;
  } else {
    use_cuda = o.backends.find("cuda") != std::string::npos;
    use_cpu = o.backends.find("cpu") != std::string::npos;
    use_dma = o.backends.find("host-dma") != std::string::npos;
  }
  Report rep;
  rep.key = "lookup";
  if ((use_cuda || use_dma) && gw) {
    if (!use_cpu) return Status(Code::kUnsupported, "bench lookup --backends cuda/host-dma: " + *gw);
    rep.notes.push_back("cuda and host-dma backends waived: " + *gw);
    use_cuda = use_dma = false;
  }
  const int sets = std::max(ctx.warmup, 1) + ctx.reps;
  const int64_t max_tokens = *std::max_element(o.batches.begin(), o.batches.end());
  ThreadPool pool(ctx.threads);

  Table tb;
  tb.key = "lookup";
  tb.title = "Lookup sweep: median [p5, p95] us per call; M rows/s; source = rows x (d + d/32), staging = rows x 2d "
             "(separate paths, never summed); GB = 1e9 B";
  tb.columns = {{"layout", 0},   {"d", 0},          {"span [GiB]", 2},    {"ids", 0},          {"sorted", 0},
                {"tokens", 0},   {"rows", 0},       {"variant", 0},       {"grid", 0},         {"tiles", 0},
                {"med [us]", 1}, {"p5 [us]", 1},    {"p95 [us]", 1},      {"rows/s [M]", 2},   {"src [GB/s]", 2},
                {"stg [GB/s]", 2}, {"% link", 1},   {"% gather", 1}};
  tb.label_columns = 10;  // layout .. tiles name the case; the figures start at "med [us]"
  nlohmann::json cases = nlohmann::json::array();
  nlohmann::json tables = nlohmann::json::array();
  std::vector<plot::Figure> figs;

  for (const auto& lname : want_sweep ? o.layouts : std::vector<std::string>{}) {
    ENGRAM_ASSIGN_OR_RETURN(const RowFormat fmt, parse_row_format(lname));
    for (int d : o.d) {
      if (d <= 0 || d % 32 != 0) return Status(Code::kInvalidArgument, "--d " + std::to_string(d) + ": expected a multiple of 32");
      const EngramLayout layout = bench_layout(table_bytes_req, fmt, d);
      TableOptions to;
      ENGRAM_RETURN_IF_ERROR(set_table_option(to, "--backing", o.backing));
      ENGRAM_RETURN_IF_ERROR(set_table_option(to, "--placement", o.placement));
      const double tc0 = now_ns();
      ENGRAM_ASSIGN_OR_RETURN(engine::BareTable built, engine::create_bare_table(layout, to));
      std::unique_ptr<HostTable>& table = built.table;
      const TableView view = table->view(0);
      fill_table(view, ctx.seed, ctx.threads);
      const double fill_s = (now_ns() - tc0) * 1e-9;
      const int64_t tbytes = layout.table_bytes(0);
      const auto census = table->census(CensusPoint::kAfterLoad, uint64_t{1} << 16);
      nlohmann::json tj = {{"layout", lname}, {"d", d}, {"rows", view.rows}, {"stride_bytes", view.stride_bytes},
                           {"bytes", tbytes}, {"backing", o.backing}, {"placement_requested", o.placement},
                           {"create_fill_s", fill_s}};
      tj["census"] = nlohmann::json::array();
      for (const auto& c : census) {
        tj["census"].push_back(c.to_json());
        std::string line = fmt::format("{} d={} table {:.2f} GiB, placement {}: census", lname, d, gib(tbytes), o.placement);
        for (auto& [node, pages] : c.pages_per_node) line += fmt::format(" N{}={:.1f}%", node, 100.0 * c.fraction_on(node));
        if (!c.known) line += " unknown (" + c.reason + ")";
        rep.notes.push_back(line);
      }
      std::unique_ptr<GpuLookupSession> gpu;
      if (use_cuda || use_dma) {
        ENGRAM_ASSIGN_OR_RETURN(gpu, open_gpu_lookup(view, tbytes, max_tokens * layout.heads(), sets,
                                                     o.tlb_scrub_rows, ctx.seed));
        tj["gpu"] = gpu->info();
      }
      tables.push_back(tj);
      std::vector<uint16_t> host_out(static_cast<size_t>(max_tokens * layout.heads() * d));
      const int64_t row_copy = fmt == RowFormat::kFused ? view.stride_bytes : d;
      std::vector<uint8_t> host_gather(static_cast<size_t>(max_tokens * layout.heads() * (row_copy + d / 32)));

      for (int64_t span : spans) {
        const EngramLayout span_layout = bench_layout(std::min(span, tbytes), fmt, d);
        for (const auto& dist : o.dists) {
          for (const auto& so : o.sorted) {
            const bool sorted = so == "yes";
            plot::Figure fig;
            fig.title = fmt::format("{} d={} span {:.2f} GiB, {} ids{}", lname, d, gib(span), dist, sorted ? " sorted" : "");
            fig.x_label = "batch [tokens] (x 24 heads rows)";
            fig.y_label = "throughput [M rows/s]";
            fig.log_x = true;
            std::map<std::string, plot::Series> series;
            bool dist_ok = true;
            for (int64_t tokens : o.batches) {
              auto src = make_ids(dist, span_layout, o.zipf_alpha, ctx.seed + 17, ctx.data_dir, o.tokens);
              if (!src.is_ok()) {
                rep.notes.push_back("ids " + dist + ": n/a: " + src.status().to_string());
                dist_ok = false;
                break;
              }
              ENGRAM_ASSIGN_OR_RETURN(auto id_sets, make_id_sets(**src, tokens, sets, sorted));
              const int heads = layout.heads();
              const int64_t rows = tokens * heads;
              if (gpu)
                for (int k = 0; k < sets; ++k) ENGRAM_RETURN_IF_ERROR(gpu->set_ids(k, id_sets[static_cast<size_t>(k)]));
              std::vector<Variant> vs;
              if (use_cuda) {
                for (double f : o.grid_fractions)
                  vs.push_back({f == 1.0 ? "cuda lookup" : fmt::format("cuda lookup grid {:.2f}", f),
                                [&gpu, tokens, heads, f](int k) { return gpu->lookup(k, tokens, heads, f); }});
                vs.push_back({"cuda gather", [&gpu, rows](int k) { return gpu->gather(k, rows, false); }});
                vs.push_back({"cuda gather payload", [&gpu, rows](int k) { return gpu->gather(k, rows, true); }});
              }
              if (use_dma)
                vs.push_back({"host-dma", [&](int k) {
                                return gpu->host_gather_dma(id_sets[static_cast<size_t>(k)], tokens, heads, &pool);
                              }});
              if (use_cpu) {
                vs.push_back({"cpu lookup", [&, tokens, heads](int k) -> Result<Sample> {
                                LookupRequest req;
                                req.ids = id_sets[static_cast<size_t>(k)].data();
                                req.tokens = tokens;
                                req.heads = heads;
                                req.out = host_out.data();
                                const double t0 = now_ns();
                                auto st = cpu::lookup(view, req, &pool);
                                if (!st.is_ok()) return st.status();
                                Sample s;
                                s.ns = now_ns() - t0;
                                return s;
                              }});
                vs.push_back({"cpu gather", [&, rows](int k) -> Result<Sample> {
                                const int64_t* ids = id_sets[static_cast<size_t>(k)].data();
                                const int64_t per = row_copy + (fmt == RowFormat::kFused ? 0 : d / 32);
                                const double t0 = now_ns();
                                pool.parallel_for(rows, 256, [&](int64_t b, int64_t e) {
                                  for (int64_t i = b; i < e; ++i) {
                                    uint8_t* dst = host_gather.data() + i * per;
                                    std::memcpy(dst, view.payload_of(ids[i]), static_cast<size_t>(row_copy));
                                    if (fmt != RowFormat::kFused)
                                      std::memcpy(dst + row_copy, view.scales_of(ids[i]), static_cast<size_t>(d / 32));
                                  }
                                });
                                Sample s;
                                s.ns = now_ns() - t0;
                                return s;
                              }});
              }
              LookupShape shape{rows, d + d / 32, 2LL * d};
              Ceilings ceil;
              if (gpu) ceil.link_gbps = gpu->h2d_pinned_gbps();
              // Two cases: GPU variants against the GPU gather, CPU ones against the CPU gather.
              std::vector<Variant> gv, cv;
              for (auto& v : vs) (v.name.rfind("cpu", 0) == 0 ? cv : gv).push_back(v);
              std::vector<LookupFigures> figsout;
              for (auto* group : {&gv, &cv}) {
                if (group->empty()) continue;
                const bool is_cpu = group == &cv;
                ENGRAM_ASSIGN_OR_RETURN(auto cr, sweep_case(*group, shape, ceil, is_cpu ? "cpu gather" : "cuda gather",
                                                            std::max(ctx.warmup, 1), ctx.reps, ctx.rng));
                for (auto& f : cr.figures) figsout.push_back(f);
              }
              for (const auto& f : figsout) {
                tb.rows.push_back({Cell(lname), Cell(d), Cell(gib(span)), Cell(dist), Cell(sorted ? "yes" : "no"),
                                   Cell(tokens), Cell(rows), Cell(f.name), Cell(f.grid < 0 ? NAN : f.grid),
                                   Cell(f.tiles < 0 ? NAN : static_cast<double>(f.tiles)), Cell(f.ns.median / 1e3),
                                   Cell(f.ns.p5 / 1e3), Cell(f.ns.p95 / 1e3), Cell(f.rows_per_s / 1e6),
                                   Cell(f.source_gbps), Cell(f.staging_gbps), Cell(f.pct_of_link),
                                   Cell(f.pct_of_gather)});
                nlohmann::json cj = {{"layout", lname}, {"d", d},         {"span_bytes", span}, {"ids", dist},
                                     {"zipf_alpha", o.zipf_alpha},       {"sorted", sorted}, {"tokens", tokens},
                                     {"rows", rows},   {"variant", f.name}};
                cj["figures"] = lookup_figures_json(f);
                cases.push_back(cj);
                auto& s = series[f.name];
                s.name = f.name;
                s.x.push_back(static_cast<double>(tokens));
                s.y.push_back(f.rows_per_s / 1e6);
              }
              if (ctx.verbose) std::fprintf(stderr, ".");
            }
            if (dist_ok) {
              for (auto& [k, s] : series) fig.series.push_back(s);
              if (figs.size() < 8) figs.push_back(fig);
            }
          }
        }
      }
    }
  }
  if (want_sweep) rep.tables.push_back(std::move(tb));
  rep.figures = std::move(figs);
  if (want_fast) ENGRAM_RETURN_IF_ERROR(run_fast(o, sections, table_bytes_req, ctx, rep, want_sweep));
  rep.method = {{"warmup", std::max(ctx.warmup, 1)},
                {"reps", ctx.reps},
                {"fresh_ids_per_rep", true},
                {"order", "variants shuffled per repetition; GPU and CPU variants in separate loops"},
                {"gpu_timer", "cudaEvent around one launch, after a TLB scrub and a 256 MiB L2 flush"},
                {"cpu_timer", "steady_clock around the call"},
                {"source_bytes_per_row", "d + d/32"},
                {"staging_bytes_per_row", "2 d"},
                {"sorted", "ids of one call sorted ascending (staging order changes)"},
                {"tlb_scrub_rows", o.tlb_scrub_rows}};
  rep.setup = {{"tables", tables},
               {"sections", sections},
               {"backends", {{"cuda", use_cuda}, {"cpu", use_cpu}, {"host_dma", use_dma}}},
               {"threads", pool.size()},
               {"table_size_requested", o.table_size}};
  rep.data["cases"] = cases;
  return rep;
}

}  // namespace

ENGRAM_BENCH(lookup, {.key = "lookup",
                      .description = "Lookup sweep: layout, d, span, ids (uniform/zipf/text, sorted), batch, grid cap, "
                                     "placement, backend (cuda/cpu/host-dma) vs link and plain-gather ceilings",
                      .add_options =
                          [](CLI::App& s) {
                            s.add_option("--backends", g_opt.backends, "auto, or a list of cuda,cpu,host-dma")
                                ->check(cli::list_of({"auto", "cuda", "cpu", "host-dma"}));
                            s.add_option("--layouts", g_opt.layouts, "Row layouts: fused,split")->delimiter(',')->check(CLI::IsMember({"fused", "split"}));
                            s.add_option("--d", g_opt.d, "Row widths d (multiples of 32)")
                                ->delimiter(',')
                                ->check(cli::multiple_in(32, 8192, 32));
                            s.add_option("--ids", g_opt.dists, "Id distributions: uniform,zipf,text")
                                ->delimiter(',')
                                ->check(CLI::IsMember({"uniform", "zipf", "text"}));
                            s.add_option("--zipf-alpha", g_opt.zipf_alpha, "Zipf exponent")->check(cli::range(1e-6, 100.0));
                            s.add_option("--sorted", g_opt.sorted, "no, yes or no,yes (ids sorted per call)")
                                ->delimiter(',')
                                ->check(CLI::IsMember({"no", "yes"}));
                            s.add_option("--batches", g_opt.batches, "Tokens per call (x 24 heads rows)")
                                ->delimiter(',')
                                ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                            s.add_option("--grid-fractions", g_opt.grid_fractions, "CUDA grid caps (fractions of SMs)")
                                ->delimiter(',')
                                ->check(cli::range(0.01, 1.0));
                            s.add_option("--table-size", g_opt.table_size, "Table bytes (the largest span; default 32GiB)")
                                ->check(cli::size_in(int64_t{1} << 20, int64_t{1} << 50));
                            s.add_option("--spans", g_opt.spans, "Spans the ids cover (<= table size), e.g. 1GiB,32GiB")
                                ->delimiter(',')
                                ->check(cli::size_in(int64_t{1} << 20, int64_t{1} << 50));
                            s.add_option("--placement", g_opt.placement, "Table placement policy (host/placement.hpp)")
                                ->check(cli::parsed_by([](const std::string& t) { return parse_placement(t).status(); }));
                            s.add_option("--backing", g_opt.backing, "Table backing: memfd, shm, hugetlb, anon-thp")
                                ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}));
                            s.add_option("--tlb-scrub-rows", g_opt.tlb_scrub_rows, "Rows of the GPU translation scrub (0 = none)")
                                ->check(cli::range(int64_t{0}, int64_t{1} << 30));
                            s.add_option("--tokens", g_opt.tokens, "Token file of the text ids (default: the default text)")
                                ->check(cli::parsed_by([](const std::string& path) {
                                  // A regular file first (a FIFO would block the read), then a token file.
                                  ENGRAM_RETURN_IF_ERROR(sys::check_input_path(path, sys::InputKind::kFile));
                                  return read_token_file(path).status();
                                }));
                            s.add_option("--sections", g_opt.sections,
                                         "sweep, fast (= calibration,prefill,decode,sort-sweep) or any of those")
                                ->delimiter(',')
                                ->check(CLI::IsMember({"sweep", "fast", "calibration", "prefill", "decode", "sort-sweep"}));
                            s.add_option("--techniques", g_opt.techniques,
                                         "Technique variants: plain,dedup-hash,dedup-sort,cache-fp8,cache-bf16,hybrid,planner,"
                                         "planner-unsplit (the planner without host threads beside device dedup/cache; "
                                         "prefill only) (default all; plain always runs)")->delimiter(',');
                            s.add_option("--fast-ids", g_opt.fast_ids, "Id distributions of the technique sections")
                                ->delimiter(',')
                                ->check(CLI::IsMember({"uniform", "zipf", "text"}));
                            s.add_option("--prefill-tokens", g_opt.prefill_tokens, "Prefill batch of the technique sections (x 24 heads)")
                                ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                            s.add_option("--decode", g_opt.decode, "Decode batches of the technique sections (tokens)")
                                ->delimiter(',')
                                ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                            s.add_option("--sort-sweep", g_opt.sort_sweep, "Batches (tokens) of the sort-threshold sweep")
                                ->delimiter(',')
                                ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                            s.add_option("--cache-size", g_opt.cache_size, "GPU hot-row cache: bytes (1GiB), share of the table (5%) or off")
                                ->check(cli::parsed_by([](const std::string& t) { return cache_bytes_of(t, 1).status(); }));
                            s.add_option("--cache-profile", g_opt.cache_profile,
                                         "Hot-row profile for the text cache (engram profile --layout bench --table-size SAME)")
                                ->check(cli::input_file());
                            s.add_option("--warm-steps", g_opt.warm_steps, "Warm-up window (prefill batches) of in-sample cache profiles")
                                ->check(cli::range(0, 1 << 20));
                            s.add_option("--host-threads", g_opt.host_threads, "Host-gather threads (0 = cores - 2)")->check(cli::range(0, 4096));
                            s.add_option("--hash-seed", g_opt.hash_seed, "Hash seed of the technique sections' text ids");
                          },
                      .filter = nullptr,
                      .run = run_lookup,
                      .order = 30});

}  // namespace engram::bench
