// Backing: the memory object that holds one table (or one shard / replica of it), mapped into this
// process: a memfd (default), a named /dev/shm file, a hugetlb memfd, or private anonymous THP memory.
//
// Life cycle (the first steps of the shared-table protocol, host/group_protocol.hpp):
//   leader:  Backing::create(options)  -> checks the size against the room there is (tmpfs free space,
//            hugepage pool, the target nodes' free memory) BEFORE creating anything, creates the object,
//            sizes it (ftruncate) and maps it. No page exists yet.
//            placement.hpp then applies the policy to the mapping and allocates every page.
//   peer:    Backing::attach_fd(fd, ...) with the memfd received over SCM_RIGHTS, or attach_path(path)
//            for a named file; maps the same object. Pages are shared, and so is the tmpfs policy.
//   leader:  unlink_name() once every peer has attached (named files only; mappings stay valid).
// The destructor unmaps, closes, and — for a named file created here and not yet unlinked — unlinks
// it, so no file survives an error path. A memfd has no name in any file system: it disappears with
// the last fd and mapping.
//
// What travels to a peer (the shared-group protocol passes these): kind, `fd()` (memfd / hugetlb
// memfd, via SCM_RIGHTS) or `identity().path` (named file), `size_bytes()`, and `identity()` to
// check that the peer mapped the same object (inode + device). kAnonThp cannot be shared: it is for a
// single process (attach_* refuse it with kInvalidArgument).
// Thread safety: a Backing is not synchronised; move-only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engram/options.hpp"
#include "engram/status.hpp"

namespace engram::host {

// The kinds and their parser are public (engram/options.hpp); host code names them here.
using engram::backing_kind_name;
using engram::BackingKind;
using engram::parse_backing_kind;

struct BackingOptions {
  BackingKind kind = BackingKind::kMemfd;
  uint64_t size_bytes = 0;             // logical bytes; the object is rounded up to the page size
  std::string name = "engram:table";   // memfd name ("/memfd:<name>" in /proc/<pid>/maps) or file prefix
  std::string shm_dir = "/dev/shm";    // kShmFile: directory (a tmpfs) of the named file
  uint64_t huge_page_bytes = 2u << 20;  // kHugetlb: 2 MiB or 1 GiB
  // Nodes the pages will be allocated on (from the placement policy; empty = any node). Used only by
  // the up-front size check for memfd / hugetlb (whose file system has no size limit of its own).
  std::vector<int> target_nodes;
  bool check_memory = true;            // false: skip the free-memory check (tmpfs free space still checked)
  // Map the object here (MAP_FIXED) instead of where the kernel chooses: a page-aligned address (huge
  // page aligned for hugetlb) inside a PROT_NONE reservation that the caller owns and releases after
  // this Backing (sys::reserve_range). On destruction the range goes back to the reserved state, so no
  // other mapping can slip into the hole. Used for head-range shards of one contiguous layer table.
  uint8_t* map_at = nullptr;
  // kShmFile: called with the file's path the moment it exists (after O_CREAT|O_EXCL, before it is
  // sized, mapped or allocated), so that a guardian (sys/process.hpp) can take it over before the
  // long prefault; a failure fails the creation (the file is removed again).
  std::function<Status(const std::string& path)> on_named_created;
};

// What names a backing in a census, a log line or the protocol.
struct BackingIdentity {
  BackingKind kind = BackingKind::kMemfd;
  std::string name;         // memfd name, or the named file's path
  std::string path;         // named file: its path ("" for memfd / anon)
  uint64_t inode = 0;       // st_ino of the object (0 for anon)
  uint64_t device = 0;      // st_dev
  // "memfd:engram:l1 inode 1234", "/dev/shm/engram.3fa9... inode 88", "anon-thp".
  std::string to_string() const;
};

// Up-front size check, without creating anything: kNoSpace naming the size, the mount and its free
// space ("table of 2.00 GiB does not fit: /dev/shm (tmpfs) has 1.00 GiB free of 12.0 GiB"), or the
// hugepage pool ("needs 1024 x 2 MiB hugepages; node(s) 1 can give 12: 12 free + 0 by overcommit"),
// or the target nodes' free memory. OK when it fits. kNotFound when shm_dir does not exist.
Status check_backing_fits(const BackingOptions& options);

// What a hugepage pool can hand out, from /sys/kernel/mm/hugepages/hugepages-<size>kB and the
// nodes' .../node<N>/hugepages/... and meminfo. The kernel allocates a page from the pool's free
// pages (per node) and, past those, a "surplus" page from the buddy allocator while the surplus
// count stays below nr_overcommit_hugepages (global; the page itself comes from the node's free
// memory). An overcommit-only pool (nr_hugepages = 0) gives pages this way.
struct HugepagePool {
  int64_t total_pages = 0;       // nr_hugepages: the pool reserved on this machine (0 and no overcommit: no pool)
  int64_t free_pages = 0;        // free_hugepages
  int64_t reserved_pages = 0;    // resv_hugepages: free pages promised to existing mappings
  int64_t surplus_pages = 0;     // surplus_hugepages
  int64_t overcommit_pages = 0;  // nr_overcommit_hugepages
  bool per_node = false;         // the counts below are known for the target nodes
  int64_t node_free_pages = 0;   // sum of the target nodes' free_hugepages
  int64_t node_room_pages = -1;  // target nodes' (or the machine's) free memory in whole pages; -1 unknown
};
// Pages obtainable: min(free - reserved, target nodes' free) + min(overcommit headroom, memory room).
int64_t hugepages_obtainable(const HugepagePool& pool);
// Reads the pool of `page_bytes` pages for `nodes` (empty: any node). kUnsupported when the kernel
// has no pool of that page size.
Result<HugepagePool> read_hugepage_pool(uint64_t page_bytes, const std::vector<int>& nodes);

class Backing {
 public:
  Backing() = default;
  ~Backing();
  Backing(Backing&& other) noexcept;
  Backing& operator=(Backing&& other) noexcept;
  Backing(const Backing&) = delete;
  Backing& operator=(const Backing&) = delete;

