// Shared-group protocol between real processes: a leader and forked peers see the same bytes and one
// physical copy (PSS), named files are unlinked once everyone attached yet stay readable, a late peer
// gets a clear error, read-only peers fault on a write, foreign or malformed peers are refused, a
// silent peer times out with its rank named, and a group that does not form says how many joined.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "group_support.hpp"
#include "sys/unix_socket.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

struct Fixture {
  TempDir sock_dir{"/tmp", "engram-mp-sock"};
  TempDir shm_dir{"/dev/shm", "engram-mp-shm"};
  GroupSetup g;
  explicit Fixture(host::BackingKind kind) {
    g.socket_path = sock_dir.path + "/g.sock";
    g.kind = kind;
    g.shm_dir = shm_dir.path;
    g.seed = rng()();
    g.segment_bytes = (64 + rng()() % 192) * 4096;  // 64..255 pages
  }
};

void expect_same_bytes(const json& peer, const GroupSetup& g) {
  ASSERT_TRUE(peer["status"]["ok"].get<bool>()) << peer.dump();
  ASSERT_EQ(peer["checksums"].size(), static_cast<size_t>(g.n_segments));
  for (const auto& c : peer["checksums"])
    EXPECT_EQ(c["fnv"].get<uint64_t>(),
              expected_checksum(g.layer_bytes(c["layer_index"].get<int>()), g.seed, c["layer_index"].get<int>()));
}

class GroupHappyPath : public ::testing::TestWithParam<host::BackingKind> {};

// Leader + 2 peers: same bytes everywhere, ranks 1 and 2, one physical copy (sum of PSS = table bytes).
TEST_P(GroupHappyPath, PeersSeeSameBytesAndOneCopy) {
  Fixture f(GetParam());
  PeerPlan pp;
  pp.measure = true;
  Child a = fork_child([&] { return run_peer(f.g, pp); });
  Child b = fork_child([&] { return run_peer(f.g, pp); });
  LeaderPlan lp;
  lp.measure = true;
  json leader = run_leader(f.g, lp);
  json pa = collect(a), pb = collect(b);
  ASSERT_TRUE(leader["status"]["ok"].get<bool>()) << leader.dump();
  expect_same_bytes(leader, f.g);
  expect_same_bytes(pa, f.g);
  expect_same_bytes(pb, f.g);
  std::set<int> ranks{pa["rank"].get<int>(), pb["rank"].get<int>()};
  EXPECT_EQ(ranks, (std::set<int>{1, 2}));
  // Every step recorded with one entry per rank; census texts gathered from all ranks.
  ASSERT_EQ(leader["steps"].size(), host::protocol_steps().size());
  for (const auto& s : leader["steps"]) {
    if (s["step"] == host::kStepDescribe) continue;
    ASSERT_EQ(s["entries"].size(), 3u) << s.dump();
    if (s["step"] == host::kStepCensusLoaded) {
      for (int r = 0; r < 3; ++r)
        EXPECT_EQ(s["entries"][r]["message"], "after load rank " + std::to_string(r) + " segments 2");
    }
  }
  // PSS: three mappers of the same pages each carry a third; a private copy would make each carry all.
  ASSERT_EQ(leader["measured"].size(), 3u);
  int64_t pss_sum = 0;
  for (const auto& m : leader["measured"]) {
    ASSERT_TRUE(m.is_object()) << leader["measured"].dump();
    EXPECT_EQ(m["rss"].get<int64_t>(), static_cast<int64_t>(f.g.mapped_bytes(0)));
    EXPECT_LT(m["pss"].get<int64_t>(), static_cast<int64_t>(f.g.mapped_bytes(0)) / 2);
    pss_sum += m["pss"].get<int64_t>();
  }
  EXPECT_NEAR(static_cast<double>(pss_sum), static_cast<double>(f.g.mapped_bytes(0)), 3 * 4096.0);
  // Named files are gone once everyone attached; nothing is left in the directory.
  EXPECT_EQ(leader["named_left_after_admit"], 0);
  EXPECT_TRUE(f.shm_dir.entries().empty());
}

INSTANTIATE_TEST_SUITE_P(Backings, GroupHappyPath,
                         ::testing::Values(host::BackingKind::kMemfd, host::BackingKind::kShmFile),
                         [](const auto& p) { return std::string(host::backing_kind_name(p.param)); });

