// Timeline export (JSON, Chrome trace) and the serial-queue recurrence (see timeline.hpp).
#include "engram/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/json_num.hpp"
#include "core/stats.hpp"

namespace engram {

std::vector<ModelRow> explain_serial_queue(const std::vector<LayerTiming>& queue, double f0_ns, double scale_l,
                                           double advance_r_ns) {
  std::vector<ModelRow> out;
  out.reserve(queue.size());
  double prev_f = f0_ns;
  for (const auto& t : queue) {
    ModelRow m;
    m.timing = &t;
    const double r = t.r_ns - advance_r_ns;
    const double l = t.lookup_ns() * scale_l;
    m.model_s_ns = std::isfinite(prev_f) ? std::max(r, prev_f) : r;
    m.model_f_ns = m.model_s_ns + l;
    m.model_e_ns = std::max(0.0, m.model_f_ns - t.c_ns);
    m.residual_s_ns = t.s_ns - m.model_s_ns;
    // The next lookup's queue is free when this one really finished (measured), or as modelled in what-ifs.
    prev_f = (scale_l == 1.0 && advance_r_ns == 0.0) ? t.f_ns : m.model_f_ns;
    out.push_back(m);
  }
  return out;
}

namespace {

// The strict field readers of from_json: a field that is there must be of its kind and in its range, so that a
// malformed or hand-edited file is refused with the field's place ("rows[3].c_ns") instead of read as 0 or as a
// time that no clock gives. Times are ns on the timeline's clock (from its origin; a caller's clock may count
// from boot): finite, in [0, kMaxTimeNs], or null / absent (not recorded).
constexpr double kMaxTimeNs = 1e18;          // 31 years
constexpr double kMaxStep = static_cast<double>(kMaxTimelineStep);

Status field_error(const std::string& where, const char* key, const std::string& expected, const nlohmann::json& v) {
  return Status(Code::kInvalidArgument, "timeline: " + where + "." + key + ": expected " + expected + ", got " + v.dump());
}

Status read_time(const nlohmann::json& r, const char* key, const std::string& where, double* out) {
  *out = kNotRecorded;
  if (!r.contains(key) || r[key].is_null()) return Status::ok();
  const nlohmann::json& v = r[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > kMaxTimeNs)
    return field_error(where, key, "a time in ns in [0, 1e+18] or null", v);
  *out = v.get<double>();
  return Status::ok();
}

// An integer field in [lo, hi] (a JSON integer, or a double with no fraction); `def` when absent.
template <typename T>
Status read_int(const nlohmann::json& r, const char* key, const std::string& where, double lo, double hi, T def, T* out) {
  *out = def;
  if (!r.contains(key)) return Status::ok();
  const nlohmann::json& v = r[key];
  const double d = v.is_number() ? v.get<double>() : 0.0;
  if (!v.is_number() || !std::isfinite(d) || d != std::floor(d) || d < lo || d > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "an integer in [%.0f, %.0f]", lo, hi);
    return field_error(where, key, range, v);
  }
  *out = v.is_number_integer() ? v.get<T>() : static_cast<T>(d);
  return Status::ok();
}

Status read_bool(const nlohmann::json& r, const char* key, const std::string& where, bool* out) {
  *out = false;
  if (!r.contains(key)) return Status::ok();
  if (!r[key].is_boolean()) return field_error(where, key, "true or false", r[key]);
  *out = r[key].get<bool>();
  return Status::ok();
}

}  // namespace

