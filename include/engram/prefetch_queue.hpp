// PrefetchQueue: the backend-neutral interface of a rank's serial lookup queue.
//
// `prepare(layer, ids)` marks the layer's hash ids ready (r), submits its lookup to the one serial queue of this
// rank and records the layer's completion event; `consume(layer)` makes the consumer wait for that event only and
// returns the staging. Mode kEarly calls prepare as soon as ids are ready; kOnDemand calls it at the consumer
// (the B1 pair: same kernel, same grid, same staging). Implementations: CPU worker thread (src/cpu/prefetch.*),
// CUDA stream + events (src/cuda/prefetch.*). Staging is persistent per layer: a layer's staging is valid from
// consume(layer) until the next prepare(layer).
// Thread safety: one driving thread per queue.
#pragma once

#include <cstdint>

#include "engram/export.hpp"
#include "engram/lookup.hpp"
#include "engram/options.hpp"
#include "engram/status.hpp"
#include "engram/timeline.hpp"

namespace engram {
ENGRAM_API_BEGIN

struct StagingView {
  const uint16_t* data = nullptr;  // [tokens][heads][d] bf16 bits (host memory for CPU, device for CUDA)
  int64_t tokens = 0;
  int heads = 0;  // staging heads per token: the layout's, or a TP slice's local heads (engram/tp_slice.hpp)
  int d = 0;
  bool on_device = false;
};

class ENGRAM_API PrefetchQueue {
 public:
  virtual ~PrefetchQueue() = default;
  // Starts decode step `step` (timeline rows of this step carry it).
  virtual void begin_step(int64_t step) = 0;
  // ids: host int64 [tokens][heads] of Engram layer `layer_index` (copied before return). Not blocking.
  virtual Status prepare(int layer_index, const int64_t* ids, int64_t tokens) = 0;
  // Waits for layer's lookup (CPU: the host thread blocks; CUDA: the main stream waits on the event).
  virtual Result<StagingView> consume(int layer_index) = 0;
  // Ends the step; timings of the step become final (CUDA: one host sync per step, outside the layer loop).
  virtual Status end_step() = 0;
  // Every row recorded so far; sum of LookupStats of every lookup.
  virtual const Timeline& timeline() const = 0;
  virtual LookupStats totals() const = 0;
  virtual const char* backend_name() const = 0;
};

ENGRAM_API_END
}  // namespace engram
