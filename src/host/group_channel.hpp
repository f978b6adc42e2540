// Group channel: the collectives a shared group runs over -- broadcast (bytes, and descriptors where the
// channel can pass them), all-gather of one status + message per rank, barrier -- each bounded by a
// timeout. An engine that already has a process group (torch.distributed) implements GroupChannel and
// runs the same protocol (host/group_protocol.hpp). UnixGroupChannel is ours: a leader listening on an
// AF_UNIX socket in a directory only its owner can enter, peers checked with SO_PEERCRED, a star of
// SOCK_SEQPACKET connections; its messages are host/group_wire.hpp's.
//
// Thread safety: a channel is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engram/status.hpp"
#include "sys/unix_socket.hpp"

namespace engram::host {

using Millis = std::chrono::milliseconds;

// One rank's part of an all-gather.
struct RankEntry {
  int rank = 0;
  int pid = 0;          // process id as the channel knows it (0: unknown)
  Status status;        // this rank's result for the step
  std::string message;  // free text or JSON (e.g. a census, a replay report)
};

// First failed entry as a Status with that entry's code: "step 'attach': rank 2 (pid 4242): <error>".
// OK when every entry is OK.
Status first_failure(const std::string& step, const std::vector<RankEntry>& entries);

class GroupChannel {
 public:
  virtual ~GroupChannel() = default;
  virtual int rank() const = 0;        // 0 is the leader
  virtual int world_size() const = 0;  // leader + peers
  virtual bool can_pass_fds() const = 0;
  virtual std::string describe() const = 0;  // "unix:/run/user/0/engram/g.1f2e.sock, rank 1 of 3"

  // Rank 0's `bytes` and `fds` reach every other rank. On rank 0 both are inputs (the descriptors stay
  // the caller's); on the others both are outputs and the descriptors become the caller's to close.
  // A peer waits up to `timeout` for it. kUnsupported when fds is non-empty and !can_pass_fds().
  virtual Status broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, Millis timeout) = 0;
  // Every rank contributes `mine` and receives every rank's entry, indexed by rank. The leader waits up
  // to `timeout` for the peers; a peer that closed its connection, sent something malformed or did
  // not answer in time appears as a failed entry (kIo / kInvalidArgument / kTimeout) naming it, and is
  // dropped from the group. A non-OK Result means this rank's own link failed (a peer whose leader
  // is gone: kIo, or silent past timeout + grace: kTimeout).
  virtual Result<std::vector<RankEntry>> all_gather(const std::string& step, const RankEntry& mine,
                                                    Millis timeout) = 0;
  // all_gather of OK entries; the first failure (or this rank's link failure).
  Status barrier(const std::string& step, Millis timeout);
};

struct UnixGroupOptions {
  std::string group = "engram";        // peers must present the same name
  std::string socket_path;             // leader: "" = <sys::private_runtime_dir()>/<group>.<random>.sock
  bool require_private_dir = true;     // leader: the socket's directory must be 0700 and ours
  std::vector<uint32_t> allowed_uids;  // besides our own euid (SO_PEERCRED on both sides)
  size_t max_message_bytes = size_t{16} << 20;
  // A peer waits this much longer than the leader's timeout for the leader's answer, so that the
  // leader (not a peer's own clock) decides who was late.
  Millis peer_grace{2000};
  Millis hello_timeout{5000};  // leader: how long one connecting process may take to say hello
};

class UnixGroupChannel;

// The leader's listening endpoint. Peers that connect are admitted by accept_group().
class UnixGroupListener {
 public:
  // Creates the private directory (when socket_path is empty) and listens. kPermission when the
  // directory is not private (require_private_dir), kInvalidArgument when a live leader holds the path.
  static Result<std::unique_ptr<UnixGroupListener>> listen(const UnixGroupOptions& options);
  const std::string& socket_path() const { return listener_.path(); }
  int fd() const { return listener_.fd(); }
  // Admits connecting processes until `n_peers` joined: checks each one's uid (SO_PEERCRED), wire
  // version and group name, answers a refusal with its reason (it does not count). Then tells every
  // peer its rank (1..n in order of arrival) and the world size. kTimeout "join: 1 of 2 peers within
  // 10000 ms" (the peers that did join are told and dropped). `cancelled`, when given, is polled about
  // every 200 ms (a server's stop flag): true ends the wait the same way ("... before the wait was
  // cancelled").
  Result<std::unique_ptr<UnixGroupChannel>> accept_group(int n_peers, Millis timeout,
                                                         const std::function<bool()>& cancelled = {});
  // Reasons of refused connections since listen() ("uid 65534 is not allowed", "wire version 9").
  const std::vector<std::string>& rejections() const { return rejections_; }
  // No new peer can find the leader; existing connections stay.
  Status unlink_socket() { return listener_.unlink_path(); }

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
  // Leader: peers still connected.
  int alive_peers() const;

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
