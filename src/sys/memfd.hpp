// File-descriptor primitives for shared table memory: memfd_create (incl. hugetlb), ftruncate,
// fallocate, fstat/fstatvfs, shared and private mappings, madvise, mincore.
//
// Contract (as in the rest of src/sys): each function returns Status or Result<T>, never leaves
// errno as the interface, and names the call and its arguments on failure ("fallocate(fd=5,
// len=512 MiB): ENOSPC"). Sizes and offsets are in bytes. Every wrapper consults fault.hpp first,
// so a test can make it fail with a chosen errno. File descriptors are created O_CLOEXEC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

// Huge page size for a hugetlb memfd (MFD_HUGETLB | MFD_HUGE_2MB / MFD_HUGE_1GB).
enum class HugePage { kNone, k2MiB, k1GiB };
size_t huge_page_bytes(HugePage h);  // 0 for kNone

// memfd_create(name, MFD_CLOEXEC [| MFD_HUGETLB | MFD_HUGE_*]). The name shows in
// /proc/<pid>/maps as "/memfd:<name> (deleted)". kUnsupported when the kernel has no hugetlb
// memfd (EINVAL with MFD_HUGETLB); kOutOfMemory / kPermission from memfd_create(2).
Result<int> memfd_create(const std::string& name, HugePage huge = HugePage::kNone);

Status close_fd(int fd);
// dup(fd) with O_CLOEXEC (F_DUPFD_CLOEXEC).
Result<int> dup_fd(int fd);
Status ftruncate_fd(int fd, uint64_t size_bytes);
// fallocate(fd, mode=0, offset, len): allocates every page of the range now (a first touch: the
// pages follow the shared policy of a tmpfs object, or the calling thread's policy). kNoSpace on
// ENOSPC; kUnsupported on EOPNOTSUPP.
Status fallocate_fd(int fd, uint64_t offset_bytes, uint64_t len_bytes);

struct FileStat {
  uint64_t size_bytes = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  uint64_t blocks_512 = 0;  // allocated 512-byte blocks (st_blocks)
  uint32_t mode = 0;
  uint32_t uid = 0;
};
Result<FileStat> fstat_fd(int fd);

struct FsSpace {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;   // f_bavail * f_frsize: what an unprivileged writer may still allocate
  uint64_t block_bytes = 0;
  uint64_t fs_type = 0;      // statfs f_type (TMPFS_MAGIC 0x01021994, HUGETLBFS_MAGIC 0x958458f6)
};
// fstatvfs + fstatfs of the file system holding `fd`.
Result<FsSpace> fs_space_fd(int fd);
// statvfs + statfs of the file system at `path`.
Result<FsSpace> fs_space_path(const std::string& path);

// mmap(nullptr, len, PROT_READ|PROT_WRITE, MAP_SHARED, fd, offset). No page is touched.
// With `fixed_at` (page aligned, inside a reservation the caller owns, see reserve_range) the mapping
// replaces that part of the reservation (MAP_FIXED) instead of going where the kernel chooses.
Result<void*> map_shared(int fd, size_t len_bytes, uint64_t offset_bytes = 0, void* fixed_at = nullptr);
// A PROT_NONE, MAP_NORESERVE region of `len_bytes` (rounded up to the page size) starting on an
// `align_bytes` boundary (a power of two): address space only, no memory is committed. Tables made of
// several backings (head-range shards) map each backing into one reservation so that one layer stays
// one contiguous range of addresses. Release with unmap_range.
Result<void*> reserve_range(size_t len_bytes, size_t align_bytes);
// Puts [addr, addr + len) back to the reserved state (PROT_NONE anonymous, MAP_FIXED) so that the range
// cannot be taken by another mmap before the owner releases the whole reservation.
Status rereserve_range(void* addr, size_t len_bytes);
// Private anonymous read/write memory at `addr` (MAP_FIXED, inside a reservation). No page is touched.
Result<void*> map_private_fixed(void* addr, size_t len_bytes);
// mmap of a private anonymous region whose start is aligned to `align_bytes` (a power of two,
// e.g. 2 MiB so that THP can back it from the first byte). No page is touched.
Result<void*> map_private_aligned(size_t len_bytes, size_t align_bytes);
// munmap(addr, len rounded up to the page size).
Status unmap_range(void* addr, size_t len_bytes);

enum class MemAdvice { kHugePage, kNoHugePage, kPopulateRead, kPopulateWrite, kDontNeed };
// madvise(addr, len, advice). kUnsupported when the kernel lacks the advice (EINVAL for
// MADV_HUGEPAGE without THP, MADV_POPULATE_* before 5.14). MADV_POPULATE_*: kNoSpace on EFAULT (a page
// of a shared file mapping could not be allocated: where an access would have raised SIGBUS),
// kOutOfMemory on ENOMEM.
Status madvise_range(void* addr, size_t len_bytes, MemAdvice advice);

// mincore(addr, len): one byte per base page, bit 0 set when the page is resident in memory
// (for a shared file mapping: in the page cache, whether or not this process mapped it).
Result<std::vector<uint8_t>> mincore_range(const void* addr, size_t len_bytes);

// Random hex string of `n_chars` from getrandom(2) (names of /dev/shm files).
Result<std::string> random_hex(int n_chars);

}  // namespace engram::sys
