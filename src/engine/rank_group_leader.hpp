// The leader's start of a rank group, shared by `engram run --ranks` and `engram soak`: a sweep of the shm and
// socket directories (what dead leaders left, host/sweep.hpp), the file guardian (it is forked, so it starts before
// the leader has threads or mappings, and removes the socket if the leader is killed), then the listening socket
// (armed in the guardian). The table itself is Engine::serve_group's.
#pragma once

#include <memory>
#include <string>

#include "engram/status.hpp"
#include "host/group_channel.hpp"
#include "host/sweep.hpp"
#include "sys/process.hpp"

namespace engram {

struct RankGroupLeader {
  host::SweepReport swept;  // stale tables and sockets of dead leaders, removed first (host/sweep.hpp)
  std::shared_ptr<sys::FileGuardian> guardian;
  std::unique_ptr<host::UnixGroupListener> listener;
};

// Errors: the guardian's, the listener's.
Result<RankGroupLeader> start_rank_group_leader(const std::string& group_name, const std::string& shm_dir);

}  // namespace engram
