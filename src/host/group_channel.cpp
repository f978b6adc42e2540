// Group channel (engram/group_channel.hpp, host/group_channel.hpp): UnixGroupListener admits peers, UnixGroupChannel runs the
// collectives over a star of SOCK_SEQPACKET connections.
//
// Every collective is leader-centred: an all-gather is "peers send their entry, the leader collects
// with one poll over all peer sockets against one deadline, then sends the full vector to every peer".
// A peer that closed its connection, timed out or sent garbage is dropped from the group at that moment
// and its reason becomes its entry, so the other peers learn who failed and why from the leader in the
// same round instead of each timing out on its own. A peer waits for the leader's answer a grace period
// longer than the leader waits for the peers: when both are alive, the leader is the one who decides.
#include "host/group_channel.hpp"

#include <algorithm>
#include <cstdint>

#include "host/group_wire.hpp"
#include "sys/memfd.hpp"

namespace engram::host {
namespace {

using namespace wire;  // message types, encoders and decoders
constexpr size_t kHelloMaxBytes = 64 * 1024;

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
  if (!sys::send_message(s, kMsgReject, encode_reject(code, reason), {}, deadline).is_ok())
    return;
  for (;;) {
    auto m = sys::recv_message(s, kHelloMaxBytes, deadline);
    // A malformed packet was still taken off the queue: keep going. EOF, timeout, error: done.
    if (!m.is_ok() && m.status().code() != Code::kInvalidArgument) return;
  }
}

}  // namespace

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
                                 encode_welcome(p.rank, ch->world_, ch->leader_pid_, options_.group),
                                 {}, sys::deadline_after(options_.hello_timeout));
    if (!s.is_ok()) ch->drop(p, peer_loss(s, "join", options_.hello_timeout));
  }
  return ch;
}

// ---- UnixGroupChannel -----------------------------------------------------------------------------

Result<std::unique_ptr<GroupChannel>> UnixGroupListener::accept(int n_peers, Millis timeout,
                                                                const std::function<bool()>& cancelled) {
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<UnixGroupChannel> channel, accept_group(n_peers, timeout, cancelled));
  return std::unique_ptr<GroupChannel>(std::move(channel));
}

Result<std::unique_ptr<GroupListener>> listen_unix_group(const UnixGroupOptions& options) {
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<UnixGroupListener> listener, UnixGroupListener::listen(options));
  return std::unique_ptr<GroupListener>(std::move(listener));
}

Result<std::unique_ptr<GroupChannel>> connect_unix_group(const std::string& socket_path,
                                                         const UnixGroupOptions& options, Millis timeout) {
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<UnixGroupChannel> channel,
                          UnixGroupChannel::connect(socket_path, options, timeout));
  return std::unique_ptr<GroupChannel>(std::move(channel));
}

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
      *s, kMsgHello, encode_hello(options.group, sys::process_id()), {},
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

void UnixGroupChannel::drop(Peer& p, Status why) {
  if (!p.alive) return;
  p.alive = false;
  p.death = std::move(why);
  p.socket.close();  // the peer sees EOF at once instead of waiting out its own timeout
}

Status UnixGroupChannel::broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, Millis timeout) {
  if (rank_ == 0) {
    const std::string payload = encode_broadcast(step, bytes);
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
  const std::string result = encode_gather_result(step, entries);
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

}  // namespace engram::host
