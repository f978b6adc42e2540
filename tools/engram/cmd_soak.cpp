// `engram soak`: lookups from N rank processes on one shared table for a long time, every sampled
// output checked against the scalar reference, and the processes' resources watched for growth.
//
// The soak runs in rounds (default 15 s each) until --duration is spent. Each round builds a new
// shared table the way `engram run --ranks N` does (Engine::serve_group on the leader, Engine::join_group
// on every rank: the same protocol, guardian and rank spawning), with a placement, backing and row layout
// drawn at random from those this machine can do, so that a long soak crosses every combination. Each
// rank (the hidden `soak-worker` subcommand, a fresh exec like `rank-worker`) attaches read-only, then
// loops: a random Engram layer, a random batch of 1..--max-batch tokens, random valid ids with some dead
// (-1) ones, a CPU lookup of its engine (checked mode) into a poisoned staging buffer; every
// --sample-every-th position is
// compared bit for bit with decode_row_reference on the table's row, and with the row's expected
// synthetic content (synth_row): a lookup bug and a corrupted shared table are both errors.
//
// Resources: every rank reports its descriptors, mappings, Rss and Pss after its first lookup and at
// the end of the round; the soak process reports its own before the first round and after the last.
// Growth of descriptors or mappings, or any error, fails the soak (exit 1). Output: a text summary
// (or --json) with rows looked up, rows checked, errors, and the start/end figures.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "args.hpp"
#include "command.hpp"
#include "core/units.hpp"
#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/lookup.hpp"
#include "engram/table.hpp"
#include "host/group.hpp"
#include "engine/rank_group_leader.hpp"
#include "engine/rank_job.hpp"
#include "host/placement.hpp"
#include "sys/unix_socket.hpp"
#include "sys/affinity.hpp"
#include "sys/numa.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace {

using json = nlohmann::json;
using Millis = std::chrono::milliseconds;
constexpr const char* kStepSoaked = "soaked";

// ---- resources of a process ---------------------------------------------------------------------

struct Resources {
  int fds = -1;
  int maps = -1;
  int64_t rss_kib = -1;
  int64_t pss_kib = -1;
  json to_json() const {
    auto num = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
    return {{"fds", num(fds)}, {"mappings", num(maps)}, {"rss_kib", num(rss_kib)}, {"pss_kib", num(pss_kib)}};
  }
};

Resources read_resources() {
  Resources r;
  {
    std::error_code ec;
    int n = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
    if (!ec) r.fds = n - 1;  // the iterator's own descriptor
  }
  {
    std::ifstream in("/proc/self/maps");
    if (in) {
      std::string line;
      int n = 0;
      while (std::getline(in, line)) ++n;
      r.maps = n;
    }
  }
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    int64_t v = 0;
    if (!(f >> key >> v)) continue;
    if (key == "Rss:") r.rss_kib = v;
    if (key == "Pss:") r.pss_kib = v;
  }
  return r;
}

// The shortest round (and so the shortest soak): a round that builds a table and starts its ranks does no
// lookups in less.
constexpr Millis kMinRound{2000};

// "10m", "45s", "1h", "90" (seconds), "1500ms", "1.5m": a decimal number (no sign, exponent or surrounding space)
// and a unit.
Result<Millis> parse_duration(const std::string& text) {
  const char* b = text.data();
  const char* e = b + text.size();
  double v = 0;
  const auto [p, ec] = std::from_chars(b, e, v, std::chars_format::fixed);
  if (ec != std::errc() || b == e || !std::isdigit(static_cast<unsigned char>(*b)))
    return Status(Code::kInvalidArgument, "duration '" + text + "': expected a number with s, m, h or ms");
  const std::string unit(p, e);
  double ms = 0;
  if (unit.empty() || unit == "s") ms = v * 1e3;
  else if (unit == "ms") ms = v;
  else if (unit == "m" || unit == "min") ms = v * 60e3;
  else if (unit == "h") ms = v * 3600e3;
  else return Status(Code::kInvalidArgument, "duration '" + text + "': unknown unit '" + unit + "' (s, m, h, ms)");
  if (!(ms >= 1) || ms > 7 * 24 * 3600e3)
    return Status(Code::kInvalidArgument, "duration '" + text + "': expected 1 ms .. 7 days");
  return Millis(static_cast<int64_t>(ms));
}

