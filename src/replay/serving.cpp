// Serving replay: the workload, the schedule record, the model shape's compute sizing and the report's JSON
// (serving.hpp). The id sources are in serving_ids.cpp, the executor in serving_run.cpp.
#include "replay/serving.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_num.hpp"
#include "core/stats.hpp"
#include "core/splitmix.hpp"
#include "replay/id_source.hpp"
#include "sys/file.hpp"

namespace engram {

namespace {

// The bounds of a --trace-file line: a request's lengths (the serving setup refuses more than 16 M tokens in all)
// and its arrival time in seconds from the replay's start (115 days).
constexpr int64_t kMaxTraceTokens = int64_t{1} << 24;
constexpr double kMaxTraceArrivalS = 1e7;

double uniform01(uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; }

nlohmann::json dist_json(const Distribution& d) { return d.to_json(); }


}  // namespace

// ---- workload -------------------------------------------------------------------------------------------

Result<LengthDist> LengthDist::parse(const std::string& text) {
  LengthDist d;
  auto bad = [&] {
    return Status(Code::kInvalidArgument, "length distribution '" + text +
                                              "': expected N, fixed:N, uniform:MIN-MAX or lognormal:MEDIAN,SIGMA");
  };
  // A whole finite number (std::stod alone would take "12abc" as 12, and "nan" or "inf" as such).
  auto number = [](const std::string& t, double* v) {
    if (t.empty() || t.size() > 64) return false;
    char* end = nullptr;
    *v = std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() && std::isfinite(*v) && !std::isspace(static_cast<unsigned char>(t[0]));
  };
  auto whole = [](double v) { return v == std::floor(v); };
  const auto colon = text.find(':');
  const std::string kind = colon == std::string::npos ? "fixed" : text.substr(0, colon);
  const std::string arg = colon == std::string::npos ? text : text.substr(colon + 1);
  if (kind == "fixed") {
    d.kind = Kind::kFixed;
    if (!number(arg, &d.a) || !whole(d.a)) return bad();
  } else if (kind == "uniform") {
    const auto dash = arg.find('-');
    if (dash == std::string::npos) return bad();
    d.kind = Kind::kUniform;
    if (!number(arg.substr(0, dash), &d.a) || !number(arg.substr(dash + 1), &d.b) || !whole(d.a) || !whole(d.b))
      return bad();
    if (d.b < d.a) return bad();
  } else if (kind == "lognormal") {
    const auto comma = arg.find(',');
    if (comma == std::string::npos) return bad();
    d.kind = Kind::kLognormal;
    if (!number(arg.substr(0, comma), &d.a) || !number(arg.substr(comma + 1), &d.b)) return bad();
    if (d.b < 0) return bad();
  } else {
    return bad();
  }
  if (!(d.a >= 1)) return bad();
  // Lengths are drawn inside [1, max_tokens]: a fixed length, a range end or a median beyond it is refused, not
  // clipped.
  const double top = d.kind == Kind::kUniform ? d.b : d.a;
  if (top > static_cast<double>(d.max_tokens))
    return Status(Code::kInvalidArgument, "length distribution '" + text + "': more tokens than the most a request may have (" +
                                              std::to_string(d.max_tokens) + ")");
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
  // Clipped as a double first: a lognormal tail can exceed what an int64_t holds (the cast would be undefined).
  const double top = static_cast<double>(std::max<int64_t>(1, d.max_tokens));
  return static_cast<int64_t>(std::clamp(v, 1.0, top));
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
    auto text = sys::read_small_file(o.trace_file, int64_t{1} << 30);
    if (!text.is_ok()) return text.status().with_context("workload: trace file");
    std::istringstream f(*text);
    std::string line;
    int lineno = 0;
    while (std::getline(f, line)) {
      ++lineno;
      if (line.empty() || line[0] == '#') continue;
      // Fields read whole (std::from_chars): "10.5" is no token count, "abc" no arrival time.
      std::vector<std::string> fields;
      for (size_t b = 0;;) {
        const size_t e = line.find(',', b);
        std::string field = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
        field.erase(0, field.find_first_not_of(" \t\r"));
        field.erase(field.find_last_not_of(" \t\r") + 1);
        fields.push_back(field);
        if (e == std::string::npos) break;
        b = e + 1;
      }
      const std::string where = o.trace_file + ":" + std::to_string(lineno);
      if (fields.size() < 2 || fields.size() > 3)
        return Status(Code::kInvalidArgument, where + ": expected 'prompt_tokens,output_tokens[,arrival_s]', got '" + line + "'");
      int64_t len[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const std::string& field = fields[static_cast<size_t>(k)];
        const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), len[k]);
        if (ec != std::errc() || end != field.data() + field.size() || len[k] < 1 || len[k] > kMaxTraceTokens)
          return Status(Code::kInvalidArgument, where + ": " + (k == 0 ? "prompt_tokens" : "output_tokens") +
                                                    ": expected an integer in [1, " + std::to_string(kMaxTraceTokens) +
                                                    "], got '" + field + "'");
      }
      const int64_t p = len[0], n = len[1];
      double arr_s = -1;
      if (fields.size() == 3) {
        const std::string& field = fields[2];
        const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), arr_s);
        if (ec != std::errc() || end != field.data() + field.size() || !std::isfinite(arr_s) || arr_s < 0 ||
            arr_s > kMaxTraceArrivalS)
          return Status(Code::kInvalidArgument, where + ": arrival_s: expected seconds in [0, " +
                                                    std::to_string(static_cast<int64_t>(kMaxTraceArrivalS)) + "], got '" + field + "'");
      }
      ServingRequest r;
      r.id = static_cast<int64_t>(out.size());
      r.prompt_tokens = p;
      r.output_tokens = n;
      r.arrival_ns = fields.size() == 3 ? arr_s * 1e9 : next_arrival();
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
  // The bounds of a --trace-file line hold for a recorded request too (lengths, arrival), and a chunk is at most a
  // whole request: a file that asks more would run for hours or days before anything failed.
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  constexpr double kMaxArrivalNs = 1e16;  // 115 days
  auto out_of = [](const std::string& where, const std::string& field, const std::string& range, const std::string& got) {
    return Status(Code::kInvalidArgument, "schedule: " + where + ": " + field + ": expected " + range + ", got " + got);
  };
  const std::string tokens_range = "an integer in [1, " + std::to_string(kMaxTokens) + "]";
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const ServingRequest& r = s.requests[i];
    const std::string where = "request " + std::to_string(i);
    if (r.id != static_cast<int64_t>(i)) return Status(Code::kInvalidArgument, "schedule: request ids must be 0..n-1 in order");
    if (!std::isfinite(r.arrival_ns) || r.arrival_ns < 0 || r.arrival_ns > kMaxArrivalNs)
      return out_of(where, "arrival_ns", "nanoseconds in [0, 1e16]", std::to_string(r.arrival_ns));
    if (r.prompt_tokens < 1 || r.prompt_tokens > kMaxTokens)
      return out_of(where, "prompt_tokens", tokens_range, std::to_string(r.prompt_tokens));
    if (r.output_tokens < 1 || r.output_tokens > kMaxTokens)
      return out_of(where, "output_tokens", tokens_range, std::to_string(r.output_tokens));
    if (r.text_offset < 0) return out_of(where, "text_offset", "an integer >= 0", std::to_string(r.text_offset));
  }
  for (size_t k = 0; k < s.steps.size(); ++k)
    for (const auto& c : s.steps[k].chunks) {
      if (c.request < 0 || c.request >= static_cast<int64_t>(s.requests.size()) || c.tokens < 1 || c.pos < 0)
        return Status(Code::kInvalidArgument, "schedule: a chunk names a request or range that does not exist");
      const std::string where = "step " + std::to_string(k) + ", chunk of request " + std::to_string(c.request);
      if (c.tokens > kMaxTokens) return out_of(where, "tokens", tokens_range, std::to_string(c.tokens));
      if (c.pos > 2 * kMaxTokens)
        return out_of(where, "pos", "an integer in [0, " + std::to_string(2 * kMaxTokens) + "]", std::to_string(c.pos));
    }
  return s;
}

Status ServingSchedule::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return Status(Code::kIo, "cannot write schedule '" + path + "'");
  f << to_json().dump() << "\n";
  return f ? Status::ok() : Status(Code::kIo, "writing schedule '" + path + "' failed");
}

Result<ServingSchedule> ServingSchedule::load(const std::string& path) {
  auto text = sys::read_small_file(path, int64_t{4} << 30);
  if (!text.is_ok()) return text.status().with_context("schedule");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status(Code::kInvalidArgument, "schedule '" + path + "' is not JSON");
  auto s = from_json(j);
  if (!s.is_ok()) return s.status().with_context(path);
  if (s->steps.empty())
    return Status(Code::kInvalidArgument, "schedule '" + path + "' has no steps (engram replay --record writes them)");
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
    // Mean and sample standard deviation of the finite values: NaN when there are none, std 0 for one value.
    const double mean = stats::mean(samples), stdev = stats::stdev(samples);
    const double sd = std::isfinite(mean) && !std::isfinite(stdev) ? 0.0 : stdev;
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
            {"host_ids_ns", dist_json(host_ids_ns)},
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