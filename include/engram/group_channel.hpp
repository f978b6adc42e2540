// Group channel: the collectives a shared group runs over -- broadcast (bytes, and descriptors where the channel
// can pass them), all-gather of one status + message per rank, barrier -- each bounded by a timeout. The engine's
// shared-table protocol (Engine::lead_group / join_group) runs over any GroupChannel: an engine that already has a
// process group (torch.distributed) implements this class; the library's own is the Unix socket channel made by
// listen_unix_group (the leader) and connect_unix_group (each peer): a leader listening on an AF_UNIX socket in a
// directory only its owner can enter, peers checked with SO_PEERCRED (uid), a star of SOCK_SEQPACKET connections
// that passes descriptors (the table's memfds).
//
// Thread safety: a channel or listener is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram::host {
ENGRAM_API_BEGIN

using Millis = std::chrono::milliseconds;

// One rank's part of an all-gather.
struct RankEntry {
  int rank = 0;
  int pid = 0;          // process id as the channel knows it (0: unknown)
  Status status;        // this rank's result for the step
  std::string message;  // free text or JSON (e.g. a census, a replay report)
};

// What happened at one step of the shared-table protocol (Engine::group_steps): its duration on this rank and every
// rank's entry.
struct StepRecord {
  std::string step;
  double seconds = 0;
  std::vector<RankEntry> entries;
};

// First failed entry as a Status with that entry's code: "step 'attach': rank 2 (pid 4242): <error>".
// OK when every entry is OK.
Status first_failure(const std::string& step, const std::vector<RankEntry>& entries);

class ENGRAM_API GroupChannel {
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
  std::string socket_path;             // leader: "" = <private runtime dir>/<group>.<random>.sock
  bool require_private_dir = true;     // leader: the socket's directory must be 0700 and ours
  std::vector<uint32_t> allowed_uids;  // besides our own euid (SO_PEERCRED on both sides)
  size_t max_message_bytes = size_t{16} << 20;
  // A peer waits this much longer than the leader's timeout for the leader's answer, so that the
  // leader (not a peer's own clock) decides who was late.
  Millis peer_grace{2000};
  Millis hello_timeout{5000};  // leader: how long one connecting process may take to say hello
};

// The leader's listening endpoint: peers that connect to socket_path() are admitted by accept().
class ENGRAM_API GroupListener {
 public:
  virtual ~GroupListener() = default;
  virtual const std::string& socket_path() const = 0;
  // Admits connecting processes until `n_peers` joined: checks each one's uid (SO_PEERCRED), wire
  // version and group name, answers a refusal with its reason (it does not count). Then tells every
  // peer its rank (1..n in order of arrival) and the world size, and returns the leader's channel (rank 0).
  // kTimeout "join: 1 of 2 peers within 10000 ms" (the peers that did join are told and dropped). `cancelled`,
  // when given, is polled about every 200 ms (a server's stop flag): true ends the wait the same way.
  virtual Result<std::unique_ptr<GroupChannel>> accept(int n_peers, Millis timeout,
                                                       const std::function<bool()>& cancelled = {}) = 0;
  // Reasons of refused connections since the listener was made ("uid 65534 is not allowed", "wire version 9").
  virtual const std::vector<std::string>& rejections() const = 0;
  // No new peer can find the leader; existing connections stay.
  virtual Status unlink_socket() = 0;
};

// The leader's Unix socket listener: creates the private directory (when options.socket_path is empty) and
// listens. kPermission when the directory is not private (require_private_dir), kInvalidArgument when a live
// leader holds the path.
Result<std::unique_ptr<GroupListener>> listen_unix_group(const UnixGroupOptions& options);

// A peer's channel: connects to the leader at `socket_path` (retrying until the listener exists, up to `timeout`),
// checks the leader's uid, says hello and waits for its rank until timeout + peer_grace. kPermission /
// kInvalidArgument with the leader's reason when refused; kTimeout when no group formed in time.
Result<std::unique_ptr<GroupChannel>> connect_unix_group(const std::string& socket_path,
                                                         const UnixGroupOptions& options, Millis timeout);

ENGRAM_API_END
}  // namespace engram::host
