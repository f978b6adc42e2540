// Serving replay: workload, schedule record, id sources and the step executor (see serving.hpp).
//
// The live scheduler and the recorded replay share one executor (run_step) and one client accounting
// (Accounting::finish_step), so the only difference between them is where a step's chunks come from and when a
// step may start. Hashing a step's ids happens on the client clock (it is on the serving path between steps)
// but before the step's own clock starts (step time is what the engine's GPU step would show).
#include "replay/serving.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/json_num.hpp"
#include "core/splitmix.hpp"
#include "replay/id_source.hpp"

namespace engram {

namespace {

double uniform01(uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; }

nlohmann::json dist_json(const Distribution& d) { return d.to_json(); }

// Mean and sample standard deviation of the finite values (NaN when there are none; std 0 for one value).
std::pair<double, double> mean_std(const std::vector<double>& v) {
  double sum = 0, sq = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) sum += x, sq += x * x, ++n;
  if (n == 0) return {kNotRecorded, kNotRecorded};
  const double mean = sum / static_cast<double>(n);
  const double var = n > 1 ? std::max(0.0, (sq - sum * mean) / static_cast<double>(n - 1)) : 0.0;
  return {mean, std::sqrt(var)};
}

}  // namespace

// ---- workload -------------------------------------------------------------------------------------------

Result<LengthDist> LengthDist::parse(const std::string& text) {
  LengthDist d;
  auto bad = [&] {
    return Status(Code::kInvalidArgument, "length distribution '" + text +
                                              "': expected N, fixed:N, uniform:MIN-MAX or lognormal:MEDIAN,SIGMA");
  };
  try {
    const auto colon = text.find(':');
    const std::string kind = colon == std::string::npos ? "fixed" : text.substr(0, colon);
    const std::string arg = colon == std::string::npos ? text : text.substr(colon + 1);
    if (kind == "fixed") {
      d.kind = Kind::kFixed;
      d.a = std::stod(arg);
    } else if (kind == "uniform") {
      const auto dash = arg.find('-');
      if (dash == std::string::npos) return bad();
      d.kind = Kind::kUniform;
      d.a = std::stod(arg.substr(0, dash));
      d.b = std::stod(arg.substr(dash + 1));
      if (d.b < d.a) return bad();
    } else if (kind == "lognormal") {
      const auto comma = arg.find(',');
      if (comma == std::string::npos) return bad();
      d.kind = Kind::kLognormal;
      d.a = std::stod(arg.substr(0, comma));
      d.b = std::stod(arg.substr(comma + 1));
      if (d.b < 0) return bad();
    } else {
      return bad();
    }
  } catch (const std::exception&) {
    return bad();
  }
  if (!(d.a >= 1)) return bad();
  return d;
}

std::string LengthDist::describe() const {
  std::ostringstream o;
  switch (kind) {
    case Kind::kFixed: o << "fixed:" << a; break;
    case Kind::kUniform: o << "uniform:" << a << "-" << b; break;
    case Kind::kLognormal: o << "lognormal:" << a << "," << b; break;
  }
  return o.str();
}

namespace {
int64_t draw_length(const LengthDist& d, uint64_t& s) {
  double v = d.a;
  if (d.kind == LengthDist::Kind::kUniform) {
    v = d.a + std::floor(uniform01(s) * (d.b - d.a + 1));
  } else if (d.kind == LengthDist::Kind::kLognormal) {
    const double u1 = std::max(uniform01(s), 1e-300), u2 = uniform01(s);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);  // Box-Muller
    v = std::round(d.a * std::exp(d.b * z));
  }
  return std::clamp<int64_t>(static_cast<int64_t>(v), 1, std::max<int64_t>(1, d.max_tokens));
}
}  // namespace

