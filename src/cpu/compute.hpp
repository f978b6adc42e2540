// CpuLayerCompute: synthetic decoder-layer work for CPU replays. A fixed amount of arithmetic per layer,
// calibrated once so that an unloaded core takes `layer_us`; under contention (lookup threads on the same cores)
// the same work takes longer, which is exactly the main-compute slowdown a replay must expose.
#pragma once

#include <vector>

#include "sched/layer_compute.hpp"

namespace engram::cpu {

class CpuLayerCompute final : public LayerCompute {
 public:
  // Calibrates iterations for `layer_us` microseconds (takes ~20 ms). layer_us = 0 gives no work.
  explicit CpuLayerCompute(double layer_us);
  Status run_layer(int layer) override;
  double layer_ns() const override { return layer_ns_; }
  long long iterations_per_layer() const { return iters_; }
  // A value derived from all work done, so the compiler cannot drop it.
  double sink() const { return sink_; }

 private:
  void work(long long iters);
  double layer_ns_;
  long long iters_ = 0;
  std::vector<float> buf_;
  double sink_ = 0;
};

}  // namespace engram::cpu
