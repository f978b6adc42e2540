// `engram bench <key>|all`: runs entries of the benchmark registry (bench/registry.hpp) and prints what they
// measured: a human table per result (units in the column headers), the conditions block (git revision,
// compiler, CPU, NUMA nodes and distances, kernel, THP, hugepages, GPU/driver/CUDA), and on request JSON, tidy
// CSV (--csv FILE, "-" = stdout: one line per figure, the row's label in a column of its own) and a PNG of every
// figure (--plot FILE.png, gnuplot). --json prints the JSON on stdout as on every other command (the human text
// then goes to stderr); --json-out FILE writes it to FILE instead. A bench this machine cannot run is waived
// with its reason: exit 77 when it was the one asked for, a "waived" line (exit 0) under `all`.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "bench/registry.hpp"
#include "bench/report_io.hpp"
#include "args.hpp"
#include "command.hpp"
#include "core/git_rev.hpp"
#include "host/conditions.hpp"
#include "report/plot.hpp"
#include "report.hpp"
#if ENGRAM_HAVE_CUDA
#include "cuda/device.cuh"
#endif

namespace engram::cli {
namespace {

struct BenchArgs {
  bench::Context ctx;
  bool json = false;      // --json: the document on stdout
  std::string json_path;  // --json-out FILE
  std::string csv_path;   // "" none, "-" stdout
  std::string plot_path;
  bool list = false;
};

nlohmann::json gpu_conditions() {
#if ENGRAM_HAVE_CUDA
  auto d = cuda::device_info(0);
  if (!d.is_ok()) return {{"gpu", nullptr}, {"reason", d.status().to_string()}};
  return {{"gpu", d->name},
          {"pci_bus_id", d->pci_bus_id},
          {"sm_count", d->sm_count},
          {"cc", std::to_string(d->cc_major) + "." + std::to_string(d->cc_minor)},
          {"memory_bytes", d->total_memory_bytes},
          {"l2_bytes", d->l2_bytes},
          {"driver_version", d->driver_version},
          {"runtime_version", d->runtime_version}};
#else
  return {{"gpu", nullptr}, {"reason", "built without CUDA (ENGRAM_CUDA=OFF or no nvcc)"}};
#endif
}

// The GPU's name for the text lines, n/a when there is none.
std::string gpu_name(const nlohmann::json& g) {
  return g.contains("gpu") && g["gpu"].is_string() ? g["gpu"].get<std::string>() : std::string("n/a");
}

int run_benches(const std::vector<const bench::Entry*>& entries, BenchArgs& a, bool single) {
  a.ctx.rng.seed(a.ctx.seed);
  a.ctx.git_rev = git_revision();
  nlohmann::json conditions = collect_conditions(git_revision());
  conditions["gpu"] = gpu_conditions();
  if (a.json && a.csv_path == "-")
    return report_failure("bench", Status(Code::kInvalidArgument,
                                          "--json and --csv - both ask for stdout; write one to a file (--json-out FILE "
                                          "or --csv FILE)"));
  if (a.json && !a.json_path.empty())
    return report_failure("bench", Status(Code::kInvalidArgument,
                                          "--json (stdout) and --json-out " + a.json_path + " (file): give one"));
  // With --json or --csv on stdout the human text goes to stderr.
  const bool json_stdout = a.json;
  const bool csv_stdout = a.csv_path == "-";
  FILE* human = json_stdout || csv_stdout ? stderr : stdout;
  std::fprintf(human, "engram bench: %s; warm-up %d, %d reps%s, seed %llu\n", conditions_summary(conditions).c_str(),
               a.ctx.warmup, a.ctx.reps, a.ctx.smoke ? ", smoke sizes" : "",
               static_cast<unsigned long long>(a.ctx.seed));
  const auto& g = conditions["gpu"];
  std::fprintf(human, "gpu: %s\n", gpu_name(g).c_str());
  std::vector<bench::Report> reports;
  nlohmann::json out = {{"schema", "engram.bench/1"}, {"conditions", conditions}};
  out["context"] = {{"warmup", a.ctx.warmup}, {"reps", a.ctx.reps}, {"smoke", a.ctx.smoke}, {"seed", a.ctx.seed},
                    {"threads", a.ctx.threads}};
  out["benches"] = nlohmann::json::array();
  int rc = 0;
  for (const bench::Entry* e : entries) {
    bench::Report r;
    r.key = e->key;
    if (e->check) {
      const Status bad = e->check(a.ctx);
      if (!bad.is_ok()) {
        std::fprintf(stderr, "engram bench %s: %s\n", e->key.c_str(), bad.to_string().c_str());
        return 2;
      }
    }
    std::optional<std::string> waive = e->filter ? e->filter(a.ctx) : std::nullopt;
    if (waive) {
      r.waived = true;
      r.waived_reason = *waive;
    } else {
      std::fprintf(stderr, "bench %s: running...\n", e->key.c_str());
      auto res = e->run(a.ctx);
      if (!res.is_ok()) {
        if (res.status().code() == Code::kUnsupported) {
          r.waived = true;
          r.waived_reason = res.status().message();
        } else {
          std::fprintf(stderr, "engram bench %s: FAILED: %s\n", e->key.c_str(), res.status().to_string().c_str());
          r.notes.push_back("failed: " + res.status().to_string());
          rc = res.status().code() == Code::kInvalidArgument ? 2 : 1;  // an option that cannot apply is bad input
        }
      } else {
        r = std::move(*res);
        r.key = e->key;
      }
    }
    if (r.waived) {
      std::fprintf(human, "\n== bench %s: WAIVED: %s\n", e->key.c_str(), r.waived_reason.c_str());
      if (single && rc == 0) rc = 77;
    } else {
      std::fprintf(human, "\n== bench %s: %s\n", e->key.c_str(), e->description.c_str());
      if (!r.setup.is_null()) std::fprintf(human, "setup: %s\n", r.setup.dump().c_str());
      if (!json_stdout && !csv_stdout) {
        for (const auto& t : r.tables) bench::print_table(t);
      }
      for (const auto& n : r.notes) std::fprintf(human, "note: %s\n", n.c_str());
    }
    out["benches"].push_back(bench::report_json(r, e->description));
    reports.push_back(std::move(r));
    std::fflush(stdout);
  }
  if (json_stdout) {
    std::cout << out.dump(2) << "\n";
  } else if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    f << out.dump(2) << "\n";
    if (!f) return report_failure("bench", Status(Code::kIo, "cannot write --json-out " + a.json_path));
    std::fprintf(human, "json: %s\n", a.json_path.c_str());
  }
  if (csv_stdout) {
    bench::write_csv(std::cout, reports);
    std::cout.flush();
  } else if (!a.csv_path.empty()) {
    std::ofstream f(a.csv_path);
    bench::write_csv(f, reports);
    if (!f) return report_failure("bench", Status(Code::kIo, "cannot write --csv " + a.csv_path));
    std::fprintf(human, "csv: %s\n", a.csv_path.c_str());
  }
  if (!a.plot_path.empty()) {
    std::vector<plot::Figure> figs;
    for (const auto& r : reports)
      for (const auto& f : r.figures) {
        figs.push_back(f);
        if (a.ctx.smoke) figs.back().title += " [smoke sizes]";  // a smoke figure must not pass for a measurement
      }
    if (figs.empty()) {
      std::fprintf(human, "plot: nothing to plot (every bench waived or without figures); %s not written\n",
                   a.plot_path.c_str());
    } else {
      plot::Canvas canvas;
      canvas.columns = figs.size() == 1 ? 1 : 2;
      canvas.caption = std::string(a.ctx.smoke ? "SMOKE RUN (tiny sizes, figures not meaningful): " : "") +
                       "engram bench, " + conditions_summary(conditions) + ", gpu " + gpu_name(g);
      const Status st = plot::render_png(figs, a.plot_path, canvas);
      if (st.is_ok())
        std::fprintf(human, "plot: %s (%zu panels)\n", a.plot_path.c_str(), figs.size());
      else
        std::fprintf(stderr, "engram bench: plot not written: %s\n", st.to_string().c_str());
      // A missing gnuplot does not fail the measurement; a gnuplot error does.
      if (!st.is_ok() && st.code() != Code::kUnsupported && rc == 0) rc = 1;
    }
  }
  return rc;
}

void add_common(CLI::App& s, BenchArgs& a) {
  s.add_option("--reps", a.ctx.reps, "Timed repetitions per case (median, p5/p95, p99 for latencies)")
      ->check(range(1, 100000));
  s.add_option("--warmup", a.ctx.warmup, "Untimed warm-up repetitions per case")->check(range(0, 100000));
  s.add_flag("--smoke", a.ctx.smoke, "Tiny sizes that finish in seconds (CI); figures are not meaningful");
  s.add_option("--seed", a.ctx.seed, "Seed of every random choice (ids, A/B order, content)")->check(unsigned_integer());
  s.add_option("--threads", a.ctx.threads, std::string("Host threads (default 0; ") + kAutoThreadsHelp + ")")
      ->check(range(0, 4096));
  s.add_option("--data-dir", a.ctx.data_dir, "Token files of scripts/tokenize-setup for text ids (default: search)")
      ->check(input_dir());
  s.add_flag("--json", a.json, "Print the report as JSON on stdout (the human text goes to stderr)");
  s.add_option("--json-out", a.json_path, "Write the report as JSON to FILE (the human text stays on stdout)")
      ->check(output_file());
  s.add_option("--csv", a.csv_path, "Write every table as tidy CSV to FILE ('-' = stdout, human text to stderr): "
               "one line per figure, bench,table,<the table's label columns>,column,value; empty value = n/a")
      ->check(output_file({"-"}));
  s.add_option("--plot", a.plot_path, "Render the figures into FILE.png with gnuplot (Debian: gnuplot-nox)")
      ->check(output_file());
  s.add_flag("--verbose", a.ctx.verbose, "Progress on stderr");
}

std::function<int()> setup_bench(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.require_subcommand(1);
  sub.footer(
      "Every bench: warm-up, then --reps repetitions with the variants it compares interleaved in a shuffled\n"
      "order; median [p5, p95] (p99 for latencies); GB/s = 1e9 B/s; n/a = could not be measured (never 0).\n"
      "What each bench times and which bytes it counts: docs/measurement.md. Exit: 0 ok, 1 failure, 2 bad\n"
      "arguments, 77 the one bench asked for is waived on this machine (reason printed).");
  auto& reg = bench::registry();
  std::sort(reg.begin(), reg.end(), [](const auto& x, const auto& y) { return x.order < y.order || (x.order == y.order && x.key < y.key); });
  std::vector<std::pair<CLI::App*, const bench::Entry*>> subs;
  for (const auto& e : reg) {
    CLI::App* s = sub.add_subcommand(e.key, e.description);
    add_common(*s, *a);
    if (e.add_options) e.add_options(*s);
    subs.emplace_back(s, &e);
  }
  CLI::App* all = sub.add_subcommand("all", "Every bench in turn with its default options (waived ones say why)");
  add_common(*all, *a);
  CLI::App* list = sub.add_subcommand("list", "List the benches and whether this machine can run them");
  return [a, subs, all, list]() -> int {
    if (all->parsed()) {
      std::vector<const bench::Entry*> es;
      for (auto& [s, e] : subs) es.push_back(e);
      return run_benches(es, *a, false);
    }
    if (list->parsed()) {
      for (auto& [s, e] : subs) {
        auto w = e->filter ? e->filter(a->ctx) : std::nullopt;
        std::printf("%-10s %s%s\n", e->key.c_str(), e->description.c_str(), w ? (" [waived: " + *w + "]").c_str() : "");
      }
      return 0;
    }
    for (auto& [s, e] : subs)
      if (s->parsed()) return run_benches({e}, *a, true);
    return 2;
  };
}

}  // namespace

ENGRAM_COMMAND(bench, "bench",
               "Benchmarks: NUMA matrix, host<->GPU copies, lookup sweeps, registration (tables, --json, --csv, --plot)",
               setup_bench);

}  // namespace engram::cli
