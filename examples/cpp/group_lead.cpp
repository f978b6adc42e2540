// A two-process shared group (include/engram/group_channel.hpp): the leader listens on a Unix socket
// (listen_unix_group), creates the table and serves it with Engine::lead_group; a forked peer connects
// (connect_unix_group) and maps the leader's table read-only with Engine::join_group, learning the layout from the
// leader. Both look rows up through their own engine (CPU backend) and check them against the leader's synthetic
// rows decoded by the scalar reference; the peer reports through its exit status.
// Exits 0 when both ranks read the same rows as the reference, 1 otherwise, 77 when Unix sockets or the shared
// table cannot be made here.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/group_channel.hpp"

namespace {

constexpr uint64_t kSeed = 23;
const engram::host::Millis kTimeout{20000};

int fail(const char* who, const char* what, const engram::Status& s) {
  std::fprintf(stderr, "%s: %s: %s\n", who, what, s.to_string().c_str());
  return s.code() == engram::Code::kUnsupported || s.code() == engram::Code::kPermission ? 77 : 1;
}

// Rows of every layer looked up through `e` against synth_row(kSeed) decoded by the reference: the mismatches.
int64_t check_rows(engram::Engine& e, int rank) {
  const engram::EngramLayout& l = e.layout();
  const int64_t tokens = 8;
  std::vector<uint8_t> payload(static_cast<size_t>(l.d)), scales(static_cast<size_t>(l.d / 32));
  std::vector<uint16_t> want(static_cast<size_t>(l.d));
  int64_t wrong = 0;
  for (int li = 0; li < l.n_layers(); ++li) {
    std::vector<int64_t> ids(static_cast<size_t>(tokens * l.heads()));
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<int64_t>((i * 977 + static_cast<size_t>(rank) * 31 + 5) % static_cast<size_t>(l.rows(li)));
    std::vector<uint16_t> out(ids.size() * static_cast<size_t>(l.d), 0xFFFF);
    if (auto r = e.lookup(li, ids.data(), tokens, out.data()); !r.is_ok()) return fail("rank", "Engine::lookup", r.status()), -1;
    for (size_t p = 0; p < ids.size(); ++p) {
      engram::synth_row(kSeed, li, ids[p], l.d, payload.data(), scales.data());
      engram::decode_row_reference(payload.data(), scales.data(), l.d, want.data());
      for (int i = 0; i < l.d; ++i) wrong += out[p * static_cast<size_t>(l.d) + static_cast<size_t>(i)] != want[static_cast<size_t>(i)];
    }
  }
  return wrong;
}

int peer(const std::string& socket_path, const engram::host::UnixGroupOptions& group) {
  auto channel = engram::host::connect_unix_group(socket_path, group, kTimeout);
  if (!channel.is_ok()) return fail("peer", "connect_unix_group", channel.status());
  engram::EngineOptions options;
  options.backend = engram::BackendKind::kCpu;
  options.lookup_threads = 1;
  auto engine = engram::Engine::join_group(options, **channel);
  if (!engine.is_ok()) return fail("peer", "Engine::join_group", engine.status());
  const int64_t wrong = check_rows(**engine, (*channel)->rank());
  std::printf("peer (rank %d of %d): %s table, rows %s\n", (*engine)->group_rank(), (*engine)->group_world_size(),
              (*engine)->table().read_only() ? "read-only" : "WRITABLE", wrong == 0 ? "match" : "MISMATCH");
  // Stay attached until the leader has read its own rows.
  if (auto s = (*channel)->barrier("done", kTimeout); !s.is_ok()) return fail("peer", "barrier", s);
  return wrong == 0 && (*engine)->table().read_only() ? 0 : 1;
}

}  // namespace

int main() {
  auto layout = engram::make_preset_layout("tiny");
  if (!layout.is_ok()) return fail("leader", "layout", layout.status());
  engram::host::UnixGroupOptions group;
  group.group = "example-group";
  auto listener = engram::host::listen_unix_group(group);  // before the fork: the peer needs the path
  if (!listener.is_ok()) return fail("leader", "listen_unix_group", listener.status());
  const std::string socket_path = (*listener)->socket_path();
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return std::perror("fork"), 1;
  if (child == 0) {
    // The child leaves the listener alone (_Exit runs no destructor, so the leader's socket path stays).
    const int rc = peer(socket_path, group);
    std::fflush(stdout);
    std::_Exit(rc);
  }

  int rc = 0;
  auto channel = (*listener)->accept(1, kTimeout);
  if (!channel.is_ok()) {
    rc = fail("leader", "accept", channel.status());
  } else {
    engram::EngineOptions options;
    options.backend = engram::BackendKind::kCpu;
    options.lookup_threads = 1;
    options.content.kind = engram::TableContent::Kind::kSynthetic;
    options.content.seed = kSeed;
    options.table.group = group.group;
    auto engine = engram::Engine::lead_group(*layout, options, **channel);
    if (!engine.is_ok()) {
      rc = fail("leader", "Engine::lead_group", engine.status());
    } else {
      const int64_t wrong = check_rows(**engine, 0);
      std::printf("leader (rank 0 of %d): rows %s\n", (*engine)->group_world_size(), wrong == 0 ? "match" : "MISMATCH");
      if (wrong != 0) rc = 1;
      if (auto s = (*channel)->barrier("done", kTimeout); !s.is_ok()) rc = fail("leader", "barrier", s);
    }
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return std::perror("waitpid"), 1;
  const int peer_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc == 0 && peer_rc != 0) std::fprintf(stderr, "peer exited with %d\n", peer_rc);
  if (rc == 0) rc = peer_rc;
  std::printf("two-process group: %s\n", rc == 0 ? "both ranks read the reference rows" : "FAILED");
  return rc;
}
