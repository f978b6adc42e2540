// Multi-rank decode replay (see multi_rank.hpp).
//
// Ownership and order matter more than anything else here. The parent starts the file guardian before
// the socket and the table exist (it is forked, so it must come before threads and mappings), listens,
// creates and places the table, and only then spawns ranks: a rank is a fresh exec, so it inherits
// nothing but stdio. After every rank has joined, the socket path is removed (nobody else needs to
// find the group). The rank processes are owned by a RankSet declared before the channel: on any
// return the channel closes first (every rank sees EOF and exits with the group's error), then the
// RankSet waits briefly and kills whatever is left, so no rank outlives the parent's call. A parent that
// dies without returning (a signal's default action, a crash) runs none of that: each rank is started
// with --leader-pid and asks the kernel to kill it when the parent ends (sys::end_with_parent), so it
// neither waits out its join timeout nor keeps the parent's stdout and stderr open. The parent must
// therefore spawn the ranks from a thread that lives as long as the call (the calling thread does).
//
// Ranks differ only in their ids: zipf / uniform ids are seeded with (seed, rank); real text is the same
// stream advanced by (rank - 1) x (warm-up + steps) steps, so the ranks serve different text at once.
#include "replay/multi_rank.hpp"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/splitmix.hpp"
#include "core/units.hpp"
#include "engine/harness.hpp"
#include "host/census.hpp"
#include "host/checkpoint.hpp"
#include "host/conditions.hpp"
#include "host/token_io.hpp"
#include "engine/rank_group_leader.hpp"
#include "replay/decode_run.hpp"
#include "replay/text_id_source.hpp"
#include "report/numbers.hpp"
#include "sys/affinity.hpp"
#include "sys/process.hpp"

namespace engram {
namespace {

using nlohmann::json;
using host::Millis;

constexpr const char* kStepReplayed = "replayed";
constexpr const char* kStepReport = "report";

// Row r of layer index li as bytes (payload then scales), for comparison across processes.
void row_bytes(const TableSpan& s, int64_t r, std::string* out) {
  out->assign(reinterpret_cast<const char*>(s.payload_of(r)), static_cast<size_t>(s.d));
  out->append(reinterpret_cast<const char*>(s.scales_of(r)), static_cast<size_t>(s.d / 32));
}

// Checks `verify_rows` rows per layer (the same rows on every rank: chosen by the job's seed): against
// synth_row for synthetic content; always folds them into one FNV-1a digest that the parent compares
// across processes.
json verify_rows(const RankJob& job, const EngramLayout& layout, const std::vector<TableSpan>& spans) {
  uint64_t fnv = 1469598103934665603ull;
  int64_t checked = 0, mismatches = 0;
  std::string got, want;
  std::vector<uint8_t> payload(static_cast<size_t>(layout.d)), scales(static_cast<size_t>(layout.d / 32));
  for (int li = 0; li < layout.n_layers(); ++li) {
    for (int k = 0; k < job.verify_rows; ++k) {
      const int64_t r = static_cast<int64_t>(mix_seed(job.seed, static_cast<uint64_t>(li), static_cast<uint64_t>(k)) %
                                             static_cast<uint64_t>(spans[static_cast<size_t>(li)].rows));
      row_bytes(spans[static_cast<size_t>(li)], r, &got);
      for (char c : got) {
        fnv ^= static_cast<uint8_t>(c);
        fnv *= 1099511628211ull;
      }
      ++checked;
      if (job.content().kind == TableContent::Kind::kSynthetic) {
        synth_row(job.seed, li, r, layout.d, payload.data(), scales.data());
        want.assign(reinterpret_cast<const char*>(payload.data()), payload.size());
        want.append(reinterpret_cast<const char*>(scales.data()), scales.size());
        if (want != got) ++mismatches;
      }
    }
  }
  return {{"rows_checked", checked},
          {"mismatches", job.content().kind == TableContent::Kind::kSynthetic ? json(mismatches) : json(nullptr)},
          {"sample_fnv", fnv}};
}

// Rss / Pss of this process's table mappings (smaps via the census module).
json table_memory(int pid) {
  auto pc = host::process_census(pid, "engram:");
  if (!pc.is_ok()) return {{"error", pc.status().to_string()}};
  int64_t rss = 0, pss = 0;
  int n = 0;
  for (const auto& t : pc->tables) {
    if (t.rss_bytes >= 0) rss += t.rss_bytes;
    if (t.pss_bytes >= 0) pss += t.pss_bytes;
    ++n;
  }
  return {{"pid", pid}, {"mappings", n}, {"rss_bytes", rss}, {"pss_bytes", pss}};
}

json census_json(const std::vector<host::PageCensus>& censuses) {
  json out = json::array();
  for (const auto& c : censuses) out.push_back(c.to_json());
  return out;
}

// Real text for rank r starts (r - 1) x (warm-up + steps) decode steps into the stream.
class StepOffsetIdSource final : public IdSource {
 public:
  StepOffsetIdSource(std::unique_ptr<IdSource> inner, int64_t offset) : inner_(std::move(inner)), offset_(offset) {}
  Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) override {
    if (!primed_) {
      for (int64_t s = 0; s < offset_; ++s) ENGRAM_RETURN_IF_ERROR(inner_->next_step(s, batch, ids));
      primed_ = true;
    }
    return inner_->next_step(step + offset_, batch, ids);
  }
  std::string describe() const override {
    return inner_->describe() + (offset_ > 0 ? ", from step " + std::to_string(offset_) : "");
  }

