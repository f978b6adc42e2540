// `engram bench cache-counts`: the host cost of the hot-row cache's online updates at serving sizes, which decides
// whether an update keeps up with the steps or is deferred:
// - counting a step's ids (plan::HotCounts::observe, ns per id) for a decode batch and an 8K-token prefill batch of
//   24 heads;
// - planning M swaps (HotCounts::plan) at the engine's base update and at its 4x burst;
// - the latency of a plan asked of the counting thread (HotCountsWorker::request_plan until the swaps are there)
//   2 ms after a prefill batch was handed to it: a plan that waits behind the batch being counted is what defers the
//   update due at the next step;
// - the updates deferred when steps come at a fixed period (decode every 100, 250 and 1,000 us, prefill every 2.5 ms:
//   `engram bench traffic` serves a layer's lookups about that fast), the counting thread driven as the engine
//   drives it.
// Ids follow a power law over the table's rows (rank r drawn log-uniformly: a Zipf-like exponent of 1, ranks scattered
// over the rows by a fixed mix); the cache holds the hottest `--slots` ranks, as a profile fill would. Every
// repetition counts fresh batches; the plan of repetition k runs on the counts of every batch before it.
// Runs on any machine (no GPU).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "bench/measure.hpp"
#include "engram/options.hpp"
#include "plan/hot_counts.hpp"
#include "plan/update_budget.hpp"
#include "tools/engram/arg_checks.hpp"

namespace engram::bench {
namespace {

struct CountsOptions {
  int64_t rows = 126'326'170;   // one 32 GiB layer of the V4.1-Flash layout
  int64_t slots = 5'575'836;    // its 5% fp8 cache
  int64_t heads = 24;
  int64_t decode_batch = 256;   // sequences per decode step
  int64_t prefill_tokens = 8192;
};
CountsOptions g_counts;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Power-law ids: rank = floor(rows^u) - 1 for u uniform in [0, 1), scattered over the rows.
struct IdSource {
  int64_t rows;
  std::mt19937_64 rng;
  int64_t id_of_rank(int64_t rank) const {
    return static_cast<int64_t>(mix64(static_cast<uint64_t>(rank)) % static_cast<uint64_t>(rows));
  }
  std::vector<int64_t> batch(int64_t n) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double ln = std::log(static_cast<double>(rows));
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& id : v) id = id_of_rank(std::min<int64_t>(rows - 1, static_cast<int64_t>(std::exp(u(rng) * ln)) - 1));
    return v;
  }
};

