// lookup-fast: the lookup beyond the request-bound ceiling (issue #8), each technique on and off, on one
// V4.1-Flash-row table (d = 256, fused, 24 heads, >= 32 GiB for the reported figures) in host memory registered
// for UVA (never copied), with real-text ids (the tokenized text of scripts/tokenize-setup, hashed with the
// reference N-gram hash), Zipf(1) ids and uniform ids.
//
// Sections:
//  1. start-up calibration (FastLookup::calibrate): the costs the planner uses, and the measured sort threshold;
//  2. prefill (8K tokens x 24 heads by default): rows/s of plain UVA, dedup (hash, sort), dedup + cache, hybrid at
//     the calibrated split, and the planner, each as a ratio to plain on the same ids, with its ceiling
//     (rows / unique rows for dedup; rows / unique misses with the cache; (R_uva + R_host) / R_uva for the hybrid);
//  3. decode (64, 256, 512 tokens) with a cache of 5% of the table (FP8 and BF16 rows): PCIe bytes per token
//     (rows read over the link x d + d/32) plain vs fast, time, hit rate;
//  4. sort threshold sweep: hash vs sort dedup + gather on all-unique uniform rows of growing count.
// The cache is filled from a warm-up window of the same id source (steps before the measured ones): for text,
// the frequency profile of the preceding text. Every batch uses fresh ids (the source advances), timings are
// CUDA-event times of the lookup alone, median of --reps. Output: tables on stdout, --json FILE.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "core/units.hpp"
#include "cuda/fast_lookup.cuh"
#include "cuda/registration.cuh"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "replay/id_source.hpp"
#include "replay/text_id_source.hpp"

using namespace engram;
using json = nlohmann::json;

namespace {

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "lookup-fast: %s: %s\n", #x, cudaGetErrorString(e_));             \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

[[noreturn]] void die(const Status& s, const char* what) {
  std::fprintf(stderr, "lookup-fast: %s: %s\n", what, s.to_string().c_str());
  std::exit(s.code() == Code::kUnsupported ? 77 : 1);
}

struct Args {
  double table_gib = 32;
  int prefill_tokens = 8192;
  std::vector<int> decode{64, 256, 512};
  std::vector<std::string> dists{"text", "zipf", "uniform"};
  std::string tokens;
  std::string cache_size = "5%";
  int reps = 5;
  int warm_steps = 8;
  int host_threads = 0;
  int threads = 0;
  uint64_t seed = 1;
  std::string json_path;
  bool smoke = false;
};

EngramLayout bench_layout(int64_t bytes) {
  EngramLayout l;
  l.name = "v41-flash-rows";
  l.layer_ids = {1};
  l.max_ngram = 4;
  l.heads_per_order = 8;
  l.d = 256;
  l.format = RowFormat::kFused;
  const int64_t per_head = bytes / (24 * EngramLayout::fused_record_bytes(256)) + 1;
  l.vocab_size_per_order = {per_head, per_head, per_head};
  const Status st = l.finalize();
  if (!st.is_ok()) die(st, "layout");
  return l;
}

// Parallel synthetic fill: random payload words (splitmix64), realistic scales (codes 119..135), zero padding.
void fill_table(const TableView& v, uint64_t seed, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      const int64_t lo = v.rows * t / threads, hi = v.rows * (t + 1) / threads;
      for (int64_t r = lo; r < hi; ++r) {
        uint64_t* w = reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(v.data) + r * v.stride_bytes);
        for (int i = 0; i < v.stride_bytes / 8; ++i) {
          uint64_t z = seed + static_cast<uint64_t>(r * 64 + i) * 0x9E3779B97F4A7C15ull;
          z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
          z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
          w[i] = z ^ (z >> 31);
        }
        uint8_t* s = const_cast<uint8_t*>(v.data) + r * v.stride_bytes + v.d;
        for (int i = 0; i < v.d / 32; ++i) s[i] = static_cast<uint8_t>(119 + (s[i] % 17));
        for (int64_t i = v.d + v.d / 32; i < v.stride_bytes; ++i) s[i - v.d] = 0;
      }
    });
  for (auto& th : pool) th.join();
}