 private:
  std::unique_ptr<IdSource> inner_;
  int64_t offset_;
  bool primed_ = false;
};

// This rank's ids: the job's, with what makes them its own (`stream`): zipf / uniform ids seeded with (seed, rank),
// real text started (rank - 1) x (warm-up + steps) steps into the stream.
Result<std::unique_ptr<IdSource>> rank_ids(const RankJob& job, const EngramLayout& layout, int rank, DecodeIdsSpec spec,
                                           std::string* note, json* stream) {
  spec.seed = mix_seed(job.seed, static_cast<uint64_t>(rank), 0x1d5);
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<IdSource> source, make_decode_id_source(layout, spec, note));
  if (dynamic_cast<TextIdSource*>(source.get()) != nullptr) {
    const int64_t offset = int64_t{rank - 1} * (job.warmup + job.steps);
    *stream = {{"text_from_step", offset}};
    return std::unique_ptr<IdSource>(new StepOffsetIdSource(std::move(source), offset));
  }
  *stream = {{"seed", spec.seed}};
  return source;
}

// The rank processes of one run. See the file comment for why it is declared before the channel.
struct RankSet {
  std::vector<int> pids;
  std::vector<sys::ExitInfo> exits;
  std::vector<bool> reaped;

  void add(int pid) {
    pids.push_back(pid);
    exits.emplace_back();
    reaped.push_back(false);
  }
  // Waits up to `grace` for every rank, then SIGKILLs and reaps the rest.
  void finish(Millis grace) {
    const auto deadline = sys::deadline_after(grace);
    for (size_t i = 0; i < pids.size(); ++i) {
      if (reaped[i]) continue;
      auto e = sys::wait_process(pids[i], deadline);
      if (!e.is_ok()) {
        (void)sys::kill_process(pids[i], SIGKILL);
        e = sys::wait_process(pids[i], sys::deadline_after(std::chrono::seconds(10)));
      }
      if (e.is_ok()) exits[i] = *e;
      reaped[i] = true;
    }
  }
  ~RankSet() { finish(Millis(3000)); }
};

}  // namespace

// ---- parent --------------------------------------------------------------------------------------

