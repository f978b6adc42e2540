// The measuring part of `engram bench traffic` (see bench/traffic.cpp for what it measures and traffic_gpu.hpp for
// the interface); its CUDA resources are bench/traffic_device's. Set-up, once per process: the fused table (created and filled by the bench, then handed to two engines:
// the planner engine with its cache and the plain engine, which share its registration) and the split copy with the
// same rows (registered by the bench for the reference and plain-split arms); a 256 MiB flush buffer; every
// workload's ids uploaded before its arms run. Then per workload: warm-up and timed repetitions with the arms in a
// shuffled order (time_variants), every call on its own ids, each call's output checked on sampled rows; then the
// shared check call. Times: the engine's queue L (events s and f on its prefetch stream); the other arms, CUDA events
// around the launch on the bench's stream. The L2 flush runs before each call, outside the timed span.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include <fmt/format.h>

#include "bench/gpu.hpp"
#include "bench/lookup.hpp"
#include "bench/traffic_device.hpp"
#include "bench/traffic_gpu.hpp"
#include "core/json_num.hpp"
#include "engine/backend.hpp"
#include "engine/bare_table.hpp"
#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/units.hpp"

namespace engram::bench {
namespace {

constexpr double kNaN = stats::kNaN;

// One timed or checked call of an arm.
struct CallRecord {
  double ns = kNaN;
  std::string path;
  int grid = -1;
  int64_t probes = 0, hits = 0;                 // engine: cache probes and hits of this call
  double predicted_us = kNaN, plain_us = kNaN;  // engine: the planner's prediction for its path and for plain
};

struct ArmState {
  std::string arm;
  std::vector<CallRecord> timed;  // repetition order
  int64_t checked_rows = 0, mismatches = 0;
  std::string first_mismatch;
};

// The rows of `out` ([rows][d] bf16 bits) at `positions` against the CPU decoder of `view` for ids[position].
void check_rows(const TableView& view, const std::vector<int64_t>& ids, const uint16_t* out,
                const std::vector<int64_t>& positions, ArmState& a, const std::string& where) {
  std::vector<uint16_t> want(static_cast<size_t>(view.d));
  for (int64_t p : positions) {
    const int64_t id = ids[static_cast<size_t>(p)];
    if (id >= 0 && id < view.rows)
      decode_row_reference(view.payload_of(id), view.scales_of(id), view.d, want.data());
    else
      std::fill(want.begin(), want.end(), uint16_t{0});
    ++a.checked_rows;
    if (std::memcmp(want.data(), out + p * view.d, 2 * static_cast<size_t>(view.d)) != 0) {
      if (a.mismatches++ == 0) a.first_mismatch = fmt::format("{}: row {} (id {})", where, p, id);
    }
  }
}

std::vector<int64_t> sample_positions(int64_t rows, int n, uint64_t seed) {
  std::vector<int64_t> p;
  if (n <= 0 || rows <= 0) return p;
  if (n >= rows) {
    for (int64_t i = 0; i < rows; ++i) p.push_back(i);
    return p;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> u(0, rows - 1);
  for (int i = 0; i < n; ++i) p.push_back(u(rng));
  return p;
}

// The goals the fast path is measured against (the table), for its workloads.
double goal_of(const std::string& domain, const TrafficWorkload& w) {
  if (w.prefill && w.tokens == 8192) return domain == "same" ? 4.0 : 2.5;
  if (!w.prefill && (w.tokens == 64 || w.tokens == 256)) return domain == "same" ? 2.0 : 1.5;
  return kNaN;
}

double json_double(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : kNaN; }
int64_t json_int(const nlohmann::json& j) { return j.is_number() ? j.get<int64_t>() : 0; }
// j[key], or null when j is not an object or has no such key (describe() leaves out what it could not read).
const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}
// describe()'s first layer of the fast path, or null.
const nlohmann::json& fast_layer0(const nlohmann::json& d) {
  static const nlohmann::json kNull;
  const nlohmann::json& f = field(d, "fast_path");
  return f.is_array() && !f.empty() ? f[0] : kNull;
}

// Median, p5 and p95 of a / b paired by repetition.
stats::Summary paired(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return stats::summarize(r);
}

std::string paths_text(const std::vector<CallRecord>& calls) {
  std::map<std::string, int> n;
  for (const auto& c : calls) ++n[c.path.empty() ? "-" : c.path];
  std::string out;
  for (const auto& [p, k] : n) out += (out.empty() ? "" : ", ") + p + (n.size() > 1 ? fmt::format(" x{}", k) : "");
  return out;
}

std::vector<double> times_of(const ArmState& a) {
  std::vector<double> v;
  for (const auto& c : a.timed) v.push_back(c.ns);
  return v;
}

}  // namespace

Status run_traffic_gpu(const TrafficRun& run, Context& ctx, Report& rep) {
  if (auto w = gpu_waiver()) return Status(Code::kUnsupported, *w);
  const TrafficOptions& o = run.options;
  const int A = static_cast<int>(o.arms.size());
  const int reps_total = run.warmup + run.reps;
  const int calls = traffic_calls(reps_total, A);
  const int heads = run.layout.heads();
  int64_t max_tokens = 1;
  for (const auto& w : run.workloads) max_tokens = std::max(max_tokens, w.workload.tokens);
  auto has_arm = [&](const char* a) { return std::find(o.arms.begin(), o.arms.end(), a) != o.arms.end(); };

  // ---- tables: fused (engines) and split (reference, plain-split), same rows and content ------------------------
  EngramLayout split_layout = run.layout;
  split_layout.format = RowFormat::kSplit;
  ENGRAM_RETURN_IF_ERROR(split_layout.finalize());
  const double t_fill = now_ns();
  ENGRAM_ASSIGN_OR_RETURN(engine::BareTable fused_built, engine::create_bare_table(run.layout, TableOptions{}));
  std::shared_ptr<HostTable> fused(std::move(fused_built.table));
  const TableView fview = fused->view(0);
  fill_table(fview, ctx.seed, ctx.threads);
  const bool need_split = has_arm("reference") || has_arm("plain-split");
  engine::BareTable split_built;
  TableView sview;
  if (need_split) {
    ENGRAM_ASSIGN_OR_RETURN(split_built, engine::create_bare_table(split_layout, TableOptions{}));
    sview = split_built.table->view(0);
    fill_table(sview, ctx.seed, ctx.threads);
  }
  const double fill_s = (now_ns() - t_fill) * 1e-9;
  if (ctx.verbose) fmt::print(stderr, "traffic: tables filled in {:.1f} s\n", fill_s);

  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<TrafficDevice> dev, open_traffic_device(max_tokens * heads, calls, run.layout.d));
  double split_reg_s = kNaN;
  if (need_split) {
    ENGRAM_ASSIGN_OR_RETURN(split_reg_s, dev->register_split(sview, split_layout.table_bytes(0)));
  }

