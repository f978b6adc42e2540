// Group wire codec (see group_wire.hpp). Every decoder parses without exceptions and checks each field's
// type and range before it is used, so a peer's garbage becomes a Status, never a throw.
#include "host/group_wire.hpp"

#include <cstdint>

#include "sys/unix_socket.hpp"

namespace engram::host::wire {
namespace {

using nlohmann::json;

bool parse_object(const std::string& text, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded() && out->is_object();
}
bool get_str(const json& j, const char* key, std::string* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  *v = it->get<std::string>();
  return true;
}
bool get_int(const json& j, const char* key, int64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  *v = it->get<int64_t>();
  return true;
}
bool get_u64(const json& j, const char* key, uint64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    int64_t s = 0;
    if (!get_int(j, key, &s) || s < 0) return false;
    *v = static_cast<uint64_t>(s);
    return true;
  }
  *v = it->get<uint64_t>();
  return true;
}

bool status_from_json(const json& j, Status* s) {
  int64_t code = 0, sys = 0;
  std::string err;
  if (!get_int(j, "code", &code) || !get_int(j, "sys", &sys) || !get_str(j, "error", &err)) return false;
  if (code < 0 || code > static_cast<int>(Code::kInternal)) return false;
  *s = code == 0 ? Status::ok() : Status(static_cast<Code>(code), err, static_cast<int>(sys));
  return true;
}

bool entry_from_json(const json& j, std::string* step, RankEntry* e) {
  int64_t rank = 0, pid = 0;
  if (!j.is_object() || !get_str(j, "step", step) || !get_int(j, "rank", &rank) || !get_int(j, "pid", &pid) ||
      !get_str(j, "message", &e->message) || !status_from_json(j, &e->status))
    return false;
  e->rank = static_cast<int>(rank);
  e->pid = static_cast<int>(pid);
  return true;
}

}  // namespace

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json status_json(const Status& s) {
  return {{"code", static_cast<int>(s.code())}, {"sys", s.sys_error()}, {"error", s.message()}};
}

json entry_json(const std::string& step, const RankEntry& e) {
  json j = status_json(e.status);
  j["step"] = step;
  j["rank"] = e.rank;
  j["pid"] = e.pid;
  j["message"] = e.message;
  return j;
}

std::string encode_hello(const std::string& group, int pid) {
  return dump({{"protocol", kProtocolVersion}, {"group", group}, {"pid", pid}});
}

std::string encode_welcome(int rank, int world, int leader_pid, const std::string& group) {
  return dump({{"rank", rank}, {"world", world}, {"leader_pid", leader_pid}, {"group", group}});
}

std::string encode_reject(Code code, const std::string& reason) {
  return dump({{"code", static_cast<int>(code)}, {"error", reason}});
}

