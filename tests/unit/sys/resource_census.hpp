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
#pragma once

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
  std::string path;  // "" for anonymous
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

struct ResourceCensus {
  int fds = 0;
  int maps = 0;
  int engram_maps = 0;  // mappings of memfd:engram* objects or of files under `shm_dir`
  int big_maps = 0;     // anonymous mappings of at least `big_bytes` (a leaked private table)
  int shm_files = -1;   // entries in shm_dir (-1: not asked)

  static ResourceCensus take(uint64_t big_bytes, const std::string& shm_dir = "") {
    ResourceCensus c;
    c.fds = count_fds();
    for (const auto& m : read_mappings()) {
      ++c.maps;
      const bool engram = m.path.find("/memfd:engram") == 0 || (!shm_dir.empty() && m.path.find(shm_dir) == 0);
      if (engram) ++c.engram_maps;
      if (m.path.empty() && m.bytes() >= big_bytes) ++c.big_maps;
    }
    if (!shm_dir.empty()) c.shm_files = count_dir_entries(shm_dir);
    return c;
  }
  std::string to_string() const {
    return "fds=" + std::to_string(fds) + " maps=" + std::to_string(maps) + " engram_maps=" +
           std::to_string(engram_maps) + " big_anon_maps=" + std::to_string(big_maps) +
           " shm_files=" + std::to_string(shm_files);
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
