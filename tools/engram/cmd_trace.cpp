// `engram trace analyze FILE`: explains a recorded timeline with the serial-queue model (warm-up steps left out):
// per rank and Engram layer the queue time s-r, lookup time L, exposed wait E = max(0, f-c), lead time c-r and
// the residual between measured and modelled start; the layers that dominate E; and what-if totals when lookups
// are faster (--scale-lookup), submitted earlier (--advance-ready-us) or one layer's lookups run on a second queue
// (--move-layer); and a PNG of one step's lanes (--plot FILE.png --step K: prefetch queue lookups s..f, main-stream
// waits c..wait_end, ids-ready-to-submit r..submit) drawn with gnuplot (plot.hpp).
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "command.hpp"
#include "report/plot.hpp"
#include "report.hpp"
#include "engram/timeline.hpp"
#include "sys/file.hpp"

namespace engram::cli {
namespace {

struct TraceArgs {
  std::string file;
  double scale_lookup = 1.0;
  double advance_ready_us = 0.0;
  bool json = false;
  int move_layer = -1;
  std::string plot;
  int64_t step = -1;
  int rank = 0;
  bool include_warmup = false;
};

// Lanes of one step of one rank, times in us from the step's first r.
Status plot_step(const Timeline& tl, int rank, int64_t step, const std::string& png, const std::string& file) {
  bool rank_seen = false;
  for (const auto& t : tl.rows()) rank_seen |= t.rank == rank;
  if (!rank_seen)
    return Status(Code::kInvalidArgument, "--rank " + std::to_string(rank) + ": the timeline has no lookups of that rank");
  const auto rows = step_rows(tl, rank, step);
  if (rows.empty())
    return Status(Code::kInvalidArgument, "--step " + std::to_string(step) + ": rank " + std::to_string(rank) + " has no lookups in that step");
  double t0 = kNotRecorded;
  for (const auto& t : rows)
    if (std::isfinite(t.r_ns) && !(t0 <= t.r_ns)) t0 = t.r_ns;
  if (!std::isfinite(t0)) t0 = rows.front().s_ns;
  plot::Figure f;
  f.title = "rank " + std::to_string(rank) + ", step " + std::to_string(step) + " (" + file + ")";
  f.x_label = "time from the step's first ids-ready [us]";
  f.y_label = "";
  f.style = plot::Style::kLanes;
  f.lanes = {"ids ready -> submit", "prefetch queue (lookup s..f)", "main stream (wait c..end)"};
  f.color_names = {"r..submit", "lookup L", "consumer wait"};
  auto us = [&](double ns) { return (ns - t0) / 1e3; };
  for (const auto& t : rows) {
    const std::string tag = "L" + std::to_string(t.layer_id);
    if (std::isfinite(t.r_ns) && std::isfinite(t.submit_ns)) f.segments.push_back({0, us(t.r_ns), us(t.submit_ns), 0, tag});
    if (std::isfinite(t.s_ns) && std::isfinite(t.f_ns)) f.segments.push_back({1, us(t.s_ns), us(t.f_ns), 1, tag});
    if (std::isfinite(t.c_ns) && std::isfinite(t.wait_end_ns))
      f.segments.push_back({2, us(t.c_ns), us(std::max(t.c_ns, t.wait_end_ns)), 2, tag});
  }
  plot::Canvas c;
  c.caption = "E = max(0, f - c); the wait bar starts when the consumer arrives (c)";
  return plot::render_png({f}, png, c);
}

nlohmann::json dj(const Distribution& d) { return d.to_json(); }

int analyze(const TraceArgs& a) {
  auto text = sys::read_small_file(a.file, int64_t{4} << 30);
  if (!text.is_ok()) return report_failure("trace analyze", text.status());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return report_failure("trace analyze", Status(Code::kInvalidArgument, "'" + a.file + "' is not JSON"));
  auto all = Timeline::from_json(j);
  if (!all.is_ok()) return report_failure("trace analyze", all.status().with_context(a.file));
  // Warm-up steps are left out unless asked for, so the figures are those of the run's own report.
  auto tl = a.include_warmup ? all : Result<Timeline>(all->measured());
  const size_t warmup_rows = all->rows().size() - tl->rows().size();
  if (tl->rows().empty())
    return report_failure("trace analyze", Status(Code::kInvalidArgument, a.file + ": timeline has no " +
                                                                               (warmup_rows ? "measured rows (only warm-up; --include-warmup)" : "rows")));
  // E = max(0, f - c) needs both times of a lookup: a timeline where no row records them (null: not recorded) has
  // no exposed wait to report, not one of 0.
  bool any_e = false;
  for (const auto& t : tl->rows()) any_e |= std::isfinite(t.f_ns) && std::isfinite(t.c_ns);
  if (!any_e)
    return report_failure("trace analyze", Status(Code::kInvalidArgument, a.file + ": timeline: no row records both f_ns "
                                                                                   "and c_ns: the exposed wait cannot be computed"));
  const auto base = analyze_timeline(*tl);
  const bool what_if = a.scale_lookup != 1.0 || a.advance_ready_us != 0.0 || a.move_layer >= 0;
  if (a.move_layer >= 0 && (a.scale_lookup != 1.0 || a.advance_ready_us != 0.0))
    return report_failure("trace analyze", Status(Code::kInvalidArgument, "--move-layer is a what-if of its own: not with --scale-lookup/--advance-ready-us"));
  if (a.move_layer >= 0) {
    bool found = false;
    for (const auto& x : base) found |= x.layer_id == a.move_layer;
    if (!found) return report_failure("trace analyze", Status(Code::kInvalidArgument, "--move-layer " + std::to_string(a.move_layer) + ": no such Engram layer in the timeline"));
  }
  const auto wi = a.move_layer >= 0 ? analyze_timeline_moved(*tl, a.move_layer)
                  : what_if        ? analyze_timeline(*tl, a.scale_lookup, a.advance_ready_us * 1000.0)
                                   : base;
  std::string plot_note;
  if (!a.plot.empty()) {
    int64_t step = a.step;
    if (step < 0) {  // default: the step with the largest total exposed wait of the rank
      std::map<int64_t, double> e;
      for (const auto& t : tl->rows())
        if (t.rank == a.rank && !t.is_warmup() && std::isfinite(t.exposed_wait_ns())) e[t.step] += t.exposed_wait_ns();
      double best = -1;
      for (auto& [k, v] : e)
        if (v > best) best = v, step = k;
    }
    Status ps = plot_step(*tl, a.rank, step, a.plot, a.file);
    if (ps.code() == Code::kInvalidArgument) return report_failure("trace analyze", ps);
    plot_note = ps.is_ok() ? "step " + std::to_string(step) + " lanes drawn in " + a.plot : "plot not drawn: " + ps.to_string();
  }

  double total_e = 0, total_wi = 0;
  for (const auto& x : base) total_e += x.total_exposed_wait_ns;
  for (const auto& x : wi) total_wi += x.total_model_exposed_wait_ns;
  nlohmann::json out;
  out["schema"] = "engram.trace-analyze/1";
  out["file"] = a.file;
  out["lookups"] = tl->rows().size();
  out["warmup_lookups_excluded"] = warmup_rows;
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
                      {"moved_layer_to_second_queue", a.move_layer >= 0 ? nlohmann::json(a.move_layer) : nlohmann::json(nullptr)},
                      {"total_model_exposed_wait_ns", total_wi}, {"layers", w}};
  }
  if (!plot_note.empty()) out["plot"] = plot_note;
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu lookups%s, total exposed wait %.1f us\n\n", a.file.c_str(), tl->rows().size(),
              warmup_rows ? (" (" + std::to_string(warmup_rows) + " warm-up lookups left out; --include-warmup)").c_str()
                          : (a.include_warmup ? " (warm-up included)" : ""),
              total_e / 1e3);
  std::printf("%-5s %-6s %12s %12s %12s %12s %12s %12s %8s\n", "rank", "layer", "queue med", "L med", "E med", "E p95",
              "lead med", "resid med", "E share");
  for (const auto& x : base)
    std::printf("%-5d %-6d %12s %12s %12s %12s %12s %12s %8s\n", x.rank, x.layer_id,
                fmt_num(x.queue_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.lookup_ns.median / 1e3, "%.1f").c_str(),
                fmt_num(x.exposed_wait_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.exposed_wait_ns.p95 / 1e3, "%.1f").c_str(),
                fmt_num(x.lead_ns.median / 1e3, "%.1f").c_str(), fmt_num(x.residual_s_ns.median / 1e3, "%.1f").c_str(),
                total_e > 0 ? fmt_num(100 * x.total_exposed_wait_ns / total_e, "%.0f%%").c_str() : "n/a");
  if (!plot_note.empty()) std::printf("Plot: %s\n", plot_note.c_str());
  std::printf("(all times in us; queue = s - r, L = f - s, E = max(0, f - c), lead = c - r,\n"
              " resid = measured s - model s from s_i = max(r_i, f_{i-1}): a large residual means another dependency)\n");
  if (what_if) {
    if (a.move_layer >= 0)
      std::printf("\nWhat-if (layer %d's lookups on a second serial queue; consumer arrivals as measured):\n", a.move_layer);
    else
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
  an->add_option("file", a->file, "Timeline file (Chrome trace written by engram run, or timeline JSON)")
      ->required()
      ->check(input_file());
  an->add_option("--scale-lookup", a->scale_lookup, "What-if: multiply every lookup time L by this factor")->check(range(0.0, 1000.0));
  an->add_option("--advance-ready-us", a->advance_ready_us, "What-if: make ids ready (r) this many microseconds earlier")
      ->check(range(0.0, 1e9));
  an->add_option("--move-layer", a->move_layer, "What-if: run this Engram layer's lookups on a second serial queue")
      ->check(range(0, 100000));
  an->add_option("--plot", a->plot, "Draw one step's lanes (ids ready, prefetch queue, main-stream waits) into this PNG")
      ->check(output_file());
  an->add_option("--step", a->step, "Step for --plot (default: the step with the largest exposed wait)")
      ->check(integer_in(0, kMaxTimelineStep));
  an->add_option("--rank", a->rank, "Rank for --plot (default 0)")->check(integer_in(0, kMaxTimelineRank));
  an->add_flag("--include-warmup", a->include_warmup,
               "Count the warm-up steps too (default: left out, as engram run's own report leaves them out)");
  an->add_flag("--json", a->json, "Print JSON");
  for (const char* name : {"--step", "--rank"})
    refuse_without(*an, an->get_option(name), an->get_option("--plot"), "it picks what --plot draws");
  return [a] { return analyze(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(trace, "trace", "Analyse recorded lookup timelines (critical-path model, what-if)", engram::cli::setup);
