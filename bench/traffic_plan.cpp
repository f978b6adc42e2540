// See traffic_plan.hpp. Pure host code: it runs (and is tested) on machines without a GPU.
#include "bench/traffic_plan.hpp"

#include <algorithm>
#include <thread>

#include "engram/options.hpp"

namespace engram::bench {
namespace {

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, "bench traffic: " + m); }

template <typename T>
bool has_repeat(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) != v.end();
}

}  // namespace

Status check_traffic_options(const TrafficOptions& o) {
  if (o.arms.empty()) return bad("--arms: no arm");
  for (const auto& a : o.arms)
    if (std::find(traffic_arm_names().begin(), traffic_arm_names().end(), a) == traffic_arm_names().end())
      return bad("--arms '" + a + "': expected engine, plain, reference or plain-split");
  if (has_repeat(o.arms)) return bad("--arms: an arm is named twice");
  if (o.domains.empty()) return bad("--domains: no domain");
  for (const auto& d : o.domains)
    if (d != "same" && d != "other") return bad("--domains '" + d + "': expected same or other");
  if (has_repeat(o.domains)) return bad("--domains: a domain is named twice");
  if (o.prefill_tokens < 0) return bad("--prefill-tokens " + std::to_string(o.prefill_tokens) + " must be >= 0 (0 = no prefill)");
  for (int64_t b : o.decode)
    if (b < 1) return bad("--decode " + std::to_string(b) + ": a decode batch must be >= 1 sequence");
  if (has_repeat(o.decode)) return bad("--decode: a batch is named twice");
  if (o.prefill_tokens == 0 && o.decode.empty()) return bad("no workload: --prefill-tokens 0 and no --decode batch");
  auto cs = parse_cache_size(o.cache_size);
  if (!cs.is_ok()) return bad("--cache-size: " + cs.status().message());
  if (!o.cache_profile.empty() && !o.train_tokens.empty())
    return bad("--cache-profile and --train-tokens: give one (a profile, or the training split to count here)");
  if (auto g = GridCap::of_fraction(o.engine_grid_fraction); !g.is_ok())
    return bad("--engine-grid-fraction: " + g.status().message());
  if (o.check_rows < 0) return bad("--check-rows must be >= 0");
  if (o.seq_len < 1) return bad("--seq-len must be >= 1");
  return Status::ok();
}

std::vector<TrafficWorkload> traffic_workloads(const TrafficOptions& o) {
  std::vector<TrafficWorkload> w;
  if (o.prefill_tokens > 0) w.push_back({true, o.prefill_tokens});
  for (int64_t b : o.decode) w.push_back({false, b});
  return w;
}

int64_t TrafficPlan::tokens_needed(const std::vector<TrafficWorkload>& workloads, int calls) {
  int64_t n = 0;
  for (const auto& w : workloads) n += w.tokens * calls;
  return n;
}

Result<TrafficPlan> TrafficPlan::make(int64_t stream_tokens, const std::vector<TrafficWorkload>& workloads, int calls,
                                      const std::string& what) {
  if (calls < 1) return bad("a plan needs at least one call per workload");
  const int64_t need = tokens_needed(workloads, calls);
  if (stream_tokens < need)
    return bad(what + " holds " + std::to_string(stream_tokens) + " tokens; " + std::to_string(calls) +
               " calls of each workload read " + std::to_string(need) +
               " distinct token positions (give a larger held-out text, or fewer --reps or arms)");
  TrafficPlan p;
  p.calls_ = calls;
  int64_t at = 0, decode_need = 0;
  for (const auto& w : workloads) {
    if (w.prefill) {
      p.work_.push_back({w, at, 0});
      at += w.tokens * calls;
    } else {
      decode_need += w.tokens * calls;
    }
  }
  // The rest of the stream is shared by the decode workloads in proportion to what each needs, so every sequence's
  // slot (stride tokens) holds at least `calls` tokens.
  const int64_t rest = stream_tokens - at;
  for (const auto& w : workloads) {
    if (w.prefill) continue;
    const int64_t share = decode_need > 0 ? static_cast<int64_t>(static_cast<double>(rest) * static_cast<double>(w.tokens * calls) /
                                                                 static_cast<double>(decode_need))
                                          : 0;
    const int64_t stride = std::max<int64_t>(calls, share / w.tokens);
    p.work_.push_back({w, at, stride});
    at += stride * w.tokens;
  }
  if (at > stream_tokens) return Status(Code::kInternal, "bench traffic: plan overruns the stream");
  // Keep the caller's workload order.
  std::vector<Part> ordered;
  for (const auto& w : workloads)
    for (const auto& part : p.work_)
      if (part.w.prefill == w.prefill && part.w.tokens == w.tokens) ordered.push_back(part);
  p.work_ = std::move(ordered);
  return p;
}

std::vector<int64_t> TrafficPlan::positions(size_t w, int call) const {
  const Part& p = work_.at(w);
  std::vector<int64_t> out(static_cast<size_t>(p.w.tokens));
  for (int64_t i = 0; i < p.w.tokens; ++i)
    out[static_cast<size_t>(i)] = p.w.prefill ? p.begin + call * p.w.tokens + i : p.begin + i * p.stride + call;
  return out;
}

Result<std::vector<int64_t>> hash_token_stream(const NgramHasher& hasher, const TokenFile& tokens, int64_t seq_len,
                                               int threads) {
  if (seq_len < 1) return bad("seq_len must be >= 1");
  const size_t heads = static_cast<size_t>(hasher.layout().heads());
  std::vector<std::pair<int64_t, int64_t>> seqs;  // [begin, end) token ranges
  for (const auto& doc : tokens.documents)
    for (int64_t s = doc.first_token; s < doc.first_token + doc.token_count; s += seq_len)
      seqs.push_back({s, std::min(s + seq_len, doc.first_token + doc.token_count)});
  std::vector<int64_t> out(tokens.ids.size() * heads, -1);
  threads = std::max(1, std::min<int>(threads, static_cast<int>(seqs.size())));
  std::vector<Status> st(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<int64_t> raw;
      for (size_t i = static_cast<size_t>(t); i < seqs.size(); i += static_cast<size_t>(threads)) {
        const auto [b, e] = seqs[i];
        raw.assign(tokens.ids.begin() + b, tokens.ids.begin() + e);
        std::span<int64_t> dst(out.data() + static_cast<size_t>(b) * heads, static_cast<size_t>(e - b) * heads);
        Status s = hasher.hash(raw, 0, dst);
        if (!s.is_ok()) {
          st[static_cast<size_t>(t)] = s.with_context(tokens.path);
          return;
        }
      }
    });
  for (auto& th : pool) th.join();
  for (auto& s : st) ENGRAM_RETURN_IF_ERROR(s);
  return out;
}

std::vector<int64_t> gather_stream_ids(const std::vector<int64_t>& stream, int heads, const std::vector<int64_t>& positions) {
  const size_t h = static_cast<size_t>(heads);
  std::vector<int64_t> ids(positions.size() * h);
  for (size_t i = 0; i < positions.size(); ++i)
    std::copy_n(stream.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(positions[i]) * h), h,
                ids.begin() + static_cast<std::ptrdiff_t>(i * h));
  return ids;
}

}  // namespace engram::bench
