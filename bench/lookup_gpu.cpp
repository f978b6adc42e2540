// engram_bench_lookup_gpu: UVA lookup throughput on one GPU, beside its two ceilings measured in the same run.
//
// What it times (all with CUDA events around one launch on one stream, after warm-up; median, p5, p95 over the
// repetitions): the lookup kernel (FP8 rows + ue8m0 scales -> BF16 staging) with the foreground grid (all SMs)
// and the background grid (grid_fraction 0.5), the plain 16-byte gather of the same bytes the lookup reads, and
// the plain gather of the payloads only (design.md's baseline), for decode batches and prefill chunks of a
// V4.1-Flash-shaped table (d = 256, 24 heads) of at least --table-gib GiB in private anonymous memory that is
// registered, never copied. Each repetition uses fresh ids (an id set is never reused, so no row is in L2 from
// an earlier repetition); before every timed launch a gather of 131072 other random rows evicts the GPU's cached
// address translations (--tlb-scrub-rows) and a 256 MiB device memset flushes the L2, so every variant runs
// cold on the same ids, as a decode step's fresh ids do; the order of the four variants is shuffled per
// repetition. The link ceiling is the pinned H2D/D2H copy bandwidth (1 GiB
// cudaMemcpyAsync), also measured from the registered table itself. Registration time per GiB is reported.
// Optionally (--step-batch > 0), decode steps through the CudaBackend (prefetch queue + cuBLAS layer compute):
// per-layer exposed wait E for early and on_demand, the compute-only step, the timeline's own overhead (timeline
// on vs off) and one step's timeline.
//
// Units: GB = 1e9 B; rows/s in millions (M rows/s); source bytes = rows * (d + d/32); staging = rows * 2d.
// Exit codes: 0 ok, 1 failure, 2 bad arguments, 77 no GPU (waived, with the reason).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/registration.cuh"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/conditions.hpp"
#include "replay/id_source.hpp"
#include "sched/timeline.hpp"

