// `engram experiment A1|A2|A3|B1|B2`: one change per experiment, arms re-created and placed before registration,
// census proof, the same recorded batches in every arm, randomised order over >= 5 repetitions, medians with
// p5/p95, bootstrap CI of the difference, and the acceptance chain (src/replay/experiment.hpp). Writes report.md,
// report.json, metrics.png and one timeline per arm into --out. An experiment whose arms would do the same on
// this machine (A1-A3 on one node, B2's CPU analogue on too few cores) is refused with the reason (exit 77).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "args.hpp"
#include "command.hpp"
#include "core/git_rev.hpp"
#include "host/conditions.hpp"
#include "report/plot.hpp"
#include "report.hpp"
#include "serving_args.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"
#include "sys/numa.hpp"

namespace engram::cli {
namespace {

struct ExperimentArgs {
  std::string id;
  ServingArgs s;
  int reps = 5;
  std::vector<double> caps = {0.25, 0.5, 1.0};
  std::string out;
  std::string batches;
  uint64_t order_seed = 7;
  std::string prefetch = "early";
  bool json = false;
};

// One bar panel per headline metric: arms on x, median with p5..p95 error bars.
Status plot_metrics(const nlohmann::json& j, const std::string& png) {
  struct Key {
    const char* key;
    const char* title;
    const char* unit;
  };
  static const std::vector<Key> keys = {{"ttft_p50_ms", "TTFT p50", "ms"},
                                        {"itl_p50_ms", "ITL p50", "ms"},
                                        {"goodput_rps", "goodput", "requests/s"},
                                        {"lookup_p50_us", "lookup time L p50", "us"},
                                        {"wait_per_step_us", "consumer wait per step", "us"},
                                        {"main_compute_p50_us", "main compute per step", "us"}};
  std::vector<plot::Figure> figs;
  for (const auto& [k, title, unit] : keys) {
    plot::Figure f;
    f.title = std::string(title) + " [" + unit + "]";
    f.x_label = "";  // the arm names are the x tick labels
    f.y_label = unit;
    f.style = plot::Style::kBars;
    plot::Series s;
    s.name = "median over " + std::to_string(j["repetitions"].is_number() ? j["repetitions"].get<int>() : 0) +
             " repetitions, whiskers p5..p95";
    for (const auto& a : j["arms"]) {
      f.categories.push_back(a["name"].get<std::string>());
      const auto& m = a["metrics"][k];
      auto g = [&](const char* f2) { return m[f2].is_number() ? m[f2].get<double>() : kNotRecorded; };
      s.y.push_back(g("median"));
      s.y_low.push_back(g("p5"));
      s.y_high.push_back(g("p95"));
    }
    f.series.push_back(s);
    figs.push_back(f);
  }
  plot::Canvas c;
  c.columns = 3;
  c.width_px = 1500;
  c.caption = "engram experiment " + j["experiment"].get<std::string>() + ": " + j["changes"].get<std::string>();
  return plot::render_png(figs, png, c);
}

int experiment(const ExperimentArgs& a) {
  auto say = [&](const std::string& m) {
    if (!a.json) std::fprintf(stderr, "engram experiment %s: %s\n", a.id.c_str(), m.c_str());
  };
  auto setup = resolve_serving(a.s, say);
  if (!setup.is_ok()) return report_failure("experiment", setup.status());
  ServingSetup& s = *setup;
  // Refuse, before anything is built, an experiment whose arms would not differ on this machine.
  const int hw = sys::usable_cpu_count();
  if (auto arms = make_arms(a.id, s.engine, sys::memory_nodes(), a.caps, hw); !arms.is_ok())
    return report_failure("experiment " + a.id, arms.status());
  ExperimentOptions o;
  o.id = a.id;
  o.layout = s.layout;
  o.base = s.engine;
  o.serving = s.serving;
  o.serving.mode = a.prefetch == "early" ? PrefetchMode::kEarly : PrefetchMode::kOnDemand;
  o.make_ids = s.make_ids;
  o.reps = a.reps;
  o.order_seed = a.order_seed;
  o.caps = a.caps;
  o.out_dir = a.out.empty() ? "engram-experiment-" + a.id : a.out;
  // The report goes there after every repetition: a folder that cannot be written is refused before the first.
  if (Status st = sys::check_output_path(o.out_dir, sys::OutputKind::kDirectory); !st.is_ok())
    return report_failure("experiment", st.with_context("--out"));
  o.conditions = collect_conditions(git_revision());
  o.log = say;
  if (!a.batches.empty()) {
    auto sch = ServingSchedule::load(a.batches);
    if (!sch.is_ok()) return report_failure("experiment", sch.status().with_context("--batches"));
    o.schedule = std::move(*sch);
  } else {
    o.schedule.requests = s.requests;
  }
  auto res = run_experiment(o);
  if (!res.is_ok()) return report_failure("experiment " + a.id, res.status());
  std::string plot_note;
  const std::string png = o.out_dir + "/metrics.png";
  Status ps = plot_metrics(res->json, png);
  if (ps.is_ok()) {
    res->markdown += "\n## Plots\n\n![per-arm medians, p5..p95](metrics.png)\n";
    res->json["plots"] = {"metrics.png"};
  } else {
    plot_note = "plot not drawn: " + ps.to_string();
    res->markdown += "\n(" + plot_note + ")\n";
    res->json["plots"] = nlohmann::json::array();
    say(plot_note);
  }
  res->markdown += "\nTimelines per arm (last repetition): `engram trace analyze " + o.out_dir + "/trace-<arm>.json`\n";
  Status ws = write_experiment_report(*res, o.out_dir);
  if (!ws.is_ok()) return report_failure("experiment", ws);
  if (a.json) {
    res->json["schema"] = "engram.experiment/1";
    std::printf("%s\n", res->json.dump(2).c_str());
    return 0;
  }
  std::printf("%s\nReport: %s/report.md, %s/report.json%s\n", res->markdown.c_str(), o.out_dir.c_str(), o.out_dir.c_str(),
              ps.is_ok() ? (", " + png).c_str() : "");
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<ExperimentArgs>();
  sub.add_option("id", a->id, "A1 (node 0 <-> node 1), A2 (bound <-> interleaved), A3 (shared <-> replica per node), "
                              "B1 (early <-> on-demand), B2 (grid cap sweep)")
      ->required()
      ->check(CLI::IsMember({"A1", "A2", "A3", "B1", "B2"}));
  add_serving_options(sub, a->s);
  sub.add_option("--reps", a->reps, "Repetitions, arm order shuffled in each (default 5, at least 5: fewer make the "
                                    "bootstrap interval a point)")
      ->check(range(kMinExperimentReps, 1000));
  sub.add_option("--caps", a->caps, "B2: grid caps to sweep, two or more fractions in [0.01, 1], first = baseline "
                                    "(default 0.25 0.5 1.0)")
      ->check(range(0.01, 1.0));
  sub.add_option("--out", a->out, "Results folder (default engram-experiment-<ID>)")->check(output_dir());
  sub.add_option("--batches", a->batches, "Recorded batches (engram replay --record); default: recorded live once, untimed")
      ->check(input_file());
  sub.add_option("--order-seed", a->order_seed, "Seed of the arm-order shuffle (default 7)")->check(unsigned_integer());
  sub.add_option("--prefetch", a->prefetch, "Prefetch mode of every arm except in B1 (default early)")
      ->check(CLI::IsMember({"early", "on_demand"}));
  sub.add_flag("--json", a->json, "Print report.json on stdout");
  // Options read only by some experiments, or without a batches file, are refused elsewhere (option_rules.hpp).
  CLI::Option* id = sub.get_option("id");
  refuse_unless_value(sub, sub.get_option("--caps"), id, &a->id, {"B2"}, "only B2 sweeps grid caps");
  refuse_with_value(sub, sub.get_option("--prefetch"), id, &a->id, {"B1"}, "B1's arms are the two prefetch modes");
  refuse_workload_with_batches(sub, sub.get_option("--batches"));
  sub.footer(
      "Each arm: table created and placed before registration, census checked (an arm whose census does not show\n"
      "its placement is INVALID and not timed), the same recorded batches replayed. Acceptance chain: placement\n"
      "changed -> lookup or wait changed -> main compute not regressed -> end-to-end improved (bootstrap 95% CI).\n"
      "Example: engram experiment B1 --model tiny --requests 16 --rate 50 --reps 5 --out results/b1\n"
      "Exit 77: arms that would do the same on this machine (A1-A3 on one memory node: scripts/numa-guest runs them\n"
      "in a 2-node guest; B2 on the CPU when the caps round to the same lookup thread count), with the reason.");
  return [a] { return experiment(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(experiment, "experiment", "A/B experiments A1-A3 (placement), B1-B2 (prefetch, grid cap) with acceptance chain", engram::cli::setup);