Result<std::vector<ServingRequest>> make_requests(const WorkloadOptions& o, int64_t text_tokens) {
  if (!(o.rate_rps > 0)) return Status(Code::kInvalidArgument, "workload: rate must be > 0 requests/s");
  std::vector<ServingRequest> out;
  uint64_t s = mix_seed(o.seed, 0x5E2F1ull);
  uint64_t s_len = mix_seed(o.seed, 0x1E27ull);
  uint64_t s_off = mix_seed(o.seed, 0x0FF5ull);
  double t_ns = 0;
  auto next_arrival = [&] {
    const double gap_s = -std::log(1.0 - uniform01(s)) / o.rate_rps;  // exponential gap: Poisson process
    t_ns += gap_s * 1e9;
    return t_ns;
  };
  if (!o.trace_file.empty()) {
    std::ifstream f(o.trace_file);
    if (!f) return Status(Code::kNotFound, "workload: cannot open trace file '" + o.trace_file + "'");
    std::string line;
    int lineno = 0;
    while (std::getline(f, line)) {
      ++lineno;
      if (line.empty() || line[0] == '#') continue;
      std::replace(line.begin(), line.end(), ',', ' ');
      std::istringstream is(line);
      int64_t p = 0, n = 0;
      double arr_s = -1;
      if (!(is >> p >> n) || p < 1 || n < 1)
        return Status(Code::kInvalidArgument, o.trace_file + ":" + std::to_string(lineno) +
                                                  ": expected 'prompt_tokens,output_tokens[,arrival_s]' with both >= 1");
      ServingRequest r;
      r.id = static_cast<int64_t>(out.size());
      r.prompt_tokens = p;
      r.output_tokens = n;
      r.arrival_ns = (is >> arr_s) ? arr_s * 1e9 : next_arrival();
      out.push_back(r);
    }
    if (out.empty()) return Status(Code::kInvalidArgument, "workload: trace file '" + o.trace_file + "' has no requests");
    std::stable_sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.arrival_ns < b.arrival_ns; });
    for (size_t i = 0; i < out.size(); ++i) out[i].id = static_cast<int64_t>(i);
  } else {
    if (o.n_requests < 1) return Status(Code::kInvalidArgument, "workload: at least one request");
    for (int i = 0; i < o.n_requests; ++i) {
      ServingRequest r;
      r.id = i;
      r.arrival_ns = next_arrival();
      r.prompt_tokens = draw_length(o.prompt, s_len);
      r.output_tokens = draw_length(o.output, s_len);
      out.push_back(r);
    }
  }
  for (auto& r : out)
    r.text_offset = text_tokens > 0 ? static_cast<int64_t>(splitmix64(s_off) % static_cast<uint64_t>(text_tokens)) : 0;
  return out;
}

// ---- schedule -------------------------------------------------------------------------------------------

int64_t ScheduledStep::tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.tokens;
  return n;
}

nlohmann::json ServingSchedule::to_json() const {
  nlohmann::json req = nlohmann::json::array(), st = nlohmann::json::array();
  for (const auto& r : requests)
    req.push_back({r.id, r.arrival_ns, r.prompt_tokens, r.output_tokens, r.text_offset});
  for (const auto& s : steps) {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& x : s.chunks) c.push_back({x.request, x.pos, x.tokens, x.prefill ? 1 : 0});
    st.push_back(c);
  }
  return {{"format", "engram-serving-schedule/1"},
          {"requests_fields", {"id", "arrival_ns", "prompt_tokens", "output_tokens", "text_offset"}},
          {"chunk_fields", {"request", "pos", "tokens", "prefill"}},
          {"requests", req},
          {"rejected", rejected},
          {"steps", st}};
}

Result<ServingSchedule> ServingSchedule::from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("format", "") != "engram-serving-schedule/1")
    return Status(Code::kInvalidArgument, "schedule: not an engram-serving-schedule/1 file (written by engram replay --record)");
  ServingSchedule s;
  try {
    for (const auto& r : j.at("requests"))
      s.requests.push_back({r.at(0).get<int64_t>(), r.at(1).get<double>(), r.at(2).get<int64_t>(), r.at(3).get<int64_t>(),
                            r.at(4).get<int64_t>()});
    s.rejected = j.at("rejected").get<std::vector<int64_t>>();
    for (const auto& st : j.at("steps")) {
      ScheduledStep step;
      for (const auto& c : st)
        step.chunks.push_back({c.at(0).get<int64_t>(), c.at(1).get<int64_t>(), c.at(2).get<int64_t>(), c.at(3).get<int>() != 0});
      s.steps.push_back(std::move(step));
    }
  } catch (const std::exception& e) {
    return Status(Code::kInvalidArgument, std::string("schedule: malformed: ") + e.what());
  }
  for (size_t i = 0; i < s.requests.size(); ++i)
    if (s.requests[i].id != static_cast<int64_t>(i)) return Status(Code::kInvalidArgument, "schedule: request ids must be 0..n-1 in order");
  for (const auto& st : s.steps)
    for (const auto& c : st.chunks)
      if (c.request < 0 || c.request >= static_cast<int64_t>(s.requests.size()) || c.tokens < 1 || c.pos < 0)
        return Status(Code::kInvalidArgument, "schedule: a chunk names a request or range that does not exist");
  return s;
}

