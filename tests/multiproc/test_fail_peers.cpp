// A leader that fails before admitting its peers (here: Engine::lead_group cannot place its table with
// bind:<a node that does not exist>) tells them at once: every peer's join() returns the leader's code and message,
// not a timeout, although the step timeout is ten minutes. Same for a leader that refuses a memfd
// table on a channel that cannot pass descriptors (admit's own refusal).
#include <gtest/gtest.h>

#include "engram/engine.hpp"
#include "group_support.hpp"
#include "sys/numa.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

GroupSetup long_timeouts(const TempDir& sock_dir) {
  GroupSetup g;
  g.socket_path = sock_dir.path + "/g.sock";
  g.kind = host::BackingKind::kMemfd;
  g.timeouts = {host::Millis(600000), host::Millis(600000)};
  g.join_timeout = host::Millis(60000);
  return g;
}

}  // namespace

TEST(FailPeers, CreateFailureReachesEveryPeerAtOnce) {
  TempDir sock_dir{"/tmp", "engram-mp-failpeers"};
  const GroupSetup g = long_timeouts(sock_dir);
  const int missing = sys::memory_nodes().back() + 1;
  Child leader = fork_child([&]() -> json {
    auto listener = host::UnixGroupListener::listen(g.group_options());
    if (!listener.is_ok()) return {{"stage", "listen"}, {"status", status_json(listener.status())}};
    auto channel = (*listener)->accept_group(2, g.join_timeout);
    if (!channel.is_ok()) return {{"stage", "accept"}, {"status", status_json(channel.status())}};
    // The engine's leader: its table cannot be placed, so the peers get that failure in place of the description.
    EngineOptions o;
    o.backend = BackendKind::kCpu;
    o.table = g.table_options();
    auto policy = parse_placement("bind:" + std::to_string(missing));
    if (!policy.is_ok()) return {{"stage", "parse"}, {"status", status_json(policy.status())}};
    o.table.placement = *policy;
    o.step_timeout_ms = g.timeouts.step.count();
    auto engine = Engine::lead_group(g.layout(), o, **channel);
    if (engine.is_ok()) return {{"stage", "create"}, {"status", status_json(Status::ok())}};
    return {{"stage", "failed"}, {"status", status_json(engine.status())}};
  });
  Child p1 = fork_child([&] { return run_peer(g, {}); });
  Child p2 = fork_child([&] { return run_peer(g, {}); });
  const json l = collect(leader, std::chrono::seconds(90));
  const json a = collect(p1, std::chrono::seconds(90));
  const json b = collect(p2, std::chrono::seconds(90));
  ASSERT_EQ(l["stage"], "failed") << l.dump();
  const std::string leader_message = l["status"]["message"];
  EXPECT_EQ(l["status"]["code_name"], "invalid_argument") << l.dump();
  for (const json* p : {&a, &b}) {
    ASSERT_EQ((*p)["stage"], "join") << p->dump();
    const std::string m = (*p)["status"]["message"];
    EXPECT_EQ((*p)["status"]["code_name"], "invalid_argument") << m;
    EXPECT_NE(m.find("the leader failed"), std::string::npos) << m;
    EXPECT_NE(m.find("node " + std::to_string(missing)), std::string::npos) << m;
    EXPECT_NE(leader_message.find("node " + std::to_string(missing)), std::string::npos) << leader_message;
  }
  EXPECT_TRUE(sock_dir.entries().empty());
}

TEST(FailPeers, DecodedFailureCarriesTheLeadersCode) {
  auto d = host::wire::decode_description(
      R"({"protocol": 2, "group": "g", "error": {"code": 6, "sys": 28, "error": "table does not fit"}})");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->leader_failure.code(), Code::kNoSpace);
  EXPECT_EQ(d->leader_failure.sys_error(), 28);
  EXPECT_NE(d->leader_failure.message().find("table does not fit"), std::string::npos);
  EXPECT_TRUE(d->segments.empty());
  EXPECT_EQ(d->group, "g");
  auto bad = host::wire::decode_description(R"({"protocol": 2, "error": {"code": 0, "sys": 0, "error": ""}})");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << "an OK 'failure' is malformed";
}
