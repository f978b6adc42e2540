// LayerCompute: the synthetic per-layer work of a replay, standing in for a decoder layer's compute on the
// consumer's "main stream". CPU: calibrated arithmetic on the driving thread; CUDA: a calibrated GEMM on the
// main stream (src/cuda). `run_layer` is asynchronous on CUDA (enqueue only) and synchronous on CPU.
#pragma once

#include "engram/status.hpp"

namespace engram {

class LayerCompute {
 public:
  virtual ~LayerCompute() = default;
  // Runs (or enqueues) the compute of model layer `layer` of the current step.
  virtual Status run_layer(int layer) = 0;
  // Target duration of one layer in nanoseconds (as calibrated).
  virtual double layer_ns() const = 0;
  // Waits until everything run_layer enqueued has finished (CUDA: the main stream); a no-op where run_layer is
  // synchronous. A compute-only timing must call it before reading its clock.
  virtual Status synchronize() { return Status::ok(); }
};

}  // namespace engram
