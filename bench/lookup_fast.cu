// Technique sections of `engram bench lookup` (see gpu.hpp run_fast_sections): each fast-path technique
// of src/cuda/fast_lookup.cuh on and off, on one registered V4.1-Flash-row table, with real-text, Zipf and uniform
// ids. Replaces the former standalone engram_bench_lookup_fast and keeps its method: fresh ids per batch (id set k
// in repetition k, the same set for every variant), CUDA-event times of the lookup alone (ids already on the
// device), medians; and follows measure.hpp: warm-up repetitions, variants shuffled per repetition, p5/p95, n/a.
//
// Engines: one FastLookup with the host-gather threads and the FP8 cache (plain, dedup-hash, dedup-sort, cache-fp8,
// hybrid, planner, planner-unsplit) and one with the BF16 cache (cache-bf16); both on the same UvaTable, costs from
// one calibration.
// Forced variants run through launch_plan, the planner through launch; forced batches also feed the planner's
// statistics, as in the engine. Per call the engine's statistics are read before and after (outside the timed
// region), so unique fraction, hit rate and link rows are those of that variant's batches only.
// Link bytes of a batch: rows read over UVA x (d + d/32) + rows gathered on the host x 2d (their BF16 DMA).
// Caches: text ids from the --cache-profile file when given (held-out when it was made from other text: its
// coverage is in-sample, the measured hit rate held-out), otherwise, and for synthetic ids, from a warm-up window
// of the measured source (the batches before the measured ones).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "bench/gpu.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/fast_lookup.cuh"
#include "cuda/registration.cuh"
#include "plan/learned_json.hpp"
#include "engram/units.hpp"
#include "replay/id_source.hpp"
#include "sys/affinity.hpp"

