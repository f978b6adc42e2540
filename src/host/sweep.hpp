// Stale-state sweep: removes the named objects (shared-table files, leaders' sockets, checkpoint
// temp files) whose owner is dead, and only those.
//
// A killed leader's guardian (sys/process.hpp) removes its files, but nothing survives to do so
// when the whole process group, its cgroup or the OOM killer takes the leader and its guardian
// together. Each named object has an owner record next to it (sys/owner.hpp: pid, start time, boot
// id, pid namespace). A sweep reads every record in the given directories and, when the owner is
// dead (no such process, the pid reused, an earlier boot), unlinks the object and then the record.
// It never removes an object whose owner is alive, whose record is unreadable, that comes from
// another pid namespace, or that belongs to another user (the record's or the object's owner is not
// our uid); those are reported as kept, with the reason. Objects that look like engram's (a name
// starting "engram", or a socket in the leader's socket directory) without any record are kept and
// named ("no owner record"). Everything removed is named with its size and its dead owner.
//
// Users: `engram cleanup` (--dry-run, --json), `engram serve-table` and the leader of `engram run
// --ranks` at their start (the shm directory and the socket directory), `engram table create` (the
// output directory: stale temp files of a killed writer). Safe to run while other groups are
// live, and concurrently with another sweep (an object already gone is not an error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace engram::host {

struct SweptObject {
  std::string path;
  std::string kind;        // "table", "socket", "temp file", "file", "owner record" (its object was gone)
  int64_t bytes = -1;      // allocated bytes of a file; -1 for a socket or a record
  int owner_pid = 0;       // 0: no readable record
  std::string reason;      // "owner pid 4242 is gone", "owner pid 17 is alive", "no owner record", ...
};

struct SweepReport {
  bool dry_run = false;
  std::vector<std::string> dirs;
  std::vector<SweptObject> removed;  // dry run: what would be removed
  std::vector<SweptObject> kept;
  std::vector<std::string> errors;   // a directory that could not be read, an unlink that failed
  int64_t removed_bytes() const;
  nlohmann::json to_json() const;
  // One line per removed (and, with include_kept, kept) object ("removed /dev/shm/engram:layer=1...
  // (table, 1.10 GiB): owner pid 4242 is gone"), then one per error.
  std::vector<std::string> lines(bool include_kept = true) const;
};

struct SweepOptions {
  std::vector<std::string> dirs;  // directories to sweep (not recursive); missing ones are skipped
  bool dry_run = false;           // report, remove nothing
  bool report_unowned = true;     // name engram-looking objects that have no owner record
};
SweepReport sweep_stale(const SweepOptions& options);

// Where named objects are made by default: `shm_dir` (the tables; /dev/shm unless told) and the
// leaders' socket directory (sys::private_runtime_dir(), when it is usable), without duplicates.
std::vector<std::string> default_sweep_dirs(const std::string& shm_dir = "/dev/shm");

}  // namespace engram::host