Result<Timeline> Timeline::from_json(const nlohmann::json& j) {
  const nlohmann::json* rows = nullptr;
  if (j.is_object() && j.contains("engram_timeline") && j["engram_timeline"].is_object() &&
      j["engram_timeline"].contains("rows"))
    rows = &j["engram_timeline"]["rows"];
  else if (j.is_object() && j.contains("rows")) rows = &j["rows"];
  if (!rows || !rows->is_array())
    return Status(Code::kInvalidArgument, "timeline: no 'rows' array (expected a file written by engram run)");
  Timeline tl;
  const nlohmann::json& top = j.contains("engram_timeline") ? j["engram_timeline"] : j;
  // Times are ns (to_json writes "unit": "ns"); a file without the field is read as ns.
  if (top.contains("unit") && top["unit"] != "ns")
    return Status(Code::kInvalidArgument, "timeline: unit: expected \"ns\", got " + top["unit"].dump());
  if (top.contains("origin_unix_ns") && !top["origin_unix_ns"].is_null()) {
    const nlohmann::json& o = top["origin_unix_ns"];
    if (!o.is_number() || !std::isfinite(o.get<double>()) || o.get<double>() < 0)
      return Status(Code::kInvalidArgument, "timeline: origin_unix_ns: expected ns since the Unix epoch or null, got " + o.dump());
    tl.origin_unix_ns = o.get<double>();
  }
  if (top.contains("steps") && top["steps"].is_array()) {
    size_t i = 0;
    for (const auto& s : top["steps"]) {
      const std::string where = "steps[" + std::to_string(i++) + "]";
      if (!s.is_object()) return Status(Code::kInvalidArgument, "timeline: " + where + " is not an object");
      StepSpan sp;
      ENGRAM_RETURN_IF_ERROR(read_int(s, "rank", where, 0, kMaxTimelineRank, 0, &sp.rank));
      ENGRAM_RETURN_IF_ERROR(read_int(s, "step", where, -kMaxStep, kMaxStep, int64_t{0}, &sp.step));
      ENGRAM_RETURN_IF_ERROR(read_time(s, "begin_ns", where, &sp.begin_ns));
      ENGRAM_RETURN_IF_ERROR(read_time(s, "end_ns", where, &sp.end_ns));
      ENGRAM_RETURN_IF_ERROR(read_bool(s, "warmup", where, &sp.warmup));
      tl.add_step(sp);
    }
  }
  size_t i = 0;
  for (const auto& r : *rows) {
    const std::string where = "rows[" + std::to_string(i++) + "]";
    if (!r.is_object()) return Status(Code::kInvalidArgument, "timeline: " + where + " is not an object");
    LayerTiming t;
    ENGRAM_RETURN_IF_ERROR(read_int(r, "rank", where, 0, kMaxTimelineRank, 0, &t.rank));
    ENGRAM_RETURN_IF_ERROR(read_int(r, "step", where, -kMaxStep, kMaxStep, int64_t{0}, &t.step));
    ENGRAM_RETURN_IF_ERROR(read_int(r, "layer_index", where, 0, kMaxTimelineLayer, 0, &t.layer_index));
    ENGRAM_RETURN_IF_ERROR(read_int(r, "layer_id", where, 0, kMaxTimelineLayer, 0, &t.layer_id));
    ENGRAM_RETURN_IF_ERROR(read_int(r, "rows", where, 0, kMaxStep, int64_t{0}, &t.rows));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "r_ns", where, &t.r_ns));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "submit_ns", where, &t.submit_ns));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "s_ns", where, &t.s_ns));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "f_ns", where, &t.f_ns));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "c_ns", where, &t.c_ns));
    ENGRAM_RETURN_IF_ERROR(read_time(r, "wait_end_ns", where, &t.wait_end_ns));
    ENGRAM_RETURN_IF_ERROR(read_bool(r, "warmup", where, &t.warmup));
    tl.add(t);
  }
  return tl;
}

nlohmann::json Timeline::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& t : rows_) {
    rows.push_back({{"rank", t.rank},
                    {"step", t.step},
                    {"layer_index", t.layer_index},
                    {"layer_id", t.layer_id},
                    {"rows", t.rows},
                    {"r_ns", json_num(t.r_ns)},
                    {"submit_ns", json_num(t.submit_ns)},
                    {"s_ns", json_num(t.s_ns)},
                    {"f_ns", json_num(t.f_ns)},
                    {"c_ns", json_num(t.c_ns)},
                    {"wait_end_ns", json_num(t.wait_end_ns)},
                    {"warmup", t.is_warmup()}});
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : steps_)
    steps.push_back({{"rank", s.rank}, {"step", s.step}, {"begin_ns", json_num(s.begin_ns)},
                     {"end_ns", json_num(s.end_ns)}, {"warmup", s.is_warmup()}});
  nlohmann::json j = {{"unit", "ns"}, {"origin_unix_ns", json_num(origin_unix_ns)}, {"rows", rows}, {"steps", steps}};
  if (!maintenance_.empty()) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& s : maintenance_)
      m.push_back({{"rank", s.rank}, {"step", s.step}, {"layer_index", s.layer_index}, {"layer_id", s.layer_id},
                   {"what", s.what}, {"rows", s.rows}, {"start_ns", json_num(s.start_ns)},
                   {"end_ns", json_num(s.end_ns)}, {"host_us", json_num(s.host_us)}});
    j["maintenance"] = m;
  }
  return j;
}

