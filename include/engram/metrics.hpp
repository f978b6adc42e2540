// Serving metrics of an engine as a snapshot, and the one writer of the Prometheus text exposition format (0.0.4).
//
// An Engine keeps counters, gauges and fixed-bucket histograms that it updates as it serves (lookups folded from
// the queue's timeline at each end_step, table and census figures when they are taken, errors as they are
// returned); Engine::metrics() copies them into a MetricsSnapshot, from any thread. Names carry the `engram_`
// prefix and their unit (`_seconds`, `_bytes`, `_pages`; counters end in `_total`); labels are `layer` (the model
// layer id of an Engram layer), `rank`, `node`, `path`, `kind`. A figure the engine does not measure on its
// backend has no sample at all (a family with no sample is not written), never a 0. docs/metrics.md lists them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace engram {

enum class MetricType { kCounter, kGauge, kHistogram };
const char* metric_type_name(MetricType t) noexcept;  // "counter", "gauge", "histogram"

using MetricLabels = std::vector<std::pair<std::string, std::string>>;  // (name, value), in writing order

struct MetricSample {
  MetricLabels labels;
  double value = 0;  // counter and gauge
  // Histogram: upper bounds (ascending, +Inf not included) and the cumulative count of observations <= each
  // bound; `count` is the +Inf bucket (every observation), `sum` their sum.
  std::vector<double> bucket_bounds;
  std::vector<uint64_t> bucket_cumulative;
  uint64_t count = 0;
  double sum = 0;
};

struct MetricFamily {
  std::string name;  // with its unit and, for counters, `_total`
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<MetricSample> samples;
};

struct MetricsSnapshot {
  std::vector<MetricFamily> families;
  // The family named `name`; nullptr when absent.
  const MetricFamily* find(const std::string& name) const;
  // The sample of `name` whose labels include every (name, value) of `labels`; nullptr when absent.
  const MetricSample* find(const std::string& name, const MetricLabels& labels) const;
  // Sum of the values (histograms: counts) of the samples of `name` whose labels include `labels`; 0 when none.
  double sum(const std::string& name, const MetricLabels& labels = {}) const;
};

// The snapshot in the Prometheus text exposition format 0.0.4: per family `# HELP` (backslash and newline
// escaped) and `# TYPE` lines, then its samples (label values with backslash, double quote and newline escaped;
// histograms as cumulative `_bucket{le=...}` lines ending with le="+Inf", then `_sum` and `_count`). Families with
// no sample are left out. Values print as Go's strconv does (NaN, +Inf, -Inf; shortest round-trip decimal).
std::string prometheus_text(const MetricsSnapshot& snapshot);

// The Content-Type of prometheus_text() over HTTP.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace engram
