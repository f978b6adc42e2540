// collect_conditions(): reads /proc and /sys as text (no syscalls of its own), libnuma for
// the node count and distances.
#include "host/conditions.hpp"

#include <numa.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace engram {

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "n/a";
  return line;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "n/a";
}

// "[always] madvise never" -> "always"
std::string bracketed(const std::string& s) {
  auto a = s.find('['), b = s.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return s;
  return s.substr(a + 1, b - a - 1);
}

}  // namespace

nlohmann::json collect_conditions(const std::string& git_rev) {
  nlohmann::json c;
  c["git_revision"] = git_rev;
#if defined(__clang__)
  c["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  c["compiler"] = std::string("gcc ") + __VERSION__;
#else
  c["compiler"] = "n/a";
#endif
  c["cpu_model"] = cpu_model();
  c["cpu_cores_online"] = static_cast<int>(std::thread::hardware_concurrency());
  c["kernel"] = read_first_line("/proc/sys/kernel/osrelease");
  if (numa_available() >= 0) {
    const int n = numa_num_configured_nodes();
    c["numa_nodes"] = n;
    nlohmann::json dist = nlohmann::json::array();
    const int maxn = numa_max_node();
    for (int i = 0; i <= maxn; ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (int j = 0; j <= maxn; ++j) row.push_back(numa_distance(i, j));
      dist.push_back(row);
    }
    c["numa_distances"] = dist;
  } else {
    c["numa_nodes"] = "n/a";
    c["numa_distances"] = "n/a";
  }
  c["thp_enabled"] = bracketed(read_first_line("/sys/kernel/mm/transparent_hugepage/enabled"));
  c["thp_defrag"] = bracketed(read_first_line("/sys/kernel/mm/transparent_hugepage/defrag"));
  c["shmem_thp"] = bracketed(read_first_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
  c["hugepages_2m_total"] = read_first_line("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
  c["numa_balancing"] = read_first_line("/proc/sys/kernel/numa_balancing");
  return c;
}

std::string conditions_summary(const nlohmann::json& c) {
  std::ostringstream os;
  auto s = [&](const char* k) { return c.contains(k) ? (c[k].is_string() ? c[k].get<std::string>() : c[k].dump()) : "n/a"; };
  os << "cpu=" << s("cpu_model") << " x" << s("cpu_cores_online") << ", numa_nodes=" << s("numa_nodes")
     << ", kernel=" << s("kernel") << ", thp=" << s("thp_enabled") << ", rev=" << s("git_revision");
  return os.str();
}

}  // namespace engram