  // ---- engines over the fused table: planner + cache, and the plain kernel; built once, reused by every workload ----
  std::unique_ptr<Engine> eng, plain;
  const double t_eng = now_ns();
  if (has_arm("engine")) {
    EngineOptions eo;
    eo.backend = BackendKind::kCuda;
    eo.fast_path = FastPathMode::kPlanner;
    ENGRAM_ASSIGN_OR_RETURN(eo.cache.size, parse_cache_size(o.cache_size));
    if (run.profile.empty()) eo.cache.size = CacheSize{};
    eo.cache.profile = {run.profile};
    eo.cache.profile_source = run.profile_source;
    ENGRAM_ASSIGN_OR_RETURN(eo.grid_cap, GridCap::of_fraction(o.engine_grid_fraction));
    eo.max_tokens = max_tokens;
    eo.record_timeline = true;
    eo.content.kind = TableContent::Kind::kZero;  // the bench wrote the rows
    ENGRAM_ASSIGN_OR_RETURN(eng, Engine::over_table(fused, eo));
  }
  const double engine_s = (now_ns() - t_eng) * 1e-9;
  if (has_arm("plain")) {
    EngineOptions po;
    po.backend = BackendKind::kCuda;
    po.fast_path = FastPathMode::kOff;
    po.max_tokens = max_tokens;
    po.record_timeline = false;
    po.content.kind = TableContent::Kind::kZero;
    ENGRAM_ASSIGN_OR_RETURN(plain, Engine::over_table(fused, po));
  }
  if (ctx.verbose) fmt::print(stderr, "traffic: engines built in {:.1f} s\n", (now_ns() - t_eng) * 1e-9);

