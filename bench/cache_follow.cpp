// `engram bench cache-follow`: how fast the hot-row cache's online updates follow a change of traffic, simulated on
// the host over real text (no GPU): a decode replay whose text switches from one corpus to another at a given step
// (SwitchingIdSource), the cache's content driven by the engine's own policy code (plan::HotCounts: decayed LFU
// counts, candidate pool, sampled victims; plan() every `every` steps, pipelined behind the previous update's last
// slices, one slice of UpdateBudget::slice_for(every) rows staged per step and committed at the next step, as
// src/cuda/backend_cache.cpp's maintenance does), and the hit rate of every step counted
// against what the cache holds when the step's lookups run. Variants: the static cache (warm-up window, no
// update), the online policies given by --updates, and the oracles: a cache filled from a profile of the new
// text's other documents (held-out) and of the replayed text itself (in-sample), both static.
//
// Model (what the GPU run measures directly, scripts/gpu-parts/72-cache-follow.sh): Engram layer 0 of
// v41-flash-mini at --table-size (its real head sizes and hash), slots of --cache-size's bytes as the engine computes
// them (plan::hot_cache_sizing: FP8 rows, map and the staging of the largest slice); a plan is taken one step after
// it is asked for (the counting thread's latency), a staged slice is visible from the step after the next. An
// update that comes due while a whole update's swaps still wait to be staged is deferred, as in the engine. Hit = the looked-up id is held (repeats within
// a step count each time, as the GPU's probe counters do).
// Output: per variant the hit rate over windows after the switch and the step at which the moving average over
// --window steps first reaches 90% of the held-out oracle's mean over the same steps; figures: the hit-rate curve.
// Waived when a default token file is missing (scripts/tokenize-follow); --smoke: 64 steps, profiles of 16 documents.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <unordered_set>

#include "tools/engram/arg_checks.hpp"
#include "bench/registry.hpp"
#include "core/stats.hpp"
#include "engram/layout.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/options.hpp"
#include "engram/units.hpp"
#include "host/hot_profile.hpp"
#include "host/token_io.hpp"
#include "plan/hot_cache_sizing.hpp"
#include "plan/hot_counts.hpp"
#include "plan/update_budget.hpp"
#include "replay/switching_id_source.hpp"
#include "replay/text_id_source.hpp"

namespace engram::bench {
namespace {

struct FollowOptions {
  std::string first, then, oracle;  // token files ("" = under the data dir)
  std::string fill;                 // start the static and online caches from a profile of this file ("" = warm-up)
  std::string table_size = "8GiB";
  std::string cache_size = "5%";
  int batch = 64;
  int warmup = 8;
  int64_t switch_at = 400;
  int64_t steps = 1000;
  int window = 16;
  double recover = 0.9;
  std::vector<std::string> updates{"every=4,rows=256,slice=64,burst=1", "every=4,rows=256,slice=64,burst=4",
                                   "every=4,rows=256,slice=64,burst=16"};
};
FollowOptions g_follow;

constexpr double kNaN = stats::kNaN;

// One cache whose content follows a policy.
struct SimCache {
  std::string name;
  bool online = false;
  CacheUpdate update;
  plan::UpdateBudget budget{1, 1, 1};
  plan::HotCounts counts;
  std::vector<int64_t> slot_ids;
  std::unordered_set<int64_t> held;
  std::deque<plan::CacheSwap> planned;
  std::vector<plan::CacheSwap> staged;
  int64_t swapped = 0, updates = 0, last_plan = 0;
  plan::UpdateClock clock{0};  // updates due and deferred, as EngineCacheReport counts them
  bool budget_fed = true;
  std::vector<double> hit;  // per step; NaN before the cache exists

