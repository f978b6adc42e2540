// `engram rank-worker` (hidden): one rank of `engram run --ranks N`, started by the parent with the
// group's socket and name. It joins the shared group, replays on the shared table and reports back
// through the group (src/replay/multi_rank.hpp); errors go to stderr and the exit code.
#include <set>

#include "args.hpp"
#include "command.hpp"
#include "replay/multi_rank.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace {

struct WorkerArgs {
  std::string socket;
  std::string group;
  int64_t join_ms = 60000, step_ms = 30000, load_ms = 600000, replay_ms = 3600000;
  std::string fault_at;
  int fault_rank = -1;
  int leader_pid = 0;
};

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<WorkerArgs>();
  sub.group("");  // hidden from `engram --help`: started by `engram run --ranks N` only
  sub.add_option("--socket", a->socket,
                 "Leader's socket; a socket not there yet is waited for up to --join-timeout-ms (a rank may start "
                 "before its leader listens); a path that is there and not a socket is refused at once")
      ->required()
      ->check(socket_path());
  sub.add_option("--group", a->group, "Shared group name")->required()->check(group_name());
  sub.add_option("--join-timeout-ms", a->join_ms,
                 "Give up joining (no socket, or nobody accepting) after this long (default 60000)")
      ->check(range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--step-timeout-ms", a->step_ms)->check(range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--load-timeout-ms", a->load_ms)->check(range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--replay-timeout-ms", a->replay_ms)->check(range(int64_t{1}, int64_t{1} << 40));
  std::set<std::string> steps(rank_fault_steps().begin(), rank_fault_steps().end());
  sub.add_option("--fault-at", a->fault_at, "Testing: SIGKILL this rank on entering this protocol step")
      ->check(CLI::IsMember(steps));
  sub.add_option("--fault-rank", a->fault_rank, "Testing: only this rank (default: every rank)")
      ->check(range(1, 1 << 20));
  sub.add_option("--leader-pid", a->leader_pid,
                 "The leader's pid: this rank is killed when the leader ends, and ends at once if it already has")
      ->check(CLI::PositiveNumber);
  return [a] {
    // First: a rank whose leader is gone (a signal, a crash) has nobody to join or to report to, and would hold
    // the leader's stdout and stderr until its join timeout.
    if (a->leader_pid > 0)
      if (Status s = sys::end_with_parent(a->leader_pid); !s.is_ok()) return report_failure("rank-worker", s);
    RankWorkerOptions o;
    o.socket_path = a->socket;
    o.group = a->group;
    o.join_timeout = host::Millis(a->join_ms);
    o.timeouts.step = host::Millis(a->step_ms);
    o.timeouts.load = host::Millis(a->load_ms);
    o.replay_timeout = host::Millis(a->replay_ms);
    o.fault_at = a->fault_at;
    o.fault_rank = a->fault_rank;
    Status s = run_rank_worker(o);
    if (!s.is_ok()) return report_failure("rank-worker", s);
    return 0;
  };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(rank_worker, "rank-worker", "One rank of `engram run --ranks N` (started by it)", engram::cli::setup);