Status ServingSchedule::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return Status(Code::kIo, "cannot write schedule '" + path + "'");
  f << to_json().dump() << "\n";
  return f ? Status::ok() : Status(Code::kIo, "writing schedule '" + path + "' failed");
}

Result<ServingSchedule> ServingSchedule::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status(Code::kNotFound, "cannot open schedule '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) return Status(Code::kInvalidArgument, "schedule '" + path + "' is not JSON");
  auto s = from_json(j);
  if (!s.is_ok()) return s.status().with_context(path);
  return s;
}

// ---- model shape ----------------------------------------------------------------------------------------

Result<ModelShape> ModelShape::preset(const std::string& name) {
  ModelShape m;
  m.name = name;
  if (name == "v41-flash") {
    m.layers = 43;
    m.hidden = 4096;
    m.active_params_per_layer = 0.3e9;
    m.note = "assumed V4.1-Flash-class MoE shape (43 layers, hidden 4096, ~0.3 G active params per layer, bf16): "
             "not a published specification";
  } else if (name == "tiny") {
    m.layers = 4;
    m.hidden = 256;
    m.active_params_per_layer = 12.0 * 256 * 256;
    m.note = "tiny test shape (4 layers, hidden 256, 12*hidden^2 params per layer)";
  } else {
    return Status(Code::kInvalidArgument, "model '" + name + "': expected one of v41-flash, tiny");
  }
  return m;
}

std::vector<std::string> ModelShape::preset_names() { return {"v41-flash", "tiny"}; }

double model_layer_ns(const ModelShape& m, const ComputeRates& r, int64_t tokens) {
  const double floor_ns = m.active_params_per_layer * m.weight_bytes_per_param / (r.weight_gbps * 1e9) * 1e9;
  const double flops_ns = 2.0 * static_cast<double>(tokens) * m.active_params_per_layer / (r.tflops * 1e12) * 1e9;
  return std::max(floor_ns, flops_ns);
}

int units_for_layer(const ModelShape& m, const ComputeRates& r, int64_t tokens) {
  return std::max(1, static_cast<int>(std::ceil(model_layer_ns(m, r, tokens) / (r.unit_us * 1e3) - 1e-9)));
}

// ---- ids ------------------------------------------------------------------------------------------------

namespace {

class TextServingIds final : public ServingIdSource {
 public:
  TextServingIds(NgramHasher h, TokenFile t) : hasher_(std::move(h)), tokens_(std::move(t)) {}
  Status append(const ServingRequest& r, int64_t pos, int64_t n, std::vector<std::vector<int64_t>>& out) override {
    const EngramLayout& L = hasher_.layout();
    auto it = states_.find(r.id);
    if (it == states_.end()) it = states_.emplace(r.id, hasher_.begin_sequence()).first;
    if (it->second.position() != pos)
      return Status(Code::kInvalidArgument, "serving ids: request " + std::to_string(r.id) + " chunk at position " +
                                                std::to_string(pos) + " but its sequence is at " +
                                                std::to_string(it->second.position()) + " (chunks out of order)");
    const auto N = static_cast<int64_t>(tokens_.ids.size());
    tok_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tok_[static_cast<size_t>(i)] = tokens_.ids[static_cast<size_t>((r.text_offset + pos + i) % N)];
    const size_t heads = static_cast<size_t>(L.heads());
    buf_.resize(static_cast<size_t>(L.n_layers()) * static_cast<size_t>(n) * heads);
    ENGRAM_RETURN_IF_ERROR(hasher_.hash_chunk(it->second, tok_, buf_));
    out.resize(static_cast<size_t>(L.n_layers()));
    const size_t per_layer = static_cast<size_t>(n) * heads;
    for (size_t li = 0; li < out.size(); ++li)
      out[li].insert(out[li].end(), buf_.begin() + static_cast<std::ptrdiff_t>(li * per_layer),
                     buf_.begin() + static_cast<std::ptrdiff_t>((li + 1) * per_layer));
    return Status::ok();
  }
  void reset() override { states_.clear(); }
  int64_t text_tokens() const override { return static_cast<int64_t>(tokens_.ids.size()); }
  std::string describe() const override {
    return "text(" + tokens_.path + ": " + std::to_string(tokens_.ids.size()) + " tokens, " + tokens_.tokenizer +
           ", V'=" + std::to_string(hasher_.compressed_vocab()) + ")";
  }