// ---- the rank ------------------------------------------------------------------------------------

struct WorkerArgs {
  std::string socket, group;
  int64_t round_ms = 15000;
  int max_batch = 256;
  int sample_every = 16;
  int threads = 1;
  uint64_t seed = 1;
  int leader_pid = 0;
};

struct RankTally {
  int64_t lookups = 0, rows = 0, rows_checked = 0, rows_content_checked = 0, dead_rows = 0, errors = 0;
  std::vector<std::string> first_errors;  // at most 5
  void error(const std::string& e) {
    ++errors;
    if (first_errors.size() < 5) first_errors.push_back(e);
  }
};

Status soak_lookups(Engine& engine, const RankJob& job, const WorkerArgs& a, int rank, json* report) {
  const EngramLayout& layout = engine.layout();
  std::mt19937_64 rng(a.seed * 1000003u + static_cast<uint64_t>(rank));
  RankTally t;
  const int heads = layout.heads();
  const int d = layout.d;
  std::vector<int64_t> ids;
  std::vector<uint16_t> out, ref(static_cast<size_t>(d));
  std::vector<uint8_t> want_payload(static_cast<size_t>(d)), want_scales(static_cast<size_t>(d / 32));
  Resources start;
  const auto deadline = std::chrono::steady_clock::now() + Millis(a.round_ms);
  bool first = true;
  while (first || std::chrono::steady_clock::now() < deadline) {
    const int li = static_cast<int>(rng() % static_cast<uint64_t>(layout.n_layers()));
    // The first lookup is the largest batch, so that the buffers are at their final size before the
    // resources are first read (growth afterwards is a leak, not a bigger batch).
    const int64_t tokens = first ? a.max_batch : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(a.max_batch));
    ids.resize(static_cast<size_t>(tokens * heads));
    const auto& rows = layout.head_rows[static_cast<size_t>(li)];
    const auto& offs = layout.head_offsets[static_cast<size_t>(li)];
    for (int64_t tk = 0; tk < tokens; ++tk)
      for (int h = 0; h < heads; ++h)
        ids[static_cast<size_t>(tk * heads + h)] =
            rng() % 32 == 0 ? kDeadId : offs[static_cast<size_t>(h)] + static_cast<int64_t>(rng() % static_cast<uint64_t>(rows[static_cast<size_t>(h)]));
    out.assign(static_cast<size_t>(tokens * heads * d), 0xFFFF);  // poison: a NaN pattern no row decodes to
    const TableView view = engine.table().view(li);
    LookupCall call;
    call.checked = true;
    auto lr = engine.lookup(li, ids.data(), tokens, out.data(), call);
    Result<LookupStats> st = lr.is_ok() ? Result<LookupStats>(lr->stats) : Result<LookupStats>(lr.status());
    ++t.lookups;
    if (!st.is_ok()) {
      t.error("lookup of " + std::to_string(tokens) + " tokens failed: " + st.status().to_string());
      continue;
    }
    t.rows += st->rows;
    t.dead_rows += st->dead_rows;
    const int64_t n = tokens * heads;
    for (int64_t pos = static_cast<int64_t>(rng() % static_cast<uint64_t>(a.sample_every)); pos < n;
         pos += a.sample_every) {
      const int64_t id = ids[static_cast<size_t>(pos)];
      const uint16_t* got = out.data() + pos * d;
      ++t.rows_checked;
      if (id < 0) {
        for (int i = 0; i < d; ++i)
          if (got[i] != 0) {
            t.error("layer index " + std::to_string(li) + ", dead position " + std::to_string(pos) + " not zero");
            break;
          }
        continue;
      }
      decode_row_reference(view.payload_of(id), view.scales_of(id), d, ref.data());
      if (std::memcmp(ref.data(), got, static_cast<size_t>(d) * 2) != 0)
        t.error("layer index " + std::to_string(li) + ", row " + std::to_string(id) + ": lookup output differs "
                "from the reference decoder");
      // The shared row itself must still hold what the leader wrote.
      synth_row(job.seed, li, id, d, want_payload.data(), want_scales.data());
      ++t.rows_content_checked;
      if (std::memcmp(want_payload.data(), view.payload_of(id), static_cast<size_t>(d)) != 0 ||
          std::memcmp(want_scales.data(), view.scales_of(id), static_cast<size_t>(d / 32)) != 0)
        t.error("layer index " + std::to_string(li) + ", row " + std::to_string(id) +
                ": shared table content differs from the synthetic rows the leader wrote");
    }
    if (first) {
      start = read_resources();  // after the first lookup: the pool's threads and buffers exist
      first = false;
    }
  }
  ids = {};
  out = {};
  const Resources end = read_resources();
  json errs = json::array();
  for (const auto& e : t.first_errors) errs.push_back(e);
  *report = {{"rank", rank},
             {"pid", static_cast<int>(::getpid())},
             {"lookups", t.lookups},
             {"rows", t.rows},
             {"dead_rows", t.dead_rows},
             {"rows_checked", t.rows_checked},
             {"rows_content_checked", t.rows_content_checked},
             {"errors", t.errors},
             {"first_errors", errs},
             {"start", start.to_json()},
             {"end", end.to_json()}};
  return Status::ok();
}