  int64_t engine_step = 0;
  int64_t probes_seen = 0, hits_seen = 0;
  if (eng) {
    const nlohmann::json d = eng->describe();
    probes_seen = json_int(field(field(fast_layer0(d), "cache"), "probes"));
    hits_seen = json_int(field(field(fast_layer0(d), "cache"), "hits"));
  }

  // One call of arm `arm` on call set `c` of the current workload: its record, and its output (host copy) in `out`.
  auto call_arm = [&](const std::string& arm, const TrafficWorkloadIds& wl, int c, CallRecord& rec,
                      const uint16_t*& out) -> Status {
    const int64_t tokens = wl.workload.tokens, n = tokens * heads;
    const size_t out_bytes = 2 * static_cast<size_t>(fview.d) * static_cast<size_t>(n);
    if (arm == "engine") {
      PrefetchQueue& q = eng->queue();
      ENGRAM_RETURN_IF_ERROR(dev->flush(eng->main_stream(), c));  // before the ids' copy, which `r` follows
      q.begin_step(engine_step++);
      ENGRAM_RETURN_IF_ERROR(q.prepare(0, wl.calls[static_cast<size_t>(c)].data(), tokens));
      ENGRAM_ASSIGN_OR_RETURN(const StagingView v, q.consume(0));
      ENGRAM_RETURN_IF_ERROR(q.end_step());
      rec.ns = q.timeline().rows().back().lookup_ns();
      ENGRAM_ASSIGN_OR_RETURN(const LaunchShape ls, eng->last_launch(0));
      rec.path = ls.path;
      rec.grid = ls.grid;
      // The cache's counters are cumulative: this call's probes and hits are the difference to the last reading.
      const nlohmann::json d = eng->describe();
      const nlohmann::json& f = fast_layer0(d);
      const int64_t p = json_int(field(field(f, "cache"), "probes")), h = json_int(field(field(f, "cache"), "hits"));
      rec.probes = p - probes_seen;
      rec.hits = h - hits_seen;
      probes_seen = p;
      hits_seen = h;
      rec.predicted_us = json_double(field(f, "last_predicted_us"));
      rec.plain_us = json_double(field(f, "last_plain_us"));
      ENGRAM_ASSIGN_OR_RETURN(out, dev->copy_out(v.data, out_bytes));
      return Status::ok();
    }
    std::function<Status(void*)> launch;
    if (arm == "plain") {
      launch = [&](void* stream) -> Status {
        LookupCall lc;
        lc.stream = stream;
        lc.grid_cap = GridCap::all_sms();
        ENGRAM_ASSIGN_OR_RETURN(const LookupResult r, plain->lookup(0, dev->device_ids(c), tokens, dev->device_out(), lc));
        rec.path = r.launch.path;
        rec.grid = r.launch.grid;
        return Status::ok();
      };
    } else if (arm == "reference") {
      launch = [&](void* stream) -> Status {
        ENGRAM_ASSIGN_OR_RETURN(const ReferenceLaunch l, dev->launch_reference(stream, c, n));
        rec.path = "reference split rows";
        rec.grid = l.grid;
        return Status::ok();
      };
    } else {  // plain-split
      launch = [&](void* stream) -> Status {
        ENGRAM_ASSIGN_OR_RETURN(rec.grid, dev->launch_plain_split(stream, c, tokens, heads));
        rec.path = "plain-uva split";
        return Status::ok();
      };
    }
    ENGRAM_ASSIGN_OR_RETURN(rec.ns, dev->time_launch(launch));
    ENGRAM_ASSIGN_OR_RETURN(out, dev->copy_out(dev->device_out(), out_bytes));
    return Status::ok();
  };

