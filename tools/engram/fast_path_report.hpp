// Text lines of the CUDA fast path (issue #8) shared by `engram run` and `engram replay`: per Engram layer the
// paths the planner took ("Path"), and the hot-row cache ("Cache": size, rows, format, HBM, hit rate, link bytes
// avoided per token, online updates). Input: ReplayBackend::describe() taken after the run. Missing figures
// print as n/a, never 0.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/units.hpp"
#include "replay/cuda_backend_factory.hpp"
#include "report.hpp"

namespace engram::cli {

// The CPU backend has no hot-row cache: the line said once when a cache was asked for (empty when it was off).
inline std::string cpu_cache_note(const EngineCacheConfig& k) {
  return k.off() ? std::string()
                 : "hot-row cache: CUDA-only; the cpu backend runs without it (--cache-size off silences this)";
}

inline std::string json_pct(const nlohmann::json& v) {
  return v.is_number() ? fmt_num(100 * v.get<double>(), "%.1f%%") : "n/a";
}

inline void print_cache_line(const nlohmann::json& c, int layer_index) {
  const std::string state = c.value("state", "unknown");
  const std::string note = c.contains("note") && c["note"].is_string() ? c["note"].get<std::string>() : "";
  if (state != "on") {
    std::printf("Cache     layer %d: %s%s%s\n", layer_index, state.c_str(), note.empty() ? "" : ": ", note.c_str());
    if (state == "warming up")
      std::printf("          (the warm-up window did not close: fewer counted steps than --cache-warmup)\n");
    return;
  }
  const int64_t created = c.value("created_after_step", int64_t{-1});
  std::printf("Cache     layer %d: %s rows, %lld/%lld slots filled, %s HBM (budget %s), from %s%s\n", layer_index,
              c.value("format", "?").c_str(), static_cast<long long>(c.value("rows_cached", int64_t{0})),
              static_cast<long long>(c.value("slots", int64_t{0})), format_bytes(c.value("hbm_bytes", int64_t{0})).c_str(),
              format_bytes(c.value("budget_bytes", int64_t{0})).c_str(), c.value("source", std::string("?")).c_str(),
              created >= 0 ? (", serving from step " + std::to_string(created + 1) + " (created in " +
                               (c["create_ms"].is_number() ? fmt_num(c["create_ms"].get<double>(), "%.1f") : std::string("n/a")) +
                               " ms at the end of step " + std::to_string(created) + ")").c_str()
                           : ", serving from the start");
  const nlohmann::json per_tok = c.contains("link_bytes_avoided_per_token") ? c["link_bytes_avoided_per_token"] : nullptr;
  std::printf("          hit rate %s of %lld probed rows (profile coverage %s, in-sample); link bytes avoided %s "
              "(%s per token)\n",
              json_pct(c["hit_rate"]).c_str(), static_cast<long long>(c.value("probes", int64_t{0})),
              json_pct(c["profile_coverage"]).c_str(), format_bytes(c.value("link_bytes_avoided", int64_t{0})).c_str(),
              per_tok.is_number() ? (fmt_num(per_tok.get<double>(), "%.0f") + " B").c_str() : "n/a");
  auto us = [](const nlohmann::json& v) { return v.is_number() ? fmt_num(v.get<double>(), "%.0f") : std::string("n/a"); };
  std::printf("          online updates %lld (%lld deferred a step, %lld waited for the counting thread), %lld rows swapped, "
              "%lld map rebuilds; host time per update %s us mean, %s us max; %lld batches counted, %lld dropped\n",
              static_cast<long long>(c.value("updates", int64_t{0})),
              static_cast<long long>(c.value("updates_deferred", int64_t{0})),
              static_cast<long long>(c.value("updates_waited_counter", int64_t{0})),
              static_cast<long long>(c.value("rows_swapped", int64_t{0})),
              static_cast<long long>(c.value("map_rebuilds", int64_t{0})), us(c["update_host_us_mean"]).c_str(),
              us(c["update_host_us_max"]).c_str(), static_cast<long long>(c.value("counted_batches", int64_t{0})),
              static_cast<long long>(c.value("dropped_batches", int64_t{0})));
  if (!note.empty()) std::printf("          note: %s\n", note.c_str());
}

// Prints the Path and Cache lines from a CUDA backend's describe() (nothing for another backend).
inline void print_fast_path(const nlohmann::json& det, const std::string& mode) {
  if (!det.is_object() || det.value("backend", "") != "cuda") return;
  if (det.contains("fast_path") && det["fast_path"].is_array() && !det["fast_path"].empty()) {
    for (const auto& f : det["fast_path"]) {
      std::string paths;
      for (auto it = f["paths"].begin(); it != f["paths"].end(); ++it)
        paths += (paths.empty() ? "" : ", ") + it.key() + " x" + std::to_string(it.value().get<int64_t>());
      std::printf("Path      layer %d (--fast-path %s): %s; unique %s, cache hits %s\n", f["layer_index"].get<int>(),
                  mode.c_str(), paths.empty() ? "no batch" : paths.c_str(), json_pct(f["unique_fraction"]).c_str(),
                  json_pct(f["cache_hit_rate"]).c_str());
      for (const auto& w : f["last_why"]) std::printf("          why: %s\n", w.get<std::string>().c_str());
      if (f.contains("cache")) print_cache_line(f["cache"], f["layer_index"].get<int>());
    }
  } else if (det.contains("fast_path_note") && det["fast_path_note"].is_string()) {
    std::printf("Path      plain UVA gather: %s\n", det["fast_path_note"].get<std::string>().c_str());
  }
}

}  // namespace engram::cli
