// File primitives for checkpoint, model and procfs/sysfs I/O: the only place that calls open/read/pread/pwrite/
// posix_fadvise/fstat/fsync/sync_file_range/rename/unlink/mkdir/mincore on table files.
//
// Contract (as in memory.hpp): every function returns a Status (or Result), leaves the caller's
// errno exactly as it found it, and names the call, the path and the arguments on failure
// ("pread(ckpt.safetensors, len=64 MiB, off=8192): EIO (Input/output error)"). Short reads and
// writes are retried until the whole range is done; EINTR is retried. Offsets and sizes are bytes.
// A File is a move-only owner of one descriptor (opened O_CLOEXEC) and remembers its path for
// messages. Thread safety: pread/pwrite on one File from several threads is safe (positional I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engram/status.hpp"

namespace engram::sys {

class File {
 public:
  File() = default;
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }
  // close(2); a failure here can mean lost writes (NFS, quota): kIo. Idempotent.
  Status close();

 private:
  int fd_ = -1;
  std::string path_;
};

// open(path, O_RDONLY|O_CLOEXEC|O_NONBLOCK), then the flag cleared: a FIFO without a writer cannot block the
// open. kNotFound / kPermission / kIo from open(2); kInvalidArgument (EISDIR) when `path` is a directory, and
// kInvalidArgument when it is not a regular file (FIFO, socket, device).
Result<File> open_read(const std::string& path);
// open(path, O_WRONLY|O_CREAT|O_EXCL|O_TRUNC|O_NOFOLLOW|O_CLOEXEC, mode): a new file that did not
// exist (a temp name). EEXIST -> kIo, ENOENT (no such directory) -> kNotFound, EACCES -> kPermission.
Result<File> create_new(const std::string& path, unsigned mode = 0644);
// open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC), for fsync of a directory after a rename.
Result<File> open_directory(const std::string& path);

// fallocate(2) of [0, len): reserves the blocks so a full disk fails now (kNoSpace), not midway.
// File systems without fallocate give kUnsupported (the caller may go on without it).
Status allocate_file(const File& f, int64_t len);
// fstat(2) st_size in bytes.
Result<int64_t> file_size_bytes(const File& f);
// Reads exactly len bytes at offset. Reaching end of file first is kIo "short read (got N of M)".
Status pread_full(const File& f, void* buf, size_t len, int64_t offset);
// Writes exactly len bytes at offset. ENOSPC -> kNoSpace.
Status pwrite_full(const File& f, const void* buf, size_t len, int64_t offset);

enum class Advice { kNormal, kSequential, kWillNeed, kDontNeed };
// posix_fadvise(2) over [offset, offset + len) (len 0 = to the end of the file). kDontNeed drops the
// clean page-cache pages wholly inside the range (partial pages at the edges stay): it is how a
// loader avoids leaving a second copy of a table in the page cache.
Status fadvise(const File& f, int64_t offset, int64_t len, Advice advice);
// Starts writeback of [offset, offset + len) and, when wait is true, waits for it (sync_file_range(2)
// with WAIT_BEFORE|WRITE|WAIT_AFTER). Makes the range's pages clean so kDontNeed can drop them.
// It is not a durability barrier (use fsync for that).
Status sync_range(const File& f, int64_t offset, int64_t len, bool wait);
// fsync(2): data and metadata durable.
Status fsync(const File& f);

// rename(2) from -> to; with replace = false the call fails with kInvalidArgument when `to` exists
// (renameat2 RENAME_NOREPLACE; on file systems without it, a check then rename(2)).
Status rename_path(const std::string& from, const std::string& to, bool replace);
// unlink(2).
Status unlink_path(const std::string& path);
// lstat(2): true when `path` names anything (file, directory, dangling symlink); false on ENOENT.
Result<bool> path_exists(const std::string& path);

// The whole content of a regular file of at most max_bytes bytes (open, fstat, pread). kInvalidArgument
// when the file is larger (naming both sizes); errors of open/pread otherwise.
Result<std::string> read_small_file(const std::string& path, int64_t max_bytes);
// The whole content of a file read until EOF (read(2) loop): for procfs and sysfs files, whose size reads as 0.
// kNotFound when it does not exist, kPermission on EACCES.
Result<std::string> read_text_file(const std::string& path);
// Writes `data` to a new file (create_new: it must not exist), fsyncs and closes it; on error the file
// is removed.
Status write_new_file(const std::string& path, std::string_view data);

// mkdir(2) of one directory. EEXIST is returned as a Status whose sys_error() is EEXIST.
Status make_directory(const std::string& path, unsigned mode = 0755);
// Removes `path` and everything below it (symlinks are removed, never followed); a missing path is OK.
Status remove_tree(const std::string& path);
// stat(2): true when `path` is a directory (symlinks followed); false when it is not or does not exist.
bool is_directory(const std::string& path) noexcept;
enum class PathKind { kRegular, kSocket, kDirectory, kSymlink, kOther };
struct PathInfo {
  PathKind kind = PathKind::kOther;
  uint32_t uid = 0;             // st_uid
  int64_t allocated_bytes = 0;  // st_blocks x 512: what the file holds in memory or on disk
};
// lstat(2) (a symlink is reported, not followed). kNotFound when nothing is there.
Result<PathInfo> lstat_path(const std::string& path);

// Checks made on a command's paths before any work, so a bad path is refused at once and nothing is left behind.
// Every refusal is kInvalidArgument naming the path and why (the errno in sys_error() where one applies).
//   kFile       an output file: when it exists, a regular file (or a character device such as /dev/null) that
//               we may write, not a directory, not a FIFO; its directory exists and we may create files in it
//   kDirectory  an output directory: an existing directory we may write into, or a name whose parent is one
enum class OutputKind { kFile, kDirectory };
Status check_output_path(const std::string& path, OutputKind kind);
//   kFile       an input file: exists and is a regular file (a FIFO, socket or device is refused: reading one
//               could block forever)
//   kFileOrDirectory   the same, or a directory
//   kDirectory  an existing directory
enum class InputKind { kFile, kFileOrDirectory, kDirectory };
Status check_input_path(const std::string& path, InputKind kind);

// isatty(fd): true when fd is a terminal (progress lines go to stderr only then).
bool is_terminal(int fd) noexcept;

// Bytes of the first len bytes of `f` resident in the page cache (mmap + mincore(2); touches no
// page). Used to check that a load leaves no second copy of a table behind.
Result<int64_t> page_cache_resident_bytes(const File& f, int64_t len);
// statfs(2) f_type of the file system holding `path` (e.g. 0x01021994 for tmpfs).
Result<int64_t> filesystem_magic(const std::string& path);
inline constexpr int64_t kTmpfsMagic = 0x01021994;

}  // namespace engram::sys
