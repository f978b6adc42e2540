// Kill matrix: a shared-table group (leader, its guardian, two peers) killed with SIGKILL at chosen
// instants -- the leader alone, one peer, or the whole process group -- across create, fallocate,
// prefault, attach, register, load and replay, for memfd and shm tables; then "the next start"
// (the sweep a leader runs at its start, host/sweep.hpp) and the checks: no file or owner record
// left in the shm directory, no socket or record in the socket directory, no process holding or
// mapping the trial's table, and Shmem back to its baseline at the end. And a live group's table is
// never removed by another's sweep. The same for the CLI's processes is test_kill_matrix_cli.cpp.
//
// Instants: each process writes a marker line when it enters a phase; a calibration run of each
// backing measures how long every phase lasts; a trial waits for its phase's marker and kills after
// a delay drawn (fixed seed) inside that phase. fallocate and the populate of the prefault alternate
// chunk by chunk (placement.cpp): "fallocate" trials kill within the first chunks, "prefault" ones
// later. Every trial counts whatever it hit; the assertions are on what is left, never on timing.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include "group_support.hpp"
#include "host/sweep.hpp"
#include "support/cli.hpp"
#include "sys/process.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kSegmentBytes = 16u << 20;  // two segments: 32 MiB per trial
constexpr uint64_t kSeed = 20;                  // instants and extra picks
const std::vector<std::string> kPhases = {"create", "fallocate", "prefault", "attach", "register", "load", "replay"};

int g_mark_fd = -1;

void mark(const std::string& line) {
  const std::string l = line + "\n";
  (void)!write(g_mark_fd, l.data(), l.size());
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- inspection ----------------------------------------------------------------------------------

int64_t meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k, unit;
  int64_t v = 0;
  while (in >> k >> v >> unit)
    if (k == key + ":") return v;
  return -1;
}

