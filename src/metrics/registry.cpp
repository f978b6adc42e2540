// Registry, counters, gauges, histograms (see registry.hpp).
#include "metrics/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace engram::metrics {

void Counter::raise_to(double total) {
  double cur = value_.load(std::memory_order_relaxed);
  while (total > cur && !value_.compare_exchange_weak(cur, total, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // Few buckets: a linear scan beats a binary search and needs no allocation.
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void Histogram::read(MetricSample& out) const {
  out.bucket_bounds = bounds_;
  out.bucket_cumulative.resize(bounds_.size());
  uint64_t run = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    run += counts_[i].load(std::memory_order_relaxed);
    out.bucket_cumulative[i] = run;
  }
  run += counts_[bounds_.size()].load(std::memory_order_relaxed);
  out.count = run;
  out.sum = sum_.load(std::memory_order_relaxed);
}

std::vector<double> duration_buckets_seconds() {
  return {0, 1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1};
}

Registry::Child& Registry::child(const std::string& name, const std::string& help, MetricType type,
                                 const MetricLabels& labels) {
  auto fam = std::find_if(families_.begin(), families_.end(), [&](const Family& f) { return f.name == name; });
  if (fam == families_.end()) {
    families_.push_back(Family{name, help, type, {}});
    fam = std::prev(families_.end());
  } else if (fam->type != type) {
    // A programming error: one name, two types.
    std::fprintf(stderr, "engram: metric %s registered as %s and %s\n", name.c_str(), metric_type_name(fam->type),
                 metric_type_name(type));
    std::abort();
  }
  for (Child& c : fam->children)
    if (c.labels == labels) return c;
  fam->children.push_back(Child{labels, nullptr, nullptr, nullptr});
  return fam->children.back();
}

Counter* Registry::counter(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Child& c = child(name, help, MetricType::kCounter, labels);
  if (!c.counter) c.counter = std::make_unique<Counter>();
  return c.counter.get();
}

Gauge* Registry::gauge(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Child& c = child(name, help, MetricType::kGauge, labels);
  if (!c.gauge) c.gauge = std::make_unique<Gauge>();
  return c.gauge.get();
}

Histogram* Registry::histogram(const std::string& name, const std::string& help, const MetricLabels& labels,
                               const std::vector<double>& bounds) {
  std::lock_guard<std::mutex> lk(mu_);
  Child& c = child(name, help, MetricType::kHistogram, labels);
  if (!c.histogram) c.histogram = std::make_unique<Histogram>(bounds);
  return c.histogram.get();
}

MetricsSnapshot Registry::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  MetricsSnapshot s;
  s.families.reserve(families_.size());
  for (const Family& f : families_) {
    MetricFamily mf{f.name, f.help, f.type, {}};
    for (const Child& c : f.children) {
      MetricSample m;
      m.labels = c.labels;
      if (c.counter) {
        m.value = c.counter->value();
      } else if (c.gauge) {
        if (!c.gauge->is_set()) continue;
        m.value = c.gauge->value();
      } else if (c.histogram) {
        c.histogram->read(m);
      }
      mf.samples.push_back(std::move(m));
    }
    s.families.push_back(std::move(mf));
  }
  return s;
}

}  // namespace engram::metrics
