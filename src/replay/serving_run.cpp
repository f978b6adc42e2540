// Serving replay's executor (serving.hpp): the live scheduler and the recorded replay share one step runner
// (Executor::run_step) and one client accounting (finish_step), so they differ only in where a step's chunks come
// from and when a step may start. Hashing a step's ids happens on the client clock (it is on the serving path
// between steps) but before the step's own clock starts (step time is what the engine's GPU step would show).
#include "replay/serving.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <thread>

namespace engram {

namespace {

struct ReqState {
  int64_t pos = 0;         // tokens fed so far
  int64_t generated = 0;   // output tokens produced
  double first_token_ns = kNotRecorded;
  double last_token_ns = kNotRecorded;
  double done_ns = kNotRecorded;
  std::vector<double> itl_ns;
};

class Executor {
 public:
  Executor(const EngramLayout& layout, const std::vector<ServingRequest>& reqs, ServingIdSource& ids,
           PrefetchQueue& queue, LayerCompute& compute, const ServingOptions& opt)
      : layout_(layout), reqs_(reqs), ids_(ids), queue_(queue), compute_(compute), opt_(opt), state_(reqs.size()) {
    const int max_id = *std::max_element(layout.layer_ids.begin(), layout.layer_ids.end());
    decoder_layers_ = std::max(opt.model.layers, max_id + 1);
    engram_index_.assign(static_cast<size_t>(decoder_layers_), -1);
    for (int li = 0; li < layout.n_layers(); ++li) engram_index_[static_cast<size_t>(layout.layer_ids[li])] = li;
    start_clock();  // warm-up needs a clock too; the replay restarts it at its origin
  }

  Status validate() const {
    if (opt_.model.layers < 1) return Status(Code::kInvalidArgument, "serving: model shape has no layers");
    if (opt_.prepare_step && opt_.mode != PrefetchMode::kEarly)
      return Status(Code::kInvalidArgument, "serving: a step's own prepare needs early prefetch");
    if (!(opt_.rates.unit_us > 0) || !(opt_.rates.tflops > 0) || !(opt_.rates.weight_gbps > 0))
      return Status(Code::kInvalidArgument, "serving: compute rates and unit must be > 0");
    return Status::ok();
  }

  void start_clock() {
    paused_ns_ = 0;
    if (opt_.clock_ns) {
      clock_ = opt_.clock_ns;
    } else {
      const auto origin = std::chrono::steady_clock::now();
      clock_ = [origin] { return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - origin).count(); };
    }
  }
  double now() const { return clock_() - paused_ns_; }
  // Runs f with the replay's clock stopped (ServingOptions::host_ids_off_clock).
  template <typename F>
  Status off_clock(F&& f) {
    const double t0 = clock_();
    Status st = f();
    paused_ns_ += clock_() - t0;
    return st;
  }