  SimCache(std::string n, const plan::HotCountsOptions& co) : name(std::move(n)), counts(co) {}
  void fill(const std::vector<int64_t>& hot, int64_t slots) {
    slot_ids.assign(static_cast<size_t>(slots), -1);
    held.clear();
    for (size_t i = 0; i < hot.size() && static_cast<int64_t>(i) < slots; ++i) {
      slot_ids[i] = hot[i];
      held.insert(hot[i]);
    }
    counts.set_slots(slot_ids);
  }
  double probe(const std::vector<int64_t>& ids) const {
    if (slot_ids.empty()) return kNaN;
    int64_t h = 0, n = 0;
    for (int64_t id : ids) {
      if (id < 0) continue;
      ++n;
      h += held.count(id) ? 1 : 0;
    }
    return n ? static_cast<double>(h) / static_cast<double>(n) : kNaN;
  }
  // The engine's end-of-step maintenance (CudaBackend::maintain_caches): commit the staged slice, stage the next one
  // (cut before a slot or an id the slice already touches, as HotCountsWorker::take_planned does), then ask for the
  // next plan when due, refused only while a whole update's swaps still wait.
  void end_step() {
    if (!online || slot_ids.empty()) return;
    for (const auto& sw : staged) {
      if (sw.old_id >= 0) held.erase(sw.old_id);
      held.insert(sw.new_id);
      slot_ids[static_cast<size_t>(sw.slot)] = sw.new_id;
      ++swapped;
    }
    staged.clear();
    std::unordered_set<int64_t> slots_in, evicted;
    const int64_t slice = budget.slice_for(update.every);
    while (!planned.empty() && static_cast<int64_t>(staged.size()) < slice) {
      const plan::CacheSwap sw = planned.front();
      if (slots_in.count(sw.slot) || evicted.count(sw.new_id)) break;
      slots_in.insert(sw.slot);
      if (sw.old_id >= 0) evicted.insert(sw.old_id);
      staged.push_back(sw);
      planned.pop_front();
    }
    (void)clock.tick();
    if (clock.due()) {
      if (!budget_fed) {
        budget.on_plan(last_plan);
        budget_fed = true;
      }
      if (static_cast<int64_t>(planned.size()) < budget.rows()) {
        const std::vector<plan::CacheSwap> p = counts.plan(budget.rows());
        planned.insert(planned.end(), p.begin(), p.end());
        last_plan = static_cast<int64_t>(p.size());
        ++updates;
        clock.asked();
        budget_fed = false;
      } else {
        clock.refused();
      }
    }
  }
};

std::string data_path(const std::string& given, const Context& ctx, const std::string& rel);

Result<TokenFile> read_tokens_named(const std::string& given, const Context& ctx, const std::string& rel) {
  auto t = read_token_file(data_path(given, ctx, rel));
  if (!t.is_ok() && t.status().code() == Code::kNotFound && given.empty())
    return Status(Code::kNotFound, t.status().message() + " (scripts/tokenize-follow writes it)");
  return t;
}

std::string data_path(const std::string& given, const Context& ctx, const std::string& rel) {
  if (!given.empty()) return given;
  const std::string dir =
      ctx.data_dir.empty() ? std::filesystem::path(default_token_file_path()).parent_path().string() : ctx.data_dir;
  return dir + "/" + rel;
}

// Waived when a default token file is missing (scripts/tokenize-follow writes them where Node.js is).
// A token file given on the command line, read when parsing (before the bench may be waived): a regular file
// (a FIFO would block the read) holding whole uint32 ids, with its sidecar.
CLI::Validator token_file() {
  return cli::parsed_by([](const std::string& path) {
    ENGRAM_RETURN_IF_ERROR(sys::check_input_path(path, sys::InputKind::kFile));
    return read_token_file(path).status();
  });
}

// --switch-at inside (--warmup, --steps): after the warm-up window, before the last step.
Status check_switch_at(const FollowOptions& o) {
  if (o.switch_at <= o.warmup || o.switch_at >= o.steps)
    return Status(Code::kInvalidArgument, fmt::format("cache-follow: --switch-at {} must be in ({}, {}) (after the "
                                                      "warm-up window, before the last step)",
                                                      o.switch_at, o.warmup, o.steps));
  return Status::ok();
}

std::optional<std::string> follow_filter(const Context& ctx) {
  const FollowOptions& o = g_follow;
  for (const auto& [given, rel] : {std::pair{o.first, "corpus/corpus-test.tokens"}, std::pair{o.then, "other/corpus-test.tokens"},
                                   std::pair{o.oracle, "other/corpus-train.tokens"}}) {
    const std::string p = data_path(given, ctx, rel);
    if (given.empty() && !std::filesystem::exists(p)) return p + " missing (scripts/tokenize-follow writes it)";
  }
  return std::nullopt;
}

Result<Report> run_follow(Context& ctx) {
  FollowOptions o = g_follow;
  if (ctx.smoke) {  // seconds: a short replay, profiles of the first documents only
    o.steps = 64;
    o.switch_at = 32;
    o.window = 8;
  }
  ENGRAM_RETURN_IF_ERROR(check_switch_at(o));
  ENGRAM_ASSIGN_OR_RETURN(const int64_t table_bytes, parse_size_bytes(o.table_size));
  ENGRAM_ASSIGN_OR_RETURN(EngramLayout full, make_preset_layout("v41-flash-mini", table_bytes, RowFormat::kFused));
  EngramLayout layout = full;  // layer 0 alone: the same head sizes and hash as the two-layer table's first layer
  layout.layer_ids = {full.layer_ids[0]};
  ENGRAM_RETURN_IF_ERROR(layout.finalize());
  ENGRAM_ASSIGN_OR_RETURN(CacheSize size, parse_cache_size(o.cache_size));
  const int64_t budget = size.bytes_for(layout.table_bytes(0));
  int64_t staging = 1;  // the largest slice of the online policies (the engine's staging, counted in the budget)
  for (const std::string& u : o.updates) {
    ENGRAM_ASSIGN_OR_RETURN(const CacheUpdate cu, parse_cache_update(u));
    staging = std::max(staging, plan::UpdateBudget(cu.rows, cu.slice, cu.burst).max_slice_for(cu.every));
  }
  const plan::HotCacheSizing sizing =
      plan::hot_cache_sizing(budget, plan::hot_cache_row_bytes(layout.d, CacheFormat::kFp8), layout.rows(0), staging);
  const int64_t slots = std::max<int64_t>(1, sizing.slots);

  ENGRAM_ASSIGN_OR_RETURN(TokenFile first, read_tokens_named(o.first, ctx, "corpus/corpus-test.tokens"));
  ENGRAM_ASSIGN_OR_RETURN(TokenFile then, read_tokens_named(o.then, ctx, "other/corpus-test.tokens"));
  ENGRAM_ASSIGN_OR_RETURN(TokenFile oracle, read_tokens_named(o.oracle, ctx, "other/corpus-train.tokens"));
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(default_compression_table_path()));
  for (const TokenFile* f : {&first, &then, &oracle})
    ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(*f, table, default_compression_table_path()));
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(layout, table));

  // Oracle profiles: the new text's other documents (held-out) and the replayed text itself (in-sample).
  auto top_of = [&](const TokenFile& f) -> Result<std::vector<int64_t>> {
    host::HotProfileOptions po;
    po.top = slots;
    std::vector<int64_t> docs;
    if (ctx.smoke)
      for (int64_t d = 0; d < std::min<int64_t>(16, static_cast<int64_t>(f.documents.size())); ++d) docs.push_back(d);
    ENGRAM_ASSIGN_OR_RETURN(host::HotProfile p, host::compute_hot_profile(hasher, {{&f, docs}}, po));
    return p.hot_ids(0);
  };
  ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> oracle_hot, top_of(oracle));
  ENGRAM_ASSIGN_OR_RETURN(std::vector<int64_t> insample_hot, top_of(then));
  std::vector<int64_t> fill_hot;
  if (!o.fill.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(TokenFile fill, read_tokens_named(o.fill, ctx, ""));
    ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(fill, table, default_compression_table_path()));
    ENGRAM_ASSIGN_OR_RETURN(fill_hot, top_of(fill));
  }

  plan::HotCountsOptions co;
  co.id_limit = layout.rows(0);
  std::vector<SimCache> caches;
  caches.emplace_back(o.fill.empty() ? "static (warm-up window)" : "static (profile of --fill)", co);
  for (const std::string& u : o.updates) {
    CacheUpdate cu;
    plan::HotCountsOptions c = co;
    ENGRAM_ASSIGN_OR_RETURN(cu, parse_cache_update(u));
    const plan::UpdateBudget ub(cu.rows, cu.slice, cu.burst);
    c.pool_size = ub.candidate_pool();  // as the engine sizes it
    caches.emplace_back("online " + cu.to_string(), c);
    caches.back().online = true;
    caches.back().update = cu;
    caches.back().budget = ub;
    caches.back().clock = plan::UpdateClock(cu.every);
  }
  if (!o.fill.empty())
    for (auto& c : caches) c.fill(fill_hot, slots);
  caches.emplace_back("oracle: profile of the new text's other documents", co);
  caches.back().fill(oracle_hot, slots);
  const size_t oracle_index = caches.size() - 1;
  caches.emplace_back("oracle: profile of the replayed new text (in-sample)", co);
  caches.back().fill(insample_hot, slots);

  ENGRAM_ASSIGN_OR_RETURN(auto a, TextIdSource::create(hasher, std::move(first)));
  ENGRAM_ASSIGN_OR_RETURN(auto b, TextIdSource::create(hasher, std::move(then)));
  ENGRAM_ASSIGN_OR_RETURN(auto src, SwitchingIdSource::create(std::move(a), std::move(b), o.switch_at));
  std::vector<std::vector<int64_t>> ids;
  for (int64_t step = 0; step < o.steps; ++step) {
    ENGRAM_RETURN_IF_ERROR(src->next_step(step, o.batch, ids));
    for (auto& c : caches) {
      c.hit.push_back(c.probe(ids[0]));
      const bool counting = c.slot_ids.empty() || c.online;
      if (counting) c.counts.observe(ids[0].data(), static_cast<int64_t>(ids[0].size()));
      if (c.slot_ids.empty() && step + 1 == o.warmup) {
        std::vector<int64_t> hot;
        for (const auto& [id, n] : c.counts.hottest(slots)) hot.push_back(id);
        c.fill(hot, slots);
      } else {
        c.end_step();
      }
    }
    if (ctx.verbose && step % 100 == 0) fmt::print(stderr, "cache-follow: step {}\n", step);
  }

  // Windows after the switch and the recovery step.
  auto mean = [](const std::vector<double>& v, int64_t from, int64_t to) {
    double s = 0;
    int64_t n = 0;
    for (int64_t i = std::max<int64_t>(0, from); i < std::min<int64_t>(to, static_cast<int64_t>(v.size())); ++i)
      if (std::isfinite(v[static_cast<size_t>(i)])) s += v[static_cast<size_t>(i)], ++n;
    return n ? s / static_cast<double>(n) : kNaN;
  };
  const std::vector<double>& orc = caches[oracle_index].hit;
  const double oracle_after = mean(orc, o.switch_at, o.steps);
  Report rep;
  rep.key = "cache-follow";
  rep.method = {{"model", "host simulation of the engine's cache policy (plan::HotCounts), Engram layer 0"},
                {"hit", "looked-up id held by the cache when the step runs; repeats in a step count each time"},
                {"recovery", fmt::format("first step after the switch at which the mean of the last {} steps reaches "
                                         "{} x the held-out oracle's mean over the same steps",
                                         o.window, o.recover)}};
  rep.setup = {{"layout", "v41-flash-mini"}, {"table_size", o.table_size}, {"layer_rows", layout.rows(0)},
               {"cache_size", o.cache_size}, {"slots", slots}, {"batch", o.batch}, {"warmup", o.warmup},
               {"switch_at", o.switch_at}, {"steps", o.steps}, {"ids", src->describe()},
               {"oracle_profile", oracle.path}};
  Table t;
  t.key = "follow";
  t.title = fmt::format("hit rate of a {} cache ({} slots) around a switch of text at step {} (batch {})",
                        o.cache_size, slots, o.switch_at, o.batch);
  t.columns = {{"cache"},       {"before [%]", 1},       {"+0..50 [%]", 1},      {"+150..200 [%]", 1},
               {"after [%]", 1}, {"vs oracle after", 3}, {"recovered at [steps]", 0}, {"rows swapped", 0},
               {"updates due", 0}, {"deferred [%]", 1}};
  plot::Figure fig;
  fig.title = t.title;
  fig.x_label = "decode step";
  fig.y_label = fmt::format("hit rate [%] ({}-step mean)", o.window);
  fig.style = plot::Style::kLines;
  nlohmann::json series = nlohmann::json::array();
  for (const auto& c : caches) {
    double rec = kNaN;
    for (int64_t s = o.switch_at + o.window; s <= o.steps; ++s) {
      const double m = mean(c.hit, s - o.window, s), om = mean(orc, s - o.window, s);
      if (std::isfinite(m) && std::isfinite(om) && m >= o.recover * om) {
        rec = static_cast<double>(s - o.switch_at);
        break;
      }
    }
    const double after = mean(c.hit, o.switch_at, o.steps);
    t.rows.push_back({c.name, 100 * mean(c.hit, o.warmup, o.switch_at), 100 * mean(c.hit, o.switch_at, o.switch_at + 50),
                      100 * mean(c.hit, o.switch_at + 150, o.switch_at + 200), 100 * after,
                      oracle_after > 0 ? after / oracle_after : kNaN, rec, c.online ? Cell(c.swapped) : Cell("-"),
                      c.online ? Cell(c.clock.attempts()) : Cell("-"),
                      c.online && c.clock.attempts() > 0
                          ? Cell(100.0 * static_cast<double>(c.clock.deferred()) /
                                 static_cast<double>(c.clock.attempts()))
                          : Cell("-")});
    plot::Series ps{c.name, {}, {}, {}, {}};
    for (int64_t s = o.window; s <= o.steps; s += 2) {
      ps.x.push_back(static_cast<double>(s));
      ps.y.push_back(100 * mean(c.hit, s - o.window, s));
    }
    fig.series.push_back(std::move(ps));
    nlohmann::json h = nlohmann::json::array();
    for (double x : c.hit) h.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
    series.push_back({{"cache", c.name}, {"hit_rate", h}, {"rows_swapped", c.swapped},
                      {"update_attempts", c.clock.attempts()}, {"updates", c.updates},
                      {"updates_deferred", c.clock.deferred()},
                      {"update_deferred_steps", c.clock.waited_steps()}});
  }
  t.notes.push_back("before: steps warm-up..switch; after: switch..end; recovered at: n/a = not within the run");
  t.notes.push_back(fmt::format("slots: {} B per layer, FP8 rows + map + staging of {} rows (plan::hot_cache_sizing); "
                                "deferred: updates due that were not planned at the step they came due",
                                budget, sizing.staging_rows));
  rep.tables.push_back(std::move(t));
  rep.figures.push_back(std::move(fig));
  rep.data = {{"per_step", series}};
  return rep;
}

