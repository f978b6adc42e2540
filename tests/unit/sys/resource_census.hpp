// Process resource census for leak checks in hardening tests: open descriptors (/proc/<pid>/fd),
// mappings (/proc/<pid>/maps: all of them, the table-sized ones, and those of memfd / named-shm
// objects), files in a directory. A test takes one census before an operation that must fail cleanly
// and one after, and compares the parts that must not grow.
//
// Why not just the mapping count: glibc and the sanitizers' allocators map memory lazily (malloc
// arenas of new threads, cached thread stacks), so the total count may move by a few entries for
// reasons unrelated to the code under test. The exact checks are therefore on what a table leaves
// behind: a descriptor, a mapping of an engram memfd or shm file, or an anonymous mapping at least
// as large as the table (`big_maps(min_bytes)`); the total is reported for the record.
//
// Under AddressSanitizer the allocator's own mappings are left out of `big_maps`: its primary
// allocator reserves one 4 TiB PROT_NONE range and maps size-class regions inside it as the heap
// grows, which splits the reservation into more table-sized anonymous entries, and its secondary
// allocator mmaps each large malloc and keeps freed ones mapped in quarantine. Left out are exactly
// (a) the mappings inside the contiguous run of anonymous mappings that holds a heap block (the
// primary range) and (b) those whose middle ASan locates in a heap chunk; everything our code maps
// (tables, PROT_NONE reservations) is neither, so it is still counted. `sanitizer_maps` counts what
// was left out.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ENGRAM_CENSUS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENGRAM_CENSUS_ASAN 1
#endif
#endif
#ifdef ENGRAM_CENSUS_ASAN
#include <sanitizer/asan_interface.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#endif

#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace engram::hardening {

struct Mapping {
  uint64_t start = 0, end = 0;
  std::string perms;  // "rw-p", "---p", ...
  std::string path;   // "" for anonymous
  uint64_t bytes() const { return end - start; }
};

inline std::vector<Mapping> read_mappings(int pid = 0) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/maps") : "/proc/" + std::to_string(pid) + "/maps");
  std::vector<Mapping> out;
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    unsigned long long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &a, &b) != 2) continue;
    m.start = a;
    m.end = b;
    // pathname is the 6th field; it may contain spaces ("(deleted)").
    std::istringstream f(line);
    std::string skip;
    for (int i = 0; i < 5 && f >> skip; ++i) {
      if (i == 1) m.perms = skip;
    }
    std::getline(f, m.path);
    const size_t p = m.path.find_first_not_of(' ');
    m.path = p == std::string::npos ? "" : m.path.substr(p);
    out.push_back(std::move(m));
  }
  return out;
}

inline int count_fds(int pid = 0) {
  const std::string dir = pid == 0 ? "/proc/self/fd" : "/proc/" + std::to_string(pid) + "/fd";
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return pid == 0 ? n - 1 : n;  // opendir's own descriptor
}

inline int count_dir_entries(const std::string& dir) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

// True when `m` belongs to the sanitizer's heap (see the opening comment); always false without ASan.
// `maps` is the whole /proc/self/maps list `m` comes from.
inline bool sanitizer_heap_mapping(const Mapping& m, const std::vector<Mapping>& maps) {
#ifdef ENGRAM_CENSUS_ASAN
  // (a) the primary range: the run of adjacent anonymous mappings around a fresh small heap block.
  const std::unique_ptr<char, decltype(&std::free)> probe(static_cast<char*>(std::malloc(64)), &std::free);
  const auto at = reinterpret_cast<uint64_t>(probe.get());
  size_t i = 0;
  while (i < maps.size() && !(maps[i].start <= at && at < maps[i].end)) ++i;
  if (i < maps.size() && maps[i].path.empty()) {
    size_t lo = i, hi = i;
    while (lo > 0 && maps[lo - 1].path.empty() && maps[lo - 1].end == maps[lo].start) --lo;
    while (hi + 1 < maps.size() && maps[hi + 1].path.empty() && maps[hi + 1].start == maps[hi].end) ++hi;
    if (maps[lo].start <= m.start && m.end <= maps[hi].end) return true;
  }
  // (b) a large heap chunk (live or in quarantine) of the secondary allocator.
  char name[8];
  void* region = nullptr;
  size_t region_size = 0;
  const char* kind = __asan_locate_address(reinterpret_cast<void*>(m.start + m.bytes() / 2), name, sizeof name,
                                           &region, &region_size);
  return kind != nullptr && std::strcmp(kind, "heap") == 0;
#else
  (void)m;
  (void)maps;
  return false;
#endif
}

struct ResourceCensus {
  int fds = 0;
  int maps = 0;
  int engram_maps = 0;  // mappings of memfd:engram* objects or of files under `shm_dir`
  int big_maps = 0;     // anonymous mappings of at least `big_bytes` (a leaked private table)
  std::vector<Mapping> big;  // those mappings
  int sanitizer_maps = 0;    // table-sized anonymous mappings of the sanitizer's heap, not in big_maps
  int shm_files = -1;   // entries in shm_dir (-1: not asked)

  static ResourceCensus take(uint64_t big_bytes, const std::string& shm_dir = "") {
    ResourceCensus c;
    c.fds = count_fds();
    const std::vector<Mapping> maps = read_mappings();
    for (const auto& m : maps) {
      ++c.maps;
      const bool engram = m.path.find("/memfd:engram") == 0 || (!shm_dir.empty() && m.path.find(shm_dir) == 0);
      if (engram) ++c.engram_maps;
      if (!m.path.empty() || m.bytes() < big_bytes) continue;
      if (sanitizer_heap_mapping(m, maps)) {
        ++c.sanitizer_maps;
      } else {
        ++c.big_maps;
        c.big.push_back(m);
      }
    }
    if (!shm_dir.empty()) c.shm_files = count_dir_entries(shm_dir);
    return c;
  }
  std::string to_string() const {
    return "fds=" + std::to_string(fds) + " maps=" + std::to_string(maps) + " engram_maps=" +
           std::to_string(engram_maps) + " big_anon_maps=" + std::to_string(big_maps) +
           " shm_files=" + std::to_string(shm_files) + " sanitizer_heap_maps=" + std::to_string(sanitizer_maps);
  }
  // The table-sized anonymous mappings of this census that `base` does not have, one per line.
  std::string new_big_maps(const ResourceCensus& base) const {
    std::string out;
    for (const Mapping& m : big) {
      bool old = false;
      for (const Mapping& b : base.big) old = old || (b.start == m.start && b.end == m.end);
      if (old) continue;
      char line[96];
      std::snprintf(line, sizeof line, "\n  %llx-%llx %s %llu KiB", static_cast<unsigned long long>(m.start),
                    static_cast<unsigned long long>(m.end), m.perms.c_str(),
                    static_cast<unsigned long long>(m.bytes() >> 10));
      out += line;
    }
    return out;
  }
};

// Resident and proportional set size of this process in KiB (/proc/self/smaps_rollup); -1 unreadable.
inline void read_rss_pss_kib(int64_t* rss_kib, int64_t* pss_kib, int pid = 0) {
  *rss_kib = -1;
  *pss_kib = -1;
  std::ifstream in(pid == 0 ? std::string("/proc/self/smaps_rollup") : "/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string key;
  int64_t v = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    if (!(f >> key >> v)) continue;
    if (key == "Rss:") *rss_kib = v;
    if (key == "Pss:") *pss_kib = v;
  }
}

}  // namespace engram::hardening
