// CpuLayerCompute: a multiply-add sweep over a 16 KiB buffer (L1-resident, so it measures core time, not memory).
#include "cpu/compute.hpp"

#include <algorithm>
#include <chrono>

namespace engram::cpu {

CpuLayerCompute::CpuLayerCompute(double layer_us) : layer_ns_(layer_us * 1000.0), buf_(4096, 1.0f) {
  if (layer_us <= 0) return;
  // Calibrate: best of several short runs, so a momentary preemption does not inflate the estimate.
  const long long probe = 20000;
  double best_ns = 1e18;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work(probe);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best_ns = std::min(best_ns, ns);
  }
  iters_ = std::max<long long>(1, static_cast<long long>(static_cast<double>(probe) * layer_ns_ / best_ns));
}

void CpuLayerCompute::work(long long iters) {
  float a = 1.0001f, b = 0.9999f;
  const size_t n = buf_.size();
  for (long long i = 0; i < iters; ++i) {
    float& x = buf_[static_cast<size_t>(i) % n];
    x = x * a + b * 1e-7f;
    a = a * 0.99999994f + 1e-8f;
  }
  sink_ += buf_[0] + a;
}

Status CpuLayerCompute::run_layer(int) {
  if (iters_ > 0) work(iters_);
  return Status::ok();
}

}  // namespace engram::cpu
