// The one writer of the Prometheus text exposition format 0.0.4 (engram/metrics.hpp), and the snapshot's lookups.
// Format reference: prometheus/docs content/docs/instrumenting/exposition_formats.md ("Text-based format").
#include <charconv>
#include <cmath>
#include <string>

#include "engram/metrics.hpp"

namespace engram {
namespace {

void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back as v
    out.append(buf, r.ptr);
  }
}

void append_help(std::string& out, const std::string& text) {
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

void append_label_value(std::string& out, const std::string& text) {
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

// {a="x",b="y"} plus an optional le; nothing when there is no label at all.
void append_labels(std::string& out, const MetricLabels& labels, const std::string* le = nullptr) {
  if (labels.empty() && !le) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    append_label_value(out, v);
    out += '"';
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

bool labels_include(const MetricLabels& have, const MetricLabels& want) {
  for (const auto& w : want) {
    bool found = false;
    for (const auto& h : have)
      if (h == w) found = true;
    if (!found) return false;
  }
  return true;
}

}  // namespace

const char* metric_type_name(MetricType t) noexcept {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

const MetricFamily* MetricsSnapshot::find(const std::string& name) const {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

const MetricSample* MetricsSnapshot::find(const std::string& name, const MetricLabels& labels) const {
  const MetricFamily* f = find(name);
  if (!f) return nullptr;
  for (const auto& s : f->samples)
    if (labels_include(s.labels, labels)) return &s;
  return nullptr;
}

double MetricsSnapshot::sum(const std::string& name, const MetricLabels& labels) const {
  const MetricFamily* f = find(name);
  if (!f) return 0;
  double total = 0;
  for (const auto& s : f->samples)
    if (labels_include(s.labels, labels))
      total += f->type == MetricType::kHistogram ? static_cast<double>(s.count) : s.value;
  return total;
}

std::string prometheus_text(const MetricsSnapshot& snapshot) {
  std::string out;
  for (const MetricFamily& f : snapshot.families) {
    if (f.samples.empty()) continue;
    out += "# HELP " + f.name + ' ';
    append_help(out, f.help);
    out += "\n# TYPE " + f.name + ' ' + metric_type_name(f.type) + '\n';
    for (const MetricSample& s : f.samples) {
      if (f.type != MetricType::kHistogram) {
        out += f.name;
        append_labels(out, s.labels);
        out += ' ';
        append_number(out, s.value);
        out += '\n';
        continue;
      }
      for (size_t i = 0; i < s.bucket_bounds.size(); ++i) {
        std::string le;
        append_number(le, s.bucket_bounds[i]);
        out += f.name + "_bucket";
        append_labels(out, s.labels, &le);
        out += ' ' + std::to_string(i < s.bucket_cumulative.size() ? s.bucket_cumulative[i] : s.count) + '\n';
      }
      const std::string inf = "+Inf";
      out += f.name + "_bucket";
      append_labels(out, s.labels, &inf);
      out += ' ' + std::to_string(s.count) + '\n';
      out += f.name + "_sum";
      append_labels(out, s.labels);
      out += ' ';
      append_number(out, s.sum);
      out += '\n';
      out += f.name + "_count";
      append_labels(out, s.labels);
      out += ' ' + std::to_string(s.count) + '\n';
    }
  }
  return out;
}

}  // namespace engram