namespace {

using namespace engram;
using json = nlohmann::json;

struct Args {
  double table_gib = 32;
  std::vector<std::string> layouts{"fused", "split"};
  std::vector<std::string> dists{"uniform", "zipf"};
  double zipf_alpha = 1.0;
  std::vector<int> decode{1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::vector<int> prefill{2048, 4096, 8192, 16384};
  int warmup = 3;
  int reps = 15;
  double bg_fraction = 0.5;
  int step_batch = 64;
  int steps = 40;
  int step_warmup = 3;
  double layer_us = 200;
  int model_layers = 16;
  uint64_t seed = 1;
  int threads = 0;
  int64_t tlb_scrub_rows = 131072;
  std::string json_path;
  bool smoke = false;
};

struct Dist {
  double median = NAN, p5 = NAN, p95 = NAN;
};
Dist dist_of(const std::vector<double>& v) { return {percentile(v, 50), percentile(v, 5), percentile(v, 95)}; }
json jnum(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json jdist(const Dist& d) { return {{"median", jnum(d.median)}, {"p5", jnum(d.p5)}, {"p95", jnum(d.p95)}}; }

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(call)                                                                                       \
  do {                                                                                                 \
    const cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                           \
      std::fprintf(stderr, "bench: %s failed: %s (%s)\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

void die(const Status& st, const char* what) {
  std::fprintf(stderr, "bench: %s: %s\n", what, st.to_string().c_str());
  std::exit(st.code() == Code::kUnsupported ? 77 : 1);
}

// V4.1-Flash row shape (orders 2..4 x 8 heads, d = 256), one Engram layer of at least `bytes`.
EngramLayout bench_layout(int64_t bytes, RowFormat fmt) {
  EngramLayout l;
  l.name = "v41-flash-rows";
  l.layer_ids = {1};
  l.max_ngram = 4;
  l.heads_per_order = 8;
  l.d = 256;
  l.format = fmt;
  const int64_t stride = fmt == RowFormat::kFused ? EngramLayout::fused_record_bytes(256) : 256 + 8;
  const int64_t per_head = bytes / (24 * stride) + 1;
  l.vocab_size_per_order = {per_head, per_head, per_head};
  const Status st = l.finalize();
  if (!st.is_ok()) die(st, "layout");
  return l;
}

// Random table bytes (splitmix64 of the word index), written by `threads` threads (0 = all), which also
// first-touch the pages; then realistic scales (codes 119..135, as synth_row) and zero fused padding, so the
// decode runs the path real checkpoints take (a random scale byte would take the exact slow path 7% of the time).
void fill_random(uint8_t* p, int64_t bytes, uint64_t seed, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t words = bytes / 8;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      const int64_t lo = words * t / threads, hi = words * (t + 1) / threads;
      uint64_t* w = reinterpret_cast<uint64_t*>(p);
      for (int64_t i = lo; i < hi; ++i) {
        uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        w[i] = z ^ (z >> 31);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int64_t i = words * 8; i < bytes; ++i) p[i] = static_cast<uint8_t>(i);
}

void set_realistic_scales(const TableView& v, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int ns = v.d / 32;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      for (int64_t r = v.rows * t / threads; r < v.rows * (t + 1) / threads; ++r) {
        uint8_t* sc = const_cast<uint8_t*>(v.scales_of(r));
        uint64_t z = static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull;
        z ^= z >> 29;
        for (int k = 0; k < ns; ++k) sc[k] = static_cast<uint8_t>(119 + ((z >> (5 * k)) & 0xFF) % 17);
        if (v.format == RowFormat::kFused)
          std::memset(sc + ns, 0, static_cast<size_t>(v.stride_bytes - v.d - ns));
      }
    });
  }
  for (auto& th : pool) th.join();
}

// Timed copy: median GB/s of `reps` copies of `bytes` (after one warm-up).
double copy_gbps(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> v;
  for (int i = 0; i < reps + 1; ++i) {
    CK(cudaEventRecord(a, s));
    CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) v.push_back(static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return percentile(v, 50);
}

struct Variant {
  const char* name;
  double fraction;
  bool gather;
  cuda::GatherBytes what;
};

json run_sweep(const Args& a, const EngramLayout& layout, const TableView& view, const cuda::UvaTable& uva,
               const std::string& dist, cudaStream_t s, void* flush, size_t flush_bytes, std::mt19937_64& rng) {
  std::vector<int> sizes = a.decode;
  sizes.insert(sizes.end(), a.prefill.begin(), a.prefill.end());
  const int heads = layout.heads();
  const int d = layout.d;
  const int sets = a.warmup + a.reps;
  const int64_t max_tokens = *std::max_element(sizes.begin(), sizes.end());
  const int64_t max_rows = max_tokens * heads;
  int64_t* ids_dev = nullptr;
  uint16_t* out_dev = nullptr;
  uint8_t* gout_dev = nullptr;
  CK(cudaMalloc(&ids_dev, static_cast<size_t>(max_rows) * sets * sizeof(int64_t)));
  CK(cudaMalloc(&out_dev, static_cast<size_t>(max_rows) * d * 2));
  CK(cudaMalloc(&gout_dev, static_cast<size_t>(max_rows) * cuda::plain_gather_out_stride(view, cuda::GatherBytes::kRowBytes)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // TLB scrub: a gather of tlb_scrub_rows random rows (distinct pages, spread over the whole table) before every
  // timed launch evicts the GPU's cached translations of the measured rows' pages, so that every variant runs
  // translation-cold, as a decode step's fresh random ids do (otherwise whichever variant runs second on an id
  // set finds the first one's translations cached and looks faster).
  int64_t* scrub_ids = nullptr;
  uint8_t* scrub_out = nullptr;
  if (a.tlb_scrub_rows > 0) {
    std::vector<int64_t> h(static_cast<size_t>(a.tlb_scrub_rows));
    std::mt19937_64 r2(a.seed + 7);
    for (auto& x : h) x = static_cast<int64_t>(r2() % static_cast<uint64_t>(view.rows));
    CK(cudaMalloc(&scrub_ids, h.size() * 8));
    CK(cudaMalloc(&scrub_out, h.size() * static_cast<size_t>(cuda::plain_gather_out_stride(view, cuda::GatherBytes::kPayloadOnly))));
    CK(cudaMemcpy(scrub_ids, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
  }
  std::unique_ptr<IdSource> src;
  if (dist == "uniform") {
    src = make_uniform_id_source(layout, a.seed + 17);
  } else {
    auto z = make_zipf_id_source(layout, a.zipf_alpha, a.seed + 29);
    if (!z.is_ok()) die(z.status(), "zipf ids");
    src = std::move(*z);
  }
  const std::vector<Variant> variants = {{"lookup", 1.0, false, cuda::GatherBytes::kRowBytes},
                                         {"lookup_bg", a.bg_fraction, false, cuda::GatherBytes::kRowBytes},
                                         {"gather", 1.0, true, cuda::GatherBytes::kRowBytes},
                                         {"gather_payload", 1.0, true, cuda::GatherBytes::kPayloadOnly}};
  json out = json::array();
  int64_t step_counter = 0;
  std::vector<std::vector<int64_t>> ids;
  for (int tokens : sizes) {
    const int64_t rows = static_cast<int64_t>(tokens) * heads;
    for (int k = 0; k < sets; ++k) {  // fresh ids for every repetition
      const Status st = src->next_step(step_counter++, tokens, ids);
      if (!st.is_ok()) die(st, "ids");
      CK(cudaMemcpy(ids_dev + static_cast<size_t>(k) * max_rows, ids[0].data(), static_cast<size_t>(rows) * 8,
                    cudaMemcpyHostToDevice));
    }
    std::vector<std::vector<double>> t(variants.size());
    std::vector<cuda::LaunchInfo> info(variants.size());
    std::vector<size_t> order(variants.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int k = 0; k < sets; ++k) {
      std::shuffle(order.begin(), order.end(), rng);
      const int64_t* ids_k = ids_dev + static_cast<size_t>(k) * max_rows;
      for (size_t vi : order) {
        const Variant& v = variants[vi];
        if (scrub_ids) {
          cuda::GatherArgs sa;
          sa.table = &uva;
          sa.ids = scrub_ids;
          sa.rows = a.tlb_scrub_rows;
          sa.out = scrub_out;
          sa.what = cuda::GatherBytes::kPayloadOnly;
          auto sr = cuda::launch_plain_gather(sa, s);
          if (!sr.is_ok()) die(sr.status(), "tlb scrub");
        }
        CK(cudaMemsetAsync(flush, k & 0xFF, flush_bytes, s));  // evict the table's lines from L2
        CK(cudaEventRecord(e0, s));
        Result<cuda::LaunchInfo> li = cuda::LaunchInfo{};
        if (!v.gather) {
          cuda::LookupArgs la;
          la.table = &uva;
          la.ids = ids_k;
          la.tokens = tokens;
          la.heads = heads;
          la.out = out_dev;
          la.grid_fraction = v.fraction;
          li = cuda::launch_lookup(la, s);
        } else {
          cuda::GatherArgs ga;
          ga.table = &uva;
          ga.ids = ids_k;
          ga.rows = rows;
          ga.out = gout_dev;
          ga.what = v.what;
          ga.grid_fraction = v.fraction;
          li = cuda::launch_plain_gather(ga, s);
        }
        if (!li.is_ok()) die(li.status(), v.name);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (k >= a.warmup) t[vi].push_back(static_cast<double>(ms) * 1e6);
        info[vi] = *li;
      }
    }
    json row;
    row["dist"] = dist;
    row["tokens"] = tokens;
    row["rows"] = rows;
    row["phase"] = tokens >= 2048 ? "prefill" : "decode";
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Dist dd = dist_of(t[vi]);
      const double sec = dd.median * 1e-9;
      json v = {{"ns", jdist(dd)},
                {"rows_per_s", jnum(rows / sec)},
                {"grid", info[vi].grid},
                {"tiles", info[vi].tiles},
                {"tile_rows", info[vi].tile_rows}};
      if (!variants[vi].gather) {
        v["source_gbps"] = jnum(rows * static_cast<double>(d + d / 32) / sec / 1e9);
        v["staging_gbps"] = jnum(rows * 2.0 * d / sec / 1e9);
      } else {
        v["bytes_per_row"] = cuda::plain_gather_out_stride(view, variants[vi].what);
        v["gbps"] = jnum(rows * static_cast<double>(cuda::plain_gather_out_stride(view, variants[vi].what)) / sec / 1e9);
      }
      row[variants[vi].name] = v;
    }
    out.push_back(row);
    std::fprintf(stderr, ".");
  }
  std::fprintf(stderr, "\n");
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(ids_dev));
  CK(cudaFree(out_dev));
  CK(cudaFree(gout_dev));
  if (scrub_ids) CK(cudaFree(scrub_ids));
  if (scrub_out) CK(cudaFree(scrub_out));
  return out;
}

void print_sweep(const std::string& layout, const json& rows) {
  std::printf("\n%s rows (d=256, 24 heads); times in us (median [p5, p95]); M rows/s; GB = 1e9 B\n", layout.c_str());
  std::printf("%-8s %6s %7s %5s | %-26s %8s %7s %7s | %9s | %-9s %8s | %9s | %s\n", "ids", "tokens", "rows", "grid",
              "lookup us", "Mrows/s", "srcGB/s", "stgGB/s", "bg(0.5) us", "gather us", "Mrows/s", "payload us",
              "lookup/gather");
  for (const auto& r : rows) {
    auto num = [](const json& j) { return j.is_null() ? NAN : j.get<double>(); };
    const auto& l = r["lookup"];
    const auto& g = r["gather"];
    const double lt = num(l["ns"]["median"]) / 1e3, gt = num(g["ns"]["median"]) / 1e3;
    std::printf("%-8s %6d %7lld %5d | %8.1f [%7.1f, %7.1f] %8.2f %7.2f %7.2f | %9.1f | %9.1f %8.2f | %9.1f | %.3f\n",
                r["dist"].get<std::string>().c_str(), r["tokens"].get<int>(), r["rows"].get<long long>(),
                l["grid"].get<int>(), lt, num(l["ns"]["p5"]) / 1e3, num(l["ns"]["p95"]) / 1e3,
                num(l["rows_per_s"]) / 1e6, num(l["source_gbps"]), num(l["staging_gbps"]),
                num(r["lookup_bg"]["ns"]["median"]) / 1e3, gt, num(g["rows_per_s"]) / 1e6,
                num(r["gather_payload"]["ns"]["median"]) / 1e3, lt / gt);
  }
}

// Decode steps through the backend. Four variants, one step of each per iteration in shuffled order (so drift
// and warm-up hit them alike): compute-only, early, on_demand (timeline on), and early with the timeline off.
json run_steps(const Args& a, const EngramLayout& one, const TableView& view, std::mt19937_64& rng) {
  EngramLayout two = one;  // two Engram layers (model layers 1 and 14) over the same registered rows
  two.layer_ids = {1, 14};
  two.head_rows = {one.head_rows[0], one.head_rows[0]};
  two.head_offsets = {one.head_offsets[0], one.head_offsets[0]};
  cuda::CudaBackendOptions o;
  o.layer_ids = two.layer_ids;
  o.heads = two.heads();
  o.max_tokens = a.step_batch;
  o.layer_us = a.layer_us;
  o.grid_fraction = a.bg_fraction;
  auto made = cuda::make_cuda_backend(o, {view, view});
  if (!made.is_ok()) die(made.status(), "backend");
  auto& be = **made;
  auto& q = be.queue();
  auto* compute = be.compute();
  auto src = make_uniform_id_source(two, a.seed + 101);
  enum StepVariant { kComputeOnly, kEarly, kOnDemand, kEarlyNoTimeline, kVariants };
  const char* names[kVariants] = {"compute_only", "early", "on_demand", "early_timeline_off"};
  std::vector<double> step_ns[kVariants];
  std::vector<int64_t> steps_of[kVariants];
  std::vector<std::vector<int64_t>> ids;
  int64_t step = 0;
  auto one_step = [&](int v) {
    const bool lookups = v != kComputeOnly;
    const PrefetchMode mode = v == kOnDemand ? PrefetchMode::kOnDemand : PrefetchMode::kEarly;
    if (!q.set_record_timeline(v != kEarlyNoTimeline).is_ok()) die(Status(Code::kInternal, "toggle"), "timeline");
    if (!src->next_step(step, a.step_batch, ids).is_ok()) die(Status(Code::kInternal, "ids"), "ids");
    const double t0 = now_ns();
    auto check = [](const Status& st, const char* what) {
      if (!st.is_ok()) die(st, what);
    };
    if (lookups) {
      q.begin_step(step);
      if (mode == PrefetchMode::kEarly)
        for (int li = 0; li < 2; ++li) check(q.prepare(li, ids[li].data(), a.step_batch), "prepare");
    }
    for (int layer = 0; layer < a.model_layers; ++layer) {
      const int li = two.layer_index(layer);
      if (lookups && li >= 0) {
        if (mode == PrefetchMode::kOnDemand) check(q.prepare(li, ids[li].data(), a.step_batch), "prepare");
        auto v2 = q.consume(li);
        if (!v2.is_ok()) die(v2.status(), "consume");
      }
      check(compute->run_layer(layer), "compute");
    }
    check(lookups ? q.end_step() : compute->synchronize(), "step");
    return now_ns() - t0;
  };
  for (int it = 0; it < a.step_warmup + a.steps; ++it) {
    std::vector<int> order = {kComputeOnly, kEarly, kOnDemand, kEarlyNoTimeline};
    std::shuffle(order.begin(), order.end(), rng);
    for (int v : order) {
      const double t = one_step(v);
      if (it >= a.step_warmup) {
        step_ns[v].push_back(t);
        steps_of[v].push_back(step);
      }
      ++step;
    }
  }
  auto layer_stats = [&](int v) {
    json layers = json::array();
    for (int li = 0; li < 2; ++li) {
      std::vector<double> e, w, l, qn, lead;
      for (const auto& t : q.timeline().rows()) {
        if (t.layer_index != li) continue;
        if (std::find(steps_of[v].begin(), steps_of[v].end(), t.step) == steps_of[v].end()) continue;
        e.push_back(t.exposed_wait_ns());
        w.push_back(t.measured_wait_ns());
        l.push_back(t.lookup_ns());
        qn.push_back(t.queue_ns());
        lead.push_back(t.lead_ns());
      }
      layers.push_back({{"layer_id", two.layer_ids[li]}, {"exposed_wait_ns", jdist(dist_of(e))},
                        {"measured_wait_ns", jdist(dist_of(w))}, {"lookup_ns", jdist(dist_of(l))},
                        {"queue_ns", jdist(dist_of(qn))}, {"lead_ns", jdist(dist_of(lead))}});
    }
    return layers;
  };
  json out;
  out["registration_s"] = be.registration().register_ns * 1e-9;
  out["gemm_n"] = compute->gemm_n();
  out["gemms_per_layer"] = compute->gemms_per_layer();
  out["layer_ns_calibrated"] = compute->layer_ns();
  for (int v = 0; v < kVariants; ++v) {
    json x = {{"step_ns", jdist(dist_of(step_ns[v]))}};
    if (v == kEarly || v == kOnDemand) x["layers"] = layer_stats(v);
    out[names[v]] = x;
  }
  // One early step's timeline (the last one), relative to its first r.
  json one_step_rows = json::array();
  const int64_t last = steps_of[kEarly].back();
  double t0 = NAN;
  for (const auto& t : q.timeline().rows())
    if (t.step == last) t0 = std::isnan(t0) ? t.r_ns : std::min(t0, t.r_ns);
  for (const auto& t : q.timeline().rows())
    if (t.step == last)
      one_step_rows.push_back({{"layer_id", t.layer_id}, {"rows", t.rows}, {"r_us", (t.r_ns - t0) / 1e3},
                               {"s_us", (t.s_ns - t0) / 1e3}, {"f_us", (t.f_ns - t0) / 1e3},
                               {"c_us", (t.c_ns - t0) / 1e3}, {"wait_end_us", (t.wait_end_ns - t0) / 1e3},
                               {"E_us", t.exposed_wait_ns() / 1e3}});
  out["one_early_step"] = one_step_rows;
  out["batch"] = a.step_batch;
  out["model_layers"] = a.model_layers;
  out["layer_us"] = a.layer_us;
  out["grid_fraction"] = a.bg_fraction;
  out["steps_per_variant"] = a.steps;
  out["order"] = "one step of each variant per iteration, shuffled";
  return out;
}

void print_steps(const json& s) {
  auto med = [](const json& d) { return d["median"].is_null() ? NAN : d["median"].get<double>() / 1e3; };
  std::printf("\nDecode steps: batch %d, %d model layers, Engram layers 1 and 14, GEMM n=%d x %d per layer "
              "(%.1f us calibrated), background grid %.2f\n",
              s["batch"].get<int>(), s["model_layers"].get<int>(), s["gemm_n"].get<int>(), s["gemms_per_layer"].get<int>(),
              s["layer_ns_calibrated"].get<double>() / 1e3, s["grid_fraction"].get<double>());
  auto p = [](const json& d, const char* k) { return d[k].is_null() ? NAN : d[k].get<double>() / 1e3; };
  for (const char* v : {"compute_only", "early", "on_demand", "early_timeline_off"})
    std::printf("  step %-19s median %8.1f us [p5 %8.1f, p95 %8.1f]\n", v, med(s[v]["step_ns"]),
                p(s[v]["step_ns"], "p5"), p(s[v]["step_ns"], "p95"));
  for (const char* mode : {"early", "on_demand"})
    for (const auto& l : s[mode]["layers"])
      std::printf("  %-9s layer %2d: E %.1f us [p95 %.1f], wait %.1f us, L %.1f us, queue %.1f us\n", mode,
                  l["layer_id"].get<int>(), med(l["exposed_wait_ns"]),
                  l["exposed_wait_ns"]["p95"].is_null() ? NAN : l["exposed_wait_ns"]["p95"].get<double>() / 1e3,
                  med(l["measured_wait_ns"]), med(l["lookup_ns"]), med(l["queue_ns"]));
  std::printf("  (main-compute slowdown = early step / compute-only step; timeline overhead = early - early_timeline_off)\n");
  std::printf("  one early step (us from the first r): layer  r  s  f  c  wait_end  E\n");
  for (const auto& t : s["one_early_step"])
    std::printf("    L%-2d %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f\n", t["layer_id"].get<int>(), t["r_us"].get<double>(),
                t["s_us"].get<double>(), t["f_us"].get<double>(), t["c_us"].get<double>(),
                t["wait_end_us"].get<double>(), t["E_us"].get<double>());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"UVA lookup throughput vs the plain gather and the pinned-copy ceiling (H200 benchmark of issue 5)"};
  app.add_option("--table-gib", a.table_gib, "Table size per layout in GiB (>= 32 for the reported figures)");
  app.add_option("--layouts", a.layouts, "Row layouts: fused, split")->delimiter(',');
  app.add_option("--dists", a.dists, "Id distributions: uniform, zipf")->delimiter(',');
  app.add_option("--zipf-alpha", a.zipf_alpha, "Zipf exponent");
  app.add_option("--decode", a.decode, "Decode batch sizes (tokens)")->delimiter(',');
  app.add_option("--prefill", a.prefill, "Prefill chunk sizes (tokens)")->delimiter(',');
  app.add_option("--warmup", a.warmup, "Warm-up repetitions per size");
  app.add_option("--reps", a.reps, "Timed repetitions per size");
  app.add_option("--bg-fraction", a.bg_fraction, "Background grid fraction (lookup_bg and the decode steps)");
  app.add_option("--step-batch", a.step_batch, "Decode-step section batch (0 = skip)");
  app.add_option("--steps", a.steps, "Decode steps measured");
  app.add_option("--layer-us", a.layer_us, "Synthetic layer compute (us)");
  app.add_option("--model-layers", a.model_layers, "Decoder layers per step");
  app.add_option("--seed", a.seed, "Seed of table content and ids");
  app.add_option("--threads", a.threads, "Threads for filling the table (0 = all)");
  app.add_option("--tlb-scrub-rows", a.tlb_scrub_rows,
                 "Rows of the translation scrub before every timed launch (0 = none: variants share warm TLBs)");
  app.add_option("--json", a.json_path, "Write all figures as JSON to this file");
  app.add_flag("--smoke", a.smoke, "Tiny sizes (1 GiB table, few batches): seconds");
  CLI11_PARSE(app, argc, argv);
  if (a.smoke) {
    a.table_gib = 1;
    a.decode = {1, 64};
    a.prefill = {2048};
    a.reps = 3;
    a.warmup = 1;
    a.steps = 3;
    a.step_warmup = 1;
  }
  auto dev = cuda::device_info(0);
  if (!dev.is_ok()) die(dev.status(), "device");
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937_64 rng(a.seed);
  json j;
  j["bench"] = "lookup_gpu";
  j["conditions"] = collect_conditions(ENGRAM_GIT_REV);
  j["device"] = {{"name", dev->name}, {"sm_count", dev->sm_count}, {"l2_bytes", dev->l2_bytes},
                 {"driver_version", dev->driver_version}, {"runtime_version", dev->runtime_version},
                 {"pci_bus_id", dev->pci_bus_id},
                 {"can_use_host_pointer_for_registered_mem", dev->can_use_host_pointer_for_registered_mem}};
  j["method"] = {{"warmup", a.warmup}, {"reps", a.reps}, {"fresh_ids_per_rep", true}, {"l2_flush_bytes", 256 << 20},
                 {"tlb_scrub_rows", a.tlb_scrub_rows},
                 {"timer", "cudaEvent around one launch"}, {"order", "variants shuffled per repetition"}};
  std::printf("engram_bench_lookup_gpu: %s, %d SMs, driver %d, runtime %d, git %s\n", dev->name.c_str(), dev->sm_count,
              dev->driver_version, dev->runtime_version, ENGRAM_GIT_REV);

  // Link ceiling: pinned copies.
  const size_t copy_bytes = size_t{1} << 30;
  void* pinned = nullptr;
  void* devbuf = nullptr;
  CK(cudaMallocHost(&pinned, copy_bytes));
  CK(cudaMalloc(&devbuf, copy_bytes));
  std::memset(pinned, 0x3C, copy_bytes);
  const double h2d = copy_gbps(devbuf, pinned, copy_bytes, cudaMemcpyHostToDevice, s, 5);
  const double d2h = copy_gbps(pinned, devbuf, copy_bytes, cudaMemcpyDeviceToHost, s, 5);
  CK(cudaFreeHost(pinned));
  j["copy"] = {{"bytes", copy_bytes}, {"h2d_pinned_gbps", jnum(h2d)}, {"d2h_pinned_gbps", jnum(d2h)}};
  std::printf("pinned copy 1 GiB: H2D %.1f GB/s, D2H %.1f GB/s\n", h2d, d2h);

  const size_t flush_bytes = size_t{256} << 20;
  void* flush = nullptr;
  CK(cudaMalloc(&flush, flush_bytes));

  j["layouts"] = json::array();
  for (const auto& lname : a.layouts) {
    auto fmt = parse_row_format(lname);
    if (!fmt.is_ok()) die(fmt.status(), "--layouts");
    const EngramLayout layout = bench_layout(static_cast<int64_t>(a.table_gib * (1ull << 30)), *fmt);
    auto table = HostTable::allocate(layout);
    if (!table.is_ok()) die(table.status(), "table");
    const TableView view = (*table)->view(0);
    const int64_t bytes = layout.table_bytes(0);
    const double tf0 = now_ns();
    fill_random(const_cast<uint8_t*>(view.data), bytes, a.seed, a.threads);
    set_realistic_scales(view, a.threads);
    const double fill_s = (now_ns() - tf0) * 1e-9;
    cuda::RegistrationOptions ro;
    ro.boundary_bytes = *fmt == RowFormat::kFused ? view.stride_bytes : view.d;
    auto reg = cuda::HostRegistration::register_range(view.data, bytes, ro);
    if (!reg.is_ok()) die(reg.status(), "registration");
    const double gib = static_cast<double>(reg->bytes()) / (1ull << 30);
    auto uva = cuda::UvaTable::make(view, {&*reg});
    if (!uva.is_ok()) die(uva.status(), "uva table");
    // The registered table as a copy source (the same link, from the table's own pages).
    const double h2d_table = copy_gbps(devbuf, view.data, copy_bytes, cudaMemcpyHostToDevice, s, 3);
    json L = {{"layout", lname},
              {"rows", layout.rows(0)},
              {"row_stride_bytes", layout.row_stride_bytes()},
              {"table_bytes", bytes},
              {"backing", "private anonymous"}, {"content", "splitmix64 random payload, scale codes 119..135"},
              {"fill_s", fill_s},
              {"registration",
               {{"bytes", reg->bytes()},
                {"chunks", reg->chunks().size()},
                {"prefault_s", reg->prefault_ns() * 1e-9},
                {"register_s", reg->register_ns() * 1e-9},
                {"register_s_per_gib", reg->register_ns() * 1e-9 / gib},
                {"prefault_s_per_gib", reg->prefault_ns() * 1e-9 / gib},
                {"device_equals_host", reg->device_equals_host()}}},
              {"h2d_from_registered_table_gbps", jnum(h2d_table)}};
    std::printf("\n%s table: %.2f GiB, %lld rows, filled in %.1f s; registered in %zu chunk(s): prefault %.2f s, "
                "cudaHostRegister %.2f s (%.3f s/GiB), device ptr == host ptr: %s; H2D from table %.1f GB/s\n",
                lname.c_str(), gib, static_cast<long long>(layout.rows(0)), fill_s, reg->chunks().size(),
                reg->prefault_ns() * 1e-9, reg->register_ns() * 1e-9, reg->register_ns() * 1e-9 / gib,
                reg->device_equals_host() ? "yes" : "no", h2d_table);
    json results = json::array();
    for (const auto& dist : a.dists) {
      json r = run_sweep(a, layout, view, *uva, dist, s, flush, flush_bytes, rng);
      for (auto& x : r) results.push_back(x);
    }
    L["results"] = results;
    print_sweep(lname, results);
    uva = Status(Code::kInternal, "released");
    if (const Status st = reg->release(); !st.is_ok()) die(st, "unregister");
    if (a.step_batch > 0 && *fmt == RowFormat::kFused) {
      L["decode_steps"] = run_steps(a, layout, view, rng);
      print_steps(L["decode_steps"]);
    }
    j["layouts"].push_back(L);
  }
  CK(cudaFree(flush));
  CK(cudaFree(devbuf));
  CK(cudaStreamDestroy(s));
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench: cannot write %s\n", a.json_path.c_str());
      return 1;
    }
  }
  return 0;
}
