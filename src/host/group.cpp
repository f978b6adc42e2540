// Shared group: UnixGroupChannel (leader/peer star over SOCK_SEQPACKET) and the shared-table protocol
// (see group.hpp for the steps).
//
// Every collective is leader-centred: an all-gather is "peers send their entry, the leader collects
// with one poll over all peer sockets against one deadline, then sends the full vector to every peer".
// A peer that closed its connection, timed out or sent garbage is dropped from the group at that moment
// and its reason becomes its entry, so the other peers learn who failed and why from the leader in the
// same round instead of each timing out on its own. A peer waits for the leader's answer a grace period
// longer than the leader waits for the peers: when both are alive, the leader is the one who decides.
//
// Control messages are small JSON objects dumped with invalid UTF-8 replaced, and parsed without
// exceptions (a peer's garbage must become a Status, never a throw); broadcast payloads are binary
// (u32 step length, step, bytes) so that any bytes can travel.
#include "host/group.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "sys/affinity.hpp"
#include "sys/memfd.hpp"
#include "sys/protect.hpp"

namespace engram::host {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

using namespace wire;  // message types and the protocol version (group.hpp)
constexpr size_t kHelloMaxBytes = 64 * 1024;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

json status_json(const Status& s) {
  return {{"code", static_cast<int>(s.code())}, {"sys", s.sys_error()}, {"error", s.message()}};
}
bool status_from_json(const json& j, Status* s) {
  int64_t code = 0, sys = 0;
  std::string err;
  if (!get_int(j, "code", &code) || !get_int(j, "sys", &sys) || !get_str(j, "error", &err)) return false;
  if (code < 0 || code > static_cast<int>(Code::kInternal)) return false;
  *s = code == 0 ? Status::ok() : Status(static_cast<Code>(code), err, static_cast<int>(sys));
  return true;
}

json entry_json(const std::string& step, const RankEntry& e) {
  json j = status_json(e.status);
  j["step"] = step;
  j["rank"] = e.rank;
  j["pid"] = e.pid;
  j["message"] = e.message;
  return j;
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

std::string who(int rank, int pid) { return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")"; }

std::string in_quotes(const std::string& step) { return "'" + step + "'"; }

// Reason a peer left the group, from the failed receive or send.
Status peer_loss(const Status& s, const std::string& step, Millis timeout) {
  if (s.code() == Code::kTimeout)
    return Status(Code::kTimeout,
                  "did not answer step " + in_quotes(step) + " within " + std::to_string(timeout.count()) + " ms", ETIMEDOUT);
  if (s.code() == Code::kIo && s.sys_error() == EPIPE)
    return Status(Code::kIo, "closed its connection during step " + in_quotes(step) + " (process exited or was killed)",
                  EPIPE);
  if (s.code() == Code::kInvalidArgument)
    return Status(Code::kInvalidArgument, "sent a malformed message at step " + in_quotes(step) + ": " + s.message());
  return s.with_context("step " + in_quotes(step));
}

bool uid_allowed(uint32_t uid, const UnixGroupOptions& o) {
  if (uid == sys::effective_uid()) return true;
  for (uint32_t u : o.allowed_uids)
    if (u == uid) return true;
  return false;
}

// Sends the refusal, then reads (and drops) whatever the refused process still sends until it hangs up:
// closing a unix socket with unread data in it resets the connection (ECONNRESET), and the refused
// process would lose the reason we just sent. Bounded: at most 500 ms per refused connection.
void send_reject(const sys::UnixSocket& s, Code code, const std::string& reason) {
  const auto deadline = sys::deadline_after(Millis(500));
  if (!sys::send_message(s, kMsgReject, dump({{"code", static_cast<int>(code)}, {"error", reason}}), {}, deadline).is_ok())
    return;
  for (;;) {
    auto m = sys::recv_message(s, kHelloMaxBytes, deadline);
    // A malformed packet was still taken off the queue: keep going. EOF, timeout, error: done.
    if (!m.is_ok() && m.status().code() != Code::kInvalidArgument) return;
  }
}

}  // namespace

// ---- message decoders ------------------------------------------------------------------------------

namespace wire {

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

}  // namespace wire

Status first_failure(const std::string& step, const std::vector<RankEntry>& entries) {
  for (const auto& e : entries)
    if (!e.status.is_ok())
      return Status(e.status.code(), "step " + in_quotes(step) + ": " + who(e.rank, e.pid) + ": " + e.status.message(),
                    e.status.sys_error());
  return Status::ok();
}

Status GroupChannel::barrier(const std::string& step, Millis timeout) {
  RankEntry mine;
  mine.rank = rank();
  mine.pid = sys::process_id();
  auto r = all_gather(step, mine, timeout);
  if (!r.is_ok()) return r.status();
  return first_failure(step, *r);
}

// ---- UnixGroupListener ----------------------------------------------------------------------------

Result<std::unique_ptr<UnixGroupListener>> UnixGroupListener::listen(const UnixGroupOptions& options) {
  std::string path = options.socket_path;
  if (path.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(std::string dir, sys::private_runtime_dir());
    ENGRAM_ASSIGN_OR_RETURN(std::string suffix, sys::random_hex(8));
    std::string name = options.group;
    for (char& c : name)
      if (c == '/' || c == '\0') c = '_';
    path = dir + "/" + name + "." + suffix + ".sock";
  } else if (options.require_private_dir) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    ENGRAM_RETURN_IF_ERROR(sys::check_private_dir(dir).with_context("leader socket " + path));
  }
  std::unique_ptr<UnixGroupListener> l(new UnixGroupListener());
  l->options_ = options;
  ENGRAM_ASSIGN_OR_RETURN(l->listener_, sys::listen_unix(path));
  return l;
}

