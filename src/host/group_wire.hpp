// Group wire codec: the messages of a shared group as bytes. Decoders are pure functions from a received
// message (type, payload, descriptor count) to its fields, used by the channel (host/group_channel.cpp),
// the protocol (host/group_protocol.cpp) and the fuzzer (fuzz/fuzz_group_message.cpp): whatever bytes a
// peer or a leader sends, the result is a value or kInvalidArgument naming what is wrong -- never a throw,
// a crash or an allocation sized by the sender beyond the channel's max_message_bytes. Encoders are their
// inverses, so the message formats live in this one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/status.hpp"
#include "engram/tp_slice.hpp"
#include "host/group_channel.hpp"

namespace engram::host {
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


// ---- encoders: what the channel and the protocol send ----
// Control messages are JSON objects dumped with invalid UTF-8 replaced (a peer's text cannot make the
// dump throw); a broadcast is binary so that any bytes can travel.
std::string dump(const nlohmann::json& j);
nlohmann::json status_json(const Status& s);                         // {"code", "sys", "error"}
nlohmann::json entry_json(const std::string& step, const RankEntry& e);  // status_json + step, rank, pid, message
std::string encode_hello(const std::string& group, int pid);
std::string encode_welcome(int rank, int world, int leader_pid, const std::string& group);
std::string encode_reject(Code code, const std::string& reason);
std::string encode_broadcast(const std::string& step, const std::string* bytes);  // bytes may be null
std::string encode_gather_result(const std::string& step, const std::vector<RankEntry>& entries);
// The leader's failure in place of a table description (SharedTableGroup::fail_peers).
std::string encode_leader_failure(const std::string& group, const Status& failure);

}  // namespace wire
}  // namespace engram::host