  void wait_until(double t_ns) {
    double n = now();
    if (n >= t_ns) return;
    const double t0 = n;
    while (n < t_ns) {
      const double left = t_ns - n;
      if (left > 300e3) std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<int64_t>(left - 200e3)));
      n = now();
    }
    idle_ns_ += n - t0;
  }

  // Warm-up: the first request's first tokens, run and forgotten (ids state reset), before the clock starts.
  Status warmup() {
    if (opt_.warmup_steps <= 0 || reqs_.empty()) return Status::ok();
    const int64_t n = std::min<int64_t>({reqs_[0].prompt_tokens, opt_.scheduler.prefill_chunk, opt_.scheduler.token_budget});
    ScheduledStep st;
    st.chunks.push_back({reqs_[0].id, 0, n, true});
    for (int i = 0; i < opt_.warmup_steps; ++i) {
      ids_.reset();
      double ignored = 0;
      ENGRAM_RETURN_IF_ERROR(run_step(st, -1 - i, &ignored, /*measure=*/false));
    }
    ids_.reset();
    return Status::ok();
  }

  // Hashes, submits and runs one step; *end_ns = client time at its end.
  Status run_step(const ScheduledStep& st, int64_t step, double* end_ns, bool measure = true) {
    for (auto& v : ids_buf_) v.clear();
    ids_buf_.resize(static_cast<size_t>(layout_.n_layers()));
    auto host_ids = [&]() -> Status {
      for (const auto& c : st.chunks) ENGRAM_RETURN_IF_ERROR(ids_.append(reqs_[static_cast<size_t>(c.request)], c.pos, c.tokens, ids_buf_));
      return Status::ok();
    };
    const double h0 = clock_();
    ENGRAM_RETURN_IF_ERROR(opt_.host_ids_off_clock ? off_clock(host_ids) : host_ids());
    const double host_ids_ns = clock_() - h0;
    const int64_t T = st.tokens();
    const int units = units_for_layer(opt_.model, opt_.rates, T);
    const size_t mark = queue_.timeline().rows().size();
    const double t0 = now();
    queue_.begin_step(step);
    if (opt_.mode == PrefetchMode::kEarly && opt_.prepare_step) {
      ENGRAM_RETURN_IF_ERROR(opt_.prepare_step(st, step, ids_buf_));
    } else if (opt_.mode == PrefetchMode::kEarly) {
      for (int li = 0; li < layout_.n_layers(); ++li) ENGRAM_RETURN_IF_ERROR(queue_.prepare(li, ids_buf_[static_cast<size_t>(li)].data(), T));
    }
    for (int layer = 0; layer < decoder_layers_; ++layer) {
      const int li = engram_index_[static_cast<size_t>(layer)];
      if (li >= 0) {
        if (opt_.mode == PrefetchMode::kOnDemand) ENGRAM_RETURN_IF_ERROR(queue_.prepare(li, ids_buf_[static_cast<size_t>(li)].data(), T));
        auto staging = queue_.consume(li);
        if (!staging.is_ok()) return staging.status();
      }
      for (int u = 0; u < units; ++u) ENGRAM_RETURN_IF_ERROR(compute_.run_layer(layer));
    }
    ENGRAM_RETURN_IF_ERROR(queue_.end_step());
    const double t1 = now();
    *end_ns = t1;
    if (opt_.after_step) {
      auto after = [&] { return opt_.after_step(st, step, measure, ids_buf_); };
      ENGRAM_RETURN_IF_ERROR(opt_.host_ids_off_clock ? off_clock(after) : after());
    }
    if (!measure) return Status::ok();
    const double step_ns = t1 - t0;
    double waits = 0;
    const auto& rows = queue_.timeline().rows();
    for (size_t i = mark; i < rows.size(); ++i) {
      const auto& t = rows[i];
      if (std::isfinite(t.measured_wait_ns())) waits += std::max(0.0, t.measured_wait_ns());
      lookup_.push_back(t.lookup_ns());
      exposed_.push_back(t.exposed_wait_ns());
      measured_wait_.push_back(t.measured_wait_ns());
      queue_ns_.push_back(t.queue_ns());
      if (std::isfinite(t.lookup_ns())) lookup_busy_ns_ += t.lookup_ns();
      rows_ += t.rows;
    }
    step_samples_.push_back(step_ns);
    host_ids_.push_back(host_ids_ns);
    main_compute_.push_back(step_ns - waits);
    bool has_prefill = false;
    for (const auto& c : st.chunks) {
      has_prefill |= c.prefill;
      (c.prefill ? prefill_tokens_ : decode_tokens_) += c.tokens;
    }
    (has_prefill ? mixed_steps_ : decode_steps_).push_back(step_ns);
    ++steps_;
    return Status::ok();
  }

  // Client accounting of a finished step: tokens produced at its end.
  void finish_step(const ScheduledStep& st, double end_ns) {
    for (const auto& c : st.chunks) {
      const ServingRequest& r = reqs_[static_cast<size_t>(c.request)];
      ReqState& s = state_[static_cast<size_t>(c.request)];
      s.pos = c.pos + c.tokens;
      const bool emits = c.prefill ? s.pos >= r.prompt_tokens : true;
      if (!emits) continue;
      if (s.generated == 0) {
        s.first_token_ns = end_ns;
      } else {
        s.itl_ns.push_back(end_ns - s.last_token_ns);
      }
      s.last_token_ns = end_ns;
      ++s.generated;
      if (s.generated >= r.output_tokens) s.done_ns = end_ns;
    }
  }
  bool done(int64_t id) const { return std::isfinite(state_[static_cast<size_t>(id)].done_ns); }
  const ReqState& state(int64_t id) const { return state_[static_cast<size_t>(id)]; }

  ServingReport report(const std::vector<int64_t>& rejected) const {
    ServingReport rep;
    rep.requests = static_cast<int64_t>(reqs_.size());
    rep.rejected = static_cast<int64_t>(rejected.size());
    rep.rejection_rate = reqs_.empty() ? kNotRecorded : static_cast<double>(rep.rejected) / static_cast<double>(rep.requests);
    std::vector<double> ttft, e2e;
    double first_arrival = kNotRecorded, last_done = kNotRecorded;
    int64_t out_tokens = 0;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const ReqState& s = state_[i];
      if (!std::isfinite(first_arrival) || reqs_[i].arrival_ns < first_arrival) first_arrival = reqs_[i].arrival_ns;
      if (std::isfinite(s.first_token_ns)) ttft.push_back(s.first_token_ns - reqs_[i].arrival_ns);
      rep.itl_samples_ns.insert(rep.itl_samples_ns.end(), s.itl_ns.begin(), s.itl_ns.end());
      out_tokens += s.generated;
      if (!std::isfinite(s.done_ns)) continue;
      ++rep.completed;
      e2e.push_back(s.done_ns - reqs_[i].arrival_ns);
      // Time per output token after the first, as vLLM's benchmark_serving counts it (requests of one token have none).
      if (s.generated > 1)
        rep.tpot_samples_ns.push_back((s.done_ns - s.first_token_ns) / static_cast<double>(s.generated - 1));
      if (!std::isfinite(last_done) || s.done_ns > last_done) last_done = s.done_ns;
      double mean_itl = 0;
      for (double g : s.itl_ns) mean_itl += g;
      mean_itl = s.itl_ns.empty() ? 0 : mean_itl / static_cast<double>(s.itl_ns.size());
      const bool ok_ttft = s.first_token_ns - reqs_[i].arrival_ns <= opt_.slo_ttft_ms * 1e6;
      const bool ok_itl = mean_itl <= opt_.slo_itl_ms * 1e6;
      if (ok_ttft && ok_itl) ++rep.good;
    }
    rep.ttft_samples_ns = ttft;
    rep.ttft_ns = Distribution::of(ttft);
    rep.itl_ns = Distribution::of(rep.itl_samples_ns);
    rep.e2e_ns = Distribution::of(e2e);
    rep.e2e_samples_ns = e2e;
    rep.tpot_ns = Distribution::of(rep.tpot_samples_ns);
    rep.output_tokens = out_tokens;
    if (std::isfinite(first_arrival) && std::isfinite(last_done) && last_done > first_arrival) {
      rep.duration_s = (last_done - first_arrival) * 1e-9;
      rep.goodput_rps = static_cast<double>(rep.good) / rep.duration_s;
      rep.request_throughput_rps = static_cast<double>(rep.completed) / rep.duration_s;
      rep.throughput_tokens_per_s = static_cast<double>(out_tokens) / rep.duration_s;
    }
    rep.steps = steps_;
    rep.prefill_tokens = prefill_tokens_;
    rep.decode_tokens = decode_tokens_;
    rep.scheduled_tokens = prefill_tokens_ + decode_tokens_;
    rep.step_ns = Distribution::of(step_samples_);
    rep.decode_step_ns = Distribution::of(decode_steps_);
    rep.mixed_step_ns = Distribution::of(mixed_steps_);
    rep.main_compute_ns = Distribution::of(main_compute_);
    rep.host_ids_ns = Distribution::of(host_ids_);
    rep.lookup_ns = Distribution::of(lookup_);
    rep.exposed_wait_ns = Distribution::of(exposed_);
    rep.measured_wait_ns = Distribution::of(measured_wait_);
    rep.queue_ns = Distribution::of(queue_ns_);
    rep.idle_wait_s = idle_ns_ * 1e-9;
    rep.rows_looked_up = rows_;
    if (lookup_busy_ns_ > 0) rep.rows_per_s = static_cast<double>(rows_) / (lookup_busy_ns_ * 1e-9);
    rep.step_samples_ns = step_samples_;
    rep.main_compute_samples_ns = main_compute_;
    return rep;
  }

 private:
  const EngramLayout& layout_;
  const std::vector<ServingRequest>& reqs_;
  ServingIdSource& ids_;
  PrefetchQueue& queue_;
  LayerCompute& compute_;
  const ServingOptions& opt_;
  std::function<double()> clock_;
  double paused_ns_ = 0;  // clock time spent off the replay's clock
  int decoder_layers_ = 0;
  std::vector<int> engram_index_;
  std::vector<std::vector<int64_t>> ids_buf_;
  std::vector<ReqState> state_;
  std::vector<double> host_ids_;  // id source time per measured step
  std::vector<double> step_samples_, decode_steps_, mixed_steps_, main_compute_, lookup_, exposed_, measured_wait_, queue_ns_;
  double lookup_busy_ns_ = 0, idle_ns_ = 0;
  int64_t rows_ = 0, steps_ = 0, prefill_tokens_ = 0, decode_tokens_ = 0;
};

}  // namespace

