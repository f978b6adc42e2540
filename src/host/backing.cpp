// Backings (see backing.hpp). The order of operations is the point of this file: check the room
// first (statvfs of the tmpfs, the hugepage pool, the target nodes' free memory), then create and
// size the object, then map it — and let placement.cpp set the policy before the first page exists.
// Every failure after creation releases what was made (unmap, close, unlink of a named file), so an
// error never leaves a file in /dev/shm.
//
// memfd objects live on the kernel's internal tmpfs mount, which has no size limit (statvfs reports
// 0 blocks): their limit is memory, so the check compares with MemAvailable (any node) or with the
// target nodes' MemFree + Inactive(file) (what the kernel can hand out there without swapping
// anonymous memory). That estimate is approximate by nature; fallocate remains the authority
// (ENOSPC / ENOMEM there becomes kNoSpace / kOutOfMemory, still before any SIGBUS could happen).
#include "host/backing.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/units.hpp"
#include "sys/memfd.hpp"
#include "sys/numa.hpp"
#include "sys/numa_sysfs.hpp"
#include "sys/process.hpp"
#include "sys/shm.hpp"

namespace engram::host {
namespace {

constexpr uint64_t kTmpfsMagic = 0x01021994;
constexpr uint64_t kHugetlbfsMagic = 0x958458f6;

uint64_t round_up(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

std::string fs_name(uint64_t magic) {
  if (magic == kTmpfsMagic) return "tmpfs";
  if (magic == kHugetlbfsMagic) return "hugetlbfs";
  char buf[32];
  std::snprintf(buf, sizeof buf, "fs 0x%llx", static_cast<unsigned long long>(magic));
  return buf;
}

// "Key:   123 kB" lines of /proc/meminfo or node<N>/meminfo ("Node 0 Key: 123 kB") -> bytes.
int64_t meminfo_bytes(const std::string& text, const std::string& key) {
  size_t pos = 0;
  while ((pos = text.find(key + ":", pos)) != std::string::npos) {
    const bool at_line_start = pos == 0 || text[pos - 1] == '\n' || text[pos - 1] == ' ';
    if (at_line_start) {
      long long kb = 0;
      if (std::sscanf(text.c_str() + pos + key.size() + 1, " %lld", &kb) == 1) return kb * 1024;
    }
    pos += key.size();
  }
  return -1;
}

Status check_memory(uint64_t bytes, const std::vector<int>& nodes, const std::string& what) {
  if (nodes.empty()) {
    auto t = sys::read_text_file("/proc/meminfo");
    if (!t.is_ok()) return Status::ok();  // cannot tell: fallocate decides
    const int64_t avail = meminfo_bytes(*t, "MemAvailable");
    if (avail >= 0 && bytes > static_cast<uint64_t>(avail))
      return Status(Code::kNoSpace, what + " of " + format_bytes(static_cast<int64_t>(bytes)) +
                                        " does not fit in memory: MemAvailable is " + format_bytes(avail));
    return Status::ok();
  }
  int64_t room = 0;
  for (int n : nodes) {
    auto t = sys::read_text_file("/sys/devices/system/node/node" + std::to_string(n) + "/meminfo");
    if (!t.is_ok()) return Status(Code::kInvalidArgument, what + ": NUMA node " + std::to_string(n) + " does not exist");
    const int64_t free_b = meminfo_bytes(*t, "MemFree");
    const int64_t inactive_file = meminfo_bytes(*t, "Inactive(file)");
    if (free_b < 0) return Status::ok();
    room += free_b + (inactive_file > 0 ? inactive_file : 0);
  }
  if (bytes > static_cast<uint64_t>(room))
    return Status(Code::kNoSpace, what + " of " + format_bytes(static_cast<int64_t>(bytes)) +
                                      " does not fit on node(s) " + sys::format_int_list(nodes) + ": " +
                                      format_bytes(room) + " free (MemFree + Inactive(file))");
  return Status::ok();
}

// Pages the free pool can give and pages overcommit can add (see HugepagePool).
std::pair<int64_t, int64_t> obtainable_parts(const HugepagePool& p) {
  int64_t from_pool = std::max<int64_t>(0, p.free_pages - p.reserved_pages);
  if (p.per_node) from_pool = std::min(from_pool, std::max<int64_t>(0, p.node_free_pages));
  int64_t surplus = std::max<int64_t>(0, p.overcommit_pages - p.surplus_pages);
  if (p.node_room_pages >= 0) surplus = std::min(surplus, p.node_room_pages);
  return {from_pool, surplus};
}

Status check_hugepages(uint64_t bytes, uint64_t page_bytes, const std::vector<int>& nodes, const std::string& what) {
  const uint64_t need = round_up(bytes, page_bytes) / page_bytes;
  auto pool = read_hugepage_pool(page_bytes, nodes);
  if (!pool.is_ok()) return pool.status().with_context(what);
  const auto [from_pool, by_overcommit] = obtainable_parts(*pool);
  if (static_cast<int64_t>(need) <= from_pool + by_overcommit) return Status::ok();
  const std::string sys_dir = "/sys/kernel/mm/hugepages/hugepages-" + std::to_string(page_bytes / 1024) + "kB";
  // No pool at all (none reserved, no overcommit): not possible on this machine as it is set up, unlike a pool
  // that is too small or in use (a runtime shortage).
  if (pool->total_pages == 0 && pool->overcommit_pages == 0 && pool->surplus_pages == 0)
    return Status(Code::kUnsupported,
                  what + " of " + format_bytes(static_cast<int64_t>(bytes)) + " needs " + std::to_string(need) + " x " +
                      format_bytes(static_cast<int64_t>(page_bytes)) + " hugepages and this machine has no pool of " +
                      format_bytes(static_cast<int64_t>(page_bytes)) + " pages (nr_hugepages 0, nr_overcommit_hugepages 0): "
                      "reserve them as root, e.g. echo " + std::to_string(need) + " > " + sys_dir + "/nr_hugepages" +
                      (page_bytes > (uint64_t{1} << 21) ? " (1 GiB pages: best at boot, hugepagesz=1G hugepages=N)" : "") +
                      ", or allow overcommit in " + sys_dir + "/nr_overcommit_hugepages");
  const std::string where = nodes.empty() ? std::string("the pool") : "node(s) " + sys::format_int_list(nodes);
  return Status(Code::kNoSpace, what + " of " + format_bytes(static_cast<int64_t>(bytes)) + " needs " +
                                    std::to_string(need) + " x " + format_bytes(static_cast<int64_t>(page_bytes)) +
                                    " hugepages; " + where + " can give " + std::to_string(from_pool + by_overcommit) +
                                    ": " + std::to_string(from_pool) + " free + " + std::to_string(by_overcommit) +
                                    " by overcommit (nr_overcommit_hugepages " +
                                    std::to_string(pool->overcommit_pages) + ", surplus " +
                                    std::to_string(pool->surplus_pages) + "; /sys/kernel/mm/hugepages/hugepages-" +
                                    std::to_string(page_bytes / 1024) + "kB)",
                28 /* ENOSPC */);
}

}  // namespace

std::string BackingIdentity::to_string() const {
  switch (kind) {
    case BackingKind::kAnonThp: return "anon-thp";
    case BackingKind::kShmFile: return path + " inode " + std::to_string(inode);
    case BackingKind::kMemfd:
    case BackingKind::kHugetlb:
      return std::string(backing_kind_name(kind)) + ":" + name + " inode " + std::to_string(inode);
  }
  return "unknown";
}

int64_t hugepages_obtainable(const HugepagePool& p) {
  const auto [from_pool, by_overcommit] = obtainable_parts(p);
  return from_pool + by_overcommit;
}

Result<HugepagePool> read_hugepage_pool(uint64_t page_bytes, const std::vector<int>& nodes) {
  const std::string sub = "hugepages-" + std::to_string(page_bytes / 1024) + "kB";
  const std::string dir = "/sys/kernel/mm/hugepages/" + sub;
  auto free_p = sys::read_int_file(dir + "/free_hugepages");
  if (!free_p.is_ok())
    return Status(Code::kUnsupported, "no " + format_bytes(static_cast<int64_t>(page_bytes)) + " hugepage pool (" +
                                          dir + " missing)");
  auto value = [](const std::string& path) {
    auto v = sys::read_int_file(path);
    return v.is_ok() ? *v : int64_t{0};
  };
  HugepagePool p;
  p.free_pages = *free_p;
  p.total_pages = value(dir + "/nr_hugepages");
  p.reserved_pages = value(dir + "/resv_hugepages");
  p.surplus_pages = value(dir + "/surplus_hugepages");
  p.overcommit_pages = value(dir + "/nr_overcommit_hugepages");
  int64_t room_bytes = 0;
  bool room_known = true;
  if (nodes.empty()) {
    auto t = sys::read_text_file("/proc/meminfo");
    const int64_t f = t.is_ok() ? meminfo_bytes(*t, "MemFree") : -1;
    room_known = f >= 0;
    room_bytes = f;
  } else {
    p.per_node = true;
    for (int n : nodes) {
      const std::string node = "/sys/devices/system/node/node" + std::to_string(n);
      auto f = sys::read_int_file(node + "/hugepages/" + sub + "/free_hugepages");
      if (f.is_ok()) p.node_free_pages += *f;
      else p.per_node = false;  // the kernel does not say: the global count stands
      auto t = sys::read_text_file(node + "/meminfo");
      const int64_t m = t.is_ok() ? meminfo_bytes(*t, "MemFree") : -1;
      if (m < 0) room_known = false;
      else room_bytes += m;
    }
  }
  p.node_room_pages = room_known ? room_bytes / static_cast<int64_t>(page_bytes) : -1;
  return p;
}

Status check_backing_fits(const BackingOptions& o) {
  const std::string what = std::string("table (") + backing_kind_name(o.kind) + ")";
  if (o.size_bytes == 0) return Status(Code::kInvalidArgument, what + ": size 0");
  switch (o.kind) {
    case BackingKind::kShmFile: {
      ENGRAM_ASSIGN_OR_RETURN(sys::FsSpace fs, sys::fs_space_path(o.shm_dir));
      const uint64_t need = round_up(o.size_bytes, 4096);
      // A tmpfs mounted without size= reports 0 blocks: no limit of its own, memory is the limit.
      if (fs.total_bytes > 0 && need > fs.free_bytes)
        return Status(Code::kNoSpace, what + " of " + format_bytes(static_cast<int64_t>(need)) + " does not fit: " +
                                          o.shm_dir + " (" + fs_name(fs.fs_type) + ") has " +
                                          format_bytes(static_cast<int64_t>(fs.free_bytes)) + " free of " +
                                          format_bytes(static_cast<int64_t>(fs.total_bytes)),
                      28 /* ENOSPC */);
      if (o.check_memory) return check_memory(need, o.target_nodes, what);
      return Status::ok();
    }
    case BackingKind::kMemfd:
    case BackingKind::kAnonThp:
      if (o.check_memory) return check_memory(round_up(o.size_bytes, 4096), o.target_nodes, what);
      return Status::ok();
    case BackingKind::kHugetlb:
      if (o.huge_page_bytes != (2u << 20) && o.huge_page_bytes != (1u << 30))
        return Status(Code::kInvalidArgument, what + ": huge page size must be 2 MiB or 1 GiB");
      return check_hugepages(o.size_bytes, o.huge_page_bytes, o.target_nodes, what);
  }
  return Status::ok();
}

Backing::~Backing() { release(); }

Backing::Backing(Backing&& o) noexcept { *this = std::move(o); }

Backing& Backing::operator=(Backing&& o) noexcept {
  if (this != &o) {
    release();
    identity_ = std::move(o.identity_);
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_bytes_ = std::exchange(o.size_bytes_, 0);
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
    page_bytes_ = o.page_bytes_;
    owner_ = std::exchange(o.owner_, false);
    unlinked_ = std::exchange(o.unlinked_, false);
    in_reservation_ = std::exchange(o.in_reservation_, false);
  }
  return *this;
}

void Backing::release() noexcept {
  if (data_ != nullptr)
    (void)(in_reservation_ ? sys::rereserve_range(data_, mapped_bytes_) : sys::unmap_range(data_, mapped_bytes_));
  data_ = nullptr;
  in_reservation_ = false;
  if (fd_ >= 0) (void)sys::close_fd(fd_);
  fd_ = -1;
  if (owner_ && identity_.kind == BackingKind::kShmFile && !unlinked_ && !identity_.path.empty())
    (void)sys::unlink_named_file(identity_.path);
  owner_ = false;
}

Result<Backing> Backing::create(const BackingOptions& o) {
  ENGRAM_RETURN_IF_ERROR(check_backing_fits(o));
  Backing b;
  b.owner_ = true;
  b.size_bytes_ = o.size_bytes;
  b.identity_.kind = o.kind;
  b.identity_.name = o.name;
  if (o.kind == BackingKind::kAnonThp) {
    b.page_bytes_ = 4096;
    b.mapped_bytes_ = round_up(o.size_bytes, o.map_at ? 4096 : 2u << 20);
    void* p = nullptr;
    if (o.map_at) {
      ENGRAM_ASSIGN_OR_RETURN(p, sys::map_private_fixed(o.map_at, b.mapped_bytes_));
      b.in_reservation_ = true;
    } else {
      ENGRAM_ASSIGN_OR_RETURN(p, sys::map_private_aligned(b.mapped_bytes_, 2u << 20));
    }
    b.data_ = static_cast<uint8_t*>(p);
    // THP "never" (or no THP in the kernel) leaves 4 KiB pages: the table still works; say so via
    // the status only when the advice itself is refused.
    Status s = sys::madvise_range(p, b.mapped_bytes_, sys::MemAdvice::kHugePage);
    if (!s.is_ok() && s.code() != Code::kUnsupported) return s;
    return b;
  }
  if (o.kind == BackingKind::kShmFile) {
    // From the owner record's creation until the guardian holds the file and its record, a termination signal
    // waits (sys::DeferTermination): nothing half made is left by Ctrl-C.
    sys::DeferTermination hold;
    ENGRAM_ASSIGN_OR_RETURN(sys::NamedFile f, sys::create_named_file(o.shm_dir, o.name));
    b.fd_ = f.fd;
    b.identity_.path = f.path;
    b.identity_.name = f.path;
    // Hand the name over before the file is sized and allocated (minutes for a large table).
    if (o.on_named_created) ENGRAM_RETURN_IF_ERROR(o.on_named_created(f.path));
  } else {
    const sys::HugePage hp = o.kind != BackingKind::kHugetlb ? sys::HugePage::kNone
                             : o.huge_page_bytes == (1u << 30) ? sys::HugePage::k1GiB
                                                              : sys::HugePage::k2MiB;
    ENGRAM_ASSIGN_OR_RETURN(int fd, sys::memfd_create(o.name, hp));
    b.fd_ = fd;
    if (hp != sys::HugePage::kNone) b.page_bytes_ = sys::huge_page_bytes(hp);
  }
  b.mapped_bytes_ = round_up(o.size_bytes, b.page_bytes_);
  ENGRAM_RETURN_IF_ERROR(sys::ftruncate_fd(b.fd_, b.mapped_bytes_));
  ENGRAM_ASSIGN_OR_RETURN(sys::FileStat st, sys::fstat_fd(b.fd_));
  b.identity_.inode = st.inode;
  b.identity_.device = st.device;
  if (o.map_at && reinterpret_cast<uintptr_t>(o.map_at) % b.page_bytes_ != 0)
    return Status(Code::kInvalidArgument, "backing " + o.name + ": map address is not aligned to its " +
                                              format_bytes(static_cast<int64_t>(b.page_bytes_)) + " pages");
  ENGRAM_ASSIGN_OR_RETURN(void* p, sys::map_shared(b.fd_, b.mapped_bytes_, 0, o.map_at));
  b.data_ = static_cast<uint8_t*>(p);
  b.in_reservation_ = o.map_at != nullptr;
  return b;
}

Result<Backing> Backing::attach_fd(int fd, BackingKind kind, uint64_t size_bytes, const std::string& name,
                                   uint8_t* map_at) {
  Backing b;
  b.fd_ = fd;  // owned from here on: closed by ~Backing on any failure below
  b.identity_.kind = kind;
  b.identity_.name = name;
  if (kind != BackingKind::kMemfd && kind != BackingKind::kHugetlb)
    return Status(Code::kInvalidArgument, std::string("attach_fd: a ") + backing_kind_name(kind) +
                                              " backing is not passed as a descriptor");
  if (size_bytes == 0) return Status(Code::kInvalidArgument, "attach_fd: size 0");
  ENGRAM_ASSIGN_OR_RETURN(sys::FileStat st, sys::fstat_fd(fd));
  if (st.size_bytes < size_bytes)
    return Status(Code::kInvalidArgument, "attach_fd(" + name + "): object holds " +
                                              format_bytes(static_cast<int64_t>(st.size_bytes)) + ", expected " +
                                              format_bytes(static_cast<int64_t>(size_bytes)));
  if (kind == BackingKind::kHugetlb) {
    ENGRAM_ASSIGN_OR_RETURN(sys::FsSpace fs, sys::fs_space_fd(fd));
    b.page_bytes_ = fs.block_bytes;  // hugetlbfs reports its page size as the block size
  }
  b.identity_.inode = st.inode;
  b.identity_.device = st.device;
  b.size_bytes_ = size_bytes;
  b.mapped_bytes_ = round_up(size_bytes, b.page_bytes_);
  if (map_at && reinterpret_cast<uintptr_t>(map_at) % b.page_bytes_ != 0)
    return Status(Code::kInvalidArgument, "attach_fd(" + name + "): map address not aligned to the page size");
  ENGRAM_ASSIGN_OR_RETURN(void* p, sys::map_shared(fd, b.mapped_bytes_, 0, map_at));
  b.data_ = static_cast<uint8_t*>(p);
  b.in_reservation_ = map_at != nullptr;
  return b;
}

Result<Backing> Backing::attach_path(const std::string& path, uint64_t size_bytes, uint8_t* map_at) {
  if (size_bytes == 0) return Status(Code::kInvalidArgument, "attach_path: size 0");
  auto fd = sys::open_named_file(path);
  if (!fd.is_ok()) {
    // The leader made the file moments ago: it vanishing is a runtime failure of the group (kIo, exit 1), not a
    // name the user got wrong.
    if (fd.status().code() == Code::kNotFound)
      return Status(Code::kIo, "attach_path(" + path + "): the named file is gone (unlinked by the leader "
                                         "after every peer attached, or the leader died): this peer joined late",
                    fd.status().sys_error());
    return fd.status();
  }
  Backing b;
  b.fd_ = *fd;
  b.identity_.kind = BackingKind::kShmFile;
  b.identity_.name = path;
  b.identity_.path = path;
  ENGRAM_ASSIGN_OR_RETURN(sys::FileStat st, sys::fstat_fd(b.fd_));
  if (st.size_bytes < size_bytes)
    return Status(Code::kInvalidArgument, "attach_path(" + path + "): file holds " +
                                              format_bytes(static_cast<int64_t>(st.size_bytes)) + ", expected " +
                                              format_bytes(static_cast<int64_t>(size_bytes)));
  b.identity_.inode = st.inode;
  b.identity_.device = st.device;
  b.size_bytes_ = size_bytes;
  b.mapped_bytes_ = round_up(size_bytes, b.page_bytes_);
  if (map_at && reinterpret_cast<uintptr_t>(map_at) % b.page_bytes_ != 0)
    return Status(Code::kInvalidArgument, "attach_path(" + path + "): map address not aligned to the page size");
  ENGRAM_ASSIGN_OR_RETURN(void* p, sys::map_shared(b.fd_, b.mapped_bytes_, 0, map_at));
  b.data_ = static_cast<uint8_t*>(p);
  b.in_reservation_ = map_at != nullptr;
  return b;
}

Status Backing::unlink_name() {
  if (identity_.kind != BackingKind::kShmFile || unlinked_) return Status::ok();
  Status s = sys::unlink_named_file(identity_.path);
  if (s.is_ok() || s.code() == Code::kNotFound) unlinked_ = true;
  return s;
}

Status Backing::fallocate_range(uint64_t offset_bytes, uint64_t len_bytes) const {
  if (fd_ < 0) return Status(Code::kInvalidArgument, "fallocate: a private anonymous backing has no file");
  Status s = sys::fallocate_fd(fd_, offset_bytes, len_bytes);
  if (s.code() == Code::kNoSpace && identity_.kind == BackingKind::kShmFile) {
    auto fs = sys::fs_space_fd(fd_);
    if (fs.is_ok())
      return Status(Code::kNoSpace, s.message() + "; " + identity_.path + " (" + fs_name(fs->fs_type) + ") has " +
                                        format_bytes(static_cast<int64_t>(fs->free_bytes)) + " free",
                    s.sys_error());
  }
  return s;
}

}  // namespace engram::host