 private:
  NgramHasher hasher_;
  TokenFile tokens_;
  std::unordered_map<int64_t, SequenceState> states_;
  std::vector<int64_t> tok_, buf_;
};

class ZipfServingIds final : public ServingIdSource {
 public:
  ZipfServingIds(const EngramLayout& L, double alpha, uint64_t seed) : layout_(L), alpha_(alpha), seed_(seed) {
    for (int li = 0; li < L.n_layers(); ++li)
      for (int h = 0; h < L.heads(); ++h) samplers_.emplace_back(L.head_rows[li][h], alpha);
  }
  Status append(const ServingRequest& r, int64_t pos, int64_t n, std::vector<std::vector<int64_t>>& out) override {
    const int heads = layout_.heads();
    out.resize(static_cast<size_t>(layout_.n_layers()));
    for (int li = 0; li < layout_.n_layers(); ++li)
      for (int64_t i = 0; i < n; ++i)
        for (int h = 0; h < heads; ++h) {
          uint64_t s = mix_seed(seed_, static_cast<uint64_t>(r.id) << 24 ^ static_cast<uint64_t>(pos + i),
                                static_cast<uint64_t>(li) * static_cast<uint64_t>(heads) + static_cast<uint64_t>(h));
          const int64_t p = layout_.head_rows[li][h];
          const int64_t rank = samplers_[static_cast<size_t>(li) * static_cast<size_t>(heads) + static_cast<size_t>(h)].sample(s);
          out[static_cast<size_t>(li)].push_back(layout_.head_offsets[li][h] + zipf_rank_row(rank, p));
        }
    return Status::ok();
  }
  void reset() override {}
  std::string describe() const override {
    char b[96];
    std::snprintf(b, sizeof b, "zipf(alpha=%.2f, seed=%llu)", alpha_, static_cast<unsigned long long>(seed_));
    return b;
  }

 private:
  EngramLayout layout_;
  double alpha_;
  uint64_t seed_;
  std::vector<ZipfSampler> samplers_;
};

}  // namespace

Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(NgramHasher hasher, TokenFile tokens) {
  if (tokens.ids.empty()) return Status(Code::kInvalidArgument, "serving ids: token file '" + tokens.path + "' is empty");
  if (tokens.vocab_size != hasher.vocab_size())
    return Status(Code::kInvalidArgument, "serving ids: token file vocabulary " + std::to_string(tokens.vocab_size) +
                                              " != hasher vocabulary " + std::to_string(hasher.vocab_size()));
  return std::unique_ptr<ServingIdSource>(new TextServingIds(std::move(hasher), std::move(tokens)));
}

Result<std::unique_ptr<ServingIdSource>> make_text_serving_ids(const EngramLayout& layout, const std::string& token_file) {
  const std::string path = token_file.empty() ? default_token_file_path() : token_file;
  auto tokens = read_token_file(path);
  if (!tokens.is_ok()) {
    if (tokens.status().code() == Code::kNotFound)
      return Status(Code::kNotFound, tokens.status().message() + " (make it with scripts/tokenize-setup DIR and set ENGRAM_DATA_DIR=DIR)");
    return tokens.status();
  }
  const std::string table_path = default_compression_table_path();
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(table_path));
  ENGRAM_RETURN_IF_ERROR(check_token_file_matches_table(*tokens, table, table_path));
  ENGRAM_ASSIGN_OR_RETURN(NgramHasher hasher, NgramHasher::create(layout, std::move(table), NgramHashOptions{}));
  return make_text_serving_ids(std::move(hasher), std::move(*tokens));
}

Result<std::unique_ptr<ServingIdSource>> make_zipf_serving_ids(const EngramLayout& layout, double alpha, uint64_t seed) {
  if (!(alpha > 0)) return Status(Code::kInvalidArgument, "serving ids: zipf alpha must be > 0");
  return std::unique_ptr<ServingIdSource>(new ZipfServingIds(layout, alpha, seed));
}