Result<std::unique_ptr<UnixGroupChannel>> UnixGroupListener::accept_group(int n_peers, Millis timeout,
                                                                         const std::function<bool()>& cancelled) {
  if (n_peers < 0) return Status(Code::kInvalidArgument, "accept_group: negative peer count");
  const auto deadline = sys::deadline_after(timeout);
  std::unique_ptr<UnixGroupChannel> ch(new UnixGroupChannel());
  ch->options_ = options_;
  ch->socket_path_ = listener_.path();
  ch->rank_ = 0;
  ch->leader_pid_ = sys::process_id();
  while (static_cast<int>(ch->peers_.size()) < n_peers) {
    // Waits in slices so that a cancellation (a server's SIGINT) is seen within ~200 ms.
    auto s = sys::accept_unix(listener_, cancelled ? std::min(deadline, sys::deadline_after(Millis(200))) : deadline);
    const bool cancel = !s.is_ok() && s.status().code() == Code::kTimeout && cancelled && cancelled();
    if (!s.is_ok() && s.status().code() == Code::kTimeout && !cancel && sys::SteadyClock::now() < deadline) continue;
    if (!s.is_ok()) {
      std::string msg = "join: " + std::to_string(ch->peers_.size()) + " of " + std::to_string(n_peers) +
                        " peers joined " + (cancel ? std::string("before the wait was cancelled") :
                                            "within " + std::to_string(timeout.count()) + " ms") + " at " + listener_.path();
      if (!rejections_.empty()) msg += "; refused: " + rejections_.back();
      for (auto& p : ch->peers_) send_reject(p.socket, Code::kTimeout, "the group did not form: " + msg);
      if (s.status().code() == Code::kTimeout) return Status(Code::kTimeout, msg, ETIMEDOUT);
      return s.status().with_context(msg);
    }
    auto refuse = [&](Code code, const std::string& reason) {
      rejections_.push_back(reason);
      send_reject(*s, code, reason);
    };
    auto cred = sys::peer_credentials(*s);
    if (!cred.is_ok()) {
      refuse(Code::kPermission, "SO_PEERCRED failed: " + cred.status().message());
      continue;
    }
    const std::string from = "process " + std::to_string(cred->pid) + " (uid " + std::to_string(cred->uid) + ")";
    if (!uid_allowed(cred->uid, options_)) {
      refuse(Code::kPermission, from + ": uid " + std::to_string(cred->uid) +
                                    " may not join (the leader runs as uid " + std::to_string(sys::effective_uid()) +
                                    "; allowed_uids names the others)");
      continue;
    }
    const auto hello_deadline = std::min(deadline, sys::deadline_after(options_.hello_timeout));
    auto hello = sys::recv_message(*s, kHelloMaxBytes, hello_deadline);
    if (!hello.is_ok()) {
      refuse(hello.status().code() == Code::kTimeout ? Code::kTimeout : Code::kInvalidArgument,
             from + ": no valid hello: " + hello.status().message());
      continue;
    }
    auto decoded = decode_hello(hello->type, hello->payload, hello->n_fds());
    if (!decoded.is_ok()) {
      refuse(Code::kInvalidArgument, from + ": " + decoded.status().message());
      continue;
    }
    const int64_t protocol = decoded->protocol;
    const std::string& group = decoded->group;
    if (protocol != kProtocolVersion) {
      refuse(Code::kInvalidArgument, from + ": protocol version " + std::to_string(protocol) + ", the leader speaks " +
                                         std::to_string(kProtocolVersion));
      continue;
    }
    if (group != options_.group) {
      refuse(Code::kInvalidArgument, from + ": asks for group '" + group + "', this leader serves '" + options_.group + "'");
      continue;
    }
    UnixGroupChannel::Peer p;
    p.socket = std::move(*s);
    p.rank = static_cast<int>(ch->peers_.size()) + 1;
    p.pid = cred->pid;
    ch->peers_.push_back(std::move(p));
  }
  ch->world_ = n_peers + 1;
  for (auto& p : ch->peers_) {
    Status s = sys::send_message(p.socket, kMsgWelcome,
                                 dump({{"rank", p.rank},
                                       {"world", ch->world_},
                                       {"leader_pid", ch->leader_pid_},
                                       {"group", options_.group}}),
                                 {}, sys::deadline_after(options_.hello_timeout));
    if (!s.is_ok()) ch->drop(p, peer_loss(s, "join", options_.hello_timeout));
  }
  return ch;
}

