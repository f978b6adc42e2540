// The metrics registry: counters, gauges and fixed-bucket histograms whose updates are relaxed atomics (no lock, no
// allocation), grouped in families that are registered up front (a mutex guards registration and snapshots only).
//
// The serving thread updates metrics through pointers it resolved when the engine was built; a scraping thread
// calls snapshot() at any time. A snapshot is not a consistent cut across metrics (a lookup may be in the counter
// and not yet in the histogram); within a histogram, _count is the sum of its buckets so the buckets and +Inf
// always agree. A gauge or histogram is written only once it holds a measurement (Gauge::set, one observation is
// not required for histograms: an empty histogram is a real zero count); a counter is written from registration on.
// Pure C++ (docs/metrics.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engram/metrics.hpp"

namespace engram::metrics {

class Counter {
 public:
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  // Raises the counter to `total` (a total kept elsewhere, e.g. device counters); never lowers it.
  void raise_to(double total);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) {
    value_.store(v, std::memory_order_relaxed);
    set_.store(true, std::memory_order_release);
  }
  void clear() { set_.store(false, std::memory_order_release); }  // back to "not measured"
  bool is_set() const { return set_.load(std::memory_order_acquire); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
  std::atomic<bool> set_{false};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending upper bounds, +Inf implied
  void observe(double v);                          // NaN is ignored (not measured)
  const std::vector<double>& bounds() const { return bounds_; }
  void read(MetricSample& out) const;              // bounds, cumulative counts, count, sum

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1 (the last: above every bound)
  std::atomic<double> sum_{0};
};

// Bucket bounds for durations from 1 us to 1 s (a lookup, a wait, a queue time), with 0 first (an exposed wait
// of exactly zero: the lookup was done before the consumer arrived).
std::vector<double> duration_buckets_seconds();

class Registry {
 public:
  // Registers (or finds) the family and the child with these labels. The pointer stays valid for the registry's
  // life. A family's type and help are fixed by its first registration; a histogram's bounds by its first child.
  Counter* counter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Gauge* gauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Histogram* histogram(const std::string& name, const std::string& help, const MetricLabels& labels,
                       const std::vector<double>& bounds);
  MetricsSnapshot snapshot() const;

 private:
  struct Child {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name, help;
    MetricType type;
    std::deque<Child> children;
  };
  Child& child(const std::string& name, const std::string& help, MetricType type, const MetricLabels& labels);
  mutable std::mutex mu_;
  std::deque<Family> families_;
};

}  // namespace engram::metrics