Status run_soak_worker(const WorkerArgs& a) {
  host::UnixGroupOptions gopt;
  gopt.group = a.group;
  ENGRAM_ASSIGN_OR_RETURN(auto channel, host::UnixGroupChannel::connect(a.socket, gopt, Millis(60000)));
  const int rank = channel->rank();
  EngineOptions eo;  // CPU lookups (checked) on this rank's read-only view of the shared table
  eo.backend = BackendKind::kCpu;
  eo.lookup_threads = a.threads;
  eo.read_only = true;
  eo.max_tokens = a.max_batch;
  ENGRAM_ASSIGN_OR_RETURN(auto engine, Engine::join_group(eo, *channel));
  json report;
  Status local = [&]() -> Status {
    ENGRAM_ASSIGN_OR_RETURN(RankJob job, RankJob::from_json(engine->group_job()));
    return soak_lookups(*engine, job, a, rank, &report);
  }();
  if (local.is_ok() && report.value("errors", int64_t{0}) != 0)
    local = Status(Code::kInternal, "rank " + std::to_string(rank) + ": " + std::to_string(report["errors"].get<int64_t>()) +
                                        " errors; first: " + report["first_errors"][0].get<std::string>());
  host::RankEntry mine;
  mine.rank = rank;
  mine.status = local;
  mine.message = report.dump();
  auto all = channel->all_gather(kStepSoaked, mine, Millis(a.round_ms + 120000));
  if (!all.is_ok()) return all.status();
  // Wait for the leader to end the group (EOF) so that it reaps us, not the other way round.
  (void)channel->barrier("end", Millis(60000));
  return local;
}

// ---- the soak ------------------------------------------------------------------------------------

struct SoakArgs {
  std::string duration = "10m";
  std::string round = "15s";
  int ranks = 2;
  std::string table_size = "64MiB";
  int max_batch = 256;
  int sample_every = 16;
  int threads = 1;
  uint64_t seed = 1;
  std::vector<std::string> placements;  // empty: every one this machine can do
  std::vector<std::string> backings{"memfd", "shm"};
  bool json_out = false;
};

std::vector<std::string> default_placements() {
  std::vector<std::string> p{"none", "local", "interleave:all"};
  const std::vector<int> nodes = sys::memory_nodes();
  const int first = nodes.empty() ? 0 : nodes.front();
  p.push_back("bind:" + std::to_string(first));
  p.push_back("preferred:" + std::to_string(first));
  if (nodes.size() > 1) p.push_back("replica-per-node");
  return p;
}

struct RankProcesses {
  std::vector<int> pids;
  ~RankProcesses() { finish(Millis(3000)); }
  void finish(Millis grace) {
    const auto deadline = sys::deadline_after(grace);
    for (int pid : pids) {
      if (!sys::wait_process(pid, deadline).is_ok()) {
        (void)sys::kill_process(pid, SIGKILL);
        (void)sys::wait_process(pid, sys::deadline_after(std::chrono::seconds(10)));
      }
    }
    pids.clear();
  }
};

