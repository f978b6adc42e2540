// The library's group channel over Unix sockets (the public interface and its factories: engram/group_channel.hpp).
// UnixGroupListener is the leader's endpoint, UnixGroupChannel one rank's end of the star of SOCK_SEQPACKET
// connections; its messages are host/group_wire.hpp's. The internal code (replay harnesses, tests, the Python
// binding) uses these concrete types for what the interface does not carry: the listening descriptor, peer pids.
//
// Thread safety: a channel is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engram/group_channel.hpp"
#include "engram/status.hpp"
#include "sys/unix_socket.hpp"

namespace engram::host {

class UnixGroupChannel;

// The leader's listening endpoint. Peers that connect are admitted by accept_group().
class UnixGroupListener final : public GroupListener {
 public:
  // Creates the private directory (when socket_path is empty) and listens. kPermission when the
  // directory is not private (require_private_dir), kInvalidArgument when a live leader holds the path.
  static Result<std::unique_ptr<UnixGroupListener>> listen(const UnixGroupOptions& options);
  const std::string& socket_path() const override { return listener_.path(); }
  int fd() const { return listener_.fd(); }
  // Admits connecting processes until `n_peers` joined: checks each one's uid (SO_PEERCRED), wire
  // version and group name, answers a refusal with its reason (it does not count). Then tells every
  // peer its rank (1..n in order of arrival) and the world size. kTimeout "join: 1 of 2 peers within
  // 10000 ms" (the peers that did join are told and dropped). `cancelled`, when given, is polled about
  // every 200 ms (a server's stop flag): true ends the wait the same way ("... before the wait was
  // cancelled").
  Result<std::unique_ptr<UnixGroupChannel>> accept_group(int n_peers, Millis timeout,
                                                         const std::function<bool()>& cancelled = {});
  // GroupListener::accept: accept_group as the interface's channel.
  Result<std::unique_ptr<GroupChannel>> accept(int n_peers, Millis timeout,
                                               const std::function<bool()>& cancelled = {}) override;
  // Reasons of refused connections since listen() ("uid 65534 is not allowed", "wire version 9").
  const std::vector<std::string>& rejections() const override { return rejections_; }
  // No new peer can find the leader; existing connections stay.
  Status unlink_socket() override { return listener_.unlink_path(); }

 private:
  UnixGroupOptions options_;
  sys::UnixListener listener_;
  std::vector<std::string> rejections_;
};

class UnixGroupChannel final : public GroupChannel {
 public:
  // Peer: connects (retrying until the listener exists, up to `timeout`), checks the leader's uid,
  // says hello and waits for its rank until timeout + peer_grace. kPermission / kInvalidArgument
  // with the leader's reason when refused; kTimeout when no group formed in time.
  static Result<std::unique_ptr<UnixGroupChannel>> connect(const std::string& socket_path,
                                                           const UnixGroupOptions& options, Millis timeout);
  ~UnixGroupChannel() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  bool can_pass_fds() const override { return true; }
  std::string describe() const override;
  Status broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, Millis timeout) override;
  Result<std::vector<RankEntry>> all_gather(const std::string& step, const RankEntry& mine, Millis timeout) override;

  int leader_pid() const { return leader_pid_; }
  // Leader: pids of the peers by rank (index 0 is the leader itself).
  std::vector<int> pids() const;

 private:
  friend class UnixGroupListener;
  struct Peer {
    sys::UnixSocket socket;
    int rank = 0;
    int pid = 0;
    bool alive = true;
    Status death;  // why it left the group
  };
  UnixGroupChannel() = default;
  void drop(Peer& p, Status why);
  Result<std::vector<RankEntry>> leader_all_gather(const std::string& step, const RankEntry& mine, Millis timeout);
  Result<std::vector<RankEntry>> peer_all_gather(const std::string& step, const RankEntry& mine, Millis timeout);

  UnixGroupOptions options_;
  std::string socket_path_;
  int rank_ = 0;
  int world_ = 1;
  int leader_pid_ = 0;
  std::vector<Peer> peers_;     // leader: one per peer, index = rank - 1
  sys::UnixSocket to_leader_;   // peer
  Status leader_lost_;          // peer: set once the leader's connection failed
};

}  // namespace engram::host