double median(std::vector<double> x) {
  if (x.empty()) return NAN;
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

struct Variant {
  std::string name;
  plan::Plan plan;
  bool planner = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"lookup-fast: dedup, sort, GPU hot-row cache, host gather + hybrid and the planner vs the plain UVA "
               "lookup (issue #8)"};
  app.add_option("--table-gib", a.table_gib, "Table size in GiB (>= 32 for the reported figures)");
  app.add_option("--prefill-tokens", a.prefill_tokens, "Prefill batch tokens (x 24 heads)");
  app.add_option("--decode", a.decode, "Decode batch sizes (tokens)")->delimiter(',');
  app.add_option("--dists", a.dists, "Id distributions: text, zipf, uniform")->delimiter(',');
  app.add_option("--tokens", a.tokens, "Token file for text ids (default: scripts/tokenize-setup's default)");
  app.add_option("--cache-size", a.cache_size, "GPU hot-row cache: bytes (1GiB) or share of the table (5%)");
  app.add_option("--reps", a.reps, "Timed batches per variant (fresh ids each)");
  app.add_option("--warm-steps", a.warm_steps, "Warm-up window (batches) that fills the cache profile");
  app.add_option("--host-threads", a.host_threads, "Host-gather threads (0 = cores - 2)");
  app.add_option("--threads", a.threads, "Table fill threads (0 = all)");
  app.add_option("--seed", a.seed, "Seed");
  app.add_option("--json", a.json_path, "Write the figures as JSON to this file");
  app.add_flag("--smoke", a.smoke, "Tiny sizes (256 MiB table, 2 reps)");
  CLI11_PARSE(app, argc, argv);
  if (a.smoke) {
    a.table_gib = 0.25;
    a.prefill_tokens = 1024;
    a.reps = 2;
    a.warm_steps = 2;
    a.decode = {64};
  }
  if (a.host_threads <= 0) a.host_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 2);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) die(Status(Code::kUnsupported, "no CUDA device"), "device");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  json J;
  J["bench"] = "lookup-fast";

  const EngramLayout layout = bench_layout(static_cast<int64_t>(a.table_gib * (1ull << 30)));
  const int heads = layout.heads();
  auto table = HostTable::allocate(layout);
  if (!table.is_ok()) die(table.status(), "table");
  const TableView view = (*table)->view(0);
  auto t0 = std::chrono::steady_clock::now();
  fill_table(view, a.seed, a.threads);
  const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cuda::RegistrationOptions ro;
  ro.boundary_bytes = view.stride_bytes;
  t0 = std::chrono::steady_clock::now();
  auto reg = cuda::HostRegistration::register_range(view.data, layout.table_bytes(0), ro);
  if (!reg.is_ok()) die(reg.status(), "registration");
  const double reg_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto uva = cuda::UvaTable::make(view, {&*reg});
  if (!uva.is_ok()) die(uva.status(), "uva table");
  std::printf("table: %s, %lld rows of %lld B (d=256 fused), filled in %.1f s (parallel synthetic), registered in %.1f s\n",
              format_bytes(layout.table_bytes(0)).c_str(), static_cast<long long>(view.rows),
              static_cast<long long>(view.stride_bytes), fill_s, reg_s);
  J["table"] = {{"bytes", layout.table_bytes(0)}, {"rows", view.rows}, {"stride_bytes", view.stride_bytes},
                {"fill_s", fill_s}, {"register_s", reg_s}};

  const int64_t max_rows = static_cast<int64_t>(a.prefill_tokens) * heads;
  cuda::FastLookupOptions fo;
  fo.max_rows = max_rows;
  fo.host_threads = a.host_threads;
  auto fl = cuda::FastLookup::create(&*uva, fo);
  if (!fl.is_ok()) die(fl.status(), "fast lookup");
  Status cs = (*fl)->calibrate(s);
  if (!cs.is_ok()) die(cs, "calibration");
  const plan::Costs& k = (*fl)->costs();
  std::printf("\ncalibration: UVA %.1f M rows/s (sorted %.1f), fixed %.1f us; hash dedup %.1f us + %.3f ns/row; sort "
              "dedup %.1f us + %.3f ns/row; host gather (%d threads) %.1f M rows/s + %.1f us; sort threshold %lld unique rows\n",
              k.uva_rows_per_s / 1e6, k.uva_sorted_rows_per_s / 1e6, k.uva_fixed_us, k.dedup_hash_fixed_us,
              k.dedup_hash_ns_per_row, k.dedup_sort_fixed_us, k.dedup_sort_ns_per_row, a.host_threads,
              k.host_rows_per_s / 1e6, k.host_fixed_us, static_cast<long long>(k.sort_min_unique_rows));
  J["calibration"] = {{"uva_rows_per_s", k.uva_rows_per_s}, {"uva_sorted_rows_per_s", k.uva_sorted_rows_per_s},
                      {"uva_fixed_us", k.uva_fixed_us}, {"dedup_hash_fixed_us", k.dedup_hash_fixed_us},
                      {"dedup_hash_ns_per_row", k.dedup_hash_ns_per_row}, {"dedup_sort_fixed_us", k.dedup_sort_fixed_us},
                      {"dedup_sort_ns_per_row", k.dedup_sort_ns_per_row}, {"host_rows_per_s", k.host_rows_per_s},
                      {"host_fixed_us", k.host_fixed_us}, {"host_threads", a.host_threads},
                      {"sort_min_unique_rows", k.sort_min_unique_rows}, {"source", k.source}};
  auto cache_bytes = cuda::parse_cache_size(a.cache_size, layout.table_bytes(0));
  if (!cache_bytes.is_ok()) die(cache_bytes.status(), "--cache-size");

  int64_t* d_ids = nullptr;
  uint16_t* d_out = nullptr;
  unsigned long long* d_cnt = nullptr;
  CK(cudaMalloc(&d_ids, 8 * max_rows));
  CK(cudaMalloc(&d_out, 2 * 256 * max_rows));
  CK(cudaMalloc(&d_cnt, 16));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const double link_bytes_per_row = view.d + view.d / 32.0;

  J["sections"] = json::array();
  for (const auto& dist : a.dists) {
    // A text source walks its token file with one batch size from step 0; a new batch size restarts it
    // (make_src), past a warm-up window so that the measured steps are not the profiled ones.
    auto make_src = [&]() -> Result<std::unique_ptr<IdSource>> {
      if (dist == "text") {
        auto t = make_text_id_source(layout, a.tokens, "", 0);
        if (!t.is_ok()) return t.status();
        return std::unique_ptr<IdSource>(std::move(*t));
      }
      if (dist == "zipf") {
        auto z = make_zipf_id_source(layout, 1.0, a.seed + 3);
        if (!z.is_ok()) return z.status();
        return std::unique_ptr<IdSource>(std::move(*z));
      }
      return std::unique_ptr<IdSource>(make_uniform_id_source(layout, a.seed + 5));
    };
    std::unique_ptr<IdSource> src;
    {
      auto made = make_src();
      if (!made.is_ok()) {
        if (dist != "text") die(made.status(), dist.c_str());
        std::printf("\n[%s] skipped: %s\n", dist.c_str(), made.status().message().c_str());
        J["sections"].push_back({{"dist", dist}, {"skipped", made.status().message()}});
        continue;
      }
      src = std::move(*made);
    }
    int src_tokens = a.prefill_tokens;
    int64_t step = 0;
    std::vector<std::vector<int64_t>> ids;
    // Warm-up window -> frequency profile -> cache (FP8 and BF16).
    std::unordered_map<int64_t, int64_t> freq;
    for (int w = 0; w < a.warm_steps; ++w) {
      Status st = src->next_step(step++, a.prefill_tokens, ids);
      if (!st.is_ok()) die(st, "ids");
      for (int64_t id : ids[0]) ++freq[id];
    }
    std::vector<std::pair<int64_t, int64_t>> fv(freq.begin(), freq.end());
    std::sort(fv.begin(), fv.end(), [](auto& x, auto& y) { return x.second > y.second; });
    std::vector<int64_t> hot;
    for (auto& [id, c] : fv) hot.push_back(id);
    std::unique_ptr<cuda::HotRowCache> caches[2];
    for (int f = 0; f < 2; ++f) {
      cuda::HotCacheOptions co;
      co.budget_bytes = *cache_bytes;
      co.format = f == 0 ? cuda::CacheFormat::kFp8 : cuda::CacheFormat::kBf16;
      auto c = cuda::HotRowCache::create(view, hot, co);
      if (!c.is_ok()) die(c.status(), "cache");
      caches[f] = std::move(*c);
      caches[f]->set_profile_coverage(caches[f]->coverage_of(fv));  // the planner's hit-rate prior
    }
    std::printf("\n[%s ids] profile: %zu distinct ids in %d warm-up batches; cache %s: fp8 %lld rows, bf16 %lld rows; profile coverage (planner's hit prior) fp8 %.1f%%, bf16 %.1f%%\n",
                dist.c_str(), fv.size(), a.warm_steps, format_bytes(*cache_bytes).c_str(),
                static_cast<long long>(caches[0]->filled()), static_cast<long long>(caches[1]->filled()),
                100 * caches[0]->profile_coverage(), 100 * caches[1]->profile_coverage());

    std::vector<Variant> vars;
    // Fixed variants run at the grid the planner gets (la.grid_fraction = 1.0 below), so that plain vs planner is
    // one A/B (run 1 timed the fixed variants at Plan's default 0.5).
    plan::Plan p;
    p.grid_fraction = 1.0;
    vars.push_back({"plain", p});
    p.dedup = true;
    vars.push_back({"dedup-hash", p});
    p.sort = true;
    vars.push_back({"dedup-sort", p});
    p.sort = false;
    p.cache = true;
    vars.push_back({"dedup+cache-fp8", p});
    vars.push_back({"dedup+cache-bf16", p});
    plan::Plan h;
    h.grid_fraction = 1.0;
    h.host_share = plan::balanced_host_share(k.uva_rows_per_s, k.host_rows_per_s);
    vars.push_back({"hybrid", h});
    vars.push_back({"planner", {}, true});

    auto measure = [&](int tokens, const Variant& v, int cache_fmt, double& ms, double& unique_frac, double& hit,
                       double& link_rows) {
      (*fl)->set_cache(nullptr);
      if (v.plan.cache || v.planner) {
        // Cache objects are moved in and out of the engine so both formats share one FastLookup.
        (*fl)->set_cache(std::move(caches[cache_fmt]));
      }
      std::vector<double> t;
      if (tokens != src_tokens) {
        auto made = make_src();
        if (!made.is_ok()) die(made.status(), "ids");
        src = std::move(*made);
        step = 0;
        src_tokens = tokens;
        for (int w = 0; w < a.warm_steps; ++w) {
          Status st = src->next_step(step++, tokens, ids);
          if (!st.is_ok()) die(st, "ids");
        }
      }
      auto before = (*fl)->stats(s);
      for (int r = 0; r < a.reps + 1; ++r) {
        Status st = src->next_step(step++, tokens, ids);
        if (!st.is_ok()) die(st, "ids");
        CK(cudaMemcpyAsync(d_ids, ids[0].data(), 8 * ids[0].size(), cudaMemcpyHostToDevice, s));
        cuda::LookupArgs la;
        la.table = &*uva;
        la.ids = d_ids;
        la.ids_host = ids[0].data();
        la.tokens = tokens;
        la.heads = heads;
        la.out = d_out;
        la.counters = d_cnt;
        la.grid_fraction = 1.0;
        CK(cudaStreamSynchronize(s));
        CK(cudaEventRecord(e0, s));
        auto li = v.planner ? (*fl)->launch(la, s) : (*fl)->launch_plan(la, v.plan, s);
        if (!li.is_ok()) die(li.status(), v.name.c_str());
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float f = 0;
        CK(cudaEventElapsedTime(&f, e0, e1));
        if (r > 0) t.push_back(f);  // first batch: warm-up
      }
      auto after = (*fl)->stats(s);
      ms = median(t);
      const double du = static_cast<double>(after->unique_rows - before->unique_rows);
      const double dr = static_cast<double>(after->dedup_rows - before->dedup_rows);
      const double dh = static_cast<double>(after->cache_hits - before->cache_hits);
      const double dp = static_cast<double>(after->cache_probes - before->cache_probes);
      unique_frac = dr > 0 ? du / dr : NAN;
      hit = dp > 0 ? dh / dp : NAN;
      const double rows_all = static_cast<double>(after->rows - before->rows);
      const double read = (dr > 0 ? du + (rows_all - dr) : rows_all) - dh;
      link_rows = read / (a.reps + 1);
    };
    // set_cache takes ownership and the next variant's set_cache(nullptr) frees it: rebuild before each use.
    auto rebuild = [&](int f) {
      if (caches[f]) return;
      cuda::HotCacheOptions co;
      co.budget_bytes = *cache_bytes;
      co.format = f == 0 ? cuda::CacheFormat::kFp8 : cuda::CacheFormat::kBf16;
      auto c = cuda::HotRowCache::create(view, hot, co);
      if (!c.is_ok()) die(c.status(), "cache");
      caches[f] = std::move(*c);
      caches[f]->set_profile_coverage(caches[f]->coverage_of(fv));
    };
    json sec = {{"dist", dist}, {"describe", src->describe()}, {"profile_distinct_ids", fv.size()},
                {"profile_coverage_fp8", caches[0]->profile_coverage()},
                {"profile_coverage_bf16", caches[1]->profile_coverage()},
                {"cache_bytes", *cache_bytes}, {"cache_rows_fp8", caches[0]->filled()},
                {"cache_rows_bf16", caches[1]->filled()}};
    const double hbm_fp8 = static_cast<double>(caches[0]->hbm_bytes()), hbm_bf16 = static_cast<double>(caches[1]->hbm_bytes());
    // Prefill.
    std::printf("prefill %d tokens x %d heads = %lld rows\n", a.prefill_tokens, heads,
                static_cast<long long>(max_rows));
    std::printf("  %-18s %10s %12s %8s %9s %8s %10s  %s\n", "variant", "ms", "M rows/s", "ratio", "ceiling", "unique",
                "cache hit", "path");
    double plain_ms = NAN;
    json pre = json::array();
    for (const auto& v : vars) {
      const int cf = v.name == "dedup+cache-bf16" ? 1 : 0;
      rebuild(cf);
      double ms, u, hit, link_rows;
      measure(a.prefill_tokens, v, cf, ms, u, hit, link_rows);
      if (v.name == "plain") plain_ms = ms;
      const double ratio = plain_ms / ms;
      double ceiling = NAN;
      if (v.plan.dedup && std::isfinite(u)) ceiling = 1.0 / u;
      if (v.plan.cache && std::isfinite(u) && std::isfinite(hit)) ceiling = 1.0 / std::max(1e-9, u * (1 - hit));
      if (v.plan.host_share > 0) ceiling = (k.uva_rows_per_s + k.host_rows_per_s) / k.uva_rows_per_s;
      const std::string path = v.planner ? (*fl)->last_plan().path_name() : v.plan.path_name();
      std::printf("  %-18s %10.3f %12.1f %8.2f %9s %7s %10s  %s\n", v.name.c_str(), ms, max_rows / ms / 1e3, ratio,
                  std::isfinite(ceiling) ? (std::to_string(ceiling).substr(0, 5) + "x").c_str() : "n/a",
                  std::isfinite(u) ? (std::to_string(100 * u).substr(0, 4) + "%").c_str() : "n/a",
                  std::isfinite(hit) ? (std::to_string(100 * hit).substr(0, 4) + "%").c_str() : "n/a", path.c_str());
      pre.push_back({{"variant", v.name}, {"ms", ms}, {"rows_per_s", max_rows / ms * 1e3}, {"ratio_vs_plain", ratio},
                     {"ceiling", std::isfinite(ceiling) ? json(ceiling) : json(nullptr)},
                     {"unique_fraction", std::isfinite(u) ? json(u) : json(nullptr)},
                     {"cache_hit_rate", std::isfinite(hit) ? json(hit) : json(nullptr)}, {"path", path},
                     {"why", v.planner ? json((*fl)->last_plan().why) : json(nullptr)}});
    }
    sec["prefill"] = pre;
    // Decode: bytes per token over the link, plain vs dedup+cache (both formats) and the planner.
    json dec = json::array();
    std::printf("decode, cache %s (fp8 %s HBM, bf16 %s HBM)\n", a.cache_size.c_str(), format_bytes(static_cast<int64_t>(hbm_fp8)).c_str(),
                format_bytes(static_cast<int64_t>(hbm_bf16)).c_str());
    std::printf("  %-8s %-18s %10s %14s %8s %9s %10s\n", "tokens", "variant", "us", "link B/token", "cut", "ceiling", "cache hit");
    for (int tokens : a.decode) {
      double plain_bpt = NAN;
      for (const auto& v : vars) {
        if (v.name == "dedup-sort" || v.name == "hybrid") continue;
        const int cf = v.name == "dedup+cache-bf16" ? 1 : 0;
        rebuild(cf);
        double ms, u, hit, link_rows;
        measure(tokens, v, cf, ms, u, hit, link_rows);
        const double bpt = link_rows * link_bytes_per_row / tokens;
        if (v.name == "plain") plain_bpt = bpt;
        const double cut = plain_bpt / bpt;
        double ceiling = NAN;
        if (std::isfinite(u)) ceiling = 1.0 / std::max(1e-9, u * (std::isfinite(hit) ? 1 - hit : 1.0));
        std::printf("  %-8d %-18s %10.1f %14.0f %8.2f %9s %10s\n", tokens, v.name.c_str(), ms * 1e3, bpt, cut,
                    std::isfinite(ceiling) ? (std::to_string(ceiling).substr(0, 5) + "x").c_str() : "n/a",
                    std::isfinite(hit) ? (std::to_string(100 * hit).substr(0, 4) + "%").c_str() : "n/a");
        dec.push_back({{"tokens", tokens}, {"variant", v.name}, {"us", ms * 1e3}, {"link_bytes_per_token", bpt},
                       {"cut_vs_plain", cut}, {"ceiling", std::isfinite(ceiling) ? json(ceiling) : json(nullptr)},
                       {"cache_hit_rate", std::isfinite(hit) ? json(hit) : json(nullptr)},
                       {"path", v.planner ? (*fl)->last_plan().path_name() : v.plan.path_name()}});
      }
    }
    sec["decode"] = dec;
    J["sections"].push_back(sec);
  }
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    f << J.dump(2) << "\n";
  }
  return 0;
}