  // Leader: size check, create, size, map (see top). Nothing is left behind on failure.
  // kInvalidArgument (size 0, bad name/prefix, bad huge page size), kNoSpace (does not fit),
  // kUnsupported (no hugetlb memfd), kPermission, kOutOfMemory (mmap / hugetlb reservation).
  static Result<Backing> create(const BackingOptions& options);
  // Peer: takes ownership of `fd` (a memfd or hugetlb memfd received over SCM_RIGHTS; closed on
  // failure too), checks that the object holds at least `size_bytes`, maps it (at `map_at` inside the
  // caller's reservation when given, as BackingOptions::map_at).
  // kInvalidArgument when the object is smaller than `size_bytes` or kind is kAnonThp / kShmFile.
  static Result<Backing> attach_fd(int fd, BackingKind kind, uint64_t size_bytes, const std::string& name,
                                   uint8_t* map_at = nullptr);
  // Peer: opens a named file (O_RDWR|O_NOFOLLOW, same owner) and maps it (at `map_at` when given). kNotFound
  // when the leader already unlinked it (a peer that joined late); kInvalidArgument when it is too small.
  static Result<Backing> attach_path(const std::string& path, uint64_t size_bytes, uint8_t* map_at = nullptr);

  bool valid() const { return data_ != nullptr; }
  BackingKind kind() const { return identity_.kind; }
  const BackingIdentity& identity() const { return identity_; }
  uint8_t* data() const { return data_; }
  uint64_t size_bytes() const { return size_bytes_; }      // logical size asked for
  uint64_t mapped_bytes() const { return mapped_bytes_; }  // rounded up to the (huge) page size
  uint64_t page_bytes() const { return page_bytes_; }      // 4 KiB, or the hugetlb page size
  int fd() const { return fd_; }                           // -1 for kAnonThp
  bool owner() const { return owner_; }                    // created here (leader) vs attached
  bool unlinked() const { return unlinked_; }
  // Named file: unlink its path now (mappings and fds stay valid). Other kinds: OK, nothing to do.
  Status unlink_name();
  // Allocates every page of [offset, offset + len) with fallocate(2) (shared kinds) — a first touch
  // under the object's policy. kNoSpace on ENOSPC (no SIGBUS later); kInvalidArgument for kAnonThp.
  Status fallocate_range(uint64_t offset_bytes, uint64_t len_bytes) const;

 private:
  void release() noexcept;
  BackingIdentity identity_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_bytes_ = 0;
  uint64_t mapped_bytes_ = 0;
  uint64_t page_bytes_ = 4096;
  bool owner_ = false;
  bool unlinked_ = false;
  bool in_reservation_ = false;  // mapped at BackingOptions::map_at: released back to PROT_NONE
};

}  // namespace engram::host
