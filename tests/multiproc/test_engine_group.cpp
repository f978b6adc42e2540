// A shared group through the Engine: a leader (Engine::lead_group) and 2 peers (Engine::join_group, forked) over a
// UnixGroupChannel. Every rank reads the leader's synthetic rows through its own engine, bit for bit with the
// reference; the protocol ran its steps in order on every rank; the census "after registration" was taken after
// each rank's registration step (the census message records what the rank had registered then: nothing on the
// cpu backend, whose registration is a no-op); peers are read-only views of ONE copy; a peer's options can come
// from the leader's job (Engine::join_group's configure).
#include <gtest/gtest.h>

#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "group_support.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

EngramLayout small_layout() {
  EngramLayout l;
  l.name = "engine-group";
  l.layer_ids = {1, 3};
  l.max_ngram = 3;
  l.heads_per_order = 2;
  l.vocab_size_per_order = {3000, 4000};
  l.d = 64;
  l.format = RowFormat::kFused;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

// Rows of every layer looked up through `e` and compared with synth_row(seed) decoded by the reference.
json check_rows(Engine& e, uint64_t seed, std::mt19937_64& rng) {
  const EngramLayout& l = e.layout();
  int64_t checked = 0, wrong = 0;
  std::vector<uint8_t> payload(static_cast<size_t>(l.d)), scales(static_cast<size_t>(l.d / 32));
  std::vector<uint16_t> ref(static_cast<size_t>(l.d));
  for (int li = 0; li < l.n_layers(); ++li) {
    const int64_t tokens = 16;
    std::vector<int64_t> ids(static_cast<size_t>(tokens * l.heads()));
    for (auto& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(l.rows(li)));
    std::vector<uint16_t> out(ids.size() * static_cast<size_t>(l.d), 0xFFFF);
    auto r = e.lookup(li, ids.data(), tokens, out.data());
    if (!r.is_ok()) return {{"error", r.status().to_string()}};
    for (size_t p = 0; p < ids.size(); ++p) {
      synth_row(seed, li, ids[p], l.d, payload.data(), scales.data());
      decode_row_reference(payload.data(), scales.data(), l.d, ref.data());
      wrong += std::memcmp(ref.data(), out.data() + p * static_cast<size_t>(l.d), static_cast<size_t>(l.d) * 2) != 0;
      ++checked;
    }
  }
  return {{"checked", checked}, {"wrong", wrong}};
}

json steps_json(const Engine& e) {
  json steps = json::array();
  for (const auto& s : e.group_steps()) {
    json entries = json::array();
    for (const auto& x : s.entries) entries.push_back({{"rank", x.rank}, {"ok", x.status.is_ok()}, {"message", x.message}});
    steps.push_back({{"step", s.step}, {"entries", entries}});
  }
  return steps;
}

TEST(EngineGroup, LeaderAndTwoPeersServeOneTableThroughTheirEngines) {
  TempDir sock_dir{"/tmp", "engram-eg"};
  const std::string socket = sock_dir.path + "/g.sock";
  const uint64_t seed = rng()();
  host::UnixGroupOptions go;
  go.group = "eg";
  go.socket_path = socket;
  auto peer = [&] {
    return fork_child([&] {
      auto ch = host::UnixGroupChannel::connect(socket, go, host::Millis(20000));
      if (!ch.is_ok()) return json{{"stage", "connect"}, {"status", status_json(ch.status())}};
      EngineOptions o;
      o.backend = BackendKind::kCpu;
      o.lookup_threads = 1;
      // The leader's job names how many lookup threads every rank uses.
      auto configure = [](const std::string& job, const EngramLayout&, EngineOptions& opts) -> Status {
        const json j = json::parse(job, nullptr, false);
        if (!j.is_object()) return Status(Code::kInvalidArgument, "job is not JSON: " + job);
        return set_engine_option(opts, "lookup_threads", std::to_string(j.value("threads", 0)));
      };
      auto e = Engine::join_group(o, **ch, configure);
      if (!e.is_ok()) return json{{"stage", "join"}, {"status", status_json(e.status())}};
      std::mt19937_64 r(seed + static_cast<uint64_t>((*ch)->rank()));
      json out = check_rows(**e, seed, r);
      out["stage"] = "joined";
      out["rank"] = (*e)->group_rank();
      out["read_only"] = (*e)->table().read_only();
      out["lookup_threads"] = (*e)->describe()["lookup_threads"];
      out["steps"] = steps_json(**e);
      json points = json::array();  // the points in the order taken (one census per layer at each)
      for (const auto& c : (*e)->censuses())
        if (points.empty() || points.back() != host::census_point_name(c.point)) points.push_back(host::census_point_name(c.point));
      out["census_points"] = points;
      // Still attached while the leader measures Pss.
      (void)(*ch)->barrier("measured", host::Millis(20000));
      return out;
    });
  };
  Child a = peer();
  Child b = peer();
  auto listener = host::UnixGroupListener::listen(go);
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  auto ch = (*listener)->accept_group(2, host::Millis(20000));
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.content.kind = TableContent::Kind::kSynthetic;
  o.content.seed = seed;
  o.table.group = "eg";
  auto leader = Engine::lead_group(small_layout(), o, **ch, json{{"threads", 2}}.dump());
  ASSERT_TRUE(leader.is_ok()) << leader.status().to_string();
  std::mt19937_64 r(seed);
  const json mine = check_rows(**leader, seed, r);
  EXPECT_EQ(mine.value("wrong", -1), 0) << mine.dump();
  // One copy: the leader's Pss of layer 0's mapping is about a third of its Rss while all three map it.
  const auto [rss, pss] = smaps_rss_pss((*leader)->table().view(0).data);
  Status measured = (*ch)->barrier("measured", host::Millis(20000));
  EXPECT_TRUE(measured.is_ok()) << measured.to_string();
  json pa = collect(a), pb = collect(b);
  for (const json& p : {pa, pb}) {
    ASSERT_EQ(p["stage"], "joined") << p.dump();
    EXPECT_GT(p["checked"].get<int64_t>(), 0);
    EXPECT_EQ(p["wrong"], 0) << p.dump();
    EXPECT_TRUE(p["read_only"].get<bool>());
    EXPECT_EQ(p["lookup_threads"], 2) << "the leader's job configured the peer";
    // Every rank took its census after registration and after load, in the protocol's order.
    EXPECT_EQ(p["census_points"], json::array({"after registration", "after load"})) << p.dump();
  }
  EXPECT_EQ((std::set<int>{pa["rank"].get<int>(), pb["rank"].get<int>()}), (std::set<int>{1, 2}));
  EXPECT_GT(rss, 0);
  EXPECT_LT(pss, rss / 2) << "three mappers of one copy: Pss should be about a third of Rss";
  // Protocol steps in order; at "census after registration" every rank reports what it had registered (the cpu
  // backend registers nothing: null) and its census; the register step ran before it.
  const auto& steps = (*leader)->group_steps();
  std::vector<std::string> names;
  for (const auto& s : steps) names.push_back(s.step);
  EXPECT_EQ(names, host::protocol_steps());
  for (const auto& s : steps) {
    if (s.step != host::kStepCensusRegistered) continue;
    ASSERT_EQ(s.entries.size(), 3u);
    for (const auto& x : s.entries) {
      const json m = json::parse(x.message, nullptr, false);
      ASSERT_TRUE(m.is_object()) << x.message;
      EXPECT_EQ(m["backend"], "cpu") << x.message;
      EXPECT_TRUE(m["registration"].is_null()) << x.message;
      ASSERT_TRUE(m["censuses"].is_array());
      EXPECT_EQ(m["censuses"].size(), 2u) << "one census per layer";
      for (const auto& c : m["censuses"]) EXPECT_EQ(c["point"], "after registration");
    }
  }
  EXPECT_EQ((*leader)->group_rank(), 0);
  EXPECT_EQ((*leader)->group_world_size(), 3);
}

// The group's table is HostTable's, head-range shards included: a peer attaches a sharded table (each shard its
// own backing, mapped side by side where the leader has it) and reads the same rows.
class ShardedGroup : public ::testing::TestWithParam<const char*> {};

TEST_P(ShardedGroup, PeerAttachesHeadShardsAsOneTable) {
  TempDir sock_dir{"/tmp", "engram-eg"};
  TempDir shm_dir{"/dev/shm", "engram-eg-shm"};
  const std::string socket = sock_dir.path + "/g.sock";
  const uint64_t seed = rng()();
  host::UnixGroupOptions go;
  go.group = "eg";
  go.socket_path = socket;
  const EngramLayout layout = small_layout();
  Child p = fork_child([&] {
    auto ch = host::UnixGroupChannel::connect(socket, go, host::Millis(20000));
    if (!ch.is_ok()) return json{{"status", status_json(ch.status())}};
    EngineOptions o;
    o.backend = BackendKind::kCpu;
    auto e = Engine::join_group(o, **ch);
    if (!e.is_ok()) return json{{"status", status_json(e.status())}};
    std::mt19937_64 r(seed + 1);
    json out = check_rows(**e, seed, r);
    out["status"] = status_json(Status::ok());
    out["shards"] = (*e)->table().n_shards();
    out["parts"] = (*e)->table().parts().size();
    out["shard1_begin"] = (*e)->table().shard_heads(1).begin;
    return out;
  });
  auto listener = host::UnixGroupListener::listen(go);
  ASSERT_TRUE(listener.is_ok());
  auto ch = (*listener)->accept_group(1, host::Millis(20000));
  ASSERT_TRUE(ch.is_ok());
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.content.seed = seed;
  ASSERT_TRUE(set_engine_option(o, "backing", GetParam()).is_ok());
  o.table.shm_dir = shm_dir.path;
  o.table.head_shards = *parse_head_shards("2", layout.heads());
  auto leader = Engine::lead_group(layout, o, **ch);
  ASSERT_TRUE(leader.is_ok()) << leader.status().to_string();
  json r = collect(p);
  ASSERT_TRUE(r["status"]["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["wrong"], 0) << r.dump();
  EXPECT_GT(r["checked"].get<int64_t>(), 0);
  EXPECT_EQ(r["shards"], 2);
  EXPECT_EQ(r["parts"], 2 * layout.n_layers());
  EXPECT_EQ(r["shard1_begin"], (*leader)->table().shard_heads(1).begin);
  EXPECT_TRUE(shm_dir.entries().empty()) << "named shards are unlinked once the peer attached";
}

INSTANTIATE_TEST_SUITE_P(Backings, ShardedGroup, ::testing::Values("memfd", "shm"));

// A peer whose options cannot apply fails the group's attach step with its own message, on every rank.
TEST(EngineGroup, APeerThatCannotConfigureFailsTheGroupByName) {
  TempDir sock_dir{"/tmp", "engram-eg"};
  const std::string socket = sock_dir.path + "/g.sock";
  host::UnixGroupOptions go;
  go.group = "eg";
  go.socket_path = socket;
  Child p = fork_child([&] {
    auto ch = host::UnixGroupChannel::connect(socket, go, host::Millis(20000));
    if (!ch.is_ok()) return json{{"status", status_json(ch.status())}};
    auto configure = [](const std::string&, const EngramLayout&, EngineOptions& opts) {
      return set_engine_option(opts, "fast_path", "sometimes");
    };
    auto e = Engine::join_group(EngineOptions{}, **ch, configure);
    return json{{"status", status_json(e.status())}};
  });
  auto listener = host::UnixGroupListener::listen(go);
  ASSERT_TRUE(listener.is_ok());
  auto ch = (*listener)->accept_group(1, host::Millis(20000));
  ASSERT_TRUE(ch.is_ok());
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  auto leader = Engine::lead_group(small_layout(), o, **ch);
  ASSERT_FALSE(leader.is_ok());
  EXPECT_EQ(leader.status().code(), Code::kInvalidArgument) << leader.status().to_string();
  EXPECT_NE(leader.status().message().find("step 'attach': rank 1"), std::string::npos) << leader.status().to_string();
  EXPECT_NE(leader.status().message().find("sometimes"), std::string::npos) << leader.status().to_string();
  json r = collect(p);
  EXPECT_EQ(r["status"]["code_name"], "invalid_argument") << r.dump();
}

}  // namespace