  // ---- workloads -----------------------------------------------------------------------------------------------
  Table arms_t, sum_t, plan_t, check_t;
  arms_t.key = "traffic_arms";
  arms_t.title = "Traffic: every arm per workload (median [p5, p95] us per call; x ref = reference / arm paired per "
                 "repetition, its median [p5, p95]; hit = the engine's cache hits / probes; seen = share of a call's ids that calls "
                 "of earlier repetitions or workloads read too: repeats of the text, alike for every arm)";
  arms_t.columns = {{"domain", 0}, {"workload", 0}, {"arm", 0},         {"path", 0},         {"grid", 0},
                    {"med [us]", 1}, {"p5 [us]", 1}, {"p95 [us]", 1},   {"x ref", 2},        {"x ref p5", 2},
                    {"x ref p95", 2}, {"hit [%]", 1}, {"seen [%]", 1}};
  arms_t.label_columns = 5;
  sum_t.key = "traffic_summary";
  sum_t.title = "Traffic: the engine against the reference-style kernel and its own plain kernel (ratios paired per "
                "repetition, medians; engine / plain = plain time / engine time)";
  sum_t.columns = {{"workload", 0}, {"reference [us]", 1}, {"engine [us]", 1}, {"ratio", 2}, {"goal", 2},
                   {"met", 0},      {"hit [%]", 1},        {"engine / plain", 2}, {"plain-split / reference", 3}};
  plan_t.key = "traffic_planner";
  plan_t.title = "Traffic: the planner's prediction for the engine's lookups against the measured time (medians; "
                 "predicted plain = its prediction for the plain gather, against the plain arm)";
  plan_t.columns = {{"domain", 0},          {"workload", 0},           {"measured [us]", 1}, {"predicted [us]", 1},
                    {"predicted / measured", 2}, {"predicted plain [us]", 1}, {"plain arm [us]", 1},
                    {"predicted plain / plain", 2}};
  plan_t.label_columns = 2;
  check_t.key = "traffic_check";
  check_t.title = "Traffic: outputs against the CPU decoder (sampled rows of every call) and between arms (the shared "
                  "check call, every row)";
  check_t.columns = {{"domain", 0}, {"workload", 0}, {"arm", 0}, {"rows checked", 0}, {"mismatches", 0}, {"first", 0}};
  check_t.label_columns = 3;
  nlohmann::json jw = nlohmann::json::array();
  int64_t total_mismatches = 0;