Result<json> run_multi_rank(const RankJob& job_in, const MultiRankOptions& o) {
  if (o.ranks < 1 || o.ranks > 1024)
    return Status(Code::kInvalidArgument, "--ranks " + std::to_string(o.ranks) + ": expected 1..1024");
  RankJob job = job_in;
  job.ranks = o.ranks;
  ENGRAM_ASSIGN_OR_RETURN(EngramLayout layout, job_layout(job));
  EngineOptions table_opts;
  ENGRAM_RETURN_IF_ERROR(set_engine_option(table_opts, "--backing", o.backing));
  ENGRAM_RETURN_IF_ERROR(set_engine_option(table_opts, "--placement", o.placement));
  table_opts.table.shm_dir = o.shm_dir;
  table_opts.content = job.content();
  table_opts.content.on_progress = o.on_load_progress;
  table_opts.step_timeout_ms = o.timeouts.step.count();
  table_opts.load_timeout_ms = o.timeouts.load.count();
  if (table_opts.table.backing.kind == BackingKind::kAnonThp)
    return Status(Code::kInvalidArgument,
                  "backing anon-thp is private to one process: ranks cannot share it (use memfd, shm or hugetlb)");
  std::string exe = o.exe;
  if (exe.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(exe, sys::self_exe_path());
  }
  const std::string group_name = "run-" + std::to_string(sys::process_id());
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  const auto t_start = std::chrono::steady_clock::now();

  ENGRAM_ASSIGN_OR_RETURN(RankGroupLeader leader, start_rank_group_leader(group_name, o.shm_dir));
  auto& guardian = leader.guardian;
  auto& listener = leader.listener;
  for (const auto& line : leader.swept.lines(false)) o.notice ? o.notice(line) : say(line);
  say("building " + layout.name + " table (" + format_bytes(layout.total_bytes()) + ", " + o.backing +
      " backing, placement " + o.placement + ") shared by " + std::to_string(o.ranks) + " ranks, " +
      (job.content().kind == TableContent::Kind::kSynthetic
           ? "writing synthetic rows (seed " + std::to_string(job.seed) + ")"
           : "loading " + job.content().to_string()) +
      " ...");
  ENGRAM_ASSIGN_OR_RETURN(auto engine, Engine::serve_group(layout, table_opts, group_name, job.to_json().dump()));
  // The leader's census after placement; the protocol takes the ones after registration and after load.
  json census = json::array();
  for (const auto& c : engine->censuses())
    if (c.point == host::CensusPoint::kAfterPlacement) census.push_back(c.to_json());

  RankSet ranks;  // before the channel: see the file comment
  std::vector<std::string> argv_base{exe,
                                     "rank-worker",
                                     "--socket",
                                     listener->socket_path(),
                                     "--group",
                                     group_name,
                                     "--join-timeout-ms",
                                     std::to_string(o.join_timeout.count()),
                                     "--step-timeout-ms",
                                     std::to_string(o.timeouts.step.count()),
                                     "--load-timeout-ms",
                                     std::to_string(o.timeouts.load.count()),
                                     "--replay-timeout-ms",
                                     std::to_string(o.replay_timeout.count()),
                                     "--leader-pid",
                                     std::to_string(sys::process_id())};
  for (const auto& a : o.extra_rank_args) argv_base.push_back(a);
  for (int r = 0; r < o.ranks; ++r) {
    auto pid = sys::spawn_process(argv_base);
    if (!pid.is_ok()) return pid.status().with_context("starting rank process " + std::to_string(r + 1));
    ranks.add(*pid);
  }
  say("waiting for " + std::to_string(o.ranks) + " ranks at " + listener->socket_path() + " ...");
  auto channel = listener->accept_group(o.ranks, o.join_timeout);
  if (!channel.is_ok()) return channel.status().with_context("engram run --ranks " + std::to_string(o.ranks));
  (void)listener->unlink_socket();  // the group is complete: nobody else needs to find it
  (void)guardian->disarm(listener->socket_path());

  const size_t censuses_before = engine->censuses().size();
  Status admitted = engine->admit(**channel);
  if (!admitted.is_ok()) return admitted.with_context("engram run --ranks " + std::to_string(o.ranks));
  for (size_t k = censuses_before; k < engine->censuses().size(); ++k) census.push_back(engine->censuses()[k].to_json());

  say("ranks replaying " + std::to_string(job.warmup) + "+" + std::to_string(job.steps) + " decode steps ...");
  host::RankEntry mine;
  auto replayed = (*channel)->all_gather(kStepReplayed, mine, o.replay_timeout);
  if (!replayed.is_ok()) return replayed.status().with_context("engram run --ranks, step 'replayed'");
  ENGRAM_RETURN_IF_ERROR(host::first_failure(kStepReplayed, *replayed).with_context("engram run --ranks"));
  mine.message = table_memory(sys::process_id()).dump();
  auto reports = (*channel)->all_gather(kStepReport, mine, o.timeouts.step);
  if (!reports.is_ok()) return reports.status().with_context("engram run --ranks, step 'report'");
  ENGRAM_RETURN_IF_ERROR(host::first_failure(kStepReport, *reports).with_context("engram run --ranks"));
  for (auto& c : census_json(engine->census(host::CensusPoint::kAfterReplay))) census.push_back(c);
  const std::vector<int> pids = (*channel)->pids();
  channel->reset();  // ranks see the group end and exit
  ranks.finish(Millis(30000));

  // ---- the report ----
  json out;
  out["command"] = "run";
  out["mode"] = "multi-rank";
  out["ranks"] = o.ranks;
  out["conditions"] = collect_conditions(o.git_rev);
  json placement = json::array();
  uint64_t all_backings_bytes = 0;
  for (const auto& p : engine->table().parts()) {
    placement.push_back({{"layer_index", p.layer_index}, {"backing", p.backing->backing.identity().to_string()},
                         {"report", p.backing->report.to_json()}});
    all_backings_bytes += p.backing->backing.size_bytes();
  }
  out["table"] = {{"layout", layout.name},
                  {"row_layout", row_format_name(layout.format)},
                  {"d", layout.d},
                  {"engram_layers", layout.layer_ids},
                  {"heads", layout.heads()},
                  {"rows", layout.total_rows()},
                  {"bytes", layout.total_bytes()},
                  {"bytes_all_backings", all_backings_bytes},
                  {"content", job.content().to_string()},
                  {"backing", o.backing},
                  {"placement_requested", o.placement},
                  {"placement", placement},
                  {"read_only_ranks", o.read_only}};
  json steps = json::array();
  for (const auto& s : engine->group_steps()) {
    json e = json::array();
    for (const auto& x : s.entries) e.push_back({{"rank", x.rank}, {"pid", x.pid}, {"ok", x.status.is_ok()}});
    steps.push_back({{"step", s.step}, {"seconds", s.seconds}, {"entries", e}});
  }
  out["group"] = {{"name", group_name}, {"socket", listener->socket_path()}, {"leader_pid", sys::process_id()},
                  {"rank_pids", json(std::vector<int>(pids.begin() + 1, pids.end()))}, {"protocol", steps}};
  out["census"] = census;
  json per_rank = json::array(), rank_census = json::array(), mem_ranks = json::array();
  json leader_mem = json::parse((*reports)[0].message, nullptr, false);
  int64_t pss_sum = leader_mem.is_object() ? leader_mem.value("pss_bytes", int64_t{0}) : 0;
  double rows_per_s_sum = 0, tokens_per_s_sum = 0, step_median_max = kNotRecorded;
  bool same_bytes = true;
  std::vector<double> layer_e_max;
  uint64_t first_fnv = 0;
  for (size_t r = 1; r < reports->size(); ++r) {
    const auto& e = (*reports)[r];
    json rep = json::parse(e.message, nullptr, false);
    if (!rep.is_object()) return Status(Code::kInternal, "rank " + std::to_string(r - 1) + " sent an unreadable report");
    const auto& exit = ranks.exits[r - 1];
    // Replay ranks are numbered 0..N-1; the shared group numbers the same processes 1..N (the leader is 0 there).
    const int replay_rank = static_cast<int>(r) - 1;
    per_rank.push_back({{"rank", replay_rank}, {"group_rank", r}, {"pid", e.pid}, {"exit", exit.to_string()},
                        {"report", rep}});
    if (rep.contains("census"))
      rank_census.push_back({{"rank", replay_rank}, {"group_rank", r}, {"census", rep["census"]}});
    if (rep.contains("memory")) {
      mem_ranks.push_back(rep["memory"]);
      pss_sum += rep["memory"].value("pss_bytes", int64_t{0});
    }
    const auto& lk = rep["lookup"];
    if (lk["rows_per_s"].is_number()) rows_per_s_sum += lk["rows_per_s"].get<double>();
    if (rep["steps"]["tokens_per_s"].is_number()) tokens_per_s_sum += rep["steps"]["tokens_per_s"].get<double>();
    const auto& med = rep["steps"]["step_ns"]["median"];
    if (med.is_number())
      step_median_max = std::isfinite(step_median_max) ? std::max(step_median_max, med.get<double>()) : med.get<double>();
    const auto& layers = rep["layers"];
    layer_e_max.resize(layers.size(), kNotRecorded);
    for (size_t k = 0; k < layers.size(); ++k) {
      const auto& v = layers[k]["exposed_wait_ns"]["median"];
      if (v.is_number())
        layer_e_max[k] = std::isfinite(layer_e_max[k]) ? std::max(layer_e_max[k], v.get<double>()) : v.get<double>();
    }
    const uint64_t fnv = rep["verify"]["sample_fnv"].get<uint64_t>();
    if (r == 1) first_fnv = fnv;
    same_bytes = same_bytes && fnv == first_fnv && !(rep["verify"]["mismatches"].is_number() &&
                                                     rep["verify"]["mismatches"].get<int64_t>() != 0);
  }
  out["per_rank"] = per_rank;
  out["rank_census"] = rank_census;
  json layer_e = json::array();
  for (size_t k = 0; k < layer_e_max.size(); ++k)
    layer_e.push_back({{"layer_id", layout.layer_ids[k]}, {"exposed_wait_ns_median_worst_rank", json_num(layer_e_max[k])}});
  out["aggregate"] = {{"rows_per_s_sum", rows_per_s_sum},
                      {"tokens_per_s_sum", tokens_per_s_sum},
                      {"step_ns_median_worst_rank", json_num(step_median_max)},
                      {"layers", layer_e},
                      {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()}};
  out["memory"] = {{"table_bytes", all_backings_bytes},
                   {"leader", leader_mem},
                   {"ranks", mem_ranks},
                   {"pss_sum_bytes", pss_sum},
                   {"note", "Pss divides each shared page among its mappers: the sum over processes counts the "
                            "table's resident pages once"}};
  out["same_bytes"] = same_bytes;
  return out;
}