// ---- UnixGroupChannel -----------------------------------------------------------------------------

UnixGroupChannel::~UnixGroupChannel() = default;

Result<std::unique_ptr<UnixGroupChannel>> UnixGroupChannel::connect(const std::string& socket_path,
                                                                    const UnixGroupOptions& options, Millis timeout) {
  const auto deadline = sys::deadline_after(timeout);
  const std::string what = "join group '" + options.group + "' at " + socket_path;
  auto s = sys::connect_unix(socket_path, deadline);
  if (!s.is_ok()) return s.status().with_context(what);
  ENGRAM_ASSIGN_OR_RETURN(sys::PeerCredentials cred, sys::peer_credentials(*s));
  if (!uid_allowed(cred.uid, options))
    return Status(Code::kPermission, what + ": the listening process " + std::to_string(cred.pid) + " runs as uid " +
                                         std::to_string(cred.uid) + ", not as ours (" +
                                         std::to_string(sys::effective_uid()) + ")");
  Status sent = sys::send_message(
      *s, kMsgHello, dump({{"protocol", kProtocolVersion}, {"group", options.group}, {"pid", sys::process_id()}}), {},
      deadline);
  if (!sent.is_ok()) return sent.with_context(what + ": hello");
  auto m = sys::recv_message(*s, options.max_message_bytes, deadline + options.peer_grace);
  if (!m.is_ok()) {
    if (m.status().code() == Code::kIo && m.status().sys_error() == EPIPE)
      return Status(Code::kIo, what + ": the leader closed the connection before admitting us (leader exited?)", EPIPE);
    if (m.status().code() == Code::kTimeout)
      return Status(Code::kTimeout, what + ": the group did not form within " +
                                        std::to_string((timeout + options.peer_grace).count()) + " ms",
                    ETIMEDOUT);
    return m.status().with_context(what);
  }
  auto welcome = decode_welcome_or_reject(m->type, m->payload);
  if (!welcome.is_ok()) return welcome.status().with_context(what);
  std::unique_ptr<UnixGroupChannel> ch(new UnixGroupChannel());
  ch->options_ = options;
  ch->socket_path_ = socket_path;
  ch->rank_ = welcome->rank;
  ch->world_ = welcome->world;
  ch->leader_pid_ = welcome->leader_pid;
  ch->to_leader_ = std::move(*s);
  return ch;
}

std::string UnixGroupChannel::describe() const {
  return "unix:" + socket_path_ + ", rank " + std::to_string(rank_) + " of " + std::to_string(world_);
}

std::vector<int> UnixGroupChannel::pids() const {
  std::vector<int> out{leader_pid_};
  for (const auto& p : peers_) out.push_back(p.pid);
  return out;
}

int UnixGroupChannel::alive_peers() const {
  int n = 0;
  for (const auto& p : peers_) n += p.alive ? 1 : 0;
  return n;
}

