// The leader's start of a rank group (see rank_group_leader.hpp).
#include "engine/rank_group_leader.hpp"

namespace engram {

Result<RankGroupLeader> start_rank_group_leader(const std::string& group_name, const std::string& shm_dir) {
  RankGroupLeader l;
  l.swept = host::sweep_stale({host::default_sweep_dirs(shm_dir)});
  ENGRAM_ASSIGN_OR_RETURN(sys::FileGuardian guard, sys::FileGuardian::start());
  l.guardian = std::make_shared<sys::FileGuardian>(std::move(guard));
  host::UnixGroupOptions gopt;
  gopt.group = group_name;
  ENGRAM_ASSIGN_OR_RETURN(l.listener, host::UnixGroupListener::listen(gopt));
  ENGRAM_RETURN_IF_ERROR(l.guardian->arm(l.listener->socket_path()));
  return l;
}

}  // namespace engram
