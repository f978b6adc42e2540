// CpuPrefetchQueue: the CPU backend's serial prefetch queue (one worker thread per rank).
//
// prepare() copies the ids, stamps r/submit and pushes a job onto a FIFO served by one worker thread, which runs
// the lookups strictly in submission order (the seed's single serial stream) using a ThreadPool for the gather.
// consume() stamps c, blocks until that layer's job is done, stamps wait_end. Times come from an injected clock
// (nanoseconds on one time base), so tests can drive it deterministically.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "engram/prefetch_queue.hpp"

namespace engram::cpu {

struct CpuPrefetchOptions {
  int rank = 0;
  int lookup_threads = 0;          // threads of the gather pool; 0 = one per CPU this process may run on (the one
                                   // place this rule is applied: CpuPrefetchQueue::create)
  bool checked = false;            // validate ids before each lookup (LookupRequest::checked)
  bool record_timeline = true;
  std::function<double()> clock_ns;  // default: steady_clock ns since construction
};

class CpuPrefetchQueue final : public PrefetchQueue {
 public:
  // tables[i] is the table of Engram layer index i (layer_ids[i]); every table has `heads` heads and row width d.
  // Ids are [tokens][heads]; the staging has the tables' out heads (a TP slice: its local heads; all alike).
  static Result<std::unique_ptr<CpuPrefetchQueue>> create(std::vector<TableView> tables, std::vector<int> layer_ids,
                                                           int heads, const CpuPrefetchOptions& options);
  ~CpuPrefetchQueue() override;

  void begin_step(int64_t step) override;
  Status prepare(int layer_index, const int64_t* ids, int64_t tokens) override;
  Result<StagingView> consume(int layer_index) override;
  Status end_step() override;
  const Timeline& timeline() const override { return timeline_; }
  LookupStats totals() const override;
  const char* backend_name() const override { return "cpu"; }
  int lookup_threads() const { return pool_->size(); }  // the gather pool's threads (0 resolved)

 private:
  CpuPrefetchQueue() = default;
  void worker_loop();

  struct LayerSlot {
    std::vector<int64_t> ids;
    std::vector<uint16_t> staging;
    int64_t tokens = 0;
    bool pending = false;  // prepared, not yet consumed
    bool done = false;     // lookup finished
    Status status;
    LayerTiming timing;
  };

  std::vector<TableView> tables_;
  std::vector<int> layer_ids_;
  int heads_ = 0;      // ids' heads per token
  int out_heads_ = 0;  // staging's heads per token (heads_, or a TP slice's local heads)
  CpuPrefetchOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<LayerSlot> slots_;
  Timeline timeline_;
  LookupStats totals_;
  int64_t step_ = 0;
  double step_begin_ns_ = kNotRecorded;  // clock at begin_step (the step's span on the timeline)

  mutable std::mutex mu_;
  std::condition_variable cv_job_, cv_done_;
  std::deque<int> fifo_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace engram::cpu