void UnixGroupChannel::drop(Peer& p, Status why) {
  if (!p.alive) return;
  p.alive = false;
  p.death = std::move(why);
  p.socket.close();  // the peer sees EOF at once instead of waiting out its own timeout
}

Status UnixGroupChannel::broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, Millis timeout) {
  if (rank_ == 0) {
    std::string payload(4, '\0');
    const uint32_t n = static_cast<uint32_t>(step.size());
    for (int i = 0; i < 4; ++i) payload[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    payload += step;
    if (bytes) payload += *bytes;
    const std::vector<int> none;
    for (auto& p : peers_) {
      if (!p.alive) continue;
      Status s = sys::send_message(p.socket, kMsgBroadcast, payload, fds ? *fds : none, sys::deadline_after(timeout));
      if (!s.is_ok()) drop(p, peer_loss(s, step, timeout));
    }
    return Status::ok();
  }
  if (fds) fds->clear();
  const std::string what = "step " + in_quotes(step) + " (broadcast), rank " + std::to_string(rank_);
  if (!leader_lost_.is_ok()) return leader_lost_;
  auto m = sys::recv_message(to_leader_, options_.max_message_bytes, sys::deadline_after(timeout));
  if (!m.is_ok()) {
    const Status& s = m.status();
    if (s.code() == Code::kIo && s.sys_error() == EPIPE)
      leader_lost_ = Status(Code::kIo, what + ": the leader (pid " + std::to_string(leader_pid_) +
                                           ") closed the connection (leader exited or was killed)", EPIPE);
    else if (s.code() == Code::kTimeout)
      leader_lost_ = Status(Code::kTimeout, what + ": nothing from the leader (pid " + std::to_string(leader_pid_) +
                                                ") within " + std::to_string(timeout.count()) + " ms", ETIMEDOUT);
    else
      leader_lost_ = s.with_context(what);
    return leader_lost_;
  }
  auto b = decode_broadcast(m->type, m->payload);
  if (!b.is_ok()) return b.status().with_context(what);
  if (b->step != step)
    return Status(Code::kInternal, what + ": the leader broadcast step " + in_quotes(b->step) + " (protocol out of step)");
  if (bytes) *bytes = std::move(b->bytes);
  if (m->n_fds() != 0 && !fds) return Status(Code::kInvalidArgument, what + ": unexpected descriptors");
  for (size_t i = 0; i < m->n_fds(); ++i) fds->push_back(m->take_fd(i));
  return Status::ok();
}

Result<std::vector<RankEntry>> UnixGroupChannel::all_gather(const std::string& step, const RankEntry& mine,
                                                            Millis timeout) {
  return rank_ == 0 ? leader_all_gather(step, mine, timeout) : peer_all_gather(step, mine, timeout);
}

Result<std::vector<RankEntry>> UnixGroupChannel::leader_all_gather(const std::string& step, const RankEntry& mine,
                                                                   Millis timeout) {
  std::vector<RankEntry> entries(static_cast<size_t>(world_));
  entries[0] = mine;
  entries[0].rank = 0;
  if (entries[0].pid == 0) entries[0].pid = leader_pid_;
  std::vector<bool> have(peers_.size(), false);
  const auto deadline = sys::deadline_after(timeout);
  for (;;) {
    std::vector<int> fds;
    std::vector<size_t> idx;
    for (size_t i = 0; i < peers_.size(); ++i)
      if (peers_[i].alive && !have[i]) {
        fds.push_back(peers_[i].socket.fd());
        idx.push_back(i);
      }
    if (fds.empty()) break;
    auto ready = sys::poll_readable(fds, deadline);
    if (!ready.is_ok()) return ready.status().with_context("step " + in_quotes(step));
    if (ready->empty()) {  // deadline: everyone still silent is out
      for (size_t i : idx) drop(peers_[i], peer_loss(Status(Code::kTimeout, "", ETIMEDOUT), step, timeout));
      break;
    }
    for (size_t k : *ready) {
      Peer& p = peers_[idx[k]];
      auto m = sys::recv_message(p.socket, options_.max_message_bytes, deadline);
      if (!m.is_ok()) {
        drop(p, peer_loss(m.status(), step, timeout));
        continue;
      }
      auto decoded = decode_gather_entry(m->type, m->payload, m->n_fds());
      if (!decoded.is_ok()) {
        drop(p, peer_loss(decoded.status(), step, timeout));
        continue;
      }
      const std::string& their_step = decoded->first;
      RankEntry& e = decoded->second;
      if (their_step != step || e.rank != p.rank) {
        drop(p, Status(Code::kInternal, "is at step " + in_quotes(their_step) + " as rank " + std::to_string(e.rank) +
                                            " while the group is at step " + in_quotes(step) + " (protocol out of step)"));
        continue;
      }
      e.pid = p.pid;  // the kernel's word (SO_PEERCRED), not the peer's
      entries[static_cast<size_t>(p.rank)] = std::move(e);
      have[idx[k]] = true;
    }
  }
  for (const auto& p : peers_)
    if (!p.alive) entries[static_cast<size_t>(p.rank)] = RankEntry{p.rank, p.pid, p.death, ""};
  json res;
  res["step"] = step;
  res["entries"] = json::array();
  for (const auto& e : entries) res["entries"].push_back(entry_json(step, e));
  const std::string result = dump(res);
  for (auto& p : peers_) {
    if (!p.alive) continue;
    Status s = sys::send_message(p.socket, kMsgGatherResult, result, {}, sys::deadline_after(timeout));
    if (!s.is_ok()) {
      drop(p, peer_loss(s, step, timeout));
      entries[static_cast<size_t>(p.rank)] = RankEntry{p.rank, p.pid, p.death, ""};
    }
  }
  return entries;
}

Result<std::vector<RankEntry>> UnixGroupChannel::peer_all_gather(const std::string& step, const RankEntry& mine,
                                                                 Millis timeout) {
  const std::string what = "step " + in_quotes(step) + ", rank " + std::to_string(rank_);
  if (!leader_lost_.is_ok()) return leader_lost_;
  RankEntry e = mine;
  e.rank = rank_;
  e.pid = sys::process_id();
  const auto wait = timeout + options_.peer_grace;
  const auto deadline = sys::deadline_after(wait);
  Status s = sys::send_message(to_leader_, kMsgGather, dump(entry_json(step, e)), {}, deadline);
  Result<sys::Message> m = s.is_ok() ? sys::recv_message(to_leader_, options_.max_message_bytes, deadline)
                                     : Result<sys::Message>(s);
  if (!m.is_ok()) {
    const Status& st = m.status();
    if (st.code() == Code::kIo && st.sys_error() == EPIPE)
      leader_lost_ = Status(Code::kIo, what + ": the leader (pid " + std::to_string(leader_pid_) +
                                           ") closed the connection (leader exited, was killed, or dropped this rank)",
                            EPIPE);
    else if (st.code() == Code::kTimeout)
      leader_lost_ = Status(Code::kTimeout, what + ": no answer from the leader (pid " + std::to_string(leader_pid_) +
                                                ") within " + std::to_string(wait.count()) + " ms",
                            ETIMEDOUT);
    else
      leader_lost_ = st.with_context(what);
    return leader_lost_;
  }
  auto decoded = decode_gather_result(m->type, m->payload, world_);
  if (!decoded.is_ok()) return decoded.status().with_context(what);
  if (decoded->first != step)
    return Status(Code::kInternal, what + ": the leader answered step " + in_quotes(decoded->first) +
                                       " (protocol out of step)");
  return std::move(decoded->second);
}

// ---- protocol ------------------------------------------------------------------------------------

const std::vector<std::string>& protocol_steps() {
  static const std::vector<std::string> steps{kStepDescribe,         kStepAttach, kStepRegister, kStepCensusRegistered,
                                              kStepLoad,             kStepReady,  kStepCensusLoaded};
  return steps;
}

SharedTableGroup::~SharedTableGroup() = default;

Result<std::unique_ptr<SharedTableGroup>> SharedTableGroup::lead(std::shared_ptr<HostTable> table,
                                                                 const std::string& group, const std::string& job,
                                                                 std::shared_ptr<sys::FileGuardian> guardian) {
  if (!table) return Status(Code::kInvalidArgument, "shared group '" + group + "': no table");
  const auto parts = table->parts();
  if (parts.empty())
    return Status(Code::kInvalidArgument, "shared group '" + group + "': the table has no shareable backing "
                                                                      "(private memory from allocate())");
  bool named = false;
  for (const auto& p : parts) {
    const Backing& b = p.backing->backing;
    if (b.kind() == BackingKind::kAnonThp)
      return Status(Code::kInvalidArgument, "shared group '" + group +
                                                "': an anon-thp backing is private to one process and cannot be "
                                                "shared (use memfd, shm or hugetlb)");
    if (!b.owner())
      return Status(Code::kInvalidArgument, "shared group '" + group + "': the table is attached, not created here");
    named = named || (b.kind() == BackingKind::kShmFile && !b.unlinked());
  }
  std::unique_ptr<SharedTableGroup> g(new SharedTableGroup());
  g->leader_ = true;
  g->group_ = group;
  g->job_ = job;
  g->table_ = std::move(table);
  g->guardian_ = std::move(guardian);
  if (named && !g->guardian_) {
    auto guard = sys::FileGuardian::start();
    if (!guard.is_ok()) return guard.status().with_context("shared group '" + group + "': file guardian");
    g->guardian_ = std::make_shared<sys::FileGuardian>(std::move(*guard));
  }
  // Arming is idempotent: a file already armed by the creator's TableOptions::on_named_created keeps one entry.
  if (g->guardian_)
    for (const auto& p : parts) {
      const Backing& b = p.backing->backing;
      if (b.kind() == BackingKind::kShmFile && !b.unlinked()) ENGRAM_RETURN_IF_ERROR(g->guardian_->arm(b.identity().path));
    }
  return g;
}

nlohmann::json SharedTableGroup::description() const {
  json segs = json::array();
  int fd_index = 0;
  const HostTable& t = *table_;
  for (const auto& p : t.parts()) {
    const Backing& b = p.backing->backing;
    const auto& id = b.identity();
    const PlacementReport& r = p.backing->report;
    const bool by_fd = id.kind == BackingKind::kMemfd || id.kind == BackingKind::kHugetlb;
    const HeadRange h = t.n_shards() > 1 || !t.tp().whole() ? t.shard_heads(p.shard) : HeadRange{0, t.layout().heads()};
    const uint64_t offset = static_cast<uint64_t>(b.data() - t.view(p.layer_index, p.replica).data);
    segs.push_back({{"kind", backing_kind_name(id.kind)},
                    {"name", id.name},
                    {"path", id.path},
                    {"size_bytes", b.size_bytes()},
                    {"inode", id.inode},
                    {"device", id.device},
                    {"layer_index", p.layer_index},
                    {"replica_node", r.replica_node},
                    {"head_begin", h.begin},
                    {"head_end", h.end},
                    {"offset_bytes", offset},
                    {"fd_index", by_fd ? fd_index++ : -1},
                    {"placement_requested", r.requested},
                    {"placement_resolved", r.resolved},
                    {"placement_obtained", r.obtained},
                    {"prefault", r.prefault}});
  }
  json out = {{"protocol", kProtocolVersion}, {"group", group_}, {"job", job_}, {"layout", layout_to_json(t.layout())},
              {"segments", segs}};
  if (!t.tp().whole()) {
    out["tp_size"] = t.tp().size;
    out["tp_rank"] = t.tp().rank;
  }
  return out;
}

Status SharedTableGroup::unlink_named() {
  if (!leader_ || !table_) return Status::ok();
  return table_->unlink_named_files([this](const std::string& path) {
    if (guardian_) (void)guardian_->disarm(path);
  });
}

Status SharedTableGroup::fail_peers(GroupChannel& channel, const std::string& group, const Status& failure,
                                    Millis timeout) {
  const Status why = failure.is_ok() ? Status(Code::kInternal, "fail_peers called without a failure") : failure;
  std::string bytes = dump({{"protocol", kProtocolVersion}, {"group", group}, {"error", status_json(why)}});
  std::vector<int> none;
  (void)channel.broadcast(kStepDescribe, &bytes, &none, timeout);
  return why.with_context("shared group '" + group + "', step 'describe'");
}

Status SharedTableGroup::load(const std::function<Status(HostTable&)>& loader) {
  if (!leader_) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': only the leader loads weights");
  Status s = loader(*table_);
  if (s.is_ok()) loaded_ = true;
  return s;
}

namespace {

// Runs one step on this rank: hook, local work, all-gather, record. Returns the group's verdict.
struct StepRunner {
  GroupChannel& channel;
  const ProtocolHooks& hooks;
  std::vector<StepRecord>& record;
  std::string group;

  Status run(const std::string& step, Millis timeout, const std::function<Status(std::string* message)>& local) {
    const auto t0 = Clock::now();
    if (hooks.on_step) hooks.on_step(step, channel.rank());
    RankEntry mine;
    mine.rank = channel.rank();
    mine.pid = sys::process_id();
    mine.status = local(&mine.message);
    auto entries = channel.all_gather(step, mine, timeout);
    StepRecord rec;
    rec.step = step;
    rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!entries.is_ok()) {
      rec.entries.push_back(mine);
      record.push_back(std::move(rec));
      return entries.status().with_context("shared group '" + group + "'");
    }
    rec.entries = *entries;
    record.push_back(std::move(rec));
    Status f = first_failure(step, *entries);
    return f.is_ok() ? f : f.with_context("shared group '" + group + "'");
  }
};

Status run_census(const ProtocolHooks& hooks, CensusPoint point, const HostTable* table, int rank, std::string* msg) {
  if (!hooks.census || !table) return Status::ok();
  auto c = hooks.census(point, *table, rank);
  if (!c.is_ok()) return c.status();
  *msg = std::move(*c);
  return Status::ok();
}

}  // namespace

