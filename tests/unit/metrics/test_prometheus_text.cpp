// The Prometheus text writer and the registry: escaping of help and label values, histograms with cumulative
// buckets ending at +Inf with _sum and _count, counters and gauges, families without samples left out.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engram/metrics.hpp"
#include "metrics/registry.hpp"

namespace {

using engram::MetricsSnapshot;
using engram::prometheus_text;
namespace m = engram::metrics;

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(PrometheusText, CounterAndGaugeWithHelpAndType) {
  m::Registry r;
  r.counter("engram_lookups_total", "Lookups served", {{"layer", "1"}, {"rank", "0"}})->add(3);
  r.gauge("engram_table_bytes", "Bytes", {{"layer", "14"}})->set(1024);
  const std::string t = prometheus_text(r.snapshot());
  EXPECT_TRUE(has_line(t, "# HELP engram_lookups_total Lookups served")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE engram_lookups_total counter")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookups_total{layer=\"1\",rank=\"0\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE engram_table_bytes gauge")) << t;
  EXPECT_TRUE(has_line(t, "engram_table_bytes{layer=\"14\"} 1024")) << t;
}

TEST(PrometheusText, EscapesHelpAndLabelValues) {
  m::Registry r;
  r.gauge("engram_x", "a \\ backslash\nand a newline", {{"path", "a\"b\\c\nd"}})->set(1);
  const std::string t = prometheus_text(r.snapshot());
  EXPECT_TRUE(has_line(t, "# HELP engram_x a \\\\ backslash\\nand a newline")) << t;
  EXPECT_TRUE(has_line(t, "engram_x{path=\"a\\\"b\\\\c\\nd\"} 1")) << t;
}

TEST(PrometheusText, HistogramBucketsCumulativeWithInfSumCount) {
  m::Registry r;
  m::Histogram* h = r.histogram("engram_lookup_duration_seconds", "L", {{"layer", "1"}}, {0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.002, 0.003, 0.05, 5.0}) h->observe(v);
  h->observe(std::nan(""));  // not a measurement
  const std::string t = prometheus_text(r.snapshot());
  EXPECT_TRUE(has_line(t, "# TYPE engram_lookup_duration_seconds histogram")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookup_duration_seconds_bucket{layer=\"1\",le=\"0.001\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookup_duration_seconds_bucket{layer=\"1\",le=\"0.01\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookup_duration_seconds_bucket{layer=\"1\",le=\"0.1\"} 4")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookup_duration_seconds_bucket{layer=\"1\",le=\"+Inf\"} 5")) << t;
  EXPECT_TRUE(has_line(t, "engram_lookup_duration_seconds_count{layer=\"1\"} 5")) << t;
  EXPECT_NE(t.find("engram_lookup_duration_seconds_sum{layer=\"1\"} 5.0555"), std::string::npos) << t;
  // Buckets come before _sum and _count, in ascending order.
  EXPECT_LT(t.find("le=\"0.1\""), t.find("le=\"+Inf\""));
  EXPECT_LT(t.find("le=\"+Inf\""), t.find("_sum"));
}

TEST(PrometheusText, UnsetGaugeAndEmptyFamilyAreLeftOut) {
  m::Registry r;
  r.gauge("engram_plan_predicted_seconds", "not measured on this backend", {{"layer", "1"}});
  m::Gauge* g = r.gauge("engram_cleared", "cleared", {});
  g->set(2);
  g->clear();
  const std::string t = prometheus_text(r.snapshot());
  EXPECT_EQ(t.find("engram_plan_predicted_seconds"), std::string::npos) << t;
  EXPECT_EQ(t.find("engram_cleared"), std::string::npos) << t;
  EXPECT_EQ(r.snapshot().find("engram_plan_predicted_seconds")->samples.size(), 0u);
}

TEST(PrometheusText, NumbersAsGoParsesThem) {
  MetricsSnapshot s;
  s.families.push_back({"engram_v", "v", engram::MetricType::kGauge, {}});
  for (double v : {0.1, 1e-7, 123456789.0, std::nan(""), HUGE_VAL, -HUGE_VAL})
    s.families[0].samples.push_back({{{"i", std::to_string(s.families[0].samples.size())}}, v, {}, {}, 0, 0});
  const std::string t = prometheus_text(s);
  EXPECT_TRUE(has_line(t, "engram_v{i=\"0\"} 0.1")) << t;
  EXPECT_TRUE(has_line(t, "engram_v{i=\"1\"} 1e-07")) << t;
  EXPECT_TRUE(has_line(t, "engram_v{i=\"2\"} 123456789")) << t;
  EXPECT_TRUE(has_line(t, "engram_v{i=\"3\"} NaN")) << t;
  EXPECT_TRUE(has_line(t, "engram_v{i=\"4\"} +Inf")) << t;
  EXPECT_TRUE(has_line(t, "engram_v{i=\"5\"} -Inf")) << t;
}

TEST(MetricsRegistry, SameLabelsSameChildCounterRaiseNeverLowers) {
  m::Registry r;
  m::Counter* a = r.counter("engram_c_total", "c", {{"layer", "1"}});
  EXPECT_EQ(a, r.counter("engram_c_total", "c", {{"layer", "1"}}));
  a->raise_to(10);
  a->raise_to(4);
  EXPECT_EQ(a->value(), 10);
  const MetricsSnapshot s = r.snapshot();
  EXPECT_EQ(s.sum("engram_c_total"), 10);
  EXPECT_NE(s.find("engram_c_total", {{"layer", "1"}}), nullptr);
  EXPECT_EQ(s.find("engram_c_total", {{"layer", "2"}}), nullptr);
}

}  // namespace