std::string encode_broadcast(const std::string& step, const std::string* bytes) {
  std::string payload(4, '\0');
  const uint32_t n = static_cast<uint32_t>(step.size());
  for (int i = 0; i < 4; ++i) payload[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  payload += step;
  if (bytes) payload += *bytes;
  return payload;
}

std::string encode_gather_result(const std::string& step, const std::vector<RankEntry>& entries) {
  json res;
  res["step"] = step;
  res["entries"] = json::array();
  for (const auto& e : entries) res["entries"].push_back(entry_json(step, e));
  return dump(res);
}

std::string encode_leader_failure(const std::string& group, const Status& failure) {
  return dump({{"protocol", kProtocolVersion}, {"group", group}, {"error", status_json(failure)}});
}

// ---- decoders --------------------------------------------------------------------------------------

Result<Hello> decode_hello(uint16_t type, const std::string& payload, size_t n_fds) {
  json h;
  Hello out;
  if (type != kMsgHello) return Status(Code::kInvalidArgument, "message type " + std::to_string(type) + " is not a hello");
  if (n_fds != 0) return Status(Code::kInvalidArgument, "a hello carries no descriptors");
  if (!parse_object(payload, &h) || !get_str(h, "group", &out.group) || !get_int(h, "protocol", &out.protocol))
    return Status(Code::kInvalidArgument, "malformed hello (JSON object with 'group' and 'protocol' expected)");
  return out;
}

Result<Welcome> decode_welcome_or_reject(uint16_t type, const std::string& payload) {
  json j;
  if (!parse_object(payload, &j)) return Status(Code::kInvalidArgument, "malformed answer from the leader");
  if (type == kMsgReject) {
    int64_t code = 0;
    std::string err;
    if (!get_int(j, "code", &code) || !get_str(j, "error", &err) || code <= 0 ||
        code > static_cast<int>(Code::kInternal))
      return Status(Code::kInvalidArgument, "malformed refusal from the leader");
    return Status(static_cast<Code>(code), "the leader refused: " + err);
  }
  int64_t rank = 0, world = 0, leader_pid = 0;
  if (type != kMsgWelcome || !get_int(j, "rank", &rank) || !get_int(j, "world", &world) ||
      !get_int(j, "leader_pid", &leader_pid) || rank < 1 || rank >= world || world > (1 << 20) || leader_pid < 0 ||
      leader_pid > INT32_MAX)
    return Status(Code::kInvalidArgument, "malformed welcome from the leader");
  return Welcome{static_cast<int>(rank), static_cast<int>(world), static_cast<int>(leader_pid)};
}

Result<Broadcast> decode_broadcast(uint16_t type, const std::string& payload) {
  if (type != kMsgBroadcast || payload.size() < 4)
    return Status(Code::kInvalidArgument, "expected a broadcast, got message type " + std::to_string(type) + " of " +
                                              std::to_string(payload.size()) + " bytes");
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(payload[static_cast<size_t>(i)]);
  if (n > payload.size() - 4) return Status(Code::kInvalidArgument, "malformed broadcast (step length)");
  return Broadcast{payload.substr(4, n), payload.substr(4 + n)};
}

Result<std::pair<std::string, RankEntry>> decode_gather_entry(uint16_t type, const std::string& payload,
                                                              size_t n_fds) {
  json j;
  std::pair<std::string, RankEntry> out;
  if (type != kMsgGather || n_fds != 0 || !parse_object(payload, &j) || !entry_from_json(j, &out.first, &out.second))
    return Status(Code::kInvalidArgument, "expected an all-gather entry (type " + std::to_string(type) + ", " +
                                              std::to_string(payload.size()) + " bytes)");
  return out;
}

Result<std::pair<std::string, std::vector<RankEntry>>> decode_gather_result(uint16_t type, const std::string& payload,
                                                                          int world) {
  json j;
  std::pair<std::string, std::vector<RankEntry>> out;
  if (type != kMsgGatherResult || !parse_object(payload, &j) || !get_str(j, "step", &out.first))
    return Status(Code::kInvalidArgument, "malformed all-gather result from the leader");
  const auto it = j.find("entries");
  if (it == j.end() || !it->is_array() || world < 0 || it->size() != static_cast<size_t>(world))
    return Status(Code::kInvalidArgument, "malformed all-gather result from the leader (entries)");
  for (const auto& x : *it) {
    RankEntry r;
    std::string st;
    if (!entry_from_json(x, &st, &r)) return Status(Code::kInvalidArgument, "malformed all-gather entry");
    out.second.push_back(std::move(r));
  }
  return out;
}

Result<Description> decode_description(const std::string& bytes) {
  json d;
  int64_t protocol = 0;
  Description out;
  if (!parse_object(bytes, &d) || !get_int(d, "protocol", &protocol))
    return Status(Code::kInvalidArgument, "malformed table description from the leader");
  if (protocol != kProtocolVersion)
    return Status(Code::kInvalidArgument, "table description of protocol " + std::to_string(protocol) +
                                              ", this build speaks " + std::to_string(kProtocolVersion));
  auto err = d.find("error");
  if (err != d.end()) {
    Status s;
    if (!status_from_json(*err, &s) || s.is_ok())
      return Status(Code::kInvalidArgument, "malformed error in the table description");
    (void)get_str(d, "group", &out.group);
    out.leader_failure = Status(s.code(), "the leader failed: " + s.message(), s.sys_error());
    return out;
  }
  auto it = d.find("segments");
  int64_t tp_size = 1, tp_rank = 0;
  if (d.contains("tp_size") && (!get_int(d, "tp_size", &tp_size) || !get_int(d, "tp_rank", &tp_rank) || tp_size < 1 ||
                                tp_size > 65535 || tp_rank < 0 || tp_rank >= tp_size))
    return Status(Code::kInvalidArgument, "malformed tp_size / tp_rank in the table description");
  out.tp = {static_cast<int>(tp_size), static_cast<int>(tp_rank)};
  if (!get_str(d, "group", &out.group) || !get_str(d, "job", &out.job) || !get_str(d, "layout", &out.layout) ||
      it == d.end() || !it->is_array() || (it->empty() && out.tp.whole()))
    return Status(Code::kInvalidArgument, "malformed table description from the leader (group, job, layout, segments)");
  for (const auto& s : *it) {
    SegmentInfo i;
    if (!s.is_object() || !get_str(s, "kind", &i.kind) || !get_str(s, "name", &i.name) ||
        !get_str(s, "path", &i.path) || !get_u64(s, "size_bytes", &i.size_bytes) || !get_u64(s, "inode", &i.inode) ||
        !get_u64(s, "device", &i.device) || !get_int(s, "layer_index", &i.layer_index) ||
        !get_int(s, "replica_node", &i.replica_node) || !get_int(s, "fd_index", &i.fd_index) ||
        !get_int(s, "head_begin", &i.head_begin) || !get_int(s, "head_end", &i.head_end) ||
        !get_u64(s, "offset_bytes", &i.offset_bytes))
      return Status(Code::kInvalidArgument, "malformed segment in the table description");
    if (i.head_begin < 0 || i.head_end < i.head_begin || i.head_end > 65535 || i.offset_bytes >= (uint64_t{1} << 56))
      return Status(Code::kInvalidArgument, "segment of the table description out of range (heads " +
                                                std::to_string(i.head_begin) + "-" + std::to_string(i.head_end) +
                                                ", offset " + std::to_string(i.offset_bytes) + ")");
    if (i.size_bytes == 0 || i.size_bytes >= (uint64_t{1} << 56) || i.fd_index < -1 ||
        i.fd_index >= static_cast<int64_t>(sys::kMaxMessageFds) || i.replica_node < -1 || i.replica_node > 4095 ||
        i.layer_index < 0 || i.layer_index > INT32_MAX)
      return Status(Code::kInvalidArgument, "segment of the table description out of range (size_bytes " +
                                                std::to_string(i.size_bytes) + ", fd_index " +
                                                std::to_string(i.fd_index) + ", replica_node " +
                                                std::to_string(i.replica_node) + ")");
    (void)get_str(s, "placement_requested", &i.requested);
    (void)get_str(s, "placement_resolved", &i.resolved);
    (void)get_str(s, "placement_obtained", &i.obtained);
    (void)get_str(s, "prefault", &i.prefault);
    out.segments.push_back(std::move(i));
  }
  return out;
}

}  // namespace engram::host::wire