Status SharedTableGroup::admit(GroupChannel& channel, const ProtocolHooks& hooks, const ProtocolTimeouts& timeouts) {
  if (!leader_) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': admit() is the leader's");
  if (channel.rank() != 0) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': channel rank is not 0");
  steps_.clear();
  auto fail = [&](Status s) {
    if (!s.is_ok()) (void)unlink_named();  // no named file survives a failed group
    return s;
  };
  // Step "describe".
  {
    const auto t0 = Clock::now();
    if (hooks.on_step) hooks.on_step(kStepDescribe, 0);
    std::vector<int> fds;
    for (const auto& p : table_->parts()) {
      const Backing& b = p.backing->backing;
      if (b.kind() == BackingKind::kMemfd || b.kind() == BackingKind::kHugetlb) fds.push_back(b.fd());
    }
    std::string bytes = dump(description());
    // An engine's channel that cannot pass descriptors still works with named files; with a memfd
    // the peers are told why in place of the description, and their join() returns it.
    if (!fds.empty() && !channel.can_pass_fds())
      return fail(fail_peers(channel, group_,
                             Status(Code::kUnsupported, "the channel (" + channel.describe() +
                                                            ") cannot pass descriptors: share a named backing (shm) "
                                                            "instead"),
                             timeouts.step));
    ENGRAM_RETURN_IF_ERROR(fail(channel.broadcast(kStepDescribe, &bytes, &fds, timeouts.step)
                                    .with_context("shared group '" + group_ + "'")));
    steps_.push_back({kStepDescribe, std::chrono::duration<double>(Clock::now() - t0).count(), {}});
  }
  StepRunner r{channel, hooks, steps_, group_};
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepAttach, timeouts.step, [](std::string*) { return Status::ok(); })));
  // Every peer holds a mapping or a descriptor now: the name has done its job.
  const Status unlinked = unlink_named();
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepRegister, timeouts.step, [&](std::string*) {
    if (!unlinked.is_ok()) return unlinked.with_context("unlink of the named table after attach");
    return hooks.register_memory ? hooks.register_memory(table_, 0) : Status::ok();
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepCensusRegistered, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterRegistration, table_.get(), 0, msg);
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepLoad, timeouts.step, [&](std::string*) {
    if (!hooks.load || loaded_) return Status::ok();
    Status s = hooks.load(*table_);
    if (s.is_ok()) loaded_ = true;
    return s.with_context("leader weight load");
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepReady, timeouts.step, [](std::string*) { return Status::ok(); })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepCensusLoaded, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterLoad, table_.get(), 0, msg);
  })));
  return Status::ok();
}