// Processes (other than ours) that map or hold a descriptor of an object whose name contains `tag`.
std::vector<std::string> holders_of(const std::string& tag) {
  std::vector<std::string> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream maps("/proc/" + pid + "/maps");
    std::string line;
    bool hit = false;
    while (!hit && std::getline(maps, line)) hit = line.find(tag) != std::string::npos;
    const std::string fd_dir = "/proc/" + pid + "/fd";
    if (DIR* fds = opendir(fd_dir.c_str())) {
      while (!hit) {
        dirent* f = readdir(fds);
        if (f == nullptr) break;
        char buf[512];
        const ssize_t n = readlink((fd_dir + "/" + f->d_name).c_str(), buf, sizeof buf - 1);
        if (n > 0) hit = std::string(buf, static_cast<size_t>(n)).find(tag) != std::string::npos;
      }
      closedir(fds);
    }
    if (hit) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

// ---- one group, library level ----------------------------------------------------------------------

struct Dirs {
  TempDir sock{"/tmp", "engram-km-sock"};
  TempDir shm{"/dev/shm", "engram-km-shm"};
};

struct TrialSetup {
  host::BackingKind kind = host::BackingKind::kShmFile;
  std::string tag;  // in every backing name of the trial
  std::string socket_path;
  std::string shm_dir;
};

// Two fused Engram layers of about kSegmentBytes each.
EngramLayout trial_layout() {
  GroupSetup g;
  g.segment_bytes = kSegmentBytes;
  g.n_segments = 2;
  return g.layout();
}

// The trial's table: its tag in every backing name (the table's group), each named file armed in the guardian as
// soon as it exists (what Engine::lead_group does), a marker when the file is there.
TableOptions trial_table_options(const TrialSetup& t, std::shared_ptr<sys::FileGuardian> guardian) {
  TableOptions o;
  o.backing.kind = t.kind;
  o.shm_dir = t.shm_dir;
  o.group = t.tag;
  o.prefault_threads = 1;  // a longer, steadier prefault to aim at
  o.on_named_created = [guardian](const std::string& path) {
    ENGRAM_RETURN_IF_ERROR(guardian->arm(path));
    mark("L allocate");
    return Status::ok();
  };
  return o;
}

host::UnixGroupOptions trial_channel_options(const TrialSetup& t) {
  host::UnixGroupOptions o;
  o.group = "km";
  o.socket_path = t.socket_path;
  return o;
}

const host::ProtocolTimeouts kTimeouts{host::Millis(20000), host::Millis(20000)};
// A peer whose leader died before admitting it can only wait this long (nothing tells it); a leader
// whose peer died before connecting waits a second more for it. Short: several trials end so.
const host::Millis kJoinTimeout{2000};

// Reads the first pages of every layer for ~40 ms: the "replay" of the trial.
void replay(const HostTable& t) {
  const auto t0 = Clock::now();
  while (ms_since(t0) < 40)
    for (int li = 0; li < t.n_layers(); ++li) {
      const TableSpan s = t.span(li);
      (void)fnv64(s.data, std::min<uint64_t>(static_cast<uint64_t>(s.rows * s.stride_bytes), 4u << 20));
    }
}

[[noreturn]] void leader_main(const TrialSetup& t) {
  mark("L start");
  auto guard = sys::FileGuardian::start();
  if (!guard.is_ok()) _exit(3);
  auto guardian = std::make_shared<sys::FileGuardian>(std::move(*guard));
  auto listener = host::UnixGroupListener::listen(trial_channel_options(t));
  if (!listener.is_ok()) _exit(4);
  if (!guardian->arm((*listener)->socket_path()).is_ok()) _exit(5);
  mark("L create");
  auto table = HostTable::create(trial_layout(), trial_table_options(t, guardian));
  if (!table.is_ok()) _exit(6);
  auto group = host::SharedTableGroup::lead(std::shared_ptr<HostTable>(std::move(*table)), "km", "", guardian);
  if (!group.is_ok()) _exit(6);
  mark("L accept");
  auto ch = (*listener)->accept_group(2, kJoinTimeout + host::Millis(1000));
  if (!ch.is_ok()) _exit(7);
  host::ProtocolHooks hooks;
  hooks.on_step = [](const std::string& step, int) { mark("L " + step); };
  hooks.load = [](HostTable& tab) {
    for (int li = 0; li < tab.n_layers(); ++li) {
      const TableSpan s = tab.span(li);
      fill_segment(s.data, static_cast<uint64_t>(s.rows * s.stride_bytes), kSeed, li);
    }
    return Status::ok();
  };
  if (!(*group)->admit(**ch, hooks, kTimeouts).is_ok()) _exit(8);
  mark("L replay");
  replay(*(*group)->table());
  _exit((*ch)->barrier("replayed", kTimeouts.step).is_ok() ? 0 : 9);
}

[[noreturn]] void peer_main(const TrialSetup& t, int index) {
  const std::string who = "P" + std::to_string(index);
  mark(who + " connect");
  auto ch = host::UnixGroupChannel::connect(t.socket_path, trial_channel_options(t), kJoinTimeout);
  if (!ch.is_ok()) _exit(3);
  host::ProtocolHooks hooks;
  hooks.on_step = [who](const std::string& step, int) { mark(who + " " + step); };
  auto g = host::SharedTableGroup::join(**ch, {}, hooks, kTimeouts);
  if (!g.is_ok()) _exit(4);
  mark(who + " replay");
  replay(*(*g)->table());
  _exit((*ch)->barrier("replayed", kTimeouts.step).is_ok() ? 0 : 5);
}

enum class Victim { kNone, kLeader, kPeer, kGroup };
const char* victim_name(Victim v) {
  switch (v) {
    case Victim::kNone: return "none";
    case Victim::kLeader: return "leader";
    case Victim::kPeer: return "peer";
    case Victim::kGroup: return "group";
  }
  return "?";
}

struct Outcome {
  std::map<std::string, double> first_ms;  // marker -> first time seen
  std::string at_kill;                     // the victim's last marker when the kill was sent ("" = no kill)
  bool killed = false;
  bool hung = false;
};

// Runs one group; kills `victim` `delay_ms` after `marker` first appears (kNone: no kill).
Outcome run_group(const TrialSetup& t, Victim victim, const std::string& marker, double delay_ms) {
  Outcome out;
  int p[2];
  if (pipe(p) != 0) std::abort();
  g_mark_fd = p[1];
  std::fflush(nullptr);
  const int leader = fork();
  if (leader == 0) {
    close(p[0]);
    setpgid(0, 0);
    leader_main(t);
  }
  setpgid(leader, leader);
  int peers[2];
  for (int i = 0; i < 2; ++i) {
    peers[i] = fork();
    if (peers[i] == 0) {
      close(p[0]);
      setpgid(0, leader);
      peer_main(t, i + 1);
    }
    setpgid(peers[i], leader);
  }
  close(p[1]);
  const auto t0 = Clock::now();
  std::string buf, last;
  bool eof = false;
  double kill_at = -1;
  for (;;) {
    if (!eof) {
      pollfd pf{p[0], POLLIN, 0};
      if (poll(&pf, 1, 1) > 0) {
        char b[4096];
        const ssize_t n = read(p[0], b, sizeof b);
        if (n <= 0) eof = true;
        else buf.append(b, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          const std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          const double now = ms_since(t0);
          out.first_ms.emplace(line, now);
          // The victim's own last phase: the leader's for a leader or group kill, P1's for a peer.
          if (line.rfind(victim == Victim::kPeer ? "P1 " : "L ", 0) == 0) last = line;
          if (victim != Victim::kNone && kill_at < 0 && line == marker) kill_at = now + delay_ms;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (kill_at >= 0 && !out.killed && ms_since(t0) >= kill_at) {
      const int target = victim == Victim::kLeader ? leader : victim == Victim::kPeer ? peers[0] : -leader;
      (void)kill(target, SIGKILL);
      out.killed = true;
      out.at_kill = last;
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (eof && kill(-leader, 0) != 0 && errno == ESRCH) break;
    if (ms_since(t0) > 45000) {
      out.hung = true;
      (void)kill(-leader, SIGKILL);
    }
  }
  close(p[0]);
  return out;
}

// What the trial left in its directories (entry names).
std::vector<std::string> left_in(const Dirs& d) {
  std::vector<std::string> out;
  for (auto& n : d.shm.entries()) out.push_back(d.shm.path + "/" + n);
  for (auto& n : d.sock.entries()) out.push_back(d.sock.path + "/" + n);
  return out;
}

// The window [lo, hi) in ms after its marker in which a trial of `phase` kills, from a calibration.
struct Aim {
  std::string marker;
  double lo_ms = 0, hi_ms = 0;
};

Aim aim_for(const std::string& phase, Victim v, host::BackingKind kind, const Outcome& cal) {
  auto at = [&](const std::string& m) {
    auto it = cal.first_ms.find(m);
    return it == cal.first_ms.end() ? -1.0 : it->second;
  };
  const std::string who = v == Victim::kPeer ? "P1 " : "L ";
  const bool named = kind == host::BackingKind::kShmFile;
  const double create = at("L create"), alloc = at("L allocate"), accept = at("L accept");
  if (phase == "create") return {"L create", 0, std::max(0.05, (named ? alloc : accept) - create) * (named ? 0.9 : 0.1)};
  if (phase == "fallocate") {
    if (named) return {"L allocate", 0, 0.3};
    return {"L create", 0.1 * (accept - create), 0.3 * (accept - create)};
  }
  if (phase == "prefault") {
    if (named) return {"L allocate", 0.1 * (accept - alloc), 0.9 * (accept - alloc)};
    return {"L create", 0.3 * (accept - create), 0.9 * (accept - create)};
  }
  // Protocol steps and replay: from the step's marker to the next step's.
  const std::vector<std::string> order = {"attach", "register", "census after registration", "load", "ready",
                                          "census after load", "replay"};
  const auto it = std::find(order.begin(), order.end(), phase);
  const double begin = at(who + phase);
  double end = begin + 40;
  if (it != order.end() && it + 1 != order.end() && at(who + *(it + 1)) > begin) end = at(who + *(it + 1));
  return {who + phase, 0, std::max(0.05, 0.9 * (end - begin))};
}

struct Tally {
  int trials = 0, killed = 0, left_before_sweep = 0, swept = 0, left_after = 0;
  double ms = 0;  // wall time of the trials (to keep the matrix cheap)
};

}  // namespace

TEST(KillMatrix, EveryPhaseEveryVictimLeavesNothingAfterTheNextStart) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // the guardians of killed leaders come back to us
  const int64_t shmem_before = meminfo_kib("Shmem");
  std::mt19937_64 pick(kSeed);
  std::map<host::BackingKind, Outcome> calibration;
  struct Trial {
    host::BackingKind kind;
    Victim victim;
    std::string phase;
  };
  std::vector<Trial> trials;
  for (auto kind : {host::BackingKind::kMemfd, host::BackingKind::kShmFile})
    for (Victim v : {Victim::kLeader, Victim::kPeer, Victim::kGroup})
      for (const auto& ph : kPhases) trials.push_back({kind, v, ph});
  for (int i = 0; i < 14; ++i)  // extra trials: shm (named objects) at random phases and victims
    trials.push_back({host::BackingKind::kShmFile, static_cast<Victim>(1 + pick() % 3), kPhases[pick() % kPhases.size()]});

  std::map<std::string, Tally> tally;  // "<kind> <victim> <phase>"
  std::map<std::string, int> hit;      // the victim's last marker when the kill was sent
  int index = 0;
  for (auto kind : {host::BackingKind::kMemfd, host::BackingKind::kShmFile}) {
    Dirs d;
    TrialSetup t{kind, "km-cal" + std::to_string(getpid()) + "-" + host::backing_kind_name(kind),
                 d.sock.path + "/km.sock", d.shm.path};
    calibration[kind] = run_group(t, Victim::kNone, "", 0);
    ASSERT_FALSE(calibration[kind].hung);
    ASSERT_TRUE(calibration[kind].first_ms.count("L replay")) << "the calibration run did not complete";
    ASSERT_TRUE(left_in(d).empty()) << left_in(d).front();
  }
  for (const Trial& tr : trials) {
    Dirs d;
    TrialSetup t{tr.kind, "km" + std::to_string(index++) + "-" + std::to_string(getpid()), d.sock.path + "/km.sock",
                 d.shm.path};
    const Aim aim = aim_for(tr.phase, tr.victim, tr.kind, calibration[tr.kind]);
    const double delay = aim.lo_ms + (aim.hi_ms - aim.lo_ms) * std::uniform_real_distribution<double>(0, 1)(pick);
    const auto t_trial = Clock::now();
    const Outcome o = run_group(t, tr.victim, aim.marker, delay);
    const std::string what = std::string(host::backing_kind_name(tr.kind)) + " " + victim_name(tr.victim) + " " +
                             tr.phase + " (kill " + std::to_string(delay) + " ms after '" + aim.marker + "', at '" +
                             o.at_kill + "')";
    EXPECT_FALSE(o.hung) << what << ": a process outlived the 45 s bound";
    const auto before = left_in(d);
    // A live leader cleans up after a dead peer by itself; only a dead leader may leave things.
    if (tr.victim == Victim::kPeer) {
      EXPECT_TRUE(before.empty()) << what << ": left " << before.front();
    }
    // The next start.
    host::SweepOptions so;
    so.dirs = {d.shm.path, d.sock.path};
    const host::SweepReport swept = host::sweep_stale(so);
    EXPECT_TRUE(swept.errors.empty()) << what << ": " << swept.to_json().dump();
    const auto after = left_in(d);
    EXPECT_TRUE(after.empty()) << what << ": after the sweep " << after.size() << " left, first " << after.front();
    const auto holders = holders_of(t.tag);
    EXPECT_TRUE(holders.empty()) << what << ": pid " << holders.front() << " still holds the table";
    Tally& y = tally[std::string(host::backing_kind_name(tr.kind)) + " " + victim_name(tr.victim) + " " + tr.phase];
    ++y.trials;
    y.killed += o.killed ? 1 : 0;
    y.left_before_sweep += static_cast<int>(before.size());
    y.swept += static_cast<int>(swept.removed.size());
    y.left_after += static_cast<int>(after.size());
    y.ms += ms_since(t_trial);
    ++hit[o.at_kill.empty() ? "(no kill)" : o.at_kill];
  }
  // Shmem back to its baseline: a leaked 16 MiB segment per trial would show many times over.
  int64_t shmem_after = meminfo_kib("Shmem");
  for (int i = 0; i < 100 && shmem_after > shmem_before + 16 * 1024; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    shmem_after = meminfo_kib("Shmem");
  }
  EXPECT_LE(shmem_after, shmem_before + 16 * 1024) << "Shmem " << shmem_before << " kB before, " << shmem_after
                                                   << " kB after " << trials.size() << " trials";
  int total = 0, killed = 0, before = 0, swept = 0, after = 0;
  std::printf("%-34s %6s %6s %13s %6s %6s %8s\n", "kind victim phase", "trials", "killed", "left-by-kill", "swept",
              "left", "ms");
  // left-by-kill: directory entries (objects and owner records) after the kill; swept: objects (or
  // lone records) the next start removed; left: entries after it.
  for (const auto& [k, y] : tally) {
    std::printf("%-34s %6d %6d %13d %6d %6d %8.0f\n", k.c_str(), y.trials, y.killed, y.left_before_sweep, y.swept,
                y.left_after, y.ms);
    total += y.trials;
    killed += y.killed;
    before += y.left_before_sweep;
    swept += y.swept;
    after += y.left_after;
  }
  std::printf("library trials %d, killed %d, objects left by the kills %d, removed by the next start %d, left %d; "
              "Shmem %lld -> %lld kB\n",
              total, killed, before, swept, after, static_cast<long long>(shmem_before),
              static_cast<long long>(shmem_after));
  std::printf("the victim's last marker at the kill:");
  for (const auto& [m, n] : hit) std::printf(" '%s' %d;", m.c_str(), n);
  std::printf("\n");
  EXPECT_GE(total, 50);
  RecordProperty("trials", total);
  RecordProperty("left_after", after);
}

// ---- two groups side by side ----------------------------------------------------------------------

// A live group's table and socket survive another start's sweep; a dead group's in the same
// directories are removed; the live group then admits a peer that reads the right bytes.
TEST(KillMatrix, LiveGroupIsNeverSweptDeadOneIs) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Dirs d;
  const std::string pid = std::to_string(getpid());
  // Group C: created its table and socket, then was killed with its process group.
  TrialSetup dead{host::BackingKind::kShmFile, "km-dead-" + pid, d.sock.path + "/dead.sock", d.shm.path};
  const Outcome c = run_group(dead, Victim::kGroup, "L accept", 0);
  ASSERT_TRUE(c.killed);
  const auto dead_left = left_in(d);
  ASSERT_FALSE(dead_left.empty()) << "the killed group left nothing: nothing to sweep";
  // Group A: alive, its table made, waiting for its peer.
  GroupSetup live;
  live.socket_path = d.sock.path + "/live.sock";
  live.kind = host::BackingKind::kShmFile;
  live.shm_dir = d.shm.path;
  live.group = "km-live-" + pid;  // in every backing name of its table
  live.seed = rng()();
  live.segment_bytes = 1 << 20;
  live.join_timeout = host::Millis(60000);
  Child leader = fork_child([&]() -> json {
    LeaderPlan lp;
    lp.n_peers = 1;
    return run_leader(live, lp);
  });
  // Wait until A's files and socket exist.
  std::vector<std::string> a_objects;
  for (int i = 0; i < 5000 && a_objects.size() < 3; ++i) {
    a_objects.clear();
    for (auto& n : d.shm.entries())
      if (n.find("km-live") != std::string::npos && n.rfind(".engram-owner.", 0) != 0) a_objects.push_back(n);
    for (auto& n : d.sock.entries())
      if (n == "live.sock") a_objects.push_back(n);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(a_objects.size(), 3u) << "group A did not come up";
  // Group B starts: its sweep.
  host::SweepOptions so;
  so.dirs = {d.shm.path, d.sock.path};
  const host::SweepReport swept = host::sweep_stale(so);
  for (const auto& r : swept.removed)
    EXPECT_EQ(r.path.find("live"), std::string::npos) << "removed a live group's " << r.path;
  int kept_live = 0;
  for (const auto& k : swept.kept) kept_live += k.path.find("live") != std::string::npos ? 1 : 0;
  EXPECT_EQ(kept_live, 3) << swept.to_json().dump(2);
  for (const auto& p : dead_left) EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(p))) << p;
  // A is intact: a peer joins and reads the leader's bytes.
  Child peer = fork_child([&] { return run_peer(live, {}); });
  const json l = collect(leader, std::chrono::seconds(60));
  const json p = collect(peer, std::chrono::seconds(60));
  ASSERT_EQ(l["stage"], "admit") << l.dump();
  EXPECT_TRUE(l["status"]["ok"].get<bool>()) << l.dump();
  ASSERT_EQ(p["stage"], "joined") << p.dump();
  EXPECT_EQ(p["checksums"], l["checksums"]);
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  const auto left = left_in(d);
  EXPECT_TRUE(left.empty()) << left.front();
}
