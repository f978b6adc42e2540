// Shared group: the processes of one node that share a table -- one leader (rank 0) and N peers --
// and the shared-table protocol they run (design.md, "The shared-table protocol", steps 1-5).
//
// Two layers:
//  - GroupChannel: broadcast (bytes, and descriptors where the channel can pass them), all-gather of
//    one status + message per rank, barrier; each call bounded by a timeout. An engine that already
//    has a process group (torch.distributed) implements this interface and runs the same protocol.
//    UnixGroupChannel is ours: a leader listening on an AF_UNIX socket in a directory only its owner
//    can enter, peers checked with SO_PEERCRED, a star of SOCK_SEQPACKET connections.
//  - SharedTableGroup: the protocol over any GroupChannel, for one HostTable (the one table model:
//    the leader's is HostTable::create's, a peer's is HostTable::attach's, shards and replicas included).
//      leader  lead():    after steps 1-2 (HostTable::create: each backing, memfd by default or a named
//                                    /dev/shm file when asked, placed before the first page exists and
//                                    every page allocated), shares the table
//      leader  admit() / peer join(), in lock step, each step ending in an all-gather so that one
//      rank's failure fails every rank with that rank's message:
//        "describe"                  leader broadcasts the description (layout, every backing with its
//                                    layer, replica, head range and offset; + memfds via SCM_RIGHTS),
//                                    or its failure (fail_peers): every peer's join() returns it
//        "attach"                    peers map each backing (fd or path; read-only option) where the
//                                    leader's table has it, check the inode; then the leader unlinks
//                                    named files
//        "register"                  registration hook on every rank (cudaHostRegister plugs in here)
//        "census after registration" census hook on every rank; texts gathered to all ranks
//        "load"                      leader-only weight load (synthetic fill or checkpoint)
//        "ready"                     barrier
//        "census after load"         census hook again
//    Step 5: every wait is bounded; a dead peer or leader is seen as a closed connection (EOF /
//    POLLHUP) at once, a silent one at the step's timeout; the error names the group, the step, the
//    rank and its pid. No backing outlives the last process: memfds have no name; named files are
//    unlinked once all peers attached, by the leader on any failure, and by a guardian process
//    (sys/process.hpp) if the leader dies before it could.
//
// Thread safety: a channel and a group are used by one thread at a time. Process safety: that is the
// point of this file.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/backing.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/process.hpp"
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

