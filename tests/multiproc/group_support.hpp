// Leader and peer routines of the shared-group tests: a leader that creates a small table (one or two
// Engram layers of fresh random content, each about segment_bytes), admits N peers and reports; a peer that
// joins, checks the bytes and reports; both able to kill themselves (SIGKILL) on entering a chosen protocol step.
#pragma once

#include <signal.h>
#include <sys/mman.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/splitmix.hpp"
#include "engram/table.hpp"
#include "host/group.hpp"
#include "host/placement.hpp"
#include "multiproc_support.hpp"

namespace engram::test {

struct GroupSetup {
  std::string socket_path;                           // in a private TempDir
  std::string group = "mp";
  host::BackingKind kind = host::BackingKind::kMemfd;
  std::string shm_dir;                               // kShmFile: a TempDir under /dev/shm
  uint64_t segment_bytes = 256 * 1024;               // about this many bytes per layer (table_bytes(li) exactly)
  int n_segments = 2;
  uint64_t seed = 1;
  host::ProtocolTimeouts timeouts{host::Millis(20000), host::Millis(20000)};
  host::Millis join_timeout{20000};
  host::Millis peer_grace{2000};

  host::UnixGroupOptions group_options() const {
    host::UnixGroupOptions o;
    o.group = group;
    o.socket_path = socket_path;
    o.peer_grace = peer_grace;
    return o;
  }
  // n_segments Engram layers of d = 32 (48-B fused records), one head each: rows = the prime walk's first prime
  // after segment_bytes / 48, so each layer's table holds about segment_bytes.
  EngramLayout layout() const {
    EngramLayout l;
    l.name = "mp";
    for (int i = 0; i < n_segments; ++i) l.layer_ids.push_back(i + 1);
    l.max_ngram = 2;
    l.heads_per_order = 1;
    l.vocab_size_per_order = {static_cast<int64_t>(segment_bytes / 48)};
    l.d = 32;
    l.format = RowFormat::kFused;
    (void)l.finalize();
    return l;
  }
  uint64_t layer_bytes(int li) const { return static_cast<uint64_t>(layout().table_bytes(li)); }
  uint64_t mapped_bytes(int li) const { return (layer_bytes(li) + 4095) / 4096 * 4096; }
  TableOptions table_options() const {
    TableOptions o;
    o.backing.kind = kind;
    o.shm_dir = shm_dir.empty() ? "/dev/shm" : shm_dir;
    o.group = group;
    return o;
  }
  // Steps 1-2 (create, place) and the leader's side of the group.
  Result<std::unique_ptr<host::SharedTableGroup>> lead() const {
    ENGRAM_ASSIGN_OR_RETURN(auto t, HostTable::create(layout(), table_options()));
    return host::SharedTableGroup::lead(std::shared_ptr<HostTable>(std::move(t)), group,
                                        nlohmann::json{{"seed", seed}}.dump());
  }
};

// The bytes of layer `li` of a table: [0, table_bytes(li)).
inline uint8_t* layer_bytes_of(const HostTable& t, int li) { return t.span(li).data; }

inline void fill_segment(uint8_t* p, uint64_t bytes, uint64_t seed, int index) {
  uint64_t state = mix_seed(seed, static_cast<uint64_t>(index), 0);
  for (uint64_t off = 0; off + 8 <= bytes; off += 8) {
    const uint64_t v = splitmix64(state);
    std::memcpy(p + off, &v, 8);
  }
}

inline uint64_t expected_checksum(uint64_t bytes, uint64_t seed, int index) {
  std::vector<uint8_t> buf(bytes, 0);
  fill_segment(buf.data(), bytes, seed, index);
  return fnv64(buf.data(), buf.size());
}

inline std::function<void(const std::string&, int)> crash_at(const std::string& step, int rank) {
  return [step, rank](const std::string& s, int r) {
    if (s == step && r == rank) raise(SIGKILL);
  };
}

inline nlohmann::json checksums(const HostTable& t) {
  nlohmann::json a = nlohmann::json::array();
  for (int li = 0; li < t.n_layers(); ++li)
    a.push_back({{"layer_index", li},
                 {"fnv", fnv64(layer_bytes_of(t, li), static_cast<size_t>(t.layout().table_bytes(li)))}});
  return a;
}

// Load hook of the tests: every layer's bytes from (seed, layer index).
inline std::function<Status(HostTable&)> fill_table(uint64_t seed) {
  return [seed](HostTable& t) {
    for (int li = 0; li < t.n_layers(); ++li)
      fill_segment(layer_bytes_of(t, li), static_cast<uint64_t>(t.layout().table_bytes(li)), seed, li);
    return Status::ok();
  };
}

// The named files of a table (shm backings).
inline nlohmann::json named_paths(const HostTable& t) {
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : t.parts())
    if (!p.backing->backing.identity().path.empty()) paths.push_back(p.backing->backing.identity().path);
  return paths;
}

// Census hook of the tests: a text naming the point, the rank and the layers (segments) it sees.
inline Result<std::string> census_text(host::CensusPoint p, const HostTable& t, int rank) {
  return std::string(host::census_point_name(p)) + " rank " + std::to_string(rank) + " segments " +
         std::to_string(t.n_layers());
}

struct LeaderPlan {
  int n_peers = 2;
  std::string crash_step;  // leader kills itself entering this step ("" = never)
  bool measure = false;    // after the protocol: touch, barrier, gather every rank's Rss/Pss
  std::function<void(host::SharedTableGroup&)> after;  // runs after a successful admit (in the leader)
};