namespace {

// The description's segments as HostTable::attach takes them; the received descriptors move into the specs
// (those not used are closed by the caller's list).
Result<std::vector<AttachSpec>> attach_specs(const std::vector<wire::SegmentInfo>& infos, std::vector<int>& fds) {
  std::vector<AttachSpec> out;
  for (size_t k = 0; k < infos.size(); ++k) {
    const auto& i = infos[k];
    const std::string what = "segment " + std::to_string(k) + " (" + i.kind + " " + (i.path.empty() ? i.name : i.path) + ")";
    auto kind = parse_backing_kind(i.kind);
    if (!kind.is_ok()) return kind.status().with_context(what);
    AttachSpec a;
    a.kind = *kind;
    a.name = i.name;
    a.path = i.path;
    a.size_bytes = i.size_bytes;
    a.inode = i.inode;
    a.device = i.device;
    a.layer_index = static_cast<int>(i.layer_index);
    a.replica_node = static_cast<int>(i.replica_node);
    a.heads = {static_cast<int>(i.head_begin), static_cast<int>(i.head_end)};
    a.offset_bytes = i.offset_bytes;
    a.placement_requested = i.requested;
    a.placement_resolved = i.resolved;
    a.placement_obtained = i.obtained;
    a.prefault = i.prefault;
    if (a.kind != BackingKind::kShmFile) {
      if (i.fd_index < 0 || static_cast<size_t>(i.fd_index) >= fds.size() || fds[static_cast<size_t>(i.fd_index)] < 0)
        return Status(Code::kInvalidArgument, what + ": descriptor " + std::to_string(i.fd_index) +
                                                  " announced but not received");
      a.fd = std::exchange(fds[static_cast<size_t>(i.fd_index)], -1);
    }
    out.push_back(std::move(a));
  }
  return out;
}

// Closes the descriptors a peer received and did not hand on.
struct FdList {
  std::vector<int> fds;
  ~FdList() {
    for (int fd : fds)
      if (fd >= 0) (void)sys::close_fd(fd);
  }
};

}  // namespace