void Timeline::mark_warmup(size_t first_measured_row, size_t first_measured_step) {
  for (size_t i = 0; i < rows_.size() && i < first_measured_row; ++i) rows_[i].warmup = true;
  for (size_t i = 0; i < steps_.size() && i < first_measured_step; ++i) steps_[i].warmup = true;
}

Timeline Timeline::measured() const {
  Timeline t;
  t.origin_unix_ns = origin_unix_ns;
  for (const auto& r : rows_)
    if (!r.is_warmup()) t.add(r);
  for (const auto& s : steps_)
    if (!s.is_warmup()) t.add_step(s);
  return t;
}

nlohmann::json Timeline::to_chrome_trace(const ChromeTraceOptions& o) const {
  nlohmann::json events = nlohmann::json::array();
  const double shift_us = o.absolute_time && std::isfinite(origin_unix_ns) ? origin_unix_ns / 1000.0 : 0.0;
  auto us = [](double ns) { return ns / 1000.0; };
  auto ts = [&](double ns) { return shift_us + ns / 1000.0; };
  // Each rank is a process of its own (Perfetto: one track group): the OS pid when given, else the rank. Ranks
  // that share one process (one timeline holding several ranks) get lanes of their own within it.
  auto pid_of = [&](int rank) { return o.pid > 0 ? o.pid : rank; };
  std::vector<int> ranks;
  for (const auto& t : rows_)
    if (std::find(ranks.begin(), ranks.end(), t.rank) == ranks.end()) ranks.push_back(t.rank);
  for (const auto& s : steps_)
    if (std::find(ranks.begin(), ranks.end(), s.rank) == ranks.end()) ranks.push_back(s.rank);
  enum Lane { kSteps = 0, kMain = 1, kQueue = 2, kMaintenance = 3 };
  auto tid = [&](int rank, Lane lane) { return o.pid > 0 ? 4 * rank + lane : static_cast<int>(lane); };
  for (int r : ranks) {
    const int pid = pid_of(r);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "engram rank " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_labels"}, {"pid", pid}, {"args", {{"labels", "rank=" + std::to_string(r)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid(r, kSteps)}, {"args", {{"name", "steps"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid(r, kMain)}, {"args", {{"name", "main (consumer)"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid(r, kQueue)}, {"args", {{"name", "prefetch queue"}}}});
  }
  auto name = [](bool warm, const std::string& n) { return warm ? "warm-up " + n : n; };
  for (const auto& s : steps_) {
    if (!std::isfinite(s.begin_ns) || !std::isfinite(s.end_ns)) continue;
    events.push_back({{"ph", "X"}, {"name", name(s.is_warmup(), "step " + std::to_string(s.step))}, {"cat", "step"},
                      {"pid", pid_of(s.rank)}, {"tid", tid(s.rank, kSteps)}, {"ts", ts(s.begin_ns)},
                      {"dur", std::max(0.0, us(s.end_ns - s.begin_ns))},
                      {"args", {{"rank", s.rank}, {"step", s.step}, {"warmup", s.is_warmup()}}}});
  }
  std::vector<int> maint_ranks;
  for (const auto& m : maintenance_)
    if (std::find(maint_ranks.begin(), maint_ranks.end(), m.rank) == maint_ranks.end()) maint_ranks.push_back(m.rank);
  for (int r : maint_ranks)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_of(r)}, {"tid", tid(r, kMaintenance)},
                      {"args", {{"name", "cache maintenance"}}}});
  for (const auto& m : maintenance_) {
    if (!std::isfinite(m.start_ns) || !std::isfinite(m.end_ns)) continue;
    events.push_back({{"ph", "X"}, {"name", "cache " + m.what + " L" + std::to_string(m.layer_id) + " step " +
                                                std::to_string(m.step)},
                      {"cat", "maintenance"}, {"pid", pid_of(m.rank)}, {"tid", tid(m.rank, kMaintenance)}, {"ts", ts(m.start_ns)},
                      {"dur", std::max(0.0, us(m.end_ns - m.start_ns))},
                      {"args", {{"rows", m.rows}, {"step", m.step}, {"host_us", json_num(m.host_us)}}}});
  }
  for (const auto& t : rows_) {
    const std::string tag = "L" + std::to_string(t.layer_id) + " step " + std::to_string(t.step);
    const bool warm = t.is_warmup();
    nlohmann::json args = {{"rank", t.rank}, {"rows", t.rows}, {"layer_id", t.layer_id}, {"step", t.step}, {"warmup", warm}};
    if (std::isfinite(t.s_ns) && std::isfinite(t.f_ns)) {
      args["queue_us"] = json_num(us(t.queue_ns()));
      events.push_back({{"ph", "X"}, {"name", name(warm, "lookup " + tag)}, {"cat", "lookup"}, {"pid", pid_of(t.rank)},
                        {"tid", tid(t.rank, kQueue)}, {"ts", ts(t.s_ns)}, {"dur", us(t.f_ns - t.s_ns)}, {"args", args}});
    }
    if (std::isfinite(t.c_ns) && std::isfinite(t.wait_end_ns)) {
      nlohmann::json wargs = {{"rank", t.rank}, {"exposed_wait_us", json_num(us(t.exposed_wait_ns()))}, {"warmup", warm}};
      events.push_back({{"ph", "X"}, {"name", name(warm, "wait " + tag)}, {"cat", "wait"}, {"pid", pid_of(t.rank)},
                        {"tid", tid(t.rank, kMain)}, {"ts", ts(t.c_ns)}, {"dur", std::max(0.0, us(t.wait_end_ns - t.c_ns))},
                        {"args", wargs}});
    }
    if (std::isfinite(t.r_ns))
      events.push_back({{"ph", "i"}, {"s", "t"}, {"name", name(warm, "ids ready " + tag)}, {"cat", "ready"},
                        {"pid", pid_of(t.rank)}, {"tid", tid(t.rank, kMain)}, {"ts", ts(t.r_ns)}});
    if (std::isfinite(t.submit_ns))
      events.push_back({{"ph", "i"}, {"s", "t"}, {"name", name(warm, "submit " + tag)}, {"cat", "submit"},
                        {"pid", pid_of(t.rank)}, {"tid", tid(t.rank, kQueue)}, {"ts", ts(t.submit_ns)}});
  }
  // Main compute: within each recorded step, the consumer's lane is computing wherever it is not waiting (step
  // begin -> first arrival c, each wait end -> the next arrival, the last wait end -> step end).
  for (const auto& s : steps_) {
    if (!std::isfinite(s.begin_ns) || !std::isfinite(s.end_ns)) continue;
    std::vector<const LayerTiming*> waits;
    for (const auto& t : rows_)
      if (t.rank == s.rank && t.step == s.step && std::isfinite(t.c_ns) && std::isfinite(t.wait_end_ns)) waits.push_back(&t);
    std::sort(waits.begin(), waits.end(), [](const LayerTiming* a, const LayerTiming* b) { return a->c_ns < b->c_ns; });
    double from = s.begin_ns;
    std::string after = "step start";
    auto slice = [&](double to, const std::string& until) {
      if (!(to > from)) return;
      events.push_back({{"ph", "X"}, {"name", name(s.is_warmup(), "compute")}, {"cat", "compute"}, {"pid", pid_of(s.rank)},
                        {"tid", tid(s.rank, kMain)}, {"ts", ts(from)}, {"dur", us(to - from)},
                        {"args", {{"rank", s.rank}, {"step", s.step}, {"after", after}, {"until", until}, {"warmup", s.is_warmup()}}}});
    };
    for (const LayerTiming* w : waits) {
      slice(w->c_ns, "wait L" + std::to_string(w->layer_id));
      from = std::max(from, w->wait_end_ns);
      after = "wait L" + std::to_string(w->layer_id);
    }
    slice(s.end_ns, "step end");
  }
  // The raw rows ride along so `engram trace analyze` can re-run the model from the same file; trace viewers
  // ignore unknown top-level keys.
  return {{"schema", "engram.trace/1"}, {"traceEvents", events}, {"displayTimeUnit", "ns"}, {"engram_timeline", to_json()}};
}

