// `engram run --ranks N` and `engram serve-table`: rank processes replay on ONE shared table (same rows
// everywhere, Pss adds up to one copy, every rank exits 0, nothing left behind); a rank killed during
// the protocol fails the run with its rank and step named, no rank outlives the call and no named file
// survives; serve-table hands its table to peers round after round and stops cleanly on SIGTERM.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

#include "group_support.hpp"
#include "support/cli.hpp"
#include "replay/multi_rank.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;

namespace {

RankJob small_job() {
  RankJob j;
  j.layout = "v41-flash-mini";
  j.table_bytes = (4 + static_cast<int64_t>(rng()() % 5)) << 20;  // 4..8 MiB over 2 Engram layers
  j.seed = rng()() % 1000000;
  j.batch = 8;
  j.steps = 3;
  j.warmup = 1;
  j.layer_us = 5;
  j.ids = "zipf";
  j.engine = {{"threads", "1"}};
  j.compute_only_baseline = false;
  j.verify_rows = 32;
  j.timeline = "none";
  return j;
}

MultiRankOptions small_options(int ranks) {
  MultiRankOptions o;
  o.ranks = ranks;
  o.exe = ENGRAM_CLI_PATH;
  o.timeouts.step = host::Millis(30000);
  o.timeouts.load = host::Millis(60000);
  o.join_timeout = host::Millis(60000);
  o.replay_timeout = host::Millis(120000);
  return o;
}

bool no_children_left() {
  errno = 0;
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

TEST(MultiRank, TwoRanksReplayOnOneSharedTable) {
  const RankJob job = small_job();
  auto r = run_multi_rank(job, small_options(2));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const json& j = *r;
  EXPECT_EQ(j["mode"], "multi-rank");
  ASSERT_EQ(j["per_rank"].size(), 2u);
  const auto layout = job_layout(job);
  ASSERT_TRUE(layout.is_ok());
  std::set<int> pids;
  int expect_rank = 0;
  for (const auto& pr : j["per_rank"]) {
    EXPECT_EQ(pr["exit"], "exit 0") << pr.dump();
    // Replay ranks 0..N-1, in order; the group numbers them 1..N (its leader is 0).
    EXPECT_EQ(pr["rank"], expect_rank);
    EXPECT_EQ(pr["group_rank"], expect_rank + 1);
    EXPECT_EQ(pr["report"]["rank"], expect_rank);
    ++expect_rank;
    const auto& rep = pr["report"];
    EXPECT_EQ(rep["lookup"]["rows"], job.steps * job.batch * layout->heads() * layout->n_layers());
    EXPECT_EQ(rep["verify"]["mismatches"], 0);
    EXPECT_EQ(rep["verify"]["rows_checked"], job.verify_rows * layout->n_layers());
    EXPECT_TRUE(rep["read_only"].get<bool>());
    EXPECT_GT(rep["lookup"]["rows_per_s"].get<double>(), 0);
    pids.insert(pr["pid"].get<int>());
  }
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_EQ(pids.count(getpid()), 0u);
  EXPECT_TRUE(j["same_bytes"].get<bool>());
  // Different ids per rank (DP ranks serve different sequences): each rank has its own stream.
  EXPECT_NE(j["per_rank"][0]["report"]["ids_stream"], j["per_rank"][1]["report"]["ids_stream"]);
  // The protocol ran every step with all three processes.
  ASSERT_EQ(j["group"]["protocol"].size(), host::protocol_steps().size());
  for (const auto& s : j["group"]["protocol"]) {
    if (s["step"] == host::kStepDescribe) continue;
    EXPECT_EQ(s["entries"].size(), 3u) << s.dump();
  }
  // Census at the named points, every one known and with every page resident after load.
  int after_load = 0;
  for (const auto& c : j["census"])
    if (c["point"] == "after load") {
      ++after_load;
      EXPECT_TRUE(c["known"].get<bool>()) << c.dump();
      EXPECT_EQ(c["not_resident"], 0) << c.dump();
    }
  EXPECT_EQ(after_load, layout->n_layers());
  // One copy: the Pss of all processes adds up to (at most) the table, not to N+1 tables.
  const int64_t table = j["memory"]["table_bytes"].get<int64_t>();
  const int64_t pss = j["memory"]["pss_sum_bytes"].get<int64_t>();
  EXPECT_GT(pss, table * 9 / 10) << j["memory"].dump();
  EXPECT_LT(pss, table + (256 << 10)) << j["memory"].dump();
  // The socket is gone, and so are the ranks and the guardian.
  EXPECT_NE(access(j["group"]["socket"].get<std::string>().c_str(), F_OK), 0);
  EXPECT_TRUE(no_children_left());
}

TEST(MultiRank, NamedBackingLeavesNoFile) {
  TempDir shm{"/dev/shm", "engram-mp-run"};
  MultiRankOptions o = small_options(2);
  o.backing = "shm";
  o.shm_dir = shm.path;
  auto r = run_multi_rank(small_job(), o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE((*r)["same_bytes"].get<bool>());
  EXPECT_TRUE(shm.entries().empty());
  for (const auto& p : (*r)["table"]["placement"])
    EXPECT_NE(p["backing"].get<std::string>().find(shm.path), std::string::npos) << p.dump();
}

class RankCrash : public ::testing::TestWithParam<std::string> {};

// A rank SIGKILLed at a step: the run fails naming rank 2 and the step; no rank is left running and
// no named file survives.
TEST_P(RankCrash, RunFailsNamingRankAndStep) {
  const std::string step = GetParam();
  TempDir shm{"/dev/shm", "engram-mp-run"};
  MultiRankOptions o = small_options(2);
  o.backing = "shm";
  o.shm_dir = shm.path;
  o.extra_rank_args = {"--fault-at", step, "--fault-rank", "2"};
  auto r = run_multi_rank(small_job(), o);
  ASSERT_FALSE(r.is_ok());
  const std::string m = r.status().message();
  EXPECT_EQ(r.status().code(), Code::kIo) << m;
  EXPECT_NE(m.find("rank 2 (pid"), std::string::npos) << m;
  EXPECT_NE(m.find("closed its connection during step '" + step + "'"), std::string::npos) << m;
  EXPECT_TRUE(shm.entries().empty());
  EXPECT_TRUE(no_children_left());
}

INSTANTIATE_TEST_SUITE_P(Steps, RankCrash, ::testing::Values("attach", "load", "replayed", "report"),
                         [](const auto& p) { return p.param; });

using Out = engram::testing::CliResult;
Out run_cli(const std::string& args) { return engram::testing::run_engram(args); }

TEST(MultiRank, CliRunRanksJsonAndText) {
  const std::string common =
      "run --ranks 2 --table-size 4MiB --batch 4 --steps 2 --warmup 1 --layer-us 5 --ids zipf --threads 1 "
      "--timeline none --no-baseline --seed " + std::to_string(rng()() % 1000);
  Out o = run_cli(common + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["mode"], "multi-rank");
  EXPECT_EQ(j["per_rank"].size(), 2u);
  EXPECT_TRUE(j["same_bytes"].get<bool>());
  Out t = run_cli(common);
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("ONE shared copy"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("rows identical on every rank: yes"), std::string::npos) << t.out;
  // anon-thp cannot be shared: bad input, exit 2.
  EXPECT_EQ(run_cli(common + " --backing anon-thp").code, 2);
  // One trace per rank, named by the replay rank 0..N-1, and each named in the report.
  TempDir dir{"/tmp", "engram-mp-trace"};
  const std::string base = dir.path + "/t.json";
  std::string with_trace = common;
  with_trace.replace(with_trace.find("--timeline none"), std::string("--timeline none").size(), "--timeline " + base);
  Out tr = run_cli(with_trace + " --json");
  ASSERT_EQ(tr.code, 0) << tr.out;
  json tj = json::parse(tr.out, nullptr, false);
  ASSERT_FALSE(tj.is_discarded()) << tr.out;
  for (int r = 0; r < 2; ++r) {
    const std::string f = base + ".rank" + std::to_string(r) + ".json";
    EXPECT_EQ(access(f.c_str(), F_OK), 0) << f;
    EXPECT_EQ(tj["per_rank"][r]["report"]["timeline"], f);
  }
  EXPECT_NE(access((base + ".rank2.json").c_str(), F_OK), 0);
}

// Reads one line from `fd` (bounded wait); "" at EOF or timeout.
std::string read_line(int fd, std::string& buffer, int timeout_ms = 60000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    buffer.append(buf, static_cast<size_t>(n));
  }
}

TEST(ServeTable, HandsTableToPeersAndStopsOnSigterm) {
  TempDir sock{"/tmp", "engram-mp-serve"};
  const std::string path = sock.path + "/s.sock";
  const uint64_t seed = rng()() % 100000;
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const int pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(ENGRAM_CLI_PATH, "engram", "serve-table", "--table-size", "4MiB", "--seed", std::to_string(seed).c_str(),
          "--socket", path.c_str(), "--group", "g", "--json", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string buffer;
  json ready = json::parse(read_line(out[0], buffer), nullptr, false);
  ASSERT_TRUE(ready.is_object()) << buffer;
  EXPECT_EQ(ready["event"], "ready");
  EXPECT_EQ(ready["schema"], "engram.serve-table/1");
  EXPECT_EQ(ready["socket"], path);
  auto job = RankJob::from_json(ready["job"].dump());
  ASSERT_TRUE(job.is_ok()) << job.status().to_string();
  EXPECT_EQ(job->seed, seed);
  auto layout = job_layout(*job);
  ASSERT_TRUE(layout.is_ok());
  // Two peers, one after the other (two rounds), each checks rows against the synthetic content.
  for (int round = 1; round <= 2; ++round) {
    Child peer = fork_child([&] {
      host::UnixGroupOptions go;
      go.group = "g";
      auto ch = host::UnixGroupChannel::connect(path, go, host::Millis(30000));
      if (!ch.is_ok()) return json{{"status", status_json(ch.status())}};
      host::PeerOptions po;
      po.read_only = true;
      auto g = host::SharedTableGroup::join(**ch, po, {}, {});
      if (!g.is_ok()) return json{{"status", status_json(g.status())}};
      std::vector<TableSpan> spans;
      for (int li = 0; li < (*g)->table()->n_layers(); ++li) spans.push_back((*g)->table()->span(li));
      int mismatches = 0, checked = 0;
      std::vector<uint8_t> payload(static_cast<size_t>(layout->d)), scales(static_cast<size_t>(layout->d / 32));
      for (int li = 0; li < layout->n_layers(); ++li)
        for (int k = 0; k < 50; ++k) {
          const auto& s = spans[static_cast<size_t>(li)];
          const int64_t row = static_cast<int64_t>(rng()() % static_cast<uint64_t>(s.rows));
          synth_row(seed, li, row, s.d, payload.data(), scales.data());
          mismatches += std::memcmp(payload.data(), s.payload_of(row), payload.size()) != 0 ||
                        std::memcmp(scales.data(), s.scales_of(row), scales.size()) != 0;
          ++checked;
        }
      return json{{"status", status_json(Status::ok())}, {"rank", (*ch)->rank()}, {"checked", checked},
                  {"mismatches", mismatches}};
    });
    json pr = collect(peer);
    ASSERT_TRUE(pr["status"]["ok"].get<bool>()) << pr.dump();
    EXPECT_EQ(pr["rank"], 1);
    EXPECT_EQ(pr["mismatches"], 0);
    EXPECT_EQ(pr["checked"], 100);
    json ev = json::parse(read_line(out[0], buffer), nullptr, false);
    ASSERT_TRUE(ev.is_object()) << buffer;
    EXPECT_EQ(ev["event"], "round");
    EXPECT_EQ(ev["round"], round);
    EXPECT_TRUE(ev["ok"].get<bool>()) << ev.dump();
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  json stopped = json::parse(read_line(out[0], buffer), nullptr, false);
  ASSERT_TRUE(stopped.is_object()) << buffer;
  EXPECT_EQ(stopped["event"], "stopped");
  EXPECT_EQ(stopped["schema"], "engram.serve-table/1");
  EXPECT_EQ(stopped["signal"], SIGTERM);
  EXPECT_EQ(stopped["peers_served"], 2);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  close(out[0]);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "socket left behind";
}

}  // namespace