// ---- executor -------------------------------------------------------------------------------------------

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
    model_layers_ = std::max(opt.model.layers, max_id + 1);
    engram_index_.assign(static_cast<size_t>(model_layers_), -1);
    for (int li = 0; li < layout.n_layers(); ++li) engram_index_[static_cast<size_t>(layout.layer_ids[li])] = li;
    start_clock();  // warm-up needs a clock too; the replay restarts it at its origin
  }

  Status validate() const {
    if (opt_.model.layers < 1) return Status(Code::kInvalidArgument, "serving: model shape has no layers");
    if (!(opt_.rates.unit_us > 0) || !(opt_.rates.tflops > 0) || !(opt_.rates.weight_gbps > 0))
      return Status(Code::kInvalidArgument, "serving: compute rates and unit must be > 0");
    return Status::ok();
  }

  void start_clock() {
    if (opt_.clock_ns) {
      clock_ = opt_.clock_ns;
    } else {
      const auto origin = std::chrono::steady_clock::now();
      clock_ = [origin] { return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - origin).count(); };
    }
  }
  double now() const { return clock_(); }

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
    for (const auto& c : st.chunks) ENGRAM_RETURN_IF_ERROR(ids_.append(reqs_[static_cast<size_t>(c.request)], c.pos, c.tokens, ids_buf_));
    const int64_t T = st.tokens();
    const int units = units_for_layer(opt_.model, opt_.rates, T);
    const size_t mark = queue_.timeline().rows().size();
    const double t0 = now();
    queue_.begin_step(step);
    if (opt_.mode == PrefetchMode::kEarly)
      for (int li = 0; li < layout_.n_layers(); ++li) ENGRAM_RETURN_IF_ERROR(queue_.prepare(li, ids_buf_[static_cast<size_t>(li)].data(), T));
    for (int layer = 0; layer < model_layers_; ++layer) {
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
  int model_layers_ = 0;
  std::vector<int> engram_index_;
  std::vector<std::vector<int64_t>> ids_buf_;
  std::vector<ReqState> state_;
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

nlohmann::json ServingReport::to_json() const {
  // The client block uses the flat names of vLLM's benchmark_serving (mean_/median_/std_/p95_/p99_ + metric + _ms,
  // request_throughput, output_throughput, request_goodput), so serving dashboards read it as they read vLLM's.
  nlohmann::json client = {{"requests", requests},
                           {"completed", completed},
                           {"rejected", rejected},
                           {"rejection_rate", json_num(rejection_rate)},
                           {"good", good},
                           {"duration_s", json_num(duration_s)},
                           {"total_output_tokens", output_tokens},
                           {"request_throughput", json_num(request_throughput_rps)},
                           {"output_throughput", json_num(throughput_tokens_per_s)},
                           {"request_goodput", json_num(goodput_rps)}};
  auto add = [&client](const std::string& metric, const Distribution& d, const std::vector<double>& samples) {
    const auto [mean, sd] = mean_std(samples);
    client["mean_" + metric + "_ms"] = json_num(mean / 1e6);
    client["median_" + metric + "_ms"] = json_num(d.median / 1e6);
    client["std_" + metric + "_ms"] = json_num(sd / 1e6);
    client["p95_" + metric + "_ms"] = json_num(d.p95 / 1e6);
    client["p99_" + metric + "_ms"] = json_num(d.p99 / 1e6);
  };
  add("ttft", ttft_ns, ttft_samples_ns);
  add("tpot", tpot_ns, tpot_samples_ns);
  add("itl", itl_ns, itl_samples_ns);
  add("e2el", e2e_ns, e2e_samples_ns);
  return {{"client", client},
          {"engine",
           {{"steps", steps},
            {"scheduled_tokens", scheduled_tokens},
            {"prefill_tokens", prefill_tokens},
            {"decode_tokens", decode_tokens},
            {"step_ns", dist_json(step_ns)},
            {"decode_only_step_ns", dist_json(decode_step_ns)},
            {"step_with_prefill_ns", dist_json(mixed_step_ns)},
            {"main_compute_ns", dist_json(main_compute_ns)},
            {"idle_wait_s", idle_wait_s}}},
          {"lookup",
           {{"rows", rows_looked_up},
            {"rows_per_s", json_num(rows_per_s)},
            {"lookup_ns", dist_json(lookup_ns)},
            {"queue_ns", dist_json(queue_ns)},
            {"exposed_wait_ns", dist_json(exposed_wait_ns)},
            {"measured_wait_ns", dist_json(measured_wait_ns)}}}};
}

}  // namespace engram