nlohmann::json Distribution::to_json(double scale) const {
  return {{"median", json_num(median / scale)}, {"p5", json_num(p5 / scale)}, {"p95", json_num(p95 / scale)},
          {"p99", json_num(p99 / scale)}, {"n", n}};
}

Distribution Distribution::of(const std::vector<double>& v) {
  const std::vector<double> s = stats::finite_sorted(v);
  Distribution d;
  d.n = s.size();
  d.median = stats::percentile_sorted(s, 50);
  d.p5 = stats::percentile_sorted(s, 5);
  d.p95 = stats::percentile_sorted(s, 95);
  d.p99 = stats::percentile_sorted(s, 99);
  return d;
}

std::vector<LayerAnalysis> analyze_timeline(const Timeline& timeline, double scale_l, double advance_r_ns) {
  const auto& all = timeline.rows();
  // Submission order per rank: submit time when recorded, else r.
  auto key = [](const LayerTiming& t) { return std::isfinite(t.submit_ns) ? t.submit_ns : t.r_ns; };
  std::vector<int> ranks;
  for (const auto& t : all)
    if (std::find(ranks.begin(), ranks.end(), t.rank) == ranks.end()) ranks.push_back(t.rank);
  std::sort(ranks.begin(), ranks.end());
  std::vector<LayerAnalysis> out;
  for (int rank : ranks) {
    std::vector<LayerTiming> q;
    for (const auto& t : all)
      if (t.rank == rank) q.push_back(t);
    std::stable_sort(q.begin(), q.end(), [&](const LayerTiming& a, const LayerTiming& b) { return key(a) < key(b); });
    const auto queue_model = explain_serial_queue(q, q.empty() ? 0.0 : q.front().r_ns - advance_r_ns, scale_l, advance_r_ns);
    std::vector<int> layers;
    for (const auto& t : q)
      if (std::find(layers.begin(), layers.end(), t.layer_id) == layers.end()) layers.push_back(t.layer_id);
    std::sort(layers.begin(), layers.end());
    for (int layer : layers) {
      LayerAnalysis a;
      a.rank = rank;
      a.layer_id = layer;
      std::vector<double> qn, l, e, w, lead, res, me;
      for (size_t i = 0; i < q.size(); ++i) {
        const auto& t = q[i];
        if (t.layer_id != layer) continue;
        qn.push_back(t.queue_ns());
        l.push_back(t.lookup_ns());
        e.push_back(t.exposed_wait_ns());
        w.push_back(t.measured_wait_ns());
        lead.push_back(t.lead_ns());
        res.push_back(queue_model[i].residual_s_ns);
        me.push_back(queue_model[i].model_e_ns);
        if (std::isfinite(e.back())) a.total_exposed_wait_ns += e.back();
        if (std::isfinite(me.back())) a.total_model_exposed_wait_ns += me.back();
      }
      a.queue_ns = Distribution::of(qn);
      a.lookup_ns = Distribution::of(l);
      a.exposed_wait_ns = Distribution::of(e);
      a.measured_wait_ns = Distribution::of(w);
      a.lead_ns = Distribution::of(lead);
      a.residual_s_ns = Distribution::of(res);
      a.model_exposed_wait_ns = Distribution::of(me);
      out.push_back(a);
    }
  }
  return out;
}

