// Interleaved repetitions and lookup accounting (see measure.hpp).
#include "bench/measure.hpp"

#include <algorithm>
#include <numeric>

namespace engram::bench {

nlohmann::json summary_json(const stats::Summary& s) {
  return {{"n", s.n},           {"median", json_num(s.median)}, {"p5", json_num(s.p5)},   {"p95", json_num(s.p95)},
          {"p99", json_num(s.p99)}, {"mean", json_num(s.mean)},     {"stdev", json_num(s.stdev)}, {"min", json_num(s.min)},
          {"max", json_num(s.max)}};
}

Result<std::vector<VariantTimes>> time_variants(const std::vector<Variant>& variants, int warmup, int reps,
                                                std::mt19937_64& rng) {
  std::vector<VariantTimes> out(variants.size());
  for (size_t i = 0; i < variants.size(); ++i) out[i].name = variants[i].name;
  std::vector<size_t> order(variants.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (int rep = 0; rep < warmup + reps; ++rep) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t vi : order) {
      auto s = variants[vi].call(rep);
      if (!s.is_ok()) return s.status().with_context("variant " + variants[vi].name + ", repetition " + std::to_string(rep));
      out[vi].last = *s;
      if (rep >= warmup) out[vi].ns.push_back(s->ns);
    }
  }
  return out;
}

LookupFigures lookup_figures(const VariantTimes& t, const LookupShape& shape, const Ceilings& c) {
  LookupFigures f;
  f.name = t.name;
  f.ns = t.summary();
  f.grid = t.last.grid;
  f.tiles = t.last.tiles;
  const double sec = f.ns.median * 1e-9;
  if (std::isfinite(sec) && sec > 0) {
    f.rows_per_s = static_cast<double>(shape.rows) / sec;
    f.source_gbps = static_cast<double>(shape.rows * shape.source_bytes_per_row) / sec / 1e9;
    f.staging_gbps = static_cast<double>(shape.rows * shape.staging_bytes_per_row) / sec / 1e9;
    if (std::isfinite(c.link_gbps) && c.link_gbps > 0) f.pct_of_link = f.source_gbps / c.link_gbps * 100;
    if (std::isfinite(c.gather_rows_per_s) && c.gather_rows_per_s > 0)
      f.pct_of_gather = f.rows_per_s / c.gather_rows_per_s * 100;
  }
  return f;
}

nlohmann::json lookup_figures_json(const LookupFigures& f) {
  return {{"ns", summary_json(f.ns)},
          {"rows_per_s", json_num(f.rows_per_s)},
          {"source_gbps", json_num(f.source_gbps)},
          {"staging_gbps", json_num(f.staging_gbps)},
          {"pct_of_link", json_num(f.pct_of_link)},
          {"pct_of_gather", json_num(f.pct_of_gather)},
          {"grid", f.grid < 0 ? nlohmann::json(nullptr) : nlohmann::json(f.grid)},
          {"tiles", f.tiles < 0 ? nlohmann::json(nullptr) : nlohmann::json(f.tiles)}};
}

}  // namespace engram::bench
