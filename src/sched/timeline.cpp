// Timeline export (JSON, Chrome trace) and the serial-queue recurrence (see timeline.hpp).
#include "sched/timeline.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace engram {

namespace {
nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

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

nlohmann::json Timeline::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& t : rows_) {
    rows.push_back({{"rank", t.rank},
                    {"step", t.step},
                    {"layer_index", t.layer_index},
                    {"layer_id", t.layer_id},
                    {"rows", t.rows},
                    {"r_ns", num_or_null(t.r_ns)},
                    {"submit_ns", num_or_null(t.submit_ns)},
                    {"s_ns", num_or_null(t.s_ns)},
                    {"f_ns", num_or_null(t.f_ns)},
                    {"c_ns", num_or_null(t.c_ns)},
                    {"wait_end_ns", num_or_null(t.wait_end_ns)}});
  }
  return {{"unit", "ns"}, {"rows", rows}};
}

nlohmann::json Timeline::to_chrome_trace() const {
  nlohmann::json events = nlohmann::json::array();
  auto us = [](double ns) { return ns / 1000.0; };
  std::vector<int> ranks;
  for (const auto& t : rows_)
    if (std::find(ranks.begin(), ranks.end(), t.rank) == ranks.end()) ranks.push_back(t.rank);
  for (int r : ranks) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "main (consumer)"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", 1}, {"args", {{"name", "prefetch queue"}}}});
  }
  for (const auto& t : rows_) {
    const std::string tag = "L" + std::to_string(t.layer_id) + " step " + std::to_string(t.step);
    nlohmann::json args = {{"rows", t.rows}, {"layer_id", t.layer_id}, {"step", t.step}};
    if (std::isfinite(t.s_ns) && std::isfinite(t.f_ns)) {
      args["queue_us"] = num_or_null(us(t.queue_ns()));
      events.push_back({{"ph", "X"}, {"name", "lookup " + tag}, {"cat", "lookup"}, {"pid", t.rank}, {"tid", 1},
                        {"ts", us(t.s_ns)}, {"dur", us(t.f_ns - t.s_ns)}, {"args", args}});
    }
    if (std::isfinite(t.c_ns) && std::isfinite(t.wait_end_ns)) {
      nlohmann::json wargs = {{"exposed_wait_us", num_or_null(us(t.exposed_wait_ns()))}};
      events.push_back({{"ph", "X"}, {"name", "wait " + tag}, {"cat", "wait"}, {"pid", t.rank}, {"tid", 0},
                        {"ts", us(t.c_ns)}, {"dur", std::max(0.0, us(t.wait_end_ns - t.c_ns))}, {"args", wargs}});
    }
    if (std::isfinite(t.r_ns))
      events.push_back({{"ph", "i"}, {"s", "t"}, {"name", "ids ready " + tag}, {"cat", "ready"}, {"pid", t.rank},
                        {"tid", 0}, {"ts", us(t.r_ns)}});
    if (std::isfinite(t.submit_ns))
      events.push_back({{"ph", "i"}, {"s", "t"}, {"name", "submit " + tag}, {"cat", "submit"}, {"pid", t.rank},
                        {"tid", 1}, {"ts", us(t.submit_ns)}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

double percentile(std::vector<double> values, double pct) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return kNotRecorded;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(pct, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(values.size() - 1, lo + 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

}  // namespace engram