// Named table: unlinked after attach, still readable by every peer afterwards (unlink-while-mapped).
TEST(GroupProtocol, UnlinkWhileMappedKeepsDataReadable) {
  Fixture f(host::BackingKind::kShmFile);
  PeerPlan pp;
  Child a = fork_child([&] { return run_peer(f.g, pp); });
  LeaderPlan lp;
  lp.n_peers = 1;
  json leader = run_leader(f.g, lp);
  json pa = collect(a);
  ASSERT_TRUE(leader["status"]["ok"].get<bool>()) << leader.dump();
  ASSERT_EQ(leader["paths"].size(), 2u);
  // The peer computed its checksums after the protocol, i.e. after the leader's unlink.
  expect_same_bytes(pa, f.g);
  for (const auto& p : pa["paths"]) {
    EXPECT_EQ(p.get<std::string>().rfind(f.shm_dir.path, 0), 0u);
    EXPECT_NE(access(p.get<std::string>().c_str(), F_OK), 0) << p;
  }
  EXPECT_EQ(leader["named_left_after_admit"], 0);
}

// A peer that comes after the named file was unlinked fails at attach with "joined late", and so does
// the leader's second round, naming that peer.
TEST(GroupProtocol, PeerJoiningLateAfterUnlinkGetsClearError) {
  Fixture f(host::BackingKind::kShmFile);
  PeerPlan pp;
  Child first = fork_child([&] { return run_peer(f.g, pp); });
  auto listener = host::UnixGroupListener::listen(f.g.group_options());
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  auto group = f.g.lead();
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  host::ProtocolHooks hooks;
  hooks.load = fill_table(f.g.seed);
  {
    auto ch = (*listener)->accept_group(1, f.g.join_timeout);
    ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
    Status s = (*group)->admit(**ch, hooks, f.g.timeouts);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  expect_same_bytes(collect(first), f.g);
  EXPECT_TRUE(f.shm_dir.entries().empty());
  Child late = fork_child([&] { return run_peer(f.g, pp); });
  auto ch = (*listener)->accept_group(1, f.g.join_timeout);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  Status s = (*group)->admit(**ch, hooks, f.g.timeouts);
  json l = collect(late);
  EXPECT_EQ(s.code(), Code::kIo) << s.to_string();
  EXPECT_NE(s.message().find("step 'attach': rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("joined late"), std::string::npos) << s.message();
  EXPECT_EQ(l["stage"], "join");
  EXPECT_EQ(l["status"]["code_name"], "io");
  EXPECT_NE(l["status"]["message"].get<std::string>().find("joined late"), std::string::npos) << l.dump();
}

// A read-only attach maps PROT_READ: a write faults (SIGSEGV) instead of changing the shared rows.
TEST(GroupProtocol, ReadOnlyPeerFaultsOnWrite) {
  Fixture f(host::BackingKind::kMemfd);
  PeerPlan pp;
  pp.read_only = true;
  Child a = fork_child([&] { return run_peer(f.g, pp); });
  LeaderPlan lp;
  lp.n_peers = 1;
  json leader = run_leader(f.g, lp);
  json pa = collect(a);
  ASSERT_TRUE(leader["status"]["ok"].get<bool>()) << leader.dump();
  expect_same_bytes(pa, f.g);
  EXPECT_EQ(pa["write_probe_signal"], SIGSEGV);
  // ... and the leader's bytes are unchanged.
  expect_same_bytes(leader, f.g);
}

// A peer that stops answering (SIGSTOP at "register") is named by the leader's timeout, and the other
// peer gets the same error from the leader rather than waiting on its own.
TEST(GroupProtocol, SilentPeerTimesOutWithRankNamed) {
  Fixture f(host::BackingKind::kMemfd);
  f.g.timeouts.step = host::Millis(1500);
  f.g.peer_grace = host::Millis(3000);
  PeerPlan pp;
  pp.crash_step = host::kStepRegister;
  pp.crash_rank = 2;
  pp.stop_at_step = true;
  Child a = fork_child([&] { return run_peer(f.g, pp); });
  Child b = fork_child([&] { return run_peer(f.g, pp); });
  LeaderPlan lp;
  json leader = run_leader(f.g, lp);
  // The stopped peer never reports: collect the one that does, then kill the other (SIGKILL works on
  // a stopped process).
  pollfd p[2] = {{a.read_fd, POLLIN, 0}, {b.read_fd, POLLIN, 0}};
  ASSERT_GT(poll(p, 2, 30000), 0);
  Child& talker = (p[0].revents & (POLLIN | POLLHUP)) ? a : b;
  Child& stopped = &talker == &a ? b : a;
  json other = collect(talker);
  kill(stopped.pid, SIGKILL);
  EXPECT_EQ(collect(stopped)["killed"], SIGKILL);
  const std::string m = leader["status"]["message"].get<std::string>();
  EXPECT_EQ(leader["status"]["code_name"], "timeout") << leader.dump();
  EXPECT_NE(m.find("step 'register': rank 2"), std::string::npos) << m;
  EXPECT_NE(m.find("did not answer step 'register' within 1500 ms"), std::string::npos) << m;
  ASSERT_TRUE(other.contains("status")) << other.dump();
  EXPECT_EQ(other["rank"], 1);
  EXPECT_EQ(other["status"]["code_name"], "timeout") << other.dump();
  EXPECT_NE(other["status"]["message"].get<std::string>().find("rank 2"), std::string::npos) << other.dump();
}

// Fewer peers than expected: the leader's join fails with the count; the peer that came is told why.
TEST(GroupProtocol, GroupThatDoesNotFormSaysHowManyJoined) {
  Fixture f(host::BackingKind::kMemfd);
  f.g.join_timeout = host::Millis(2000);
  f.g.peer_grace = host::Millis(2000);
  PeerPlan pp;
  Child a = fork_child([&] { return run_peer(f.g, pp); });
  json leader = run_leader(f.g, LeaderPlan{});
  json pa = collect(a);
  EXPECT_EQ(leader["stage"], "accept");
  EXPECT_EQ(leader["status"]["code_name"], "timeout");
  EXPECT_NE(leader["status"]["message"].get<std::string>().find("1 of 2 peers joined"), std::string::npos)
      << leader.dump();
  EXPECT_EQ(pa["stage"], "connect");
  EXPECT_EQ(pa["status"]["code_name"], "timeout");
  EXPECT_NE(pa["status"]["message"].get<std::string>().find("the group did not form"), std::string::npos) << pa.dump();
}

// Wrong group name, wrong protocol version, wrong wire version and an oversized hello are refused with a
// reason; the leader keeps accepting and the real peer's group forms.
TEST(GroupProtocol, MalformedHellosAreRefusedAndGroupStillForms) {
  Fixture f(host::BackingKind::kMemfd);
  Child wrong_group = fork_child([&] {
    GroupSetup g = f.g;
    g.group = "other";
    auto ch = host::UnixGroupChannel::connect(g.socket_path, g.group_options(), g.join_timeout);
    return json{{"status", status_json(ch.status())}};
  });
  auto raw = [&](const std::function<void(int fd)>& send_fn) {
    return fork_child([&, send_fn] {
      auto s = sys::connect_unix(f.g.socket_path, sys::deadline_after(std::chrono::seconds(20)));
      if (!s.is_ok()) return json{{"status", status_json(s.status())}};
      send_fn(s->fd());
      auto m = sys::recv_message(*s, 1 << 20, sys::deadline_after(std::chrono::seconds(20)));
      if (!m.is_ok()) return json{{"answer", "none"}, {"status", status_json(m.status())}};
      return json{{"answer_type", m->type}, {"answer", m->payload}};
    });
  };
  auto header = [](uint32_t magic, uint16_t version, uint16_t type, uint64_t payload, uint32_t n_fds) {
    std::string h(sys::kWireHeaderBytes, '\0');
    std::memcpy(h.data(), &magic, 4);
    std::memcpy(h.data() + 4, &version, 2);
    std::memcpy(h.data() + 6, &type, 2);
    std::memcpy(h.data() + 8, &payload, 8);
    std::memcpy(h.data() + 16, &n_fds, 4);
    return h;
  };
  Child bad_version = raw([&](int fd) {
    const std::string body = R"({"protocol":1,"group":"mp","pid":1})";
    const std::string h = header(sys::kWireMagic, 9, 1, body.size(), 0) + body;
    (void)!send(fd, h.data(), h.size(), MSG_NOSIGNAL);
  });
  Child bad_protocol = raw([&](int fd) {
    sys::UnixSocket s(dup(fd));
    (void)sys::send_message(s, 1, R"({"protocol":99,"group":"mp","pid":1})", {}, sys::deadline_after(std::chrono::seconds(5)));
  });
  Child oversized = raw([&](int fd) {
    const std::string h = header(sys::kWireMagic, sys::kWireVersion, 1, uint64_t{1} << 40, 0);
    (void)!send(fd, h.data(), h.size(), MSG_NOSIGNAL);
  });
  Child garbage = raw([&](int fd) {
    std::string junk(100, '\0');
    for (auto& c : junk) c = static_cast<char>(rng()());
    (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  });
  // The real peer arrives last: wait until the five others have been refused.
  auto listener = host::UnixGroupListener::listen(f.g.group_options());
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*listener)->rejections().size() < 5 && std::chrono::steady_clock::now() < give_up) {
    auto none = (*listener)->accept_group(1, host::Millis(300));
    ASSERT_FALSE(none.is_ok());
  }
  EXPECT_EQ((*listener)->rejections().size(), 5u);
  std::string all;
  for (const auto& r : (*listener)->rejections()) all += r + "\n";
  EXPECT_NE(all.find("asks for group 'other'"), std::string::npos) << all;
  EXPECT_NE(all.find("wire version 9"), std::string::npos) << all;
  EXPECT_NE(all.find("protocol version 99"), std::string::npos) << all;
  EXPECT_NE(all.find("exceeds the limit"), std::string::npos) << all;
  EXPECT_NE(all.find("bad magic"), std::string::npos) << all;
  json wg = collect(wrong_group);
  EXPECT_EQ(wg["status"]["code_name"], "invalid_argument") << wg.dump();
  EXPECT_NE(wg["status"]["message"].get<std::string>().find("the leader refused"), std::string::npos) << wg.dump();
  for (Child* c : {&bad_version, &bad_protocol, &oversized, &garbage}) {
    json r = collect(*c);
    EXPECT_EQ(r.value("answer_type", 0), 3) << r.dump();  // kMsgReject
  }
  PeerPlan pp;
  Child real = fork_child([&] { return run_peer(f.g, pp); });
  auto ch = (*listener)->accept_group(1, f.g.join_timeout);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  auto group = f.g.lead();
  ASSERT_TRUE(group.is_ok());
  Status s = (*group)->admit(**ch, {}, f.g.timeouts);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  json r = collect(real);
  EXPECT_TRUE(r["status"]["ok"].get<bool>()) << r.dump();
}

// A peer whose gather entry is not JSON is dropped as malformed; the others are told.
TEST(GroupProtocol, MalformedGatherEntryIsRefused) {
  Fixture f(host::BackingKind::kMemfd);
  PeerPlan pp;
  Child good = fork_child([&] { return run_peer(f.g, pp); });
  Child evil = fork_child([&] {
    // Speak the protocol by hand: hello, wait for welcome and the broadcast, then send junk.
    auto s = sys::connect_unix(f.g.socket_path, sys::deadline_after(std::chrono::seconds(20)));
    if (!s.is_ok()) return json{{"status", status_json(s.status())}};
    (void)sys::send_message(*s, 1, json{{"protocol", host::wire::kProtocolVersion}, {"group", "mp"}, {"pid", 1}}.dump(), {},
                            sys::deadline_after(std::chrono::seconds(5)));
    auto w = sys::recv_message(*s, 1 << 20, sys::deadline_after(std::chrono::seconds(20)));
    if (!w.is_ok()) return json{{"status", status_json(w.status())}};
    const int rank = json::parse(w->payload)["rank"].get<int>();
    auto d = sys::recv_message(*s, 1 << 20, sys::deadline_after(std::chrono::seconds(20)));
    (void)sys::send_message(*s, 5, "{not json", {}, sys::deadline_after(std::chrono::seconds(5)));
    auto r = sys::recv_message(*s, 1 << 20, sys::deadline_after(std::chrono::seconds(20)));
    return json{{"rank", rank}, {"after", status_json(r.status())}};
  });
  auto listener = host::UnixGroupListener::listen(f.g.group_options());
  ASSERT_TRUE(listener.is_ok());
  auto group = f.g.lead();
  ASSERT_TRUE(group.is_ok());
  auto ch = (*listener)->accept_group(2, f.g.join_timeout);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  Status s = (*group)->admit(**ch, {}, f.g.timeouts);
  json e = collect(evil), gd = collect(good);
  const std::string evil_rank = "rank " + std::to_string(e.value("rank", -1));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("step 'attach': " + evil_rank), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("sent a malformed message"), std::string::npos) << s.message();
  // The evil peer was cut off (EOF), not answered.
  EXPECT_EQ(e["after"]["code_name"], "io") << e.dump();
  EXPECT_EQ(gd["stage"], "join");
  EXPECT_EQ(gd["status"]["code_name"], "invalid_argument") << gd.dump();
  EXPECT_NE(gd["status"]["message"].get<std::string>().find(evil_rank), std::string::npos) << gd.dump();
}

// Root only: a process of another uid is refused by SO_PEERCRED (when it can reach the socket at all),
// and cannot reach a socket in a 0700 directory in the first place.
TEST(GroupProtocol, ForeignUidPeerIsRejected) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another uid (setuid); running as uid " << geteuid();
  Fixture f(host::BackingKind::kMemfd);
  TempDir open_dir{"/tmp", "engram-mp-open"};
  chmod(open_dir.path.c_str(), 0711);
  GroupSetup g = f.g;
  g.socket_path = open_dir.path + "/g.sock";
  auto as_nobody = [](const std::string& path, const host::UnixGroupOptions& o) {
    return fork_child([path, o] {
      if (setgid(65534) != 0 || setuid(65534) != 0) return json{{"setuid", false}};
      auto ch = host::UnixGroupChannel::connect(path, o, host::Millis(3000));
      return json{{"setuid", true}, {"status", status_json(ch.status())}};
    });
  };
  host::UnixGroupOptions lo = g.group_options();
  lo.require_private_dir = false;
  auto listener = host::UnixGroupListener::listen(lo);
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  chmod(g.socket_path.c_str(), 0666);  // let the foreign process reach the socket: SO_PEERCRED must stop it
  // One foreign process checks the leader too (and refuses a leader of another uid); one accepts our
  // uid, so that the leader's own check is what stops it.
  Child foreign_strict = as_nobody(g.socket_path, g.group_options());
  host::UnixGroupOptions trusting = g.group_options();
  trusting.allowed_uids = {geteuid()};
  Child foreign = as_nobody(g.socket_path, trusting);
  PeerPlan pp;
  Child real = fork_child([&] { return run_peer(g, pp); });
  auto ch = (*listener)->accept_group(1, g.join_timeout);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  auto group = g.lead();
  ASSERT_TRUE(group.is_ok());
  Status s = (*group)->admit(**ch, {}, g.timeouts);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  json rr = collect(real);
  // The foreigners may have come after the real peer: keep the door open until both were turned away.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*listener)->rejections().size() < 2 && std::chrono::steady_clock::now() < give_up)
    (void)(*listener)->accept_group(1, host::Millis(200));
  json fs = collect(foreign_strict);
  json fr = collect(foreign);
  ASSERT_TRUE(fs["setuid"].get<bool>());
  EXPECT_EQ(fs["status"]["code_name"], "permission") << fs.dump();
  EXPECT_NE(fs["status"]["message"].get<std::string>().find("runs as uid 0, not as ours (65534)"), std::string::npos)
      << fs.dump();
  ASSERT_TRUE(fr["setuid"].get<bool>());
  EXPECT_EQ(fr["status"]["code_name"], "permission") << fr.dump();
  EXPECT_NE(fr["status"]["message"].get<std::string>().find("uid 65534 may not join"), std::string::npos) << fr.dump();
  EXPECT_TRUE(rr["status"]["ok"].get<bool>()) << rr.dump();
  ASSERT_EQ((*listener)->rejections().size(), 2u);
  for (const auto& r : (*listener)->rejections()) EXPECT_NE(r.find("uid 65534 may not join"), std::string::npos) << r;
  // In the default private (0700) directory the foreign process cannot even connect.
  auto l2 = host::UnixGroupListener::listen(f.g.group_options());
  ASSERT_TRUE(l2.is_ok());
  Child blocked_child = as_nobody(f.g.socket_path, f.g.group_options());
  json blocked = collect(blocked_child);
  EXPECT_EQ(blocked["status"]["code_name"], "permission") << blocked.dump();
}

}  // namespace