namespace engram::bench {
namespace {

using cuda::cuda_status;
#define FAST_CK(call) ENGRAM_RETURN_IF_ERROR(cuda_status((call), #call))

constexpr double kNaN = stats::kNaN;

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }
double pct(double x) { return std::isfinite(x) ? 100 * x : kNaN; }

// Steps 0..n-1 of a source at one batch size: [step][tokens * heads] ids of layer 0.
Result<std::vector<std::vector<int64_t>>> steps(IdSource& src, int64_t tokens, int n) {
  std::vector<std::vector<int64_t>> out;
  std::vector<std::vector<int64_t>> ids;
  for (int k = 0; k < n; ++k) {
    ENGRAM_RETURN_IF_ERROR(src.next_step(k, static_cast<int>(tokens), ids));
    out.push_back(ids[0]);
  }
  return out;
}

// Device resources shared by the sections.
struct Gpu {
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  int64_t* d_ids = nullptr;          // [sets][max_rows]
  uint16_t* d_out = nullptr;         // [max_rows][d]
  unsigned long long* d_cnt = nullptr;
  int64_t max_rows = 0;
  int sets = 0;
  std::unique_ptr<cuda::HostRegistration> reg;
  std::unique_ptr<cuda::UvaTable> uva;
  std::unique_ptr<cuda::FastLookup> fl;       // host gather + fp8 cache
  std::unique_ptr<cuda::FastLookup> fl_bf16;  // bf16 cache
  ~Gpu() {
    if (s) cudaStreamSynchronize(s);
    fl.reset();
    fl_bf16.reset();
    uva.reset();
    if (reg) (void)reg->release();
    for (void* p : {static_cast<void*>(d_ids), static_cast<void*>(d_out), static_cast<void*>(d_cnt)})
      if (p) cudaFree(p);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
  }
};

// One variant's accumulated engine statistics over its timed calls.
struct Acc {
  int64_t rows = 0, dedup_rows = 0, unique = 0, probes = 0, hits = 0, host_rows = 0, calls = 0;
  std::map<std::string, int> paths;
  // Every call in order, warm-ups included: its time, path, unique fraction and hit rate (what a planner row's
  // learner saw, call by call).
  nlohmann::json calls_json = nlohmann::json::array();
  plan::Plan last;  // the plan of the variant's last call (a planner row's `why`)
  double unique_fraction() const { return dedup_rows > 0 ? static_cast<double>(unique) / dedup_rows : kNaN; }
  double hit_rate() const { return probes > 0 ? static_cast<double>(hits) / probes : kNaN; }
  // Rows read over UVA per call, and rows gathered on the host per call.
  double uva_rows() const {
    if (calls == 0) return kNaN;
    const double read = (dedup_rows > 0 ? unique + (rows - dedup_rows) : rows) - hits - host_rows;
    return read / calls;
  }
  double host_rows_per_call() const { return calls > 0 ? static_cast<double>(host_rows) / calls : kNaN; }
  std::string path() const {
    std::string out;
    for (const auto& [p, n] : paths) out += (out.empty() ? "" : ", ") + p + (paths.size() > 1 ? fmt::format(" x{}", n) : "");
    return out;
  }
};

// What the planner's learner holds: predicted vs measured per path and batch-size range (served batches only).
nlohmann::json learned_json(cuda::FastLookup& fl, void* stream) {
  auto st = fl.stats(stream);
  if (!st.is_ok()) return nullptr;
  return plan::learned_json(st->learned);
}

constexpr int kMaxFastVariants = 8;  // plain, dedup-hash, dedup-sort, cache-fp8, cache-bf16, hybrid, planner, planner-unsplit

struct FastVariant {
  std::string name;       // technique name (fast_techniques())
  plan::Plan plan;
  bool planner = false;
  bool bf16 = false;      // runs on the bf16-cache engine
  bool unsplit = false;   // the planner without splits (no host share beside device dedup/cache): their A/B
};

std::vector<FastVariant> variants(const std::vector<std::string>& techniques, const plan::Costs& k, bool with_cache,
                                  bool with_host) {
  std::vector<FastVariant> v;
  plan::Plan p;
  p.background = false;
  p.grid_cap = GridCap::all_sms();  // the planner's inline grid: plain vs planner is one A/B
  v.push_back({"plain", p});
  auto want = [&](const char* t) { return techniques.empty() || has(techniques, t); };
  plan::Plan q = p;
  q.dedup = true;
  if (want("dedup-hash")) v.push_back({"dedup-hash", q});
  q.sort = true;
  if (want("dedup-sort")) v.push_back({"dedup-sort", q});
  q.sort = false;
  q.cache = true;
  if (with_cache && want("cache-fp8")) v.push_back({"cache-fp8", q});
  if (with_cache && want("cache-bf16")) v.push_back({"cache-bf16", q, false, true});
  plan::Plan h = p;
  h.host_share = plan::balanced_host_share(k.uva_rows_per_s, k.host_rows_per_s);
  if (with_host && h.host_share > 0 && want("hybrid")) v.push_back({"hybrid", h});
  if (want("planner")) v.push_back({"planner", {}, true});
  if (with_host && want("planner-unsplit")) v.push_back({"planner-unsplit", {}, true, false, true});
  return v;
}

// Times `vars` over id sets `sets` (uploaded to the device here) of `tokens` x heads rows. Every (repetition, variant)
// call gets its own set (index rep * vars.size() + variant), so no call reads rows a previous call just brought into
// the GPU's L2 or TLBs: with one set per repetition shared by all variants (the first version), the variant that ran
// first in a repetition paid the cold misses and the others did not (H200 2026-12-01: plain decode batches of 1536
// rows took 20 us warm, 53-65 us cold; the calibration, on fresh ids, measured 35 us for 512 and 92 us for 2048).
Result<std::vector<VariantTimes>> time_fast(Gpu& g, const std::vector<FastVariant>& vars,
                                            const std::vector<std::vector<int64_t>>& sets, int64_t tokens, int heads,
                                            int warmup, int reps, std::mt19937_64& rng, std::vector<Acc>& acc) {
  const int64_t rows = tokens * heads;
  if (sets.size() < static_cast<size_t>(warmup + reps) * vars.size())
    return Status(Code::kInternal, "lookup-fast: " + std::to_string(sets.size()) + " id sets for " +
                                       std::to_string(warmup + reps) + " repetitions x " + std::to_string(vars.size()) +
                                       " variants");
  for (size_t k = 0; k < sets.size() && k < static_cast<size_t>(g.sets); ++k)
    FAST_CK(cudaMemcpyAsync(g.d_ids + static_cast<int64_t>(k) * g.max_rows, sets[k].data(), 8 * static_cast<size_t>(rows),
                            cudaMemcpyHostToDevice, g.s));
  FAST_CK(cudaStreamSynchronize(g.s));
  acc.assign(vars.size(), Acc{});
  std::vector<Variant> vs;
  for (size_t i = 0; i < vars.size(); ++i) {
    vs.push_back({vars[i].name, [&, i, rows](int rep) -> Result<Sample> {
                    const FastVariant& v = vars[i];
                    cuda::FastLookup& fl = v.bf16 ? *g.fl_bf16 : *g.fl;
                    ENGRAM_ASSIGN_OR_RETURN(const cuda::FastLookupStats before, fl.stats(g.s));
                    cuda::LookupArgs la;
                    la.table = g.uva.get();
                    const size_t set = static_cast<size_t>(rep) * vars.size() + i;  // own ids (see above)
                    la.ids = g.d_ids + static_cast<int64_t>(set) * g.max_rows;
                    la.ids_host = sets[set].data();
                    la.tokens = tokens;
                    la.heads = heads;
                    la.out = g.d_out;
                    la.counters = g.d_cnt;
                    la.grid_cap = GridCap::all_sms();
                    const bool split_allowed = fl.planner_options().allow_split;
                    if (v.unsplit) fl.planner_options().allow_split = false;
                    FAST_CK(cudaEventRecord(g.e0, g.s));
                    auto li = v.planner ? fl.launch(la, g.s) : fl.launch_plan(la, v.plan, g.s);
                    FAST_CK(cudaEventRecord(g.e1, g.s));
                    fl.planner_options().allow_split = split_allowed;
                    if (!li.is_ok()) return li.status().with_context(v.name);
                    FAST_CK(cudaEventSynchronize(g.e1));
                    float ms = 0;
                    FAST_CK(cudaEventElapsedTime(&ms, g.e0, g.e1));
                    ENGRAM_ASSIGN_OR_RETURN(const cuda::FastLookupStats after, fl.stats(g.s));
                    // This call's own statistics (the counts between the two reads), as run: launch_plan adjusts
                    // what it cannot take.
                    Acc one;
                    one.rows = after.rows - before.rows;
                    one.dedup_rows = after.dedup_rows - before.dedup_rows;
                    one.unique = after.unique_rows - before.unique_rows;
                    one.probes = after.cache_probes - before.cache_probes;
                    one.hits = after.cache_hits - before.cache_hits;
                    one.host_rows = after.host_rows - before.host_rows;
                    const std::string path = fl.last_plan().path_name();
                    Acc& a = acc[i];
                    a.last = fl.last_plan();
                    a.calls_json.push_back({{"warmup", rep < warmup}, {"us", static_cast<double>(ms) * 1e3}, {"path", path},
                                            {"unique_fraction", json_num(one.unique_fraction())},
                                            {"cache_hit_rate", json_num(one.hit_rate())}});
                    if (rep >= warmup) {
                      a.rows += one.rows;
                      a.dedup_rows += one.dedup_rows;
                      a.unique += one.unique;
                      a.probes += one.probes;
                      a.hits += one.hits;
                      a.host_rows += one.host_rows;
                      ++a.calls;
                      ++a.paths[path];
                    }
                    Sample smp;
                    smp.ns = static_cast<double>(ms) * 1e6;
                    smp.grid = li->grid;
                    smp.tiles = li->tiles;
                    return smp;
                  }});
  }
  return time_variants(vs, warmup, reps, rng);
}

// Share of `sets`' lookups (and of their per-batch unique ids) whose id `cache` holds: the held-out hit rate
// predicted on the CPU from the cache's host map.
std::pair<double, double> cpu_coverage(const cuda::HotRowCache& cache, const std::vector<std::vector<int64_t>>& sets) {
  int64_t n = 0, hit = 0, un = 0, uhit = 0;
  std::unordered_set<int64_t> seen;
  for (const auto& s : sets) {
    seen.clear();
    for (int64_t id : s) {
      const bool c = cache.contains(id);
      ++n;
      hit += c;
      if (seen.insert(id).second) {
        ++un;
        uhit += c;
      }
    }
  }
  return {n ? static_cast<double>(hit) / n : kNaN, un ? static_cast<double>(uhit) / un : kNaN};
}

}  // namespace

