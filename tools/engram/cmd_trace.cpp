// `engram trace analyze FILE`: explains a recorded timeline with the serial-queue model (design.md "timeline"):
// per rank and Engram layer the queue time s-r, lookup time L, exposed wait E = max(0, f-c), lead time c-r and
// the residual between measured and modelled start; the layers that dominate E; and what-if totals when lookups
// are faster (--scale-lookup) or submitted earlier (--advance-ready-us).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "report.hpp"
#include "sched/timeline.hpp"

namespace engram::cli {
namespace {

struct TraceArgs {
  std::string file;
  double scale_lookup = 1.0;
  double advance_ready_us = 0.0;
  bool json = false;
};

nlohmann::json dj(const Distribution& d) {
  return {{"median", json_num(d.median)}, {"p5", json_num(d.p5)}, {"p95", json_num(d.p95)}, {"p99", json_num(d.p99)}, {"n", d.n}};
}

int analyze(const TraceArgs& a) {
  std::ifstream f(a.file);
  if (!f) return report_failure("trace analyze", Status(Code::kNotFound, "cannot open '" + a.file + "'"));
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) return report_failure("trace analyze", Status(Code::kInvalidArgument, "'" + a.file + "' is not JSON"));
  auto tl = Timeline::from_json(j);
  if (!tl.is_ok()) return report_failure("trace analyze", tl.status().with_context(a.file));
  if (tl->rows().empty()) return report_failure("trace analyze", Status(Code::kInvalidArgument, a.file + ": timeline has no rows"));
  const auto base = analyze_timeline(*tl);
  const bool what_if = a.scale_lookup != 1.0 || a.advance_ready_us != 0.0;
  const auto wi = what_if ? analyze_timeline(*tl, a.scale_lookup, a.advance_ready_us * 1000.0) : base;

  double total_e = 0, total_wi = 0;
  for (const auto& x : base) total_e += x.total_exposed_wait_ns;
  for (const auto& x : wi) total_wi += x.total_model_exposed_wait_ns;
  nlohmann::json out;
  out["file"] = a.file;
  out["lookups"] = tl->rows().size();
  out["total_exposed_wait_ns"] = total_e;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < base.size(); ++i) {
    const auto& x = base[i];
    layers.push_back({{"rank", x.rank}, {"layer_id", x.layer_id}, {"queue_ns", dj(x.queue_ns)}, {"lookup_ns", dj(x.lookup_ns)},
                      {"exposed_wait_ns", dj(x.exposed_wait_ns)}, {"measured_wait_ns", dj(x.measured_wait_ns)},
                      {"lead_ns", dj(x.lead_ns)}, {"residual_s_ns", dj(x.residual_s_ns)},
                      {"total_exposed_wait_ns", x.total_exposed_wait_ns},
                      {"share_of_exposed_wait", total_e > 0 ? json_num(x.total_exposed_wait_ns / total_e) : json_num(kNotRecorded)}});
  }
  out["layers"] = layers;
  if (what_if) {
    nlohmann::json w = nlohmann::json::array();
    for (const auto& x : wi)
      w.push_back({{"rank", x.rank}, {"layer_id", x.layer_id}, {"model_exposed_wait_ns", dj(x.model_exposed_wait_ns)},
                   {"total_model_exposed_wait_ns", x.total_model_exposed_wait_ns}});
    out["what_if"] = {{"scale_lookup", a.scale_lookup}, {"advance_ready_us", a.advance_ready_us},
                      {"total_model_exposed_wait_ns", total_wi}, {"layers", w}};
  }
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu lookups, total exposed wait %.1f us\n\n", a.file.c_str(), tl->rows().size(), total_e / 1e3);
  std::printf("%-5s %-6s %12s %12s %12s %12s %12s %12s %8s\n", "rank", "layer", "queue med", "L med", "E med", "E p95",
              "lead med", "resid med", "E share");
  for (const auto& x : base)
    std::printf("%-5d %-6d %12s %12s %12s %12s %12s %12s %8s\n", x.rank, x.layer_id,
                fmt_num(x.queue_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.lookup_ns.median / 1e3, "%.1f").c_str(),
                fmt_num(x.exposed_wait_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.exposed_wait_ns.p95 / 1e3, "%.1f").c_str(),
                fmt_num(x.lead_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.residual_s_ns.median / 1e3, "%.1f").c_str(),
                total_e > 0 ? fmt_num(100 * x.total_exposed_wait_ns / total_e, "%.0f%%").c_str() : "n/a");
  std::printf("(all times in us; queue = s - r, L = f - s, E = max(0, f - c), lead = c - r,\n"
              " resid = measured s - model s from s_i = max(r_i, f_{i-1}): a large residual means another dependency)\n");
  if (what_if) {
    std::printf("\nWhat-if (lookups x%.2f, submitted %.1f us earlier; consumer arrivals as measured):\n", a.scale_lookup,
                a.advance_ready_us);
    std::printf("  total exposed wait %.1f us -> %.1f us (model)\n", total_e / 1e3, total_wi / 1e3);
    for (const auto& x : wi)
      std::printf("  rank %d layer %d: model E median %s us, total %.1f us\n", x.rank, x.layer_id,
                  fmt_num(x.model_exposed_wait_ns.median / 1e3, "%.1f").c_str(), x.total_model_exposed_wait_ns / 1e3);
  }
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<TraceArgs>();
  sub.require_subcommand(1);
  auto* an = sub.add_subcommand("analyze", "Explain a timeline (written by engram run --timeline) with the serial-queue model");
  an->add_option("file", a->file, "Timeline file (Chrome trace written by engram run, or timeline JSON)")->required();
  an->add_option("--scale-lookup", a->scale_lookup, "What-if: multiply every lookup time L by this factor")->check(CLI::Range(0.0, 1000.0));
  an->add_option("--advance-ready-us", a->advance_ready_us, "What-if: make ids ready (r) this many microseconds earlier")
      ->check(CLI::Range(0.0, 1e9));
  an->add_flag("--json", a->json, "Print JSON");
  return [a] { return analyze(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(trace, "trace", "Analyse recorded lookup timelines (critical-path model, what-if)", engram::cli::setup);
