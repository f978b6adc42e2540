// Report lines of an engine's lookup path, from a backend's describe() JSON: the table's tensor-parallel slice
// ("TP": heads held, padding, bytes), per Engram layer the paths the
// planner took ("Path") with the last plan's reasons ("why"), and the hot-row cache ("Cache": size, rows,
// format, HBM, hit rate, link bytes avoided per token, online updates). `engram run`, `engram replay` and the
// Python module print the same lines. Missing figures print as n/a, never 0.
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "engine/backend.hpp"
#include "report/numbers.hpp"

namespace engram::engine {
namespace {

using report::fmt_json_num;
using report::fmt_num;

std::string printf_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string printf_line(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string pct(const nlohmann::json& v) { return fmt_json_num(v, "%.1f%%", 100.0); }

int64_t int_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : 0;
}

void cache_lines(const nlohmann::json& c, int layer_index, std::vector<std::string>& out) {
  const std::string state = c.value("state", "unknown");
  const std::string note = c.contains("note") && c["note"].is_string() ? c["note"].get<std::string>() : "";
  if (state != "on") {
    out.push_back(printf_line("Cache     layer %d: %s%s%s", layer_index, state.c_str(), note.empty() ? "" : ": ",
                              note.c_str()));
    if (state == "warming up")
      out.push_back("          (the warm-up window did not close: fewer counted steps than the cache's warm-up)");
    return;
  }
  const int64_t created = c.value("created_after_step", int64_t{-1});
  const std::string from =
      created >= 0 ? ", serving from step " + std::to_string(created + 1) + " (created in " +
                         fmt_json_num(c["create_ms"], "%.1f") + " ms at the end of step " + std::to_string(created) + ")"
                   : ", serving from the start";
  const std::string fill = c.contains("fill") && c["fill"].is_string() ? c["fill"].get<std::string>() : "";
  const std::string fill_note = fill.empty() ? "" : " (rows read on the " + std::string(fill == "gpu" ? "GPU" : "host") + ")";
  out.push_back(printf_line("Cache     layer %d: %s rows, %lld/%lld slots filled, %s HBM (budget %s), from %s%s%s",
                            layer_index, c.value("format", "?").c_str(), static_cast<long long>(int_of(c, "rows_cached")),
                            static_cast<long long>(int_of(c, "slots")), format_bytes(int_of(c, "hbm_bytes")).c_str(),
                            format_bytes(int_of(c, "budget_bytes")).c_str(), c.value("source", std::string("?")).c_str(),
                            fill_note.c_str(), from.c_str()));
  const nlohmann::json per_tok = c.contains("link_bytes_avoided_per_token") ? c["link_bytes_avoided_per_token"] : nullptr;
  out.push_back(printf_line("          hit rate %s of %lld probed rows (profile coverage %s, in-sample); link bytes "
                            "avoided %s (%s per token)",
                            pct(c["hit_rate"]).c_str(), static_cast<long long>(int_of(c, "probes")),
                            pct(c["profile_coverage"]).c_str(), format_bytes(int_of(c, "link_bytes_avoided")).c_str(),
                            per_tok.is_number() ? (fmt_num(per_tok.get<double>(), "%.0f") + " B").c_str() : "n/a"));
  out.push_back(printf_line("          online updates %lld of %lld due (%lld deferred, %lld steps waited: the previous "
                            "plan not computed yet or a whole update not staged yet), %lld rows swapped in %lld slices "
                            "of <= %lld, %lld map rebuilds; serving-thread time per slice %s us "
                            "mean, %s us max; planning on the counting thread %s us mean, %s us max; %lld batches "
                            "counted (%lld from a sample, %lld ids left out), %lld dropped",
                            static_cast<long long>(int_of(c, "updates")),
                            static_cast<long long>(int_of(c, "update_attempts")),
                            static_cast<long long>(int_of(c, "updates_deferred")),
                            static_cast<long long>(int_of(c, "update_deferred_steps")),
                            static_cast<long long>(int_of(c, "rows_swapped")),
                            static_cast<long long>(int_of(c, "slices")),
                            static_cast<long long>(int_of(c, "update_slice_rows")),
                            static_cast<long long>(int_of(c, "map_rebuilds")),
                            fmt_json_num(c["update_host_us_mean"], "%.0f").c_str(),
                            fmt_json_num(c["update_host_us_max"], "%.0f").c_str(),
                            fmt_json_num(c["plan_us_mean"], "%.0f").c_str(),
                            fmt_json_num(c["plan_us_max"], "%.0f").c_str(),
                            static_cast<long long>(int_of(c, "counted_batches")),
                            static_cast<long long>(int_of(c, "sampled_batches")),
                            static_cast<long long>(int_of(c, "sampled_out_ids")),
                            static_cast<long long>(int_of(c, "dropped_batches"))));
  if (!note.empty()) out.push_back("          note: " + note);
}

}  // namespace

nlohmann::json tp_json(const HostTable& t) {
  if (t.tp().whole()) return nullptr;
  nlohmann::json layers = nlohmann::json::array();
  int64_t bytes = 0;
  LayerSlice sl;
  for (int li = 0; li < t.n_layers(); ++li) {
    sl = layer_slice(t.layout(), li, t.tp());
    layers.push_back({{"layer_id", t.layout().layer_ids[static_cast<size_t>(li)]}, {"row_begin", sl.row_begin},
                      {"row_end", sl.row_end}});
    bytes += t.layer_bytes(li);
  }
  return {{"size", t.tp().size}, {"rank", t.tp().rank}, {"heads", sl.heads}, {"local_heads", sl.local_heads},
          {"head_begin", sl.head_begin}, {"held_heads", sl.held_heads()}, {"layers", layers}, {"bytes", bytes}};
}

std::vector<std::string> describe_lines(const nlohmann::json& det) {
  std::vector<std::string> out;
  if (!det.is_object()) return out;
  if (det.contains("tp") && det["tp"].is_object()) {
    const auto& tp = det["tp"];
    const int begin = tp["head_begin"].get<int>(), held = tp["held_heads"].get<int>();
    const int padded = tp["local_heads"].get<int>() - held;
    const std::string heads = held > 0 ? "heads " + std::to_string(begin) + "-" + std::to_string(begin + held)
                                       : std::string("no heads");
    out.push_back(printf_line("TP        rank %d of %d: %s of %d (%d per rank%s), %s of table rows in memory",
                              tp["rank"].get<int>(), tp["size"].get<int>(), heads.c_str(), tp["heads"].get<int>(),
                              tp["local_heads"].get<int>(),
                              padded > 0 ? (", " + std::to_string(padded) + " padded with zeros").c_str() : "",
                              format_bytes(tp["bytes"].get<int64_t>()).c_str()));
  }
  if (det.contains("cache_note") && det["cache_note"].is_string()) out.push_back("Cache     " + det["cache_note"].get<std::string>());
  if (det.value("backend", "") != "cuda") return out;
  if (det.contains("construction") && det["construction"].is_object()) {
    const auto& c = det["construction"];
    const nlohmann::json none = nullptr;
    const nlohmann::json& a = det.contains("assembly") ? det["assembly"] : none;
    const nlohmann::json read_s = a.is_object() ? a.value("profile_read_s", none) : none;
    const nlohmann::json backend_s = a.is_object() ? a.value("backend_s", none) : none;
    out.push_back("Build     backend " + fmt_json_num(backend_s, "%.0f", 1e3) + " ms: calibration " +
                  fmt_json_num(c["calibration_ms"], "%.0f") + " ms, cache fill from the profile " +
                  fmt_json_num(c["cache_fill_ms"], "%.0f") + " ms; profile file read " + fmt_json_num(read_s, "%.3f") + " s");
  }
  const std::string mode = det.value("fast_path_mode", std::string("?"));
  if (det.contains("fast_path") && det["fast_path"].is_array() && !det["fast_path"].empty()) {
    for (const auto& f : det["fast_path"]) {
      std::string paths;
      for (auto it = f["paths"].begin(); it != f["paths"].end(); ++it)
        paths += (paths.empty() ? "" : ", ") + it.key() + " x" + std::to_string(it.value().get<int64_t>());
      const int li = f.value("layer_index", -1);
      out.push_back(printf_line("Path      layer %d (fast path %s): %s; unique %s, cache hits %s", li, mode.c_str(),
                                paths.empty() ? "no batch" : paths.c_str(), pct(f["unique_fraction"]).c_str(),
                                pct(f["cache_hit_rate"]).c_str()));
      if (f.contains("last_why"))
        for (const auto& w : f["last_why"]) out.push_back("          why: " + w.get<std::string>());
      if (!f.value("learning", true))
        out.push_back("          learning off: the planner keeps its calibrated costs");
      if (f.contains("learned") && f["learned"].is_array())
        for (const auto& r : f["learned"])
          out.push_back(printf_line("          learned rows %lld-%lld, %s: predicted %s us, measured %s us (%lld batches, "
                                    "factor %s)%s",
                                    static_cast<long long>(r.value("rows_min", int64_t{0})),
                                    static_cast<long long>(r.value("rows_max", int64_t{0})),
                                    r.value("path", std::string("?")).c_str(),
                                    report::fmt_json_num(r["predicted_us"], "%.1f").c_str(),
                                    report::fmt_json_num(r["measured_us"], "%.1f").c_str(),
                                    static_cast<long long>(r.value("batches", int64_t{0})),
                                    report::fmt_json_num(r.value("factor", nlohmann::json()), "%.2f").c_str(),
                                    r.value("barred", false) ? ", barred: measured slower than plain" : ""));
      if (f.contains("cache")) cache_lines(f["cache"], li, out);
    }
  } else if (det.contains("fast_path_note") && det["fast_path_note"].is_string()) {
    out.push_back("Path      plain UVA gather: " + det["fast_path_note"].get<std::string>());
  }
  return out;
}

}  // namespace engram::engine