// ---- rank ----------------------------------------------------------------------------------------

const std::vector<std::string>& rank_fault_steps() {
  static const std::vector<std::string> steps = [] {
    std::vector<std::string> s = host::protocol_steps();
    s.emplace_back(kStepReplayed);
    s.emplace_back(kStepReport);
    return s;
  }();
  return steps;
}

Status run_rank_worker(const RankWorkerOptions& o) {
  host::UnixGroupOptions gopt;
  gopt.group = o.group;
  ENGRAM_ASSIGN_OR_RETURN(auto channel, host::UnixGroupChannel::connect(o.socket_path, gopt, o.join_timeout));
  const int rank = channel->rank();   // in the shared group: 1..N
  const int replay_rank = rank - 1;   // in reports and file names: 0..N-1
  auto fault = [&](const std::string& step) {
    if (!o.fault_at.empty() && step == o.fault_at && (o.fault_rank < 0 || o.fault_rank == rank)) raise(SIGKILL);
  };
  // This rank's engine takes its options from the leader's job: the lookup-side options of `run`, and its GPU.
  RankJob job;
  EngineOptions eo;
  eo.rank = rank;
  eo.step_timeout_ms = o.timeouts.step.count();
  eo.load_timeout_ms = o.timeouts.load.count();
  eo.read_only = true;
  mutable_engine_harness(eo).on_protocol_step = [&](const std::string& step, int) { fault(step); };
  auto configure = [&](const std::string& job_text, const EngramLayout&, EngineOptions& opts) -> Status {
    ENGRAM_ASSIGN_OR_RETURN(job, RankJob::from_json(job_text));
    for (const auto& [k, v] : job.engine) ENGRAM_RETURN_IF_ERROR(set_engine_option(opts, k, v));
    opts.lookup_threads = sys::threads_or_auto(opts.lookup_threads, job.ranks);
    if (job.gpus > 0) opts.device = rank % job.gpus;  // else rank % visible devices
    opts.max_tokens = job.batch;
    mutable_engine_harness(opts).layer_us = job.layer_us;
    ENGRAM_ASSIGN_OR_RETURN(opts.prefetch, parse_prefetch_mode(job.prefetch));
    return Status::ok();
  };
  auto joined = Engine::join_group(eo, *channel, configure);
  if (!joined.is_ok()) return joined.status();
  Engine& engine = **joined;
  const EngramLayout& layout = engine.layout();
  nlohmann::json report;
  Status local = [&]() -> Status {
    std::vector<TableSpan> spans;
    for (int li = 0; li < layout.n_layers(); ++li) spans.push_back(engine.table().span(li));
    report["rank"] = replay_rank;
    report["group_rank"] = rank;
    report["pid"] = sys::process_id();
    report["verify"] = verify_rows(job, layout, spans);
    if (report["verify"]["mismatches"].is_number() && report["verify"]["mismatches"].get<int64_t>() != 0)
      return Status(Code::kInternal, "rank " + std::to_string(replay_rank) + ": " +
                                         std::to_string(report["verify"]["mismatches"].get<int64_t>()) +
                                         " sampled rows differ from the table's synthetic content");
    DecodeRunSpec spec = decode_run_spec(job);
    spec.timeline = job.timeline.empty() || job.timeline == "none"
                        ? ""
                        : job.timeline + ".rank" + std::to_string(replay_rank) + ".json";
    std::string note;
    json stream;
    ENGRAM_ASSIGN_OR_RETURN(auto ids, rank_ids(job, layout, rank, spec.ids, &note, &stream));
    report["ids_stream"] = stream;
    ENGRAM_ASSIGN_OR_RETURN(DecodeRun run, run_decode(engine, *ids, spec));
    const nlohmann::json details = engine.describe();
    report["backend"] = engine.backend_name();
    report["backend_details"] = engine.backend() == BackendKind::kCuda ? details : json(nullptr);
    report["lookup_threads"] = details.contains("lookup_threads") ? details["lookup_threads"] : json(nullptr);
    report["backend_note"] = engine.backend_note().empty() ? json(nullptr) : json(engine.backend_note());
    report["path"] = engine.describe_lines();
    report["ids"] = ids->describe();
    report["ids_note"] = note.empty() ? json(nullptr) : json(note);
    const HostTable& t = engine.table();
    report["replica_node"] = t.n_replicas() > 0 ? t.replica_node(t.home_replica()) : -1;
    report["read_only"] = t.read_only();
    add_replay_json(run.replay, report);
    report["timeline"] = run.timeline_path.empty() ? json(nullptr) : json(run.timeline_path);
    return Status::ok();
  }();
  fault(kStepReplayed);
  host::RankEntry mine;
  mine.status = local;
  auto replayed = channel->all_gather(kStepReplayed, mine, o.replay_timeout);
  if (!replayed.is_ok()) return replayed.status();
  ENGRAM_RETURN_IF_ERROR(host::first_failure(kStepReplayed, *replayed));
  // Every rank has finished its replay and still maps the table: Pss now shares pages among all.
  report["memory"] = table_memory(sys::process_id());
  report["census"] = census_json(engine.census(host::CensusPoint::kAfterReplay, 4096));
  fault(kStepReport);
  host::RankEntry rep;
  rep.message = report.dump(-1, ' ', false, json::error_handler_t::replace);
  auto done = channel->all_gather(kStepReport, rep, o.timeouts.step);
  if (!done.is_ok()) return done.status();
  return host::first_failure(kStepReport, *done);
}

}  // namespace engram
