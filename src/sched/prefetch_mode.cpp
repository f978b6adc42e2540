// Names of the prefetch modes (B1 pair).
#include "sched/prefetch_queue.hpp"

namespace engram {
const char* prefetch_mode_name(PrefetchMode m) { return m == PrefetchMode::kEarly ? "early" : "on_demand"; }
}  // namespace engram