Result<json> soak_round(const SoakArgs& a, int round, Millis round_ms, const std::string& placement,
                        const std::string& backing, const std::string& row_layout, int64_t table_bytes,
                        const std::string& exe) {
  RankJob job;
  job.table_bytes = table_bytes;
  job.row_layout = row_layout;
  job.seed = a.seed + static_cast<uint64_t>(round) * 7919u;
  job.ranks = a.ranks;
  ENGRAM_ASSIGN_OR_RETURN(EngramLayout layout, job_layout(job));
  EngineOptions table_opts;
  ENGRAM_RETURN_IF_ERROR(set_engine_option(table_opts, "--placement", placement));
  ENGRAM_RETURN_IF_ERROR(set_engine_option(table_opts, "--backing", backing));
  table_opts.content.kind = TableContent::Kind::kSynthetic;
  table_opts.content.seed = job.seed;
  const std::string group_name = "soak-" + std::to_string(sys::process_id()) + "-" + std::to_string(round);
  ENGRAM_ASSIGN_OR_RETURN(RankGroupLeader leader, start_rank_group_leader(group_name, table_opts.table.shm_dir));
  auto& guardian = leader.guardian;
  auto& listener = leader.listener;
  ENGRAM_ASSIGN_OR_RETURN(auto engine, Engine::serve_group(layout, table_opts, group_name, job.to_json().dump()));
  RankProcesses ranks;
  for (int r = 0; r < a.ranks; ++r) {
    auto pid = sys::spawn_process({exe, "soak-worker", "--socket", listener->socket_path(), "--group", group_name,
                                   "--round-ms", std::to_string(round_ms.count()), "--max-batch",
                                   std::to_string(a.max_batch), "--sample-every", std::to_string(a.sample_every),
                                   "--threads", std::to_string(sys::threads_or_auto(a.threads, a.ranks)), "--seed",
                                   std::to_string(job.seed), "--leader-pid", std::to_string(sys::process_id())});
    if (!pid.is_ok()) return pid.status().with_context("starting soak rank " + std::to_string(r + 1));
    ranks.pids.push_back(*pid);
  }
  auto channel = listener->accept_group(a.ranks, Millis(60000));
  if (!channel.is_ok()) return channel.status().with_context("soak round " + std::to_string(round));
  (void)listener->unlink_socket();
  (void)guardian->disarm(listener->socket_path());
  ENGRAM_RETURN_IF_ERROR(engine->admit(**channel).with_context("soak round " + std::to_string(round)));
  host::RankEntry mine;
  auto soaked = (*channel)->all_gather(kStepSoaked, mine, round_ms + Millis(60000));
  if (!soaked.is_ok()) return soaked.status().with_context("soak round " + std::to_string(round));
  json per_rank = json::array();
  for (const auto& e : *soaked) {
    if (e.rank == 0) continue;
    json r = json::parse(e.message, nullptr, false);
    if (r.is_discarded() || !r.is_object()) r = json::object();
    r["status"] = e.status.is_ok() ? "ok" : e.status.to_string();
    per_rank.push_back(r);
  }
  Status failed = host::first_failure(kStepSoaked, *soaked);
  (void)(*channel)->barrier("end", Millis(10000));
  channel->reset();
  ranks.finish(Millis(30000));
  json out = {{"round", round},        {"placement", placement},
              {"backing", backing},    {"row_layout", row_layout},
              {"table_bytes", layout.total_bytes()},
              {"placement_obtained", engine->table().parts().empty() ? "" : engine->table().parts()[0].backing->report.obtained},
              {"ranks", per_rank},     {"status", failed.is_ok() ? "ok" : failed.to_string()}};
  return out;
}