  for (const TrafficWorkloadIds& wl : run.workloads) {
    const int64_t n = wl.workload.tokens * heads;
    for (int c = 0; c < calls; ++c) ENGRAM_RETURN_IF_ERROR(dev->upload_ids(c, wl.calls[static_cast<size_t>(c)].data(), n));
    std::vector<ArmState> st(static_cast<size_t>(A));
    std::vector<std::vector<double>> seen(static_cast<size_t>(A));  // timed calls' seen_share, per arm
    std::vector<Variant> vs;
    for (int i = 0; i < A; ++i) {
      st[static_cast<size_t>(i)].arm = o.arms[static_cast<size_t>(i)];
      vs.push_back({o.arms[static_cast<size_t>(i)], [&, i](int r) -> Result<Sample> {
                      ArmState& a = st[static_cast<size_t>(i)];
                      const int c = traffic_call(r, i, A);
                      CallRecord rec;
                      const uint16_t* out = nullptr;
                      ENGRAM_RETURN_IF_ERROR(call_arm(a.arm, wl, c, rec, out).with_context(a.arm));
                      check_rows(fview, wl.calls[static_cast<size_t>(c)], out,
                                 sample_positions(n, o.check_rows, static_cast<uint64_t>(c) * 7919 + 1), a,
                                 fmt::format("call {}", c));
                      if (r >= run.warmup) {
                        a.timed.push_back(rec);
                        if (static_cast<size_t>(c) < wl.seen_share.size())
                          seen[static_cast<size_t>(i)].push_back(wl.seen_share[static_cast<size_t>(c)]);
                      }
                      Sample smp;
                      smp.ns = rec.ns;
                      smp.grid = rec.grid;
                      return smp;
                    }});
    }
    ENGRAM_ASSIGN_OR_RETURN(auto times, time_variants(vs, run.warmup, run.reps, ctx.rng));
    (void)times;
    // The shared check call: every arm on the same ids, whole outputs compared with the first arm's.
    const int cc = calls - 1;
    std::vector<uint16_t> first;
    const std::vector<int64_t> sample = sample_positions(n, std::max(o.check_rows, 4096), 12345);
    for (auto& a : st) {
      CallRecord rec;
      const uint16_t* out = nullptr;
      ENGRAM_RETURN_IF_ERROR(call_arm(a.arm, wl, cc, rec, out).with_context(a.arm + " (check call)"));
      check_rows(fview, wl.calls[static_cast<size_t>(cc)], out, sample, a, "check call");
      const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(fview.d);
      if (first.empty()) {
        first.assign(out, out + elems);
      } else {
        for (size_t e = 0; e < elems; ++e)
          if (first[e] != out[e]) {
            if (a.mismatches++ == 0)
              a.first_mismatch = fmt::format("check call: element {} differs from {}'s", e, st.front().arm);
            break;
          }
      }
    }

    // ---- figures of this workload ----
    const ArmState* ref = nullptr;
    const ArmState* eng_a = nullptr;
    const ArmState* plain_a = nullptr;
    const ArmState* psplit = nullptr;
    for (const auto& a : st) {
      if (a.arm == "reference") ref = &a;
      if (a.arm == "engine") eng_a = &a;
      if (a.arm == "plain") plain_a = &a;
      if (a.arm == "plain-split") psplit = &a;
    }
    nlohmann::json ja = nlohmann::json::array();
    for (size_t ai = 0; ai < st.size(); ++ai) {
      const ArmState& a = st[ai];
      const auto s = stats::summarize(times_of(a));
      double seen_pct = kNaN;
      if (!seen[ai].empty()) {
        double sum = 0;
        for (double x : seen[ai]) sum += x;
        seen_pct = 100 * sum / static_cast<double>(seen[ai].size());
      }
      const auto xr = ref ? paired(times_of(*ref), times_of(a)) : stats::Summary{};
      int64_t pr = 0, hi = 0;
      for (const auto& c : a.timed) pr += c.probes, hi += c.hits;
      const double hit = pr > 0 ? 100.0 * static_cast<double>(hi) / static_cast<double>(pr) : kNaN;
      arms_t.rows.push_back({Cell(wl.domain), Cell(wl.workload.name()), Cell(a.arm), Cell(paths_text(a.timed)),
                             Cell(a.timed.empty() ? kNaN : a.timed.back().grid), Cell(s.median / 1e3), Cell(s.p5 / 1e3),
                             Cell(s.p95 / 1e3), Cell(xr.median), Cell(xr.p5), Cell(xr.p95), Cell(hit), Cell(seen_pct)});
      check_t.rows.push_back({Cell(wl.domain), Cell(wl.workload.name()), Cell(a.arm), Cell(a.checked_rows),
                              Cell(a.mismatches), Cell(a.first_mismatch.empty() ? "-" : a.first_mismatch)});
      total_mismatches += a.mismatches;
      nlohmann::json calls_j = nlohmann::json::array();
      for (const auto& c : a.timed)
        calls_j.push_back({{"ns", json_num(c.ns)}, {"path", c.path}, {"grid", c.grid}, {"cache_probes", c.probes},
                           {"cache_hits", c.hits}, {"predicted_us", json_num(c.predicted_us)},
                           {"predicted_plain_us", json_num(c.plain_us)}});
      ja.push_back({{"arm", a.arm}, {"ns", summary_json(s)}, {"ratio_reference_over_arm", summary_json(xr)},
                    {"cache_hit_rate", json_num(hit / 100)}, {"paths", paths_text(a.timed)}, {"calls", calls_j},
                    {"rows_checked", a.checked_rows}, {"mismatches", a.mismatches},
                    {"seen_share", json_num(seen_pct / 100)}});
    }
    const std::string wname = (wl.domain == "same" ? "same-domain " : "other-domain ") + wl.workload.name();
    if (eng_a) {
      const auto es = stats::summarize(times_of(*eng_a));
      const auto ratio = ref ? paired(times_of(*ref), times_of(*eng_a)) : stats::Summary{};
      const auto vs_plain = plain_a ? paired(times_of(*plain_a), times_of(*eng_a)) : stats::Summary{};
      const auto split_vs_ref = (psplit && ref) ? paired(times_of(*psplit), times_of(*ref)) : stats::Summary{};
      int64_t pr = 0, hi = 0;
      std::vector<double> pred, plain_pred;
      for (const auto& c : eng_a->timed) {
        pr += c.probes, hi += c.hits;
        pred.push_back(c.predicted_us);
        plain_pred.push_back(c.plain_us);
      }
      const double hit = pr > 0 ? 100.0 * static_cast<double>(hi) / static_cast<double>(pr) : kNaN;
      const double goal = goal_of(wl.domain, wl.workload);
      const double rs = ref ? stats::summarize(times_of(*ref)).median : kNaN;
      sum_t.rows.push_back({Cell(wname), Cell(rs / 1e3), Cell(es.median / 1e3), Cell(ratio.median), Cell(goal),
                            Cell(std::isfinite(goal) && std::isfinite(ratio.median) ? (ratio.median >= goal ? "yes" : "no") : "-"),
                            Cell(hit), Cell(vs_plain.median), Cell(split_vs_ref.median)});
      const double pm = stats::summarize(pred).median, ppm = stats::summarize(plain_pred).median;
      const double plain_med = plain_a ? stats::summarize(times_of(*plain_a)).median : kNaN;
      plan_t.rows.push_back({Cell(wl.domain), Cell(wl.workload.name()), Cell(es.median / 1e3), Cell(pm),
                             Cell(pm / (es.median / 1e3)), Cell(ppm), Cell(plain_med / 1e3), Cell(ppm / (plain_med / 1e3))});
    }
    jw.push_back({{"domain", wl.domain}, {"text", wl.text}, {"workload", wl.workload.name()}, {"prefill", wl.workload.prefill},
                  {"tokens", wl.workload.tokens}, {"rows_per_call", n}, {"arms", ja},
                  {"goal", json_num(goal_of(wl.domain, wl.workload))}});
    // The engine's fast-path report after this workload (cumulative since the engine was built: the learner's
    // predicted vs measured time per path and size range, its paths, its cache) goes into the JSON as it is.
    if (eng) jw.back()["engine_fast_path"] = fast_layer0(eng->describe());
    if (ctx.verbose) fmt::print(stderr, "traffic: {} {} done\n", wl.domain, wl.workload.name());
  }

