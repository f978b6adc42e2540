// Owner records: who made a named object (a /dev/shm table, a leader's socket, a checkpoint's temp
// file), so that a later process can tell a dead owner's leftovers from a live owner's objects.
//
// A kill -9 of a whole process group, a cgroup or OOM kill leaves named objects behind that no
// guardian could remove (sys/process.hpp: the guardian dies with the group). Whoever starts next
// must be able to remove exactly those, and never an object another process still uses. So every
// named object gets a record next to it, "<dir>/.engram-owner.<object name>", holding the creator's
//   pid, start time (/proc/<pid>/stat field 22, clock ticks since boot), boot id
//   (/proc/sys/kernel/random/boot_id) and pid namespace (inode of /proc/self/ns/pid),
// and the record file's owner (st_uid) is the creator's uid. The owner is
//   alive    a process with that pid exists, is not a zombie, has that start time, on this boot;
//   dead     the boot id differs (the owner's boot is over), no process has that pid, the pid has
//            another start time (it was reused), or the process is a zombie (it holds nothing);
//   unknown  the record is unreadable or malformed, or it comes from another pid namespace (its
//            pid means nothing here) -- never treated as dead.
// Why a file and not an extended attribute on the object: tmpfs accepts user.* xattrs only since
// Linux 6.6, and Debian 12 runs 6.1; a record file works on every file system, sockets included.
//
// Order: the record is written BEFORE its object is created, so there is no instant at which the
// object exists without a record (a record without an object is harmless: a sweep removes it). It
// appears complete or not at all: written into an O_TMPFILE and linked to its name (link(2) never
// replaces a name), or, where the file system has no O_TMPFILE, created O_EXCL and written at once.
//
// Contract (as in the rest of src/sys): Status / Result, errno left as found, paths in messages.
#pragma once

#include <cstdint>
#include <string>

#include "engram/status.hpp"

namespace engram::sys {

struct ProcessStamp {
  int pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22
  std::string boot_id;       // "" when /proc/sys/kernel/random/boot_id cannot be read
  uint64_t pid_ns = 0;       // inode of /proc/<pid>/ns/pid; 0 when unreadable
};

// This process's stamp.
Result<ProcessStamp> self_stamp();
// The stamp of a running process. kNotFound when no process has that pid. `zombie` (optional) is
// set when the process has exited and awaits its parent's wait().
Result<ProcessStamp> process_stamp(int pid, bool* zombie = nullptr);

enum class OwnerState { kAlive, kDead, kUnknown };
// Decides as the file comment says; `why` gets a short reason ("pid 4242 is gone", "pid 4242 now
// belongs to another process (start time differs)", "another boot", "alive").
OwnerState owner_state(const ProcessStamp& recorded, std::string* why);

inline constexpr const char* kOwnerRecordPrefix = ".engram-owner.";
// "<dir>/.engram-owner.<name>" for "<dir>/<name>".
std::string owner_record_path(const std::string& object_path);
// True when `name` (a directory entry) is an owner record; `object_name` gets the object's name.
bool parse_owner_record_name(const std::string& name, std::string* object_name);

// Writes this process's record for `object_path` (which need not exist yet). kInvalidArgument when
// a record already exists under that name (EEXIST), kNotFound when the directory is missing,
// kPermission / kIo from open, write or link.
Status write_owner_record(const std::string& object_path);

struct OwnerRecord {
  ProcessStamp owner;
  uint32_t file_uid = 0;  // st_uid of the record file
};
// Reads the record at `record_path` (not following a symlink). kNotFound when there is none,
// kInvalidArgument when it is not a regular file or is malformed (a writer killed mid-way on a file
// system without O_TMPFILE leaves an empty one).
Result<OwnerRecord> read_owner_record(const std::string& record_path);
// Removes the record of `object_path`; OK when there is none.
Status remove_owner_record(const std::string& object_path);

}  // namespace engram::sys