// Leader: listen, create, accept, admit. Returns {"stage", "status", "named_left_after_admit", ...}.
inline nlohmann::json run_leader(const GroupSetup& g, const LeaderPlan& plan) {
  nlohmann::json out;
  auto listener = host::UnixGroupListener::listen(g.group_options());
  if (!listener.is_ok()) return {{"stage", "listen"}, {"status", status_json(listener.status())}};
  auto group = g.lead();
  if (!group.is_ok()) return {{"stage", "create"}, {"status", status_json(group.status())}};
  const nlohmann::json paths = named_paths(*(*group)->table());
  out["paths"] = paths;
  auto channel = (*listener)->accept_group(plan.n_peers, g.join_timeout);
  if (!channel.is_ok()) {
    out["stage"] = "accept";
    out["status"] = status_json(channel.status());
    return out;
  }
  host::ProtocolHooks hooks;
  if (!plan.crash_step.empty()) hooks.on_step = crash_at(plan.crash_step, 0);
  hooks.load = fill_table(g.seed);
  hooks.census = census_text;
  Status s = (*group)->admit(**channel, hooks, g.timeouts);
  out["stage"] = "admit";
  out["status"] = status_json(s);
  int named_left = 0;
  for (auto& p : paths) named_left += access(p.get<std::string>().c_str(), F_OK) == 0 ? 1 : 0;
  out["named_left_after_admit"] = named_left;
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& r : (*group)->steps()) {
    nlohmann::json e = nlohmann::json::array();
    for (const auto& x : r.entries) e.push_back({{"rank", x.rank}, {"ok", x.status.is_ok()}, {"message", x.message}});
    steps.push_back({{"step", r.step}, {"entries", e}});
  }
  out["steps"] = steps;
  if (!s.is_ok()) return out;
  out["checksums"] = checksums(*(*group)->table());
  if (plan.measure) {
    Status b = (*channel)->barrier("touched", g.timeouts.step);
    if (!b.is_ok()) {
      out["status"] = status_json(b);
      return out;
    }
    host::RankEntry mine;
    const auto [rss, pss] = smaps_rss_pss(layer_bytes_of(*(*group)->table(), 0));
    mine.message = nlohmann::json{{"rss", rss}, {"pss", pss}}.dump();
    auto all = (*channel)->all_gather("measured", mine, g.timeouts.step);
    if (!all.is_ok()) {
      out["status"] = status_json(all.status());
      return out;
    }
    nlohmann::json m = nlohmann::json::array();
    for (const auto& e : *all) m.push_back(nlohmann::json::parse(e.message, nullptr, false));
    out["measured"] = m;
  }
  if (plan.after) plan.after(**group);
  return out;
}

struct PeerPlan {
  std::string crash_step;  // kill this peer entering this step, if its rank is crash_rank
  int crash_rank = -1;
  bool read_only = false;
  bool measure = false;
  bool stop_at_step = false;  // SIGSTOP instead of SIGKILL at crash_step (a hung peer)
};

// Peer: connect, join, checksum (touches every page), optional measure, optional write probe.
inline nlohmann::json run_peer(const GroupSetup& g, const PeerPlan& plan) {
  nlohmann::json out;
  auto ch = host::UnixGroupChannel::connect(g.socket_path, g.group_options(), g.join_timeout);
  if (!ch.is_ok()) return {{"stage", "connect"}, {"status", status_json(ch.status())}};
  out["rank"] = (*ch)->rank();
  host::ProtocolHooks hooks;
  if (!plan.crash_step.empty()) {
    const std::string step = plan.crash_step;
    const int rank = plan.crash_rank;
    const int sig = plan.stop_at_step ? SIGSTOP : SIGKILL;
    hooks.on_step = [step, rank, sig](const std::string& s, int r) {
      if (s == step && r == rank) raise(sig);
    };
  }
  hooks.census = census_text;
  host::PeerOptions po;
  po.read_only = plan.read_only;
  auto group = host::SharedTableGroup::join(**ch, po, hooks, g.timeouts);
  if (!group.is_ok()) {
    out["stage"] = "join";
    out["status"] = status_json(group.status());
    return out;
  }
  out["stage"] = "joined";
  out["status"] = status_json(Status::ok());
  out["checksums"] = checksums(*(*group)->table());
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : (*group)->table()->parts()) paths.push_back(p.backing->backing.identity().path);
  out["paths"] = paths;
  if (plan.read_only) {
    // A write through a read-only attach must fault: probe it in a child of this peer.
    uint8_t* p = layer_bytes_of(*(*group)->table(), 0);
    const int pid = fork();
    if (pid == 0) {
      // A sanitizer runtime (ASan, TSan) installs its own SIGSEGV handler, which turns the fault into
      // a report and exit(1); the probe restores the default action so that the fault, and only a
      // fault, ends the child by SIGSEGV (a write that succeeds still exits 0).
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGSEGV, &dfl, nullptr);
      static_cast<volatile uint8_t*>(p)[0] = 1;
      _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    out["write_probe_signal"] = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  }
  if (plan.measure) {
    Status b = (*ch)->barrier("touched", g.timeouts.step);
    if (!b.is_ok()) {
      out["status"] = status_json(b);
      return out;
    }
    host::RankEntry mine;
    const auto [rss, pss] = smaps_rss_pss(layer_bytes_of(*(*group)->table(), 0));
    mine.message = nlohmann::json{{"rss", rss}, {"pss", pss}}.dump();
    auto all = (*ch)->all_gather("measured", mine, g.timeouts.step);
    if (!all.is_ok()) out["status"] = status_json(all.status());
  }
  return out;
}

}  // namespace engram::test