  sum_t.notes.push_back("goals: same-domain prefill 8K >= 4x, other-domain >= 2.5x; decode 64/256 same >= 2x, other >= 1.5x");
  sum_t.notes.push_back("plain-split / reference: the project's plain kernel on the reference's split table over the "
                        "reference-style kernel (about 1 when the reference arm stands for the serving engine's kernel)");
  rep.tables.push_back(std::move(sum_t));
  rep.tables.push_back(std::move(arms_t));
  // The engine's description after every workload: the learned table, the setup and the notes read it.
  const nlohmann::json final_desc = eng ? eng->describe() : nlohmann::json(nullptr);
  if (eng) {
    rep.tables.push_back(std::move(plan_t));
    // What the planner learned over every workload (layer 0): per size range and path, the model's prediction
    // corrected by what the served batches measured, and whether the guard bars the path there.
    Table learned_t;
    learned_t.key = "traffic_learned";
    learned_t.title = "Traffic: the engine's planner after every workload (layer 0): per batch-size range and path, "
                      "predicted (corrected) and measured time of its served batches; factor = the correction of "
                      "the path's model price (measured / model); barred = measured slower than the plain gather in "
                      "that range";
    learned_t.columns = {{"rows", 0}, {"path", 0}, {"batches", 0}, {"predicted [us]", 1}, {"measured [us]", 1},
                         {"factor", 2}, {"barred", 0}};
    learned_t.label_columns = 2;
    const nlohmann::json& learned = field(fast_layer0(final_desc), "learned");
    if (learned.is_array())
      for (const auto& r : learned)
        learned_t.rows.push_back({Cell(fmt::format("{}-{}", json_int(field(r, "rows_min")), json_int(field(r, "rows_max")))),
                                  Cell(field(r, "path").is_string() ? field(r, "path").get<std::string>() : std::string("-")),
                                  Cell(json_int(field(r, "batches"))), Cell(json_double(field(r, "predicted_us"))),
                                  Cell(json_double(field(r, "measured_us"))), Cell(json_double(field(r, "factor"))),
                                  Cell(field(r, "barred").is_boolean() && field(r, "barred").get<bool>() ? "yes" : "no")});
    rep.tables.push_back(std::move(learned_t));
  }
  rep.tables.push_back(std::move(check_t));