ENGRAM_BENCH(cache_follow,
             {.key = "cache-follow",
              .description = "Host simulation: hit rate of the hot-row cache's online updates over a replay whose text "
                             "switches corpus, against static and oracle caches",
              .add_options =
                  [](CLI::App& s) {
                    s.add_option("--first", g_follow.first, "Token file before the switch (default corpus/corpus-test)")
                        ->check(token_file());
                    s.add_option("--then", g_follow.then, "Token file after the switch (default other/corpus-test)")
                        ->check(token_file());
                    s.add_option("--oracle-tokens", g_follow.oracle,
                                 "Token file of the held-out oracle's profile (default other/corpus-train)")
                        ->check(token_file());
                    s.add_option("--fill", g_follow.fill,
                                 "Fill the static and online caches at start from a profile of this token file "
                                 "(default: the warm-up window)")
                        ->check(token_file());
                    s.add_option("--table-size", g_follow.table_size, "v41-flash-mini table size (default 8GiB)")
                        ->check(cli::size_in(int64_t{1} << 20, int64_t{1} << 50));
                    s.add_option("--cache-size", g_follow.cache_size, "Cache per layer (default 5%)")
                        ->check(cli::parsed_by([](const std::string& t) { return parse_cache_size(t).status(); }));
                    s.add_option("--batch", g_follow.batch, "Sequences per step (default 64)")->check(cli::range(1, 1 << 16));
                    s.add_option("--cache-warmup", g_follow.warmup, "Warm-up window of the cache in steps (default 8)")->check(cli::range(1, 1 << 20));
                    s.add_option("--switch-at", g_follow.switch_at, "Step of the switch (default 400)")->check(cli::range(int64_t{1}, int64_t{1} << 30));
                    s.add_option("--steps", g_follow.steps, "Steps in all (default 1000)")->check(cli::range(int64_t{1}, int64_t{1} << 30));
                    s.add_option("--window", g_follow.window, "Moving-average window in steps (default 16)")
                        ->check(cli::range(1, 100000));
                    s.add_option("--updates", g_follow.updates,
                                 "Online policies as --cache-update takes them, ';'-separated (default: the base rate "
                                 "(burst=1), the engine's default (burst=4) and bursts of up to 16x)")
                        ->delimiter(';')
                        ->check(cli::parsed_by([](const std::string& t) { return parse_cache_update(t).status(); }));
                  },
              .check = [](const Context&) { return check_switch_at(g_follow); },
              .filter = follow_filter,
              .run = run_follow,
              .order = 80});

}  // namespace
}  // namespace engram::bench
