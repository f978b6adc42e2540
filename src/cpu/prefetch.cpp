// CpuPrefetchQueue implementation (see prefetch.hpp). The mutex guards slots' flags and the FIFO; the ids and
// staging of a slot are owned by the worker between prepare() and done, and by the consumer after done.
#include "cpu/prefetch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cpu/lookup.hpp"
#include "sys/affinity.hpp"

namespace engram::cpu {

Result<std::unique_ptr<CpuPrefetchQueue>> CpuPrefetchQueue::create(std::vector<TableView> tables,
                                                                   std::vector<int> layer_ids, int heads,
                                                                   const CpuPrefetchOptions& options) {
  if (tables.empty() || tables.size() != layer_ids.size())
    return Status(Code::kInvalidArgument, "cpu prefetch: need one table per Engram layer (got " +
                                              std::to_string(tables.size()) + " tables, " +
                                              std::to_string(layer_ids.size()) + " layer ids)");
  if (heads <= 0) return Status(Code::kInvalidArgument, "cpu prefetch: heads must be > 0");
  std::unique_ptr<CpuPrefetchQueue> q(new CpuPrefetchQueue());
  q->tables_ = std::move(tables);
  q->layer_ids_ = std::move(layer_ids);
  q->heads_ = heads;
  q->out_heads_ = q->tables_.front().slice.out_heads(heads);
  for (const TableView& t : q->tables_)
    if (t.slice.out_heads(heads) != q->out_heads_)
      return Status(Code::kInvalidArgument, "cpu prefetch: the layers' tables are sliced differently");
  q->opt_ = options;
  if (!q->opt_.clock_ns) {
    const auto origin = std::chrono::steady_clock::now();
    q->timeline_.origin_unix_ns =
        std::chrono::duration<double, std::nano>(std::chrono::system_clock::now().time_since_epoch()).count();
    q->opt_.clock_ns = [origin] {
      return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - origin).count();
    };
  }
  q->pool_ = std::make_unique<ThreadPool>(sys::threads_or_auto(q->opt_.lookup_threads));
  q->slots_.resize(q->tables_.size());
  q->worker_ = std::thread([p = q.get()] { p->worker_loop(); });
  return q;
}

CpuPrefetchQueue::~CpuPrefetchQueue() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_job_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void CpuPrefetchQueue::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_job_.wait(lk, [&] { return stop_ || !fifo_.empty(); });
    if (stop_) return;
    const int li = fifo_.front();
    fifo_.pop_front();
    LayerSlot& slot = slots_[li];
    lk.unlock();
    const double s = opt_.clock_ns();
    LookupRequest req;
    req.ids = slot.ids.data();
    req.tokens = slot.tokens;
    req.heads = heads_;
    req.out = slot.staging.data();
    req.checked = opt_.checked;
    auto res = lookup(tables_[li], req, pool_.get());
    const double f = opt_.clock_ns();
    lk.lock();
    slot.timing.s_ns = s;
    slot.timing.f_ns = f;
    if (res.is_ok()) {
      totals_.rows += res->rows;
      totals_.dead_rows += res->dead_rows;
      totals_.invalid_ids += res->invalid_ids;
      slot.status = Status::ok();
    } else {
      slot.status = res.status();
    }
    slot.done = true;
    cv_done_.notify_all();
  }
}

void CpuPrefetchQueue::begin_step(int64_t step) {
  step_ = step;
  step_begin_ns_ = opt_.clock_ns();
}

Status CpuPrefetchQueue::prepare(int layer_index, const int64_t* ids, int64_t tokens) {
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cpu prefetch: layer index " + std::to_string(layer_index) + " out of range");
  if (tokens < 0 || (tokens > 0 && !ids))
    return Status(Code::kInvalidArgument, "cpu prefetch: bad ids/tokens");
  const double r = opt_.clock_ns();
  std::unique_lock<std::mutex> lk(mu_);
  LayerSlot& slot = slots_[layer_index];
  if (slot.pending)
    return Status(Code::kInvalidArgument, "cpu prefetch: layer index " + std::to_string(layer_index) +
                                              " prepared twice without consume");
  const size_t n = static_cast<size_t>(tokens) * static_cast<size_t>(heads_);
  const size_t out_rows = static_cast<size_t>(tokens) * static_cast<size_t>(out_heads_);
  slot.ids.assign(ids, ids + n);
  slot.staging.resize(out_rows * static_cast<size_t>(tables_[layer_index].d));
  slot.tokens = tokens;
  slot.pending = true;
  slot.done = false;
  slot.timing = LayerTiming{};
  slot.timing.rank = opt_.rank;
  slot.timing.step = step_;
  slot.timing.layer_index = layer_index;
  slot.timing.layer_id = layer_ids_[layer_index];
  slot.timing.rows = static_cast<int64_t>(out_rows);
  slot.timing.r_ns = r;
  slot.timing.submit_ns = opt_.clock_ns();
  fifo_.push_back(layer_index);
  cv_job_.notify_one();
  return Status::ok();
}

Result<StagingView> CpuPrefetchQueue::consume(int layer_index) {
  if (layer_index < 0 || layer_index >= static_cast<int>(slots_.size()))
    return Status(Code::kInvalidArgument, "cpu prefetch: layer index " + std::to_string(layer_index) + " out of range");
  const double c = opt_.clock_ns();
  std::unique_lock<std::mutex> lk(mu_);
  LayerSlot& slot = slots_[layer_index];
  if (!slot.pending)
    return Status(Code::kInvalidArgument, "cpu prefetch: consume of layer index " + std::to_string(layer_index) +
                                              " that was not prepared");
  cv_done_.wait(lk, [&] { return slot.done; });
  const double wait_end = opt_.clock_ns();
  slot.pending = false;
  slot.timing.c_ns = c;
  slot.timing.wait_end_ns = wait_end;
  if (opt_.record_timeline) timeline_.add(slot.timing);
  if (!slot.status.is_ok()) return slot.status;
  return StagingView{slot.staging.data(), slot.tokens, out_heads_, tables_[layer_index].d, false};
}

Status CpuPrefetchQueue::end_step() {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].pending)
      return Status(Code::kInvalidArgument, "cpu prefetch: step ended with layer index " + std::to_string(i) +
                                                " prepared but not consumed");
  if (opt_.record_timeline && std::isfinite(step_begin_ns_))
    timeline_.add_step({opt_.rank, step_, step_begin_ns_, opt_.clock_ns(), false});
  step_begin_ns_ = kNotRecorded;
  return Status::ok();
}

LookupStats CpuPrefetchQueue::totals() const {
  std::lock_guard<std::mutex> lk(mu_);
  return totals_;
}

}  // namespace engram::cpu
