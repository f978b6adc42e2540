// Named shared-memory files (the "named /dev/shm file" backing), in the manner of shm_open(3) but
// with the flags we need and a name no other process can predict.
//
// The file is created O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC with mode 0600 under `dir`
// (default /dev/shm) as "<prefix>.<16 random hex digits>": O_EXCL and O_NOFOLLOW mean a name planted
// in advance (a file or a symlink to elsewhere) makes creation fail instead of being used; 0600 keeps
// other users out. Peers open it by path (O_RDWR|O_NOFOLLOW) and check that it is a regular file
// owned by the same user. The leader unlinks it once every peer has attached: mappings survive.
// Each file has an owner record (owner.hpp) written just before it, removed with it, so that a later
// sweep (host/sweep.hpp) can remove the file of a leader that was killed with its whole group.
#pragma once

#include <string>

#include "engram/status.hpp"

namespace engram::sys {

struct NamedFile {
  int fd = -1;
  std::string path;
};

// Creates a new file "<dir>/<prefix>.<random>". kInvalidArgument if `prefix` holds '/', kNotFound
// if `dir` does not exist, kPermission on EACCES; EEXIST (a random clash) is retried 8 times.
// Its owner record exists before the file does (removed again when the file cannot be created).
Result<NamedFile> create_named_file(const std::string& dir, const std::string& prefix);
// Opens an existing named file for a peer. kNotFound when it was already unlinked (a peer that
// joins late); kPermission when it is not a regular file of this user or is reachable only
// through a symlink (ELOOP).
Result<int> open_named_file(const std::string& path);
// unlink(path) and its owner record; kNotFound if the file was already gone (the record is removed
// then too).
Status unlink_named_file(const std::string& path);

}  // namespace engram::sys