std::vector<LayerAnalysis> analyze_timeline_moved(const Timeline& timeline, int moved_layer_id) {
  std::vector<LayerAnalysis> out = analyze_timeline(timeline);
  auto key = [](const LayerTiming& t) { return std::isfinite(t.submit_ns) ? t.submit_ns : t.r_ns; };
  for (auto& a : out) {
    std::vector<LayerTiming> q;
    for (const auto& t : timeline.rows())
      if (t.rank == a.rank) q.push_back(t);
    std::stable_sort(q.begin(), q.end(), [&](const LayerTiming& x, const LayerTiming& y) { return key(x) < key(y); });
    // Two serial queues: f of the previous lookup on the same queue gates the next one.
    double prev_f[2] = {kNotRecorded, kNotRecorded};
    std::vector<double> me;
    double total = 0;
    for (const auto& t : q) {
      const int qi = t.layer_id == moved_layer_id ? 1 : 0;
      const double s = std::isfinite(prev_f[qi]) ? std::max(t.r_ns, prev_f[qi]) : t.r_ns;
      const double f = s + t.lookup_ns();
      prev_f[qi] = std::isfinite(f) ? f : prev_f[qi];
      if (t.layer_id != a.layer_id) continue;
      const double e = std::isfinite(f - t.c_ns) ? std::max(0.0, f - t.c_ns) : kNotRecorded;
      me.push_back(e);
      if (std::isfinite(e)) total += e;
    }
    a.model_exposed_wait_ns = Distribution::of(me);
    a.total_model_exposed_wait_ns = total;
  }
  return out;
}

std::vector<LayerTiming> step_rows(const Timeline& timeline, int rank, int64_t step) {
  std::vector<LayerTiming> v;
  for (const auto& t : timeline.rows())
    if (t.rank == rank && t.step == step) v.push_back(t);
  auto key = [](const LayerTiming& t) { return std::isfinite(t.submit_ns) ? t.submit_ns : t.r_ns; };
  std::stable_sort(v.begin(), v.end(), [&](const LayerTiming& a, const LayerTiming& b) { return key(a) < key(b); });
  return v;
}

double percentile(std::vector<double> values, double pct) { return stats::percentile(values, pct); }

}  // namespace engram