int run_soak(const SoakArgs& a) {
  if (const std::string note = sys::runtime_dir_fallback_note(); !note.empty())
    std::fprintf(stderr, "engram soak: note: %s\n", note.c_str());
  auto total = parse_duration(a.duration);
  if (!total.is_ok()) return report_failure("soak", total.status().with_context("--duration"));
  auto round_len = parse_duration(a.round);
  if (!round_len.is_ok()) return report_failure("soak", round_len.status().with_context("--round"));
  auto table_bytes = parse_size_bytes(a.table_size);
  if (!table_bytes.is_ok()) return report_failure("soak", table_bytes.status().with_context("--table-size"));
  if (a.ranks < 1 || a.ranks > 256)
    return report_failure("soak", Status(Code::kInvalidArgument, "--ranks: expected 1..256"));
  auto exe = sys::self_exe_path();
  if (!exe.is_ok()) return report_failure("soak", exe.status());
  const std::vector<std::string> placements = a.placements.empty() ? default_placements() : a.placements;
  for (const auto& p : a.placements) {
    // A node this machine does not have is bad input, refused before the first round (as run and census do when
    // they build their table); a placement the machine cannot apply (no NUMA) stays a skipped round.
    auto pp = parse_placement(p);
    if (!pp.is_ok()) return report_failure("soak", pp.status().with_context("--placement"));
    if (auto r = host::resolve_placement(*pp); !r.is_ok() && r.status().code() == Code::kInvalidArgument)
      return report_failure("soak", r.status().with_context("--placement " + p));
  }
  std::mt19937_64 rng(a.seed);
  const auto t0 = std::chrono::steady_clock::now();
  const auto end_at = t0 + *total;
  const Resources before = read_resources();
  Resources start = before;  // re-taken after the first round (see below)
  json rounds = json::array();
  int64_t rows = 0, rows_checked = 0, rows_content = 0, errors = 0, lookups = 0;
  bool growth = false, failed = false;
  std::string first_failure;
  for (int round = 0;; ++round) {
    const auto now = std::chrono::steady_clock::now();
    if (round > 0 && now >= end_at) break;
    // The last round takes what is left, at least kMinRound (so that every round does work): the soak may
    // overrun --duration by up to kMinRound.
    Millis len = std::min(*round_len, std::chrono::duration_cast<Millis>(end_at - now));
    len = std::max(len, kMinRound);
    const std::string& placement = placements[rng() % placements.size()];
    const std::string backing = a.backings[rng() % a.backings.size()];
    const std::string row_layout = rng() % 2 ? "fused" : "split";
    if (!a.json_out)
      std::fprintf(stderr, "soak: round %d: %s, %s backing, %s rows, %d ranks, %.1f s\n", round, placement.c_str(),
                   backing.c_str(), row_layout.c_str(), a.ranks, static_cast<double>(len.count()) / 1e3);
    auto r = soak_round(a, round, len, placement, backing, row_layout, *table_bytes, *exe);
    if (!r.is_ok()) {
      // A placement this machine refuses (kUnsupported / kPermission) is skipped and reported.
      const Code c = r.status().code();
      if (c == Code::kUnsupported || c == Code::kPermission) {
        rounds.push_back({{"round", round}, {"placement", placement}, {"backing", backing}, {"skipped", r.status().to_string()}});
        continue;
      }
      failed = true;
      first_failure = r.status().to_string();
      rounds.push_back({{"round", round}, {"placement", placement}, {"backing", backing}, {"status", first_failure}});
      break;
    }
    for (const auto& rk : (*r)["ranks"]) {
      rows += rk.value("rows", int64_t{0});
      rows_checked += rk.value("rows_checked", int64_t{0});
      rows_content += rk.value("rows_content_checked", int64_t{0});
      errors += rk.value("errors", int64_t{0});
      lookups += rk.value("lookups", int64_t{0});
      auto grew = [&](const char* key) {
        const json s0 = rk.contains("start") ? rk["start"].value(key, json(nullptr)) : json(nullptr);
        const json s1 = rk.contains("end") ? rk["end"].value(key, json(nullptr)) : json(nullptr);
        return s0.is_number() && s1.is_number() && s1.get<int64_t>() > s0.get<int64_t>();
      };
      if (grew("fds") || grew("mappings")) growth = true;
    }
    if ((*r)["status"] != "ok") {
      failed = true;
      if (first_failure.empty()) first_failure = (*r)["status"].get<std::string>();
    }
    rounds.push_back(*r);
    if (failed) break;
    // Growth is measured from the end of the first round: that round pays for what a process
    // allocates once (malloc arenas of the prefault threads, cached thread stacks, libnuma state).
    if (round == 0) start = read_resources();
  }
  const Resources end = read_resources();
  // The soak process itself: after the rounds, nothing of any round may remain.
  const bool self_growth = start.fds >= 0 && (end.fds > start.fds || end.maps > start.maps);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool pass = !failed && errors == 0 && !growth && !self_growth && rows_checked > 0;
  json out = {{"schema", "engram.soak/1"},
              {"command", "soak"},
              {"duration_s", wall_s},
              {"ranks", a.ranks},
              {"threads_per_rank", sys::threads_or_auto(a.threads, a.ranks)},
              {"rounds", rounds},
              {"lookups", lookups},
              {"rows", rows},
              {"rows_checked", rows_checked},
              {"rows_content_checked", rows_content},
              {"errors", errors},
              {"rank_resource_growth", growth},
              {"soak_process",
               {{"before_first_round", before.to_json()}, {"start", start.to_json()}, {"end", end.to_json()},
                {"growth", self_growth}}},
              {"failure", first_failure.empty() ? json(nullptr) : json(first_failure)},
              {"pass", pass}};
  if (a.json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("engram soak: %d ranks, %zu rounds, %.1f s\n", a.ranks, rounds.size(), wall_s);
    for (const auto& r : rounds) {
      if (r.contains("skipped")) {
        std::printf("  round %d  %-22s %-6s skipped: %s\n", r["round"].get<int>(), r["placement"].get<std::string>().c_str(),
                    r["backing"].get<std::string>().c_str(), r["skipped"].get<std::string>().c_str());
        continue;
      }
      int64_t rr = 0, rc = 0, re = 0;
      std::string mem;
      if (r.contains("ranks"))
        for (const auto& rk : r["ranks"]) {
          rr += rk.value("rows", int64_t{0});
          rc += rk.value("rows_checked", int64_t{0});
          re += rk.value("errors", int64_t{0});
          if (rk.contains("start") && rk.contains("end"))
            mem += " r" + std::to_string(rk.value("rank", 0)) + " fds " + rk["start"]["fds"].dump() + "->" +
                   rk["end"]["fds"].dump() + " maps " + rk["start"]["mappings"].dump() + "->" +
                   rk["end"]["mappings"].dump() + " pss " + rk["end"]["pss_kib"].dump() + " KiB;";
        }
      std::printf("  round %d  %-22s %-6s %-5s rows %" PRId64 ", checked %" PRId64 ", errors %" PRId64 " |%s\n",
                  r["round"].get<int>(), r["placement"].get<std::string>().c_str(),
                  r["backing"].get<std::string>().c_str(), r.value("row_layout", std::string("?")).c_str(), rr, rc,
                  re, mem.c_str());
    }
    std::printf("rows looked up %" PRId64 " in %" PRId64 " lookups; rows checked against the reference %" PRId64
                " (content %" PRId64 "); errors %" PRId64 "\n",
                rows, lookups, rows_checked, rows_content, errors);
    std::printf("soak process (from the end of round 0): fds %d -> %d, mappings %d -> %d, rss %" PRId64 " -> %" PRId64 " KiB, pss %" PRId64
                " -> %" PRId64 " KiB\n",
                start.fds, end.fds, start.maps, end.maps, start.rss_kib, end.rss_kib, start.pss_kib, end.pss_kib);
    std::printf("rank resources grew: %s; soak process grew: %s\n", growth ? "YES" : "no", self_growth ? "YES" : "no");
    if (!first_failure.empty()) std::printf("failure: %s\n", first_failure.c_str());
    std::printf("%s\n", pass ? "PASS" : "FAIL");
  }
  if (pass) return 0;
  // Every round skipped (each placement or backing asked for is not possible on this machine, e.g. hugetlb with
  // no hugepage pool): nothing was soaked, and that is "not possible here", with the reasons on stderr.
  const bool all_skipped = !failed && !rounds.empty() &&
                           std::all_of(rounds.begin(), rounds.end(), [](const json& r) { return r.contains("skipped"); });
  if (all_skipped) {
    std::fprintf(stderr, "engram soak: every round was skipped, nothing was soaked: %s\n",
                 rounds[0]["skipped"].get<std::string>().c_str());
    return 77;
  }
  return 1;
}