Result<Report> run_counts(Context& ctx) {
  CountsOptions o = g_counts;
  if (ctx.smoke) {
    o.rows = 2'000'000;
    o.slots = 100'000;
    o.prefill_tokens = 1024;
  }
  Report rep;
  rep.key = "cache-counts";
  rep.method = {{"warmup", ctx.warmup},
                {"reps", ctx.reps},
                {"timer", "steady_clock around each call, one thread (the worker's latency: request to swaps parked)"},
                {"ids", "power law over the table's rows, fresh batches per repetition"}};
  rep.setup = {{"rows", o.rows}, {"slots", o.slots}, {"heads", o.heads}, {"decode_batch", o.decode_batch},
               {"prefill_tokens", o.prefill_tokens}};
  IdSource src{o.rows, std::mt19937_64(ctx.seed)};
  const CacheUpdate engine_update;  // the engine's default online update
  const plan::UpdateBudget engine_budget(engine_update.rows, engine_update.slice, engine_update.burst);
  plan::HotCountsOptions co;
  co.id_limit = o.rows;
  co.pool_size = engine_budget.candidate_pool();
  plan::HotCounts counts(co);
  std::vector<int64_t> slot_ids(static_cast<size_t>(o.slots));
  for (int64_t s = 0; s < o.slots; ++s) slot_ids[static_cast<size_t>(s)] = src.id_of_rank(s);
  const double t_fill = now_ns();
  counts.set_slots(slot_ids);
  const double fill_ms = (now_ns() - t_fill) / 1e6;
  const int64_t decode_ids = o.decode_batch * o.heads, prefill_ids = o.prefill_tokens * o.heads;
  for (int i = 0; i < 16; ++i) {  // counts to plan from
    const auto b = src.batch(decode_ids);
    counts.observe(b.data(), decode_ids);
  }

  Table t;
  t.key = "cache_counts";
  t.title = "Host cost of the cache's online updates (one layer)";
  t.columns = {{"operation"}, {"size", 0}, {"median [us]", 1}, {"p5 [us]", 1}, {"p95 [us]", 1}, {"per id [ns]", 1}};
  nlohmann::json cases = nlohmann::json::array();
  auto add = [&](const std::string& name, int64_t size, const std::vector<double>& ns, bool per_id) {
    const stats::Summary s = stats::summarize(ns);
    const double per = per_id && size > 0 ? s.median / static_cast<double>(size) : stats::kNaN;
    t.rows.push_back({name, size, s.median / 1e3, s.p5 / 1e3, s.p95 / 1e3, per});
    cases.push_back({{"operation", name}, {"size", size}, {"ns", summary_json(s)}, {"per_id_ns", json_num(per)}});
  };
  auto time_observe = [&](int64_t n) {
    std::vector<double> ns;
    for (int k = 0; k < ctx.warmup + ctx.reps; ++k) {
      const auto b = src.batch(n);
      const double t0 = now_ns();
      counts.observe(b.data(), n);
      if (k >= ctx.warmup) ns.push_back(now_ns() - t0);
    }
    return ns;
  };
  auto time_plan = [&](int64_t m) {
    std::vector<double> ns;
    for (int k = 0; k < ctx.warmup + ctx.reps; ++k) {
      for (int i = 0; i < 4; ++i) {  // an update's period of decode steps
        const auto b = src.batch(decode_ids);
        counts.observe(b.data(), decode_ids);
      }
      const double t0 = now_ns();
      (void)counts.plan(m);
      if (k >= ctx.warmup) ns.push_back(now_ns() - t0);
    }
    return ns;
  };
  add("count a decode batch", decode_ids, time_observe(decode_ids), true);
  add("count a prefill batch", prefill_ids, time_observe(prefill_ids), true);
  add("plan an update", engine_budget.rows(), time_plan(engine_budget.rows()), false);
  add("plan a burst update", engine_budget.max_rows(), time_plan(engine_budget.max_rows()), false);

  // The counting thread: a plan asked for at the end of a prefill step, 2 ms after its batch was handed over.
  {
    plan::HotCountsWorker worker(1, co);
    worker.with(0, [&](plan::HotCounts& c) { c.set_slots(slot_ids); });
    std::vector<double> ns;
    for (int k = 0; k < ctx.warmup + ctx.reps; ++k) {
      const auto b = src.batch(prefill_ids);
      worker.submit(0, b.data(), prefill_ids);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the step's lookup: the batch is being counted
      const double t0 = now_ns();
      if (!worker.request_plan(0, engine_budget.rows())) return Status(Code::kInternal, "bench cache-counts: the plan was refused");
      while (worker.plan_queued(0)) std::this_thread::yield();
      if (k >= ctx.warmup) ns.push_back(now_ns() - t0);
      worker.drain();
      (void)worker.take_planned(0, INT64_MAX);
    }
    add("plan behind a prefill batch", engine_budget.rows(), ns, false);
  }
  t.notes.push_back(fmt::format("cache of {} slots over {} rows; set_slots took {:.0f} ms", o.slots, o.rows, fill_ms));

  // Steps at a fixed period, driven as the engine drives its counting thread (CudaBackend::before_end_sync and
  // maintain_caches): each step hands its ids over, takes one slice of planned swaps, and every 4th step an update
  // comes due; it is deferred while the previous plan is not computed yet or a whole update still waits.
  Table d;
  d.key = "cache_updates_deferred";
  d.title = "Online updates at a step period (the engine's default: " + engine_update.to_string() + ", bursts up to " +
            std::to_string(engine_update.burst) + "x)";
  d.columns = {{"steps"}, {"ids per step", 0}, {"period [us]", 0}, {"updates due", 0}, {"deferred", 0},
               {"deferred [%]", 1}, {"steps waited", 0}, {"plan mean [us]", 1}, {"batches sampled", 0}};
  nlohmann::json cadence = nlohmann::json::array();
  struct Cadence {
    std::string name;
    int64_t ids;
    double period_us;
    int steps;
  };
  const int steps = ctx.smoke ? 40 : 400;
  const Cadence cadences[] = {{"decode", decode_ids, 100, steps}, {"decode", decode_ids, 250, steps},
                              {"decode", decode_ids, 1000, steps}, {"prefill", prefill_ids, 2500, steps / 4}};
  for (const Cadence& cd : cadences) {
    plan::HotCountsWorker worker(1, co);
    worker.with(0, [&](plan::HotCounts& c) { c.set_slots(slot_ids); });
    plan::UpdateBudget budget = engine_budget;
    const int every = engine_update.every;
    plan::UpdateClock clock(every);
    bool fed = true;
    std::vector<std::vector<int64_t>> batches;
    for (int k = 0; k < cd.steps; ++k) batches.push_back(src.batch(cd.ids));
    const double t0 = now_ns();
    for (int k = 0; k < cd.steps; ++k) {
      while (now_ns() < t0 + k * cd.period_us * 1e3) {
      }
      worker.submit(0, batches[static_cast<size_t>(k)].data(), cd.ids);
      (void)worker.take_planned(0, budget.slice_for(every));
      (void)clock.tick();
      if (!clock.due()) continue;
      if (!fed && !worker.plan_queued(0)) {
        budget.on_plan(worker.last_plan_rows(0));
        fed = true;
      }
      if (worker.request_plan(0, budget.rows())) {
        clock.asked();
        fed = false;
      } else {
        clock.refused();
      }
    }
    worker.drain();
    const plan::HotCountsWorker::PlanTimes pt = worker.plan_times();
    const double plan_mean = pt.plans > 0 ? pt.sum_us / static_cast<double>(pt.plans) : stats::kNaN;
    const int64_t due_n = clock.attempts(), deferred = clock.deferred();
    const double pct = due_n > 0 ? 100.0 * static_cast<double>(deferred) / static_cast<double>(due_n) : stats::kNaN;
    d.rows.push_back({cd.name, cd.ids, cd.period_us, due_n, deferred, pct, clock.waited_steps(), plan_mean,
                      worker.sampled_batches()});
    cadence.push_back({{"steps", cd.name}, {"ids", cd.ids}, {"period_us", cd.period_us}, {"updates_due", due_n},
                       {"deferred", deferred}, {"steps_waited", clock.waited_steps()},
                       {"plan_mean_us", json_num(plan_mean)},
                       {"sampled_batches", worker.sampled_batches()}});
  }
  d.notes.push_back(
      "deferred: counted once per update that came due and was not planned at that step, as the engine counts it");
  t.notes.push_back(fmt::format(
      "an update is deferred when its plan is not back by the step it is due at (every {} steps)", engine_update.every));
  rep.tables.push_back(std::move(t));
  rep.tables.push_back(std::move(d));
  rep.data["cases"] = cases;
  rep.data["cadence"] = cadence;
  return rep;
}

}  // namespace

