// Faults in a running shared group (leader + forked peers):
//  - registration fails on one peer (the sys fault hook under kFaultHostRegister, ENOMEM / EPERM, as
//    the CUDA backend's cudaHostRegister would): every rank gets the error naming that rank and the
//    step; no named file is left;
//  - the leader's checkpoint load fails half-way: the peers' join fails at step "load", so no peer
//    ever holds a group over a half-loaded table, and the leader's table is not marked loaded;
//  - kill -9 of a peer in the middle of its lookups: the leader and the other peer keep reading
//    correct rows, and the leader's next collective names the dead rank (closed connection, kIo,
//    well before the timeout);
//  - kill -9 of the leader while peers look up: the peers' mappings stay valid and correct, and the
//    next collective reports the leader's death (kIo), not a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "group_support.hpp"
#include "sys/fault.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

struct Fixture {
  TempDir sock_dir{"/tmp", "engram-fault-sock"};
  TempDir shm_dir{"/dev/shm", "engram-fault-shm"};
  GroupSetup g;
  explicit Fixture(host::BackingKind kind = host::BackingKind::kShmFile) {
    g.socket_path = sock_dir.path + "/g.sock";
    g.kind = kind;
    g.shm_dir = shm_dir.path;
    g.seed = rng()();
    g.segment_bytes = (64 + rng()() % 64) * 4096;
    g.timeouts = {host::Millis(15000), host::Millis(15000)};
  }
};

// A peer whose registration hook asks the fault table (as the CUDA backend does) when `fail` is set.
json registering_peer(const GroupSetup& g, int err) {
  auto ch = host::UnixGroupChannel::connect(g.socket_path, g.group_options(), g.join_timeout);
  if (!ch.is_ok()) return {{"stage", "connect"}, {"status", status_json(ch.status())}};
  if (err != 0) sys::set_fault(sys::kFaultHostRegister, err);
  host::ProtocolHooks hooks;
  hooks.register_memory = [](const std::shared_ptr<HostTable>& t, int rank) -> Status {
    for (int i = 0; i < t->n_layers(); ++i)
      if (const int e = sys::fault_errno(sys::kFaultHostRegister); e != 0)
        return errno_status(e, "cudaHostRegister(segment " + std::to_string(i) + ", rank " + std::to_string(rank) + ")");
    return Status::ok();
  };
  auto group = host::SharedTableGroup::join(**ch, {}, hooks, g.timeouts);
  return {{"rank", (*ch)->rank()}, {"status", status_json(group.status())}};
}

}  // namespace

TEST(FaultGroup, RegistrationFailureOnOnePeerFailsEveryRankByName) {
  for (int err : {ENOMEM, EPERM}) {
    Fixture f;
    Child ok_peer = fork_child([&] { return registering_peer(f.g, 0); });
    Child bad_peer = fork_child([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 2: joins second
      return registering_peer(f.g, err);
    });
    LeaderPlan lp;
    json leader = run_leader(f.g, lp);
    json a = collect(ok_peer), b = collect(bad_peer);
    ASSERT_FALSE(leader["status"]["ok"].get<bool>()) << leader.dump();
    const std::string lm = leader["status"]["message"];
    EXPECT_NE(lm.find("step 'register'"), std::string::npos) << lm;
    EXPECT_NE(lm.find("cudaHostRegister"), std::string::npos) << lm;
    EXPECT_EQ(leader["status"]["code_name"], err == ENOMEM ? "out_of_memory" : "permission") << leader.dump();
    for (const json* p : {&a, &b}) {
      ASSERT_FALSE((*p)["status"]["ok"].get<bool>()) << p->dump();
      EXPECT_NE((*p)["status"]["message"].get<std::string>().find("step 'register'"), std::string::npos) << p->dump();
    }
    EXPECT_EQ(leader["named_left_after_admit"], 0);
    EXPECT_TRUE(f.shm_dir.wait_until_no("engram:").empty());
  }
}

TEST(FaultGroup, LoadFailingHalfWayNeverGivesPeersAGroup) {
  Fixture f;
  PeerPlan pp;
  Child p1 = fork_child([&] { return run_peer(f.g, pp); });
  Child p2 = fork_child([&] { return run_peer(f.g, pp); });
  {
    auto listener = host::UnixGroupListener::listen(f.g.group_options());
    ASSERT_TRUE(listener.is_ok());
    auto group = f.g.lead();
    ASSERT_TRUE(group.is_ok());
    auto ch = (*listener)->accept_group(2, f.g.join_timeout);
    ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
    host::ProtocolHooks hooks;
    hooks.load = [](HostTable& t) {
      // Half of the first layer written, then the "disk" fails.
      std::memset(layer_bytes_of(t, 0), 0x5a, static_cast<size_t>(t.layout().table_bytes(0) / 2));
      return Status(Code::kIo, "pread(ck.safetensors, 1 MiB at 3 MiB): EIO (injected)", EIO);
    };
    Status s = (*group)->admit(**ch, hooks, f.g.timeouts);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("step 'load'"), std::string::npos) << s.to_string();
    EXPECT_FALSE((*group)->loaded());
  }
  for (Child* c : {&p1, &p2}) {
    json r = collect(*c);
    EXPECT_EQ(r["stage"], "join") << r.dump();  // never "joined": no group over a half-loaded table
    ASSERT_FALSE(r["status"]["ok"].get<bool>());
    EXPECT_NE(r["status"]["message"].get<std::string>().find("step 'load'"), std::string::npos) << r.dump();
    EXPECT_NE(r["status"]["message"].get<std::string>().find("EIO"), std::string::npos) << r.dump();
  }
  EXPECT_TRUE(f.shm_dir.wait_until_no("engram:").empty());
}