auto setup_soak(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<SoakArgs>();
  sub.footer(
      "Each round builds a fresh shared table (random placement, backing and row layout), starts --ranks rank\n"
      "processes that look up random batches of 1..--max-batch tokens and compare every --sample-every-th\n"
      "output with the scalar reference decoder and the row's expected content. Fails (exit 1) on any error\n"
      "or when descriptors or mappings grow.\n"
      "Examples:\n"
      "  engram soak --duration 10m --ranks 4\n"
      "  engram soak --duration 45s --ranks 2 --table-size 32MiB --json");
  const CLI::Validator duration = parsed_by([](const std::string& t) -> Status {
    auto d = parse_duration(t);
    if (!d.is_ok()) return d.status();
    if (*d < kMinRound)
      return Status(Code::kInvalidArgument, "duration '" + t + "': below the minimum of " +
                                                std::to_string(kMinRound.count() / 1000) + " s (the shortest round)");
    return Status::ok();
  });
  sub.add_option("--duration", a->duration, "Total time: 10m, 45s, 1h (at least 2 s; the last round runs at least 2 s)")
      ->check(duration)
      ->capture_default_str();
  sub.add_option("--round", a->round, "Length of one round (one table, one placement; at least 2 s, at most --duration)")
      ->check(duration)
      ->capture_default_str();
  // A round longer than the soak would be cut to it: refused instead, naming both.
  add_parse_check(sub, [a] {
    const auto total = parse_duration(a->duration), round = parse_duration(a->round);
    if (total.is_ok() && round.is_ok() && *round > *total)
      throw CLI::ValidationError("--round", "'" + a->round + "' is longer than --duration '" + a->duration +
                                                "': give a round of at most the soak's length");
  });
  sub.add_option("--ranks", a->ranks, "Rank processes")->check(integer_in(1, 256))->capture_default_str();
  sub.add_option("--table-size", a->table_size, "Total table bytes of each round's v41-flash-mini table")
      ->check(size_in(int64_t{1} << 20, int64_t{1} << 50))
      ->capture_default_str();
  sub.add_option("--max-batch", a->max_batch, "Largest batch in tokens (each lookup draws 1..this)")
      ->check(range(1, 1 << 16))
      ->capture_default_str();
  sub.add_option("--sample-every", a->sample_every, "Check one output position in this many")
      ->check(range(1, 1 << 20))
      ->capture_default_str();
  sub.add_option("--threads", a->threads,
                 std::string("Lookup threads per rank (default 1; ") + kAutoThreadsHelp + ", shared by the ranks)")
      ->check(range(0, 256));
  sub.add_option("--seed", a->seed, "Seed of placements, batches, ids and table content")->check(unsigned_integer())->capture_default_str();
  sub.add_option("--placement", a->placements,
                 "Placements to draw from (repeatable; default: none, local, interleave:all, bind and preferred "
                 "on the first node, replica-per-node with 2+ nodes)")
      ->check(parsed_by([](const std::string& t) { return parse_placement(t).status(); }));
  sub.add_option("--backing", a->backings, "Backings to draw from (repeatable): memfd, shm, hugetlb, hugetlb-1g")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g"}))
      ->capture_default_str();
  sub.add_flag("--json", a->json_out, "JSON report on stdout");
  return [a] { return run_soak(*a); };
}