// ---- message decoders --------------------------------------------------------------------------
// Pure functions from a received message (type, payload, descriptor count) to its fields, used by the
// channel and the protocol above and by the fuzzer (fuzz/fuzz_group_message.cpp): whatever bytes a peer
// or a leader sends, the result is a value or kInvalidArgument naming what is wrong -- never a throw,
// a crash or an allocation sized by the sender beyond the channel's max_message_bytes.
namespace wire {

inline constexpr int kProtocolVersion = 2;
enum MsgType : uint16_t {
  kMsgHello = 1,         // peer -> leader: {"protocol", "group", "pid"}
  kMsgWelcome = 2,       // leader -> peer: {"rank", "world", "leader_pid", "group"}
  kMsgReject = 3,        // leader -> peer: {"code", "error"}
  kMsgBroadcast = 4,     // leader -> peer: u32 step length, step, bytes (+ descriptors)
  kMsgGather = 5,        // peer -> leader: entry
  kMsgGatherResult = 6,  // leader -> peer: {"step", "entries": [...]}
};

struct Hello {
  int64_t protocol = 0;
  std::string group;
};
// kInvalidArgument for another type, descriptors, malformed JSON or fields (the version is returned,
// not checked: the listener names it in its refusal).
Result<Hello> decode_hello(uint16_t type, const std::string& payload, size_t n_fds);

struct Welcome {
  int rank = 0, world = 0, leader_pid = 0;
};
// A refusal (kMsgReject) becomes its Status (code 1..kInternal with the leader's reason);
// a welcome must have 1 <= rank < world.
Result<Welcome> decode_welcome_or_reject(uint16_t type, const std::string& payload);

struct Broadcast {
  std::string step;
  std::string bytes;
};
// u32 little-endian step length, step, bytes. kInvalidArgument for another type or a step length
// past the payload.
Result<Broadcast> decode_broadcast(uint16_t type, const std::string& payload);

// One peer's all-gather entry: the step it is at and its entry.
Result<std::pair<std::string, RankEntry>> decode_gather_entry(uint16_t type, const std::string& payload,
                                                              size_t n_fds);
// The leader's all-gather result: exactly `world` entries. Returns the step the leader named too.
Result<std::pair<std::string, std::vector<RankEntry>>> decode_gather_result(uint16_t type, const std::string& payload,
                                                                          int world);

// One segment of the table description.
struct SegmentInfo {
  std::string kind, name, path, requested, resolved, obtained, prefault;
  uint64_t size_bytes = 0, inode = 0, device = 0;
  int64_t layer_index = 0, replica_node = -1, fd_index = -1;
  int64_t head_begin = 0, head_end = 0;  // head range held (a shard); 0, 0 = every head
  uint64_t offset_bytes = 0;             // where the backing starts in its layer's table
};
struct Description {
  std::string group, job;
  std::string layout;  // layout_to_json() text
  std::vector<SegmentInfo> segments;
  TpSlice tp;          // the table's tensor-parallel slice ("tp_size" / "tp_rank"; absent: whole); a slice without
                       // heads has no segments
  // The leader sent its failure instead of a table (SharedTableGroup::fail_peers): its code and
  // message; segments is then empty.
  Status leader_failure;
};
// The leader's description (SharedTableGroup::description()), or the leader's failure in its place
// (a Description whose leader_failure is set, code 1..kInternal). kInvalidArgument for malformed
// JSON, another protocol version, a missing field, a malformed failure.
// Checks that every announced size and offset is below 2^56 bytes (sizes non-zero), fd_index is -1 or < 64, and
// head ranges are ordered and below 2^16, so a
// hostile description cannot make a peer map beyond what its kernel object holds (attach checks the
// object's size too).
Result<Description> decode_description(const std::string& bytes);

}  // namespace wire

// ---- the protocol ------------------------------------------------------------------------------

inline constexpr const char* kStepDescribe = "describe";
inline constexpr const char* kStepAttach = "attach";
inline constexpr const char* kStepRegister = "register";
inline constexpr const char* kStepCensusRegistered = "census after registration";
inline constexpr const char* kStepLoad = "load";
inline constexpr const char* kStepReady = "ready";
inline constexpr const char* kStepCensusLoaded = "census after load";
// The steps in order (for tests and tracing).
const std::vector<std::string>& protocol_steps();

struct ProtocolTimeouts {
  Millis step{30000};   // describe, attach, register, census, ready
  Millis load{600000};  // how long peers wait for the leader's weight load
};

struct ProtocolHooks {
  // Called on every rank as it enters each step (tracing; tests inject crashes here).
  std::function<void(const std::string& step, int rank)> on_step;
  // Peer: the leader's job text, once the description arrived and before this rank attaches (a rank that takes
  // its own options from the leader's job). A failure is this rank's failure of step "attach".
  std::function<Status(const std::string& job, const EngramLayout& layout)> on_described;
  // Step "register", every rank: make the mapped table usable by a device (cudaHostRegister in chunks, rollback
  // on failure). Not set: nothing to register.
  std::function<Status(const std::shared_ptr<HostTable>& table, int rank)> register_memory;
  // Census steps, every rank: text or JSON describing where this rank's pages are; gathered so that every rank
  // (the leader in particular) can print all of them. Not set: empty text.
  std::function<Result<std::string>(CensusPoint point, const HostTable& table, int rank)> census;
  // Step "load", leader only: write the rows into the placed pages. Not set, or the table already loaded
  // (SharedTableGroup::load): nothing to do.
  std::function<Status(HostTable& table)> load;
};