ENGRAM_BENCH(cache_counts, {.key = "cache-counts",
                            .description = "Host cost of the hot-row cache's online updates: counting a step's ids, "
                                           "planning swaps, a plan's latency on the counting thread",
                            .add_options =
                                [](CLI::App& s) {
                                  s.add_option("--rows", g_counts.rows, "Rows of the layer's table")
                                      ->check(cli::range(int64_t{2}, int64_t{1} << 40));
                                  s.add_option("--slots", g_counts.slots, "Slots of the cache (the hottest ranks)")
                                      ->check(cli::range(int64_t{1}, int64_t{1} << 32));
                                  s.add_option("--prefill-tokens", g_counts.prefill_tokens, "Tokens of a prefill batch")
                                      ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                                  s.add_option("--decode-batch", g_counts.decode_batch, "Sequences of a decode batch")
                                      ->check(cli::range(int64_t{1}, int64_t{1} << 20));
                                },
                            .check = [](const Context&) -> Status {
                              if (g_counts.slots >= g_counts.rows)
                                return Status(Code::kInvalidArgument, "cache-counts: --slots must be below --rows");
                              return Status::ok();
                            },
                            .filter = [](const Context&) -> std::optional<std::string> { return std::nullopt; },
                            .run = run_counts,
                            .order = 47});

}  // namespace engram::bench