namespace {

// A peer that joins, then checks random rows against the expected content until told to stop (a
// barrier "stop"), reporting how many rows it checked and whether any differed. `die_after_ms`:
// SIGKILL itself that long into its lookups.
json looking_peer(const GroupSetup& g, int die_after_ms) {
  auto ch = host::UnixGroupChannel::connect(g.socket_path, g.group_options(), g.join_timeout);
  if (!ch.is_ok()) return {{"stage", "connect"}, {"status", status_json(ch.status())}};
  host::PeerOptions po;
  po.read_only = true;
  auto group = host::SharedTableGroup::join(**ch, po, {}, g.timeouts);
  if (!group.is_ok()) return {{"stage", "join"}, {"status", status_json(group.status())}};
  const HostTable& table = *(*group)->table();
  std::vector<std::vector<uint8_t>> want;
  for (int li = 0; li < table.n_layers(); ++li) {
    want.emplace_back(g.layer_bytes(li));
    fill_segment(want.back().data(), g.layer_bytes(li), g.seed, li);
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t checked = 0, bad = 0;
  std::mt19937_64 r(static_cast<uint64_t>(getpid()));
  // Look up for ~1.5 s (or die half-way), then the collective.
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500)) {
    if (die_after_ms > 0 && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(die_after_ms))
      raise(SIGKILL);
    for (int k = 0; k < 256; ++k) {
      const int li = static_cast<int>(r() % static_cast<uint64_t>(table.n_layers()));
      const uint64_t off = (r() % (g.layer_bytes(li) / 64)) * 64;
      ++checked;
      if (std::memcmp(layer_bytes_of(table, li) + off, want[static_cast<size_t>(li)].data() + off, 64) != 0) ++bad;
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  Status b = (*ch)->barrier("stop", g.timeouts.step);
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return {{"stage", "done"}, {"rows_checked", checked}, {"bad", bad}, {"barrier", status_json(b)}, {"waited_s", waited_s}};
}

}  // namespace

TEST(FaultGroup, PeerKilledDuringLookupsIsNamedAndOthersContinue) {
  Fixture f(host::BackingKind::kMemfd);
  Child good = fork_child([&] { return looking_peer(f.g, 0); });
  Child doomed = fork_child([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return looking_peer(f.g, 500);
  });
  // The leader runs the protocol, then waits at the same barrier as the peers.
  {
    auto listener = host::UnixGroupListener::listen(f.g.group_options());
    ASSERT_TRUE(listener.is_ok());
    auto group = f.g.lead();
    ASSERT_TRUE(group.is_ok());
    auto ch = (*listener)->accept_group(2, f.g.join_timeout);
    ASSERT_TRUE(ch.is_ok());
    host::ProtocolHooks hooks;
    const uint64_t seed = f.g.seed;
    hooks.load = fill_table(seed);
    ASSERT_TRUE((*group)->admit(**ch, hooks, f.g.timeouts).is_ok());
    const auto t0 = std::chrono::steady_clock::now();
    Status b = (*ch)->barrier("stop", f.g.timeouts.step);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(b.is_ok());
    EXPECT_EQ(b.code(), Code::kIo) << b.to_string();
    EXPECT_NE(b.message().find("rank 2"), std::string::npos) << b.to_string();
    EXPECT_NE(b.message().find("closed its connection"), std::string::npos) << b.to_string();
    EXPECT_LT(waited, 12.0) << "the dead peer must be seen by its closed connection, not the 15 s timeout";
    // The leader's own table is intact.
    for (int li = 0; li < f.g.n_segments; ++li)
      EXPECT_EQ(fnv64(layer_bytes_of(*(*group)->table(), li), f.g.layer_bytes(li)),
                expected_checksum(f.g.layer_bytes(li), seed, li));
  }
  json g = collect(good), d = collect(doomed);
  EXPECT_EQ(d["killed"], SIGKILL) << d.dump();
  ASSERT_EQ(g["stage"], "done") << g.dump();
  EXPECT_GT(g["rows_checked"].get<int64_t>(), 0);
  EXPECT_EQ(g["bad"], 0);
  EXPECT_NE(g["barrier"]["message"].get<std::string>().find("rank 2"), std::string::npos) << g.dump();
}

TEST(FaultGroup, LeaderKilledDuringLookupsPeersKeepValidRowsAndSeeItsDeath) {
  Fixture f(host::BackingKind::kMemfd);
  Child leader = fork_child([&] {
    LeaderPlan lp;
    lp.n_peers = 2;
    lp.after = [](host::SharedTableGroup&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      raise(SIGKILL);  // the leader dies while the peers look up
    };
    return run_leader(f.g, lp);
  });
  Child p1 = fork_child([&] { return looking_peer(f.g, 0); });
  Child p2 = fork_child([&] { return looking_peer(f.g, 0); });
  json l = collect(leader);
  EXPECT_EQ(l["killed"], SIGKILL) << l.dump();
  for (Child* c : {&p1, &p2}) {
    json r = collect(*c);
    ASSERT_EQ(r["stage"], "done") << r.dump();
    EXPECT_GT(r["rows_checked"].get<int64_t>(), 0);
    EXPECT_EQ(r["bad"], 0) << "rows changed after the leader died";
    EXPECT_FALSE(r["barrier"]["ok"].get<bool>());
    EXPECT_EQ(r["barrier"]["code_name"], "io") << r.dump();
    EXPECT_NE(r["barrier"]["message"].get<std::string>().find("leader"), std::string::npos) << r.dump();
    EXPECT_LT(r["waited_s"].get<double>(), 12.0);
  }
}