  nlohmann::json setup = {{"layout", run.layout.name}, {"rows", fview.rows}, {"heads", heads}, {"d", fview.d},
                          {"fused_table_bytes", run.layout.table_bytes(0)},
                          {"split_table_bytes", need_split ? nlohmann::json(split_layout.table_bytes(0)) : nlohmann::json(nullptr)},
                          {"fill_s", fill_s}, {"split_register_s", json_num(split_reg_s)}, {"engine_build_s", engine_s},
                          {"sm_count", dev->sm_count()}, {"arms", o.arms}, {"cache_size", o.cache_size},
                          {"cache_profile", run.profile_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.profile_source)},
                          {"profile_lookups", run.profile_lookups}, {"engine_grid_fraction", o.engine_grid_fraction},
                          {"warmup", run.warmup}, {"reps", run.reps}, {"calls_per_workload", calls}};
  if (eng) {
    setup["engine"] = final_desc;
    for (const auto& l : engine::describe_lines(final_desc)) rep.notes.push_back("engine: " + l);
  }
  rep.setup = setup;
  rep.method = {{"warmup", run.warmup}, {"reps", run.reps},
                {"order", "arms shuffled per repetition (time_variants)"},
                {"ids", "every call reads token positions no other call of the process reads (bench/traffic_plan.hpp)"},
                {"l2_flush_bytes", int64_t{256} << 20},
                {"engine_timer", "the prefetch queue's L = f - s (CUDA events on its prefetch stream)"},
                {"kernel_timer", "CUDA events around the launch on the bench's stream, after the flush"},
                {"check", "every call: sampled rows vs the CPU decoder; shared check call: every row between arms"}};
  rep.data["workloads"] = jw;
  rep.notes.push_back(fmt::format("tables: fused {} + split {} filled in {:.1f} s; split registration {:.1f} s; engine "
                                  "built in {:.1f} s", format_bytes(run.layout.table_bytes(0)),
                                  need_split ? format_bytes(split_layout.table_bytes(0)) : std::string("-"), fill_s,
                                  split_reg_s, engine_s));
  if (total_mismatches > 0) {
    std::string first;
    for (const auto& r : rep.tables.back().rows)
      if (r[4].value > 0) first += fmt::format("; {} {} {}: {} of {} rows, first at {}", r[0].text, r[1].text, r[2].text,
                                               r[4].value, r[3].value, r[5].text);
    return Status(Code::kInternal, fmt::format("bench traffic: {} outputs differ from the CPU decoder or between arms{}",
                                               total_mismatches, first));
  }
  return Status::ok();
}

}  // namespace engram::bench
