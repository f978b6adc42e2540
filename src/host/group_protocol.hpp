// Shared-table protocol: the steps that make one HostTable (the leader's is HostTable::create's, a peer's
// HostTable::attach's, shards and replicas included) shared by the processes of a group, over any
// GroupChannel (host/group_channel.hpp).
//      leader  lead():    after the table is created (each backing, memfd by default or a named
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
// Every wait is bounded; a dead peer or leader is seen as a closed connection (EOF / POLLHUP) at once,
// a silent one at the step's timeout; the error names the group, the step, the rank and its pid. No
// backing outlives the last process: memfds have no name; named files are unlinked once all peers
// attached, by the leader on any failure, and by a guardian process (sys/process.hpp) if the leader
// dies before it could.
//
// Thread safety: a group is used by one thread at a time. Process safety: that is the point of this file.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/backing.hpp"
#include "host/census.hpp"
#include "host/group_channel.hpp"
#include "host/placement.hpp"
#include "sys/process.hpp"

namespace engram::host {

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