Result<ServingReport> run_serving_live(const EngramLayout& layout, const std::vector<ServingRequest>& requests,
                                       ServingIdSource& ids, PrefetchQueue& queue, LayerCompute& compute,
                                       const ServingOptions& opt, ServingSchedule* recorded) {
  const SchedulerOptions& so = opt.scheduler;
  if (so.token_budget < 1 || so.prefill_chunk < 1 || so.max_running < 1 || so.max_waiting < 0)
    return Status(Code::kInvalidArgument, "serving: token budget, prefill chunk and max running must be >= 1");
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].id != static_cast<int64_t>(i) || (i > 0 && requests[i].arrival_ns < requests[i - 1].arrival_ns))
      return Status(Code::kInvalidArgument, "serving: requests must have ids 0..n-1 in arrival order");
  Executor ex(layout, requests, ids, queue, compute, opt);
  ENGRAM_RETURN_IF_ERROR(ex.validate());
  ENGRAM_RETURN_IF_ERROR(ex.warmup());
  ServingSchedule sched;
  sched.requests = requests;
  size_t next = 0;
  std::deque<int64_t> waiting;
  std::vector<int64_t> running;
  ex.start_clock();
  int64_t step = 0;
  while (true) {
    const double t = ex.now();
    while (next < requests.size() && requests[next].arrival_ns <= t) {
      if (static_cast<int>(waiting.size()) >= so.max_waiting) sched.rejected.push_back(requests[next].id);
      else waiting.push_back(requests[next].id);
      ++next;
    }
    while (!waiting.empty() && static_cast<int>(running.size()) < so.max_running) {
      running.push_back(waiting.front());
      waiting.pop_front();
    }
    ScheduledStep st;
    int64_t budget = so.token_budget;
    for (int64_t id : running) {  // decode tokens first: one per decoding request
      const ReqState& s = ex.state(id);
      if (s.pos >= requests[static_cast<size_t>(id)].prompt_tokens && budget > 0) {
        st.chunks.push_back({id, s.pos, 1, false});
        --budget;
      }
    }
    for (int64_t id : running) {  // then chunked prefill, in admission order
      const ReqState& s = ex.state(id);
      const int64_t left = requests[static_cast<size_t>(id)].prompt_tokens - s.pos;
      if (left <= 0 || budget <= 0) continue;
      const int64_t n = std::min({left, so.prefill_chunk, budget});
      st.chunks.push_back({id, s.pos, n, true});
      budget -= n;
    }
    if (st.chunks.empty()) {
      if (next >= requests.size()) break;
      ex.wait_until(requests[next].arrival_ns);
      continue;
    }
    double end_ns = 0;
    ENGRAM_RETURN_IF_ERROR(ex.run_step(st, step++, &end_ns));
    ex.finish_step(st, end_ns);
    running.erase(std::remove_if(running.begin(), running.end(), [&](int64_t id) { return ex.done(id); }), running.end());
    sched.steps.push_back(std::move(st));
  }
  auto rep = ex.report(sched.rejected);
  if (recorded) *recorded = std::move(sched);
  return rep;
}

Result<ServingReport> run_serving_recorded(const EngramLayout& layout, const ServingSchedule& schedule,
                                           ServingIdSource& ids, PrefetchQueue& queue, LayerCompute& compute,
                                           const ServingOptions& opt) {
  if (schedule.steps.empty()) return Status(Code::kInvalidArgument, "serving: the recorded schedule has no steps");
  Executor ex(layout, schedule.requests, ids, queue, compute, opt);
  ENGRAM_RETURN_IF_ERROR(ex.validate());
  ENGRAM_RETURN_IF_ERROR(ex.warmup());
  ex.start_clock();
  int64_t step = 0;
  for (const auto& st : schedule.steps) {
    // A step may not run before the requests it starts were sent (arrivals are on the real clock).
    double gate = 0;
    for (const auto& c : st.chunks)
      if (c.pos == 0) gate = std::max(gate, schedule.requests[static_cast<size_t>(c.request)].arrival_ns);
    ex.wait_until(gate);
    double end_ns = 0;
    ENGRAM_RETURN_IF_ERROR(ex.run_step(st, step++, &end_ns));
    ex.finish_step(st, end_ns);
  }
  return ex.report(schedule.rejected);
}

}  // namespace engram