struct PeerOptions {
  bool read_only = false;  // map, then mprotect(PROT_READ): a stray write faults instead of corrupting
  int gpu_node = -1;       // replica-per-node: attach the replica on this node (-1: this CPU's node)
};

// What happened at one step: its duration on this rank and every rank's entry.
struct StepRecord {
  std::string step;
  double seconds = 0;
  std::vector<RankEntry> entries;
};

class SharedTableGroup {
 public:
  // Leader, after steps 1-2: shares `table`, created and placed by HostTable::create (every backing shareable:
  // memfd, shm or hugetlb, not anon-thp). `guardian` guards the table's named files against a leader crash: one
  // is started when a backing is a named file and none is given. kInvalidArgument for a table that cannot be
  // shared (allocate()d, anon-thp, attached).
  static Result<std::unique_ptr<SharedTableGroup>> lead(std::shared_ptr<HostTable> table, const std::string& group,
                                                        const std::string& job,
                                                        std::shared_ptr<sys::FileGuardian> guardian = nullptr);
  // Peer: steps "describe".."census after load" against the leader's admit(); the table is attached at "attach"
  // (HostTable::attach, the layout comes with the description). The error names the step and the failing rank.
  static Result<std::unique_ptr<SharedTableGroup>> join(GroupChannel& channel, const PeerOptions& options,
                                                        const ProtocolHooks& hooks, const ProtocolTimeouts& timeouts);
  ~SharedTableGroup();
  SharedTableGroup(const SharedTableGroup&) = delete;
  SharedTableGroup& operator=(const SharedTableGroup&) = delete;

  // Leader that cannot go on before admit() (its table could not be built, a hook refused): sends `failure` to
  // every peer at once, in place of the description, so that each peer's join() returns it
  // (its code, "the leader failed: <message>") instead of waiting out its timeouts. Call it on the
  // channel the peers joined; the channel stays usable for nothing else. Returns `failure` with
  // the group's name for context (a peer the broadcast could not reach is dropped, as in admit).
  static Status fail_peers(GroupChannel& channel, const std::string& group, const Status& failure, Millis timeout);

  // Leader: runs the loader now, before any peer (a server that holds a loaded table for others).
  Status load(const std::function<Status(HostTable&)>& loader);
  // Leader: steps "describe".."census after load" with the channel's peers. On failure named files are unlinked
  // at once and the error names the step and the rank. May be called again with a new channel (serve-table admits
  // peers round after round); a named table is unlinked after the first round, so a later peer gets "joined
  // late" from its attach.
  Status admit(GroupChannel& channel, const ProtocolHooks& hooks, const ProtocolTimeouts& timeouts);

  bool is_leader() const { return leader_; }
  const std::string& group() const { return group_; }
  const std::string& job() const { return job_; }
  bool loaded() const { return loaded_; }
  // The shared table: the leader's every backing; a peer's attached view (its replica with replica-per-node).
  const std::shared_ptr<HostTable>& table() const { return table_; }
  // The description the leader broadcasts (protocol, group, job, layout, segments).
  nlohmann::json description() const;
  // Steps of the last admit() / join() on this rank.
  const std::vector<StepRecord>& steps() const { return steps_; }
  // Leader: unlinks every named file now (also done after attach and on failure). Idempotent.
  Status unlink_named();

 private:
  SharedTableGroup() = default;
  // Declared first so that it is destroyed last: the table's backings unlink their own files first.
  std::shared_ptr<sys::FileGuardian> guardian_;
  bool leader_ = false;
  bool loaded_ = false;
  std::string group_;
  std::string job_;
  std::shared_ptr<HostTable> table_;
  std::vector<StepRecord> steps_;
};

}  // namespace engram::host
