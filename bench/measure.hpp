// Measurement helpers shared by the benches (the lookup sweep and its technique sections included): interleaved
// A/B repetitions in a shuffled order, the lookup accounting of docs/terms.md (rows/s, source GB/s and staging GB/s kept
// apart, % of the link and of the plain-gather ceiling), and NaN-safe JSON/cell conversions.
//
// time_variants() is the one timing loop: for every repetition (warm-ups first, untimed) it runs each variant
// once, in an order shuffled per repetition from ctx.rng, so drift, thermal state and cache warm-up hit all
// variants alike; repetition k passes k to every variant (e.g. "use id set k": fresh ids per repetition, the
// same ids for every variant of one repetition). A variant returns its own measured time (ns; events on the
// GPU, steady_clock on the host) or a failed Status, which stops the loop.
#pragma once

#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "core/json_num.hpp"
#include "core/stats.hpp"

namespace engram::bench {

inline double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// {"n", "median", "p5", "p95", "p99", "mean", "stdev", "min", "max"} with null for NaN.
nlohmann::json summary_json(const stats::Summary& s);

// One measured call of a variant: the time and, for kernels, the launch shape it used.
struct Sample {
  double ns = stats::kNaN;
  int grid = -1;              // blocks launched (-1: not a kernel)
  int64_t tiles = -1;         // work tiles (-1: n/a)
};
struct Variant {
  std::string name;
  // Called with the repetition index (0 .. warmup+reps-1; the first `warmup` are not recorded).
  std::function<Result<Sample>(int rep)> call;
};
struct VariantTimes {
  std::string name;
  std::vector<double> ns;     // timed repetitions, in repetition order
  Sample last;                // last sample (grid/tiles)
  stats::Summary summary() const { return stats::summarize(ns); }
};
Result<std::vector<VariantTimes>> time_variants(const std::vector<Variant>& variants, int warmup, int reps,
                                                std::mt19937_64& rng);

// ---- Lookup accounting (byte accounting, docs/terms.md) -----------------------------------------------------------
struct LookupShape {
  int64_t rows = 0;                  // row reads per call (tokens x heads)
  int64_t source_bytes_per_row = 0;  // d + d/32 (payload + scales actually used)
  int64_t staging_bytes_per_row = 0; // 2 d (BF16 out)
};
struct Ceilings {
  double link_gbps = stats::kNaN;          // pinned H2D copy, measured in the same run
  double gather_rows_per_s = stats::kNaN;  // plain gather of the same rows, same ids, same run
};
struct LookupFigures {
  std::string name;
  stats::Summary ns;
  double rows_per_s = stats::kNaN;
  double source_gbps = stats::kNaN;        // rows * source_bytes_per_row / t
  double staging_gbps = stats::kNaN;       // rows * staging_bytes_per_row / t (a different path: never summed)
  double pct_of_link = stats::kNaN;        // source_gbps / link_gbps * 100
  double pct_of_gather = stats::kNaN;      // rows_per_s / gather_rows_per_s * 100
  int grid = -1;
  int64_t tiles = -1;
};
// Figures from the median time of `t`.
LookupFigures lookup_figures(const VariantTimes& t, const LookupShape& shape, const Ceilings& c);
nlohmann::json lookup_figures_json(const LookupFigures& f);

}  // namespace engram::bench