Result<std::unique_ptr<SharedTableGroup>> SharedTableGroup::join(GroupChannel& channel, const PeerOptions& options,
                                                                 const ProtocolHooks& hooks,
                                                                 const ProtocolTimeouts& timeouts) {
  if (channel.rank() == 0) return Status(Code::kInvalidArgument, "SharedTableGroup::join: rank 0 is the leader");
  std::unique_ptr<SharedTableGroup> g(new SharedTableGroup());
  g->leader_ = false;
  const int rank = channel.rank();
  const auto t0 = Clock::now();
  if (hooks.on_step) hooks.on_step(kStepDescribe, rank);
  std::string bytes;
  FdList fds;
  ENGRAM_RETURN_IF_ERROR(channel.broadcast(kStepDescribe, &bytes, &fds.fds, timeouts.step).with_context("shared group"));
  g->steps_.push_back({kStepDescribe, std::chrono::duration<double>(Clock::now() - t0).count(), {}});
  std::vector<wire::SegmentInfo> infos;
  auto description = wire::decode_description(bytes);
  Status described = description.status();
  EngramLayout layout;
  TpSlice tp;
  if (described.is_ok()) {
    // The leader gave up before admitting us: its failure is ours, now (it waits for no answer).
    if (!description->leader_failure.is_ok())
      return description->leader_failure.with_context("shared group '" + description->group + "', step 'describe'");
    g->group_ = description->group;
    g->job_ = description->job;
    tp = description->tp;
    infos = std::move(description->segments);
    auto l = layout_from_json(description->layout);
    if (l.is_ok()) layout = *l;
    else described = l.status().with_context("the leader's table layout");
  }
  if (g->group_.empty()) g->group_ = "?";
  StepRunner r{channel, hooks, g->steps_, g->group_};
  ENGRAM_RETURN_IF_ERROR(r.run(kStepAttach, timeouts.step, [&](std::string*) {
    if (!described.is_ok()) return described;
    if (hooks.on_described) ENGRAM_RETURN_IF_ERROR(hooks.on_described(g->job_, layout));
    ENGRAM_ASSIGN_OR_RETURN(std::vector<AttachSpec> specs, attach_specs(infos, fds.fds));
    AttachOptions ao;
    ao.read_only = options.read_only;
    ao.gpu_node = options.gpu_node;
    ao.tp = tp;
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<HostTable> t, HostTable::attach(layout, std::move(specs), ao));
    g->table_ = std::shared_ptr<HostTable>(std::move(t));
    return Status::ok();
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepRegister, timeouts.step, [&](std::string*) {
    return hooks.register_memory ? hooks.register_memory(g->table_, rank) : Status::ok();
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepCensusRegistered, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterRegistration, g->table_.get(), rank, msg);
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepLoad, timeouts.load, [](std::string*) { return Status::ok(); }));
  g->loaded_ = true;
  ENGRAM_RETURN_IF_ERROR(r.run(kStepReady, timeouts.step, [](std::string*) { return Status::ok(); }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepCensusLoaded, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterLoad, g->table_.get(), rank, msg);
  }));
  return g;
}

}  // namespace engram::host