Status run_fast_sections(const TableView& view, int64_t table_bytes, int heads, const FastSectionOptions& o,
                         Context& ctx, Report& rep) {
  if (auto w = gpu_waiver()) return Status(Code::kUnsupported, *w);
  const int warmup = std::max(ctx.warmup, 1), reps = ctx.reps;
  Gpu g;
  g.sets = (warmup + reps) * kMaxFastVariants;  // fresh ids for every (repetition, variant) call
  g.max_rows = o.prefill_tokens * heads;
  for (int64_t t : o.decode_tokens) g.max_rows = std::max(g.max_rows, t * heads);
  for (int64_t t : o.sort_sweep_tokens) g.max_rows = std::max(g.max_rows, t * heads);
  FAST_CK(cudaSetDevice(0));
  FAST_CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  FAST_CK(cudaEventCreate(&g.e0));
  FAST_CK(cudaEventCreate(&g.e1));
  FAST_CK(cudaMalloc(&g.d_ids, 8 * static_cast<size_t>(g.max_rows) * g.sets));
  FAST_CK(cudaMalloc(&g.d_out, 2 * static_cast<size_t>(view.d) * g.max_rows));
  FAST_CK(cudaMalloc(&g.d_cnt, 16));
  FAST_CK(cudaMemset(g.d_cnt, 0, 16));
  cuda::RegistrationOptions ro;
  ro.boundary_bytes = view.format == RowFormat::kFused ? view.stride_bytes : view.d;
  const double t_reg = now_ns();
  auto reg = cuda::HostRegistration::register_range(view.data, table_bytes, ro);
  if (!reg.is_ok()) return reg.status().with_context("fast sections: register the table");
  g.reg = std::make_unique<cuda::HostRegistration>(std::move(*reg));
  auto uva = cuda::UvaTable::make(view, {g.reg.get()});
  if (!uva.is_ok()) return uva.status();
  g.uva = std::make_unique<cuda::UvaTable>(std::move(*uva));
  const double reg_s = (now_ns() - t_reg) * 1e-9;
  const int host_threads = sys::threads_or_auto(o.host_threads);
  cuda::FastLookupOptions fo;
  fo.max_rows = g.max_rows;
  fo.host_threads = host_threads;
  ENGRAM_ASSIGN_OR_RETURN(g.fl, cuda::FastLookup::create(g.uva.get(), fo));
  fo.host_threads = 0;
  ENGRAM_ASSIGN_OR_RETURN(g.fl_bf16, cuda::FastLookup::create(g.uva.get(), fo));
  ENGRAM_RETURN_IF_ERROR(g.fl->calibrate(g.s).with_context("calibration"));
  g.fl_bf16->costs() = g.fl->costs();
  const plan::Costs k = g.fl->costs();
  const double link_bpr = view.d + view.d / 32.0, host_bpr = 2.0 * view.d;
  nlohmann::json J = {{"register_s", reg_s}, {"host_threads", host_threads}, {"cache_bytes", o.cache_bytes},
                      {"cache_size", o.cache_size_text}, {"max_rows", g.max_rows}};

  // ---- calibration -----------------------------------------------------------------------------------------
  J["calibration"] = {{"uva_rows_per_s", json_num(k.uva_rows_per_s)}, {"uva_sorted_rows_per_s", json_num(k.uva_sorted_rows_per_s)},
                      {"uva_fixed_us", json_num(k.uva_fixed_us)}, {"dedup_hash_fixed_us", json_num(k.dedup_hash_fixed_us)},
                      {"dedup_hash_ns_per_row", json_num(k.dedup_hash_ns_per_row)}, {"dedup_sort_fixed_us", json_num(k.dedup_sort_fixed_us)},
                      {"dedup_sort_ns_per_row", json_num(k.dedup_sort_ns_per_row)}, {"scatter_ns_per_row", json_num(k.scatter_ns_per_row)},
                      {"host_rows_per_s", json_num(k.host_rows_per_s)}, {"host_fixed_us", json_num(k.host_fixed_us)},
                      {"sort_min_unique_rows", k.sort_min_unique_rows}, {"source", k.source},
                      {"uva_curve_rows_us", k.uva_curve}, {"host_curve_rows_us", k.host_curve},
                      {"hybrid_curve_rows_us", k.hybrid_curve}, {"hybrid_share", k.hybrid_share}};
  if (has(o.sections, "calibration")) {
    Table t;
    t.key = "lookup_fast_calibration";
    t.title = "Fast path: start-up calibration on this table (the planner's costs; M = 1e6)";
    t.columns = {{"cost", 0}, {"value", 3}, {"unit", 0}};
    auto row = [&](const char* n, double v, const char* u) { t.rows.push_back({Cell(n), Cell(v), Cell(u)}); };
    row("UVA lookup, random rows", k.uva_rows_per_s / 1e6, "M rows/s");
    row("UVA lookup, rows sorted by address", k.uva_sorted_rows_per_s > 0 ? k.uva_sorted_rows_per_s / 1e6 : kNaN, "M rows/s");
    row("UVA fixed", k.uva_fixed_us, "us");
    row("hash dedup fixed", k.dedup_hash_fixed_us, "us");
    row("hash dedup per row", k.dedup_hash_ns_per_row, "ns/row");
    row("sort dedup fixed", k.dedup_sort_fixed_us, "us");
    row("sort dedup per row", k.dedup_sort_ns_per_row, "ns/row");
    row("scatter per row", k.scatter_ns_per_row, "ns/row");
    row("host gather + DMA", k.host_rows_per_s > 0 ? k.host_rows_per_s / 1e6 : kNaN, "M rows/s");
    row("host gather fixed", k.host_fixed_us, "us");
    row("sort threshold (sort at >= unique rows)", k.sort_min_unique_rows > 0 ? static_cast<double>(k.sort_min_unique_rows) : kNaN, "rows");
    row("hybrid host share (balanced)", pct(plan::balanced_host_share(k.uva_rows_per_s, k.host_rows_per_s)), "%");
    t.notes.push_back(fmt::format("source: {}; host-gather threads {}; registration {:.1f} s", k.source, host_threads, reg_s));
    // The measured curves the planner prices with (rows: plain / host / hybrid us).
    for (size_t i = 0; i < k.uva_curve.size(); ++i)
      t.notes.push_back(fmt::format("curve {:>7.0f} rows: plain {:8.1f} us, host {:8.1f} us, hybrid (host {:.0f}%) {:8.1f} us",
                                    k.uva_curve[i].first, k.uva_curve[i].second,
                                    i < k.host_curve.size() ? k.host_curve[i].second : kNaN, 100 * k.hybrid_share,
                                    i < k.hybrid_curve.size() ? k.hybrid_curve[i].second : kNaN));
    rep.tables.push_back(std::move(t));
  }

  Table pre, dec, cache_t;
  pre.key = "lookup_fast_prefill";
  pre.title = fmt::format("Fast path, prefill {} tokens x {} heads: each technique vs plain, fresh ids of the same source for every call (median "
                          "[p5, p95] us; ratio = plain median / variant median; ceiling = what the technique could "
                          "reach: 1/unique, 1/(unique x (1 - hit)), (R_uva + R_host)/R_uva)", o.prefill_tokens, heads);
  pre.columns = {{"ids", 0},         {"variant", 0},     {"path", 0},         {"med [us]", 1},    {"p5 [us]", 1},
                 {"p95 [us]", 1},    {"rows/s [M]", 2},  {"x plain", 2},      {"ceiling [x]", 2}, {"unique [%]", 1},
                 {"hit [%]", 1},     {"link [MB/call]", 2}};
  dec.key = "lookup_fast_decode";
  dec.title = fmt::format("Fast path, decode with a cache of {} ({}): link bytes per token = (UVA rows x (d + d/32) + "
                          "host rows x 2d) / tokens; cut = plain / variant", o.cache_size_text, format_bytes(o.cache_bytes));
  dec.columns = {{"ids", 0},        {"tokens", 0},      {"variant", 0},      {"path", 0},       {"med [us]", 1},
                 {"p5 [us]", 1},    {"p95 [us]", 1},    {"link B/token", 0}, {"cut [x]", 2},    {"ceiling [x]", 2},
                 {"hit [%]", 1}};
  cache_t.key = "lookup_fast_cache";
  cache_t.title = "Fast path: hot-row cache fill and hit rates; profile coverage is in-sample (share of the PROFILE's "
                  "lookups the cached ids cover), the CPU and GPU figures are measured on the benchmark's ids";
  cache_t.columns = {{"ids", 0},          {"format", 0},           {"profile", 0},            {"rows", 0},
                     {"HBM [MiB]", 1},    {"profile cov [%]", 1},  {"ids cov [%]", 1},        {"unique cov [%]", 1},
                     {"GPU hit prefill [%]", 1}};
  nlohmann::json sections = nlohmann::json::array();
  const bool with_cache = o.cache_bytes > 0;

  for (const auto& dist : o.ids) {
    auto made = o.make_source(dist);
    if (!made.is_ok()) {
      rep.notes.push_back("fast sections, " + dist + " ids: n/a: " + made.status().to_string());
      sections.push_back({{"ids", dist}, {"skipped", made.status().to_string()}});
      continue;
    }
    std::unique_ptr<IdSource> src = std::move(*made);
    nlohmann::json sec = {{"ids", dist}, {"describe", src->describe()}};
    // Each distribution is new traffic: the planner starts learning afresh, as a new engine would (what it learned
    // on the previous distribution's batches says nothing about these).
    g.fl->learner().reset();
    g.fl_bf16->learner().reset();
    // Warm-up window (profile when none is given) then the measured prefill sets.
    ENGRAM_ASSIGN_OR_RETURN(auto all, steps(*src, o.prefill_tokens, o.warm_steps + g.sets));
    std::vector<std::vector<int64_t>> psets(all.begin() + o.warm_steps, all.end());
    std::vector<std::pair<int64_t, int64_t>> profile;
    int64_t profile_lookups = 0;
    std::string profile_name;
    if (dist == "text" && !o.text_profile.empty()) {
      profile = o.text_profile;
      profile_lookups = o.text_profile_lookups;
      profile_name = o.text_profile_path;
    } else {
      std::unordered_map<int64_t, int64_t> freq;
      for (int w = 0; w < o.warm_steps; ++w)
        for (int64_t id : all[static_cast<size_t>(w)]) ++freq[id];
      profile.assign(freq.begin(), freq.end());
      std::sort(profile.begin(), profile.end(), [](auto& a, auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
      for (auto& [id, c] : profile) profile_lookups += c;
      profile_name = fmt::format("warm-up window ({} batches before the measured ones)", o.warm_steps);
    }
    all.clear();
    if (with_cache) {
      std::vector<int64_t> hot;
      hot.reserve(profile.size());
      for (auto& [id, c] : profile) hot.push_back(id);
      for (int f = 0; f < 2; ++f) {
        cuda::HotCacheOptions co;
        co.budget_bytes = o.cache_bytes;
        co.format = f == 0 ? cuda::CacheFormat::kFp8 : cuda::CacheFormat::kBf16;
        ENGRAM_ASSIGN_OR_RETURN(auto c, cuda::HotRowCache::create(view, hot, co));
        int64_t covered = 0;
        for (auto& [id, cnt] : profile)
          if (c->contains(id)) covered += cnt;
        const double cov = profile_lookups > 0 ? static_cast<double>(covered) / profile_lookups : kNaN;
        c->set_profile_coverage(cov);  // the planner's hit-rate prior
        const auto [ids_cov, uniq_cov] = cpu_coverage(*c, psets);
        cache_t.rows.push_back({Cell(dist), Cell(f == 0 ? "fp8" : "bf16"), Cell(profile_name), Cell(c->filled()),
                                Cell(static_cast<double>(c->hbm_bytes()) / double(1 << 20)), Cell(pct(cov)),
                                Cell(pct(ids_cov)), Cell(pct(uniq_cov)), Cell(kNaN)});
        sec[f == 0 ? "cache_fp8" : "cache_bf16"] = {{"rows", c->filled()}, {"slots", c->slots()}, {"hbm_bytes", c->hbm_bytes()},
                                                    {"profile", profile_name}, {"profile_ids", profile.size()},
                                                    {"profile_coverage", json_num(cov)}, {"ids_coverage_cpu", json_num(ids_cov)},
                                                    {"unique_coverage_cpu", json_num(uniq_cov)}};
        (f == 0 ? g.fl : g.fl_bf16)->set_cache(std::move(c));
      }
      // cache_fixed_us and cache_hit_ns_per_row are calibrated when a cache is attached (the planner prices cache
      // launches and cached rows with them).
      ENGRAM_RETURN_IF_ERROR(g.fl->calibrate(g.s).with_context("calibration with the cache"));
      g.fl_bf16->costs() = g.fl->costs();
      sec["cache_fixed_us"] = json_num(g.fl->costs().cache_fixed_us);
      const double hit_ns = g.fl->costs().cache_hit_ns_per_row;
      sec["cache_hit_ns_per_row"] = json_num(hit_ns > 0 ? hit_ns : kNaN);
    }
    const auto vars = variants(o.techniques, g.fl->costs(), with_cache, g.fl->host_gather() != nullptr);

    // ---- prefill ---------------------------------------------------------------------------------------------
    if (has(o.sections, "prefill")) {
      std::vector<Acc> acc;
      ENGRAM_ASSIGN_OR_RETURN(auto times, time_fast(g, vars, psets, o.prefill_tokens, heads, warmup, reps, ctx.rng, acc));
      const double rows = static_cast<double>(o.prefill_tokens * heads);
      double plain = kNaN;
      for (const auto& t : times)
        if (t.name == "plain") plain = t.summary().median;
      nlohmann::json pj = nlohmann::json::array();
      for (size_t i = 0; i < vars.size(); ++i) {
        const auto s = times[i].summary();
        const Acc& a = acc[i];
        const FastVariant& v = vars[i];
        double ceiling = kNaN;
        const double u = a.unique_fraction(), hit = a.hit_rate();
        if (v.plan.dedup && std::isfinite(u)) ceiling = 1.0 / u;
        if (v.plan.cache && std::isfinite(u) && std::isfinite(hit)) ceiling = 1.0 / std::max(1e-9, u * (1 - hit));
        if (v.plan.host_share > 0 && k.uva_rows_per_s > 0) ceiling = (k.uva_rows_per_s + k.host_rows_per_s) / k.uva_rows_per_s;
        const double rps = s.median > 0 ? rows / (s.median * 1e-9) : kNaN;
        const double link_mb = (a.uva_rows() * link_bpr + a.host_rows_per_call() * host_bpr) / 1e6;
        pre.rows.push_back({Cell(dist), Cell(v.name), Cell(a.path()), Cell(s.median / 1e3), Cell(s.p5 / 1e3),
                            Cell(s.p95 / 1e3), Cell(rps / 1e6), Cell(plain / s.median), Cell(ceiling), Cell(pct(u)),
                            Cell(pct(hit)), Cell(link_mb)});
        pj.push_back({{"variant", v.name}, {"path", a.path()}, {"ns", summary_json(s)}, {"rows_per_s", json_num(rps)},
                      {"ratio_vs_plain", json_num(plain / s.median)}, {"ceiling", json_num(ceiling)}, {"unique_fraction", json_num(u)},
                      {"cache_hit_rate", json_num(hit)}, {"link_bytes_per_call", json_num(link_mb * 1e6)},
                      {"why", v.planner ? nlohmann::json(plan::explain(a.last, g.fl->costs().source)) : nlohmann::json(nullptr)},
                      {"learned", v.planner ? learned_json(*g.fl, g.s) : nlohmann::json(nullptr)},
                      {"calls", a.calls_json}});
        if (v.name == "cache-fp8" || v.name == "cache-bf16")
          for (auto& r : cache_t.rows)
            if (r[0].text == dist && r[1].text == (v.name == "cache-fp8" ? "fp8" : "bf16")) r[8] = Cell(pct(hit));
      }
      sec["prefill"] = pj;
    }

    // ---- decode ----------------------------------------------------------------------------------------------
    if (has(o.sections, "decode")) {
      nlohmann::json dj = nlohmann::json::array();
      for (int64_t tokens : o.decode_tokens) {
        ENGRAM_ASSIGN_OR_RETURN(auto made2, o.make_source(dist));
        // Decode batches are a new walk of the source at this batch size; the first warm_steps are skipped so that a
        // warm-up-window profile is not measured on its own batches.
        ENGRAM_ASSIGN_OR_RETURN(auto dall, steps(*made2, tokens, o.warm_steps + g.sets));
        std::vector<std::vector<int64_t>> dsets(dall.begin() + o.warm_steps, dall.end());
        std::vector<FastVariant> dv;
        for (const auto& v : vars)
          if (v.name != "dedup-sort" && v.name != "hybrid" && !v.unsplit) dv.push_back(v);  // prefill-only paths
        std::vector<Acc> acc;
        ENGRAM_ASSIGN_OR_RETURN(auto times, time_fast(g, dv, dsets, tokens, heads, warmup, reps, ctx.rng, acc));
        double plain_bpt = kNaN;
        for (size_t i = 0; i < dv.size(); ++i)
          if (dv[i].name == "plain") plain_bpt = (acc[i].uva_rows() * link_bpr + acc[i].host_rows_per_call() * host_bpr) / tokens;
        for (size_t i = 0; i < dv.size(); ++i) {
          const auto s = times[i].summary();
          const Acc& a = acc[i];
          const double bpt = (a.uva_rows() * link_bpr + a.host_rows_per_call() * host_bpr) / tokens;
          const double u = a.unique_fraction(), hit = a.hit_rate();
          double ceiling = kNaN;
          if (std::isfinite(u)) ceiling = 1.0 / std::max(1e-9, u * (std::isfinite(hit) ? 1 - hit : 1.0));
          dec.rows.push_back({Cell(dist), Cell(tokens), Cell(dv[i].name), Cell(a.path()), Cell(s.median / 1e3),
                              Cell(s.p5 / 1e3), Cell(s.p95 / 1e3), Cell(bpt), Cell(plain_bpt / bpt), Cell(ceiling),
                              Cell(pct(hit))});
          dj.push_back({{"tokens", tokens}, {"variant", dv[i].name}, {"path", a.path()}, {"ns", summary_json(s)},
                        {"link_bytes_per_token", json_num(bpt)}, {"cut_vs_plain", json_num(plain_bpt / bpt)},
                        {"ceiling", json_num(ceiling)}, {"unique_fraction", json_num(u)}, {"cache_hit_rate", json_num(hit)},
                        {"learned", dv[i].planner ? learned_json(*g.fl, g.s) : nlohmann::json(nullptr)},
                        {"calls", dv[i].planner ? a.calls_json : nlohmann::json(nullptr)}});
        }
      }
      sec["decode"] = dj;
    }
    g.fl->set_cache(nullptr);
    g.fl_bf16->set_cache(nullptr);
    sections.push_back(sec);
  }
  if (has(o.sections, "prefill")) rep.tables.push_back(std::move(pre));
  if (has(o.sections, "decode")) rep.tables.push_back(std::move(dec));
  if (with_cache && (has(o.sections, "prefill") || has(o.sections, "decode"))) rep.tables.push_back(std::move(cache_t));
  J["sections"] = sections;

  // ---- sort-threshold sweep: hash vs sort dedup on all-unique uniform rows ------------------------------------
  if (has(o.sections, "sort-sweep")) {
    Table t;
    t.key = "lookup_fast_sort_sweep";
    t.title = "Fast path: sort-threshold sweep, dedup (hash) vs dedup (sort: unique ids in address order) + gather on "
              "uniform ids (all rows unique), median us; the calibrated threshold is where sort starts to win";
    t.columns = {{"tokens", 0}, {"rows", 0}, {"plain [us]", 1}, {"hash [us]", 1}, {"sort [us]", 1}, {"sort/hash", 3}, {"faster", 0}};
    auto usrc = o.make_source("uniform");
    if (!usrc.is_ok()) return usrc.status();
    plan::Plan p;
    p.background = false;
    p.grid_cap = GridCap::all_sms();
    plan::Plan ph = p, ps = p;
    ph.dedup = ps.dedup = true;
    ps.sort = true;
    const std::vector<FastVariant> sv{{"plain", p}, {"dedup-hash", ph}, {"dedup-sort", ps}};
    nlohmann::json sj = nlohmann::json::array();
    int64_t first_sort_win = -1;
    for (int64_t tokens : o.sort_sweep_tokens) {
      ENGRAM_ASSIGN_OR_RETURN(auto sets, steps(**usrc, tokens, g.sets));
      std::vector<Acc> acc;
      ENGRAM_ASSIGN_OR_RETURN(auto times, time_fast(g, sv, sets, tokens, heads, warmup, reps, ctx.rng, acc));
      const double m0 = times[0].summary().median, mh = times[1].summary().median, ms = times[2].summary().median;
      if (ms < mh && first_sort_win < 0) first_sort_win = tokens * heads;
      t.rows.push_back({Cell(tokens), Cell(tokens * heads), Cell(m0 / 1e3), Cell(mh / 1e3), Cell(ms / 1e3),
                        Cell(ms / mh), Cell(ms < mh ? "sort" : "hash")});
      sj.push_back({{"tokens", tokens}, {"rows", tokens * heads}, {"plain_ns", summary_json(times[0].summary())},
                    {"hash_ns", summary_json(times[1].summary())}, {"sort_ns", summary_json(times[2].summary())}});
    }
    t.notes.push_back(fmt::format("calibrated sort threshold: {} unique rows; first swept size where sort wins: {}",
                                  k.sort_min_unique_rows > 0 ? std::to_string(k.sort_min_unique_rows) : "never (n/a)",
                                  first_sort_win > 0 ? std::to_string(first_sort_win) + " rows" : "none"));
    rep.tables.push_back(std::move(t));
    J["sort_sweep"] = sj;
  }
  rep.data["fast"] = J;
  return Status::ok();
}

}  // namespace engram::bench