auto setup_worker(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<WorkerArgs>();
  sub.group("");  // hidden: started by `engram soak`
  sub.add_option("--socket", a->socket)->required()->check(socket_path());
  sub.add_option("--group", a->group)->required()->check(group_name());
  sub.add_option("--round-ms", a->round_ms)->check(range(int64_t{1}, int64_t{7} * 24 * 3600 * 1000));
  sub.add_option("--max-batch", a->max_batch)->check(range(1, 1 << 16));
  sub.add_option("--sample-every", a->sample_every)->check(range(1, 1 << 20));
  sub.add_option("--threads", a->threads)->check(range(1, 256));  // resolved by the leader
  sub.add_option("--seed", a->seed)->check(unsigned_integer());
  sub.add_option("--leader-pid", a->leader_pid)->check(CLI::PositiveNumber);
  return [a] {
    // A rank whose leader is gone has nobody to report to: the kernel ends it with its leader.
    if (a->leader_pid > 0)
      if (Status s = sys::end_with_parent(a->leader_pid); !s.is_ok()) return report_failure("soak-worker", s);
    Status s = run_soak_worker(*a);
    if (!s.is_ok()) return report_failure("soak-worker", s);
    return 0;
  };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(soak, "soak", "Lookups from N ranks on shared tables for a long time, outputs checked, leaks watched",
               engram::cli::setup_soak);
ENGRAM_COMMAND(soak_worker, "soak-worker", "One rank of `engram soak` (started by it)", engram::cli::setup_worker);
