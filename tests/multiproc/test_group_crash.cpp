// kill -9 of the leader or of a peer at each protocol step: the survivors get a clear error naming the
// step and the dead process, found by the closed connection (kIo), not by waiting out the timeout
// (kTimeout); and no named table file survives -- the leader unlinks on failure, the guardian unlinks
// when the leader itself is the one killed.
#include <gtest/gtest.h>

#include "group_support.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

struct CrashCase {
  bool leader_dies = false;
  std::string step;
  host::BackingKind kind = host::BackingKind::kShmFile;
};

std::string case_name(const CrashCase& c) {
  std::string s = std::string(c.leader_dies ? "Leader" : "Peer") + "_" + c.step + "_" + host::backing_kind_name(c.kind);
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class GroupCrash : public ::testing::TestWithParam<CrashCase> {};

TEST_P(GroupCrash, SurvivorsGetClearErrorAndNoFileSurvives) {
  const CrashCase c = GetParam();
  TempDir sock_dir{"/tmp", "engram-mp-sock"};
  TempDir shm_dir{"/dev/shm", "engram-mp-shm"};
  GroupSetup g;
  g.socket_path = sock_dir.path + "/g.sock";
  g.kind = c.kind;
  g.shm_dir = shm_dir.path;
  g.seed = rng()();
  g.segment_bytes = (16 + rng()() % 48) * 4096;
  // Long timeouts on purpose: the error must come from the closed connection, long before these.
  g.timeouts = {host::Millis(60000), host::Millis(60000)};

  LeaderPlan lp;
  PeerPlan pp;
  if (c.leader_dies) {
    lp.crash_step = c.step;
  } else {
    pp.crash_step = c.step;
    pp.crash_rank = 2;
  }
  Child leader = fork_child([&] { return run_leader(g, lp); });
  Child p1 = fork_child([&] { return run_peer(g, pp); });
  Child p2 = fork_child([&] { return run_peer(g, pp); });
  json l = collect(leader, std::chrono::seconds(90));
  json a = collect(p1, std::chrono::seconds(90));
  json b = collect(p2, std::chrono::seconds(90));
  const std::string quoted_step = "step '" + c.step + "'";

  if (c.leader_dies) {
    EXPECT_EQ(l["killed"], SIGKILL) << l.dump();
    for (const json* p : {&a, &b}) {
      ASSERT_TRUE(p->contains("status")) << p->dump();
      const std::string m = (*p)["status"]["message"].get<std::string>();
      EXPECT_EQ((*p)["stage"], "join") << p->dump();
      EXPECT_EQ((*p)["status"]["code_name"], "io") << m;
      EXPECT_NE(m.find(quoted_step), std::string::npos) << m;
      EXPECT_NE(m.find("the leader (pid"), std::string::npos) << m;
      EXPECT_NE(m.find("closed the connection"), std::string::npos) << m;
    }
  } else {
    const json& dead = a.contains("killed") ? a : b;
    const json& alive = a.contains("killed") ? b : a;
    EXPECT_EQ(dead["killed"], SIGKILL) << a.dump() << b.dump();
    ASSERT_TRUE(alive.contains("status")) << alive.dump();
    EXPECT_EQ(alive["rank"], 1);
    const std::string lm = l["status"]["message"].get<std::string>();
    const std::string pm = alive["status"]["message"].get<std::string>();
    EXPECT_EQ(l["stage"], "admit") << l.dump();
    EXPECT_EQ(l["status"]["code_name"], "io") << lm;
    EXPECT_NE(lm.find("rank 2 (pid"), std::string::npos) << lm;
    EXPECT_NE(lm.find("closed its connection"), std::string::npos) << lm;
    // The peer that died before "describe" was even received is found at "attach", the next step
    // where the leader listens; otherwise at the step where it died.
    const std::string seen_at = c.step == host::kStepDescribe ? "step 'attach'" : quoted_step;
    EXPECT_NE(lm.find(seen_at), std::string::npos) << lm;
    EXPECT_EQ(alive["stage"], "join") << alive.dump();
    EXPECT_EQ(alive["status"]["code_name"], "io") << pm;
    EXPECT_NE(pm.find("rank 2 (pid"), std::string::npos) << pm;
    EXPECT_NE(pm.find(seen_at), std::string::npos) << pm;
    EXPECT_EQ(l["named_left_after_admit"], 0) << l.dump();
  }
  // No named table survives: none is left once every process is gone (the guardian may take a moment
  // after a leader's death).
  const auto left = shm_dir.wait_until_no("");
  EXPECT_TRUE(left.empty()) << left.size() << " file(s) left, first " << (left.empty() ? "" : left[0]);
}

std::vector<CrashCase> crash_cases() {
  std::vector<CrashCase> v;
  for (bool leader : {true, false})
    for (const auto& s : host::protocol_steps()) v.push_back({leader, s, host::BackingKind::kShmFile});
  v.push_back({true, host::kStepLoad, host::BackingKind::kMemfd});
  v.push_back({false, host::kStepAttach, host::BackingKind::kMemfd});
  return v;
}

INSTANTIATE_TEST_SUITE_P(EachStep, GroupCrash, ::testing::ValuesIn(crash_cases()),
                         [](const auto& p) { return case_name(p.param); });

}  // namespace
