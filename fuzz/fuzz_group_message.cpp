// libFuzzer target: the shared-group message decoders (host/group.hpp, namespace wire) and the
// frame reader (sys/unix_socket.hpp recv_message) on bytes a hostile peer or leader could send.
//
// Input: one mode byte, a little-endian u16 message type, then the payload.
//   0 hello   1 welcome/refusal   2 broadcast   3 all-gather entry   4 all-gather result (world from
//   the type's high byte)   5 table description
//   6 raw packets: the payload, cut at each "\xffPKT" marker, is written as SEQPACKET packets into one
//     end of a socketpair and read back with recv_message (limit 64 KiB), as the leader reads a peer
// Promises: decoders answer a value or kInvalidArgument (a refusal decodes to the leader's code);
// an accepted description is the leader's failure (no segment, a message) or segments with sizes in
// (0, 2^56) and fd_index in [-1, 64); recv_message never returns more payload than its limit and
// closes every descriptor (there are none here).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "host/group.hpp"
#include "sys/unix_socket.hpp"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
using engram::Code;
void check_error(const engram::Status& s) { check(!s.is_ok() && !s.message().empty()); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int mode = data[0] % 7;
  const uint16_t type = static_cast<uint16_t>(data[1] | (data[2] << 8));
  const std::string payload(reinterpret_cast<const char*>(data + 3), size - 3);
  namespace wire = engram::host::wire;
  switch (mode) {
    case 0: {
      auto h = wire::decode_hello(type, payload, data[1] >> 7);
      if (!h.is_ok()) check(h.status().code() == Code::kInvalidArgument);
      break;
    }
    case 1: {
      auto w = wire::decode_welcome_or_reject(type, payload);
      if (w.is_ok()) check(w->rank >= 1 && w->rank < w->world);
      else check_error(w.status());
      break;
    }
    case 2: {
      auto b = wire::decode_broadcast(type, payload);
      if (b.is_ok()) check(4 + b->step.size() + b->bytes.size() == payload.size());
      else check(b.status().code() == Code::kInvalidArgument);
      break;
    }
    case 3: {
      auto e = wire::decode_gather_entry(type, payload, 0);
      if (!e.is_ok()) check(e.status().code() == Code::kInvalidArgument);
      break;
    }
    case 4: {
      auto r = wire::decode_gather_result(type & 0xff, payload, type >> 8);
      if (r.is_ok()) check(r->second.size() == static_cast<size_t>(type >> 8));
      else check(r.status().code() == Code::kInvalidArgument);
      break;
    }
    case 5: {
      auto d = wire::decode_description(payload);
      if (!d.is_ok()) {
        check_error(d.status());
        break;
      }
      if (!d->leader_failure.is_ok()) {  // the leader's failure in place of a table
        check(d->segments.empty());
        check_error(d->leader_failure);
        break;
      }
      check(!d->segments.empty());
      for (const auto& s : d->segments) {
        check(s.size_bytes > 0 && s.size_bytes < (uint64_t{1} << 56));
        check(s.fd_index >= -1 && s.fd_index < 64);
      }
      break;
    }
    default: {
      auto pair = engram::sys::unix_socket_pair();
      if (!pair.is_ok()) return 0;
      size_t pos = 0;
      int sent = 0;
      while (pos <= payload.size() && sent < 16) {
        size_t cut = payload.find("\xffPKT", pos);
        if (cut == std::string::npos) cut = payload.size();
        const std::string pkt = payload.substr(pos, std::min<size_t>(cut - pos, 40000));
        if (::send(pair->first.fd(), pkt.data(), pkt.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) break;
        ++sent;
        pos = cut + 4;
      }
      pair->first.close();  // the reader sees EOF after the packets
      for (int i = 0; i < sent + 1; ++i) {
        auto m = engram::sys::recv_message(pair->second, 64 * 1024, engram::sys::SteadyClock::now());
        if (!m.is_ok()) {
          if (m.status().code() == Code::kIo || m.status().code() == Code::kTimeout) break;
          check(m.status().code() == Code::kInvalidArgument);
          continue;
        }
        check(m->payload.size() <= 64 * 1024 && m->n_fds() == 0);
      }
    }
  }
  return 0;
}
