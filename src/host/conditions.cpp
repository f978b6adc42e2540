// collect_conditions(): reads /proc and /sys as text (no syscalls of its own), libnuma for the node count and
// distances. A value that cannot be read is null in the JSON and "n/a" in the one-line summary; numbers are JSON
// numbers.
#include "host/conditions.hpp"

#include <numa.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace engram {

namespace {

// The file's first line, or nullopt-like "" when it cannot be read.
bool read_first_line(const std::string& path, std::string* line) {
  std::ifstream f(path);
  return f && std::getline(f, *line);
}

nlohmann::json text_or_null(const std::string& path) {
  std::string line;
  return read_first_line(path, &line) ? nlohmann::json(line) : nlohmann::json(nullptr);
}

nlohmann::json int_or_null(const std::string& path) {
  std::string line;
  if (!read_first_line(path, &line)) return nullptr;
  char* end = nullptr;
  const long long v = std::strtoll(line.c_str(), &end, 10);
  return end != line.c_str() ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return nullptr;
}

// "[always] madvise never" -> "always"
nlohmann::json bracketed(const std::string& path) {
  std::string s;
  if (!read_first_line(path, &s)) return nullptr;
  auto a = s.find('['), b = s.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return s;
  return s.substr(a + 1, b - a - 1);
}

// /proc/loadavg: the 1, 5 and 15 minute load averages.
nlohmann::json load_average() {
  std::ifstream f("/proc/loadavg");
  double l1, l5, l15;
  if (!(f >> l1 >> l5 >> l15)) return nullptr;
  return nlohmann::json::array({l1, l5, l15});
}

// The cpufreq governor of every online CPU: one name when they agree, "name (N cpus), ..." when they do not,
// null when the kernel exposes no cpufreq (virtual machines).
nlohmann::json cpu_governor() {
  std::map<std::string, int> count;
  const int n = static_cast<int>(std::thread::hardware_concurrency());
  for (int cpu = 0; cpu < n; ++cpu) {
    std::string g;
    if (read_first_line("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/scaling_governor", &g))
      ++count[g];
  }
  if (count.empty()) return nullptr;
  if (count.size() == 1) return count.begin()->first;
  std::string out;
  for (const auto& [g, c] : count) out += (out.empty() ? "" : ", ") + g + " (" + std::to_string(c) + " cpus)";
  return out;
}

}  // namespace

nlohmann::json collect_conditions(const std::string& git_rev) {
  nlohmann::json c;
  c["git_revision"] = git_rev.empty() || git_rev == "n/a" ? nlohmann::json(nullptr) : nlohmann::json(git_rev);
#if defined(__clang__)
  c["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  c["compiler"] = std::string("gcc ") + __VERSION__;
#else
  c["compiler"] = nullptr;
#endif
  c["cpu_model"] = cpu_model();
  c["cpu_cores_online"] = static_cast<int>(std::thread::hardware_concurrency());
  c["cpu_governor"] = cpu_governor();
  c["load_average"] = load_average();
  c["kernel"] = text_or_null("/proc/sys/kernel/osrelease");
  if (numa_available() >= 0) {
    c["numa_nodes"] = numa_num_configured_nodes();
    nlohmann::json dist = nlohmann::json::array();
    const int maxn = numa_max_node();
    for (int i = 0; i <= maxn; ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (int j = 0; j <= maxn; ++j) row.push_back(numa_distance(i, j));
      dist.push_back(row);
    }
    c["numa_distances"] = dist;
  } else {
    c["numa_nodes"] = nullptr;
    c["numa_distances"] = nullptr;
  }
  c["thp_enabled"] = bracketed("/sys/kernel/mm/transparent_hugepage/enabled");
  c["thp_defrag"] = bracketed("/sys/kernel/mm/transparent_hugepage/defrag");
  c["shmem_thp"] = bracketed("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  c["hugepages_2m_total"] = int_or_null("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
  c["numa_balancing"] = int_or_null("/proc/sys/kernel/numa_balancing");
  return c;
}

std::string conditions_summary(const nlohmann::json& c) {
  std::ostringstream os;
  auto s = [&](const char* k) -> std::string {
    if (!c.contains(k) || c[k].is_null()) return "n/a";
    return c[k].is_string() ? c[k].get<std::string>() : c[k].dump();
  };
  std::string load = "n/a";
  if (c.contains("load_average") && c["load_average"].is_array() && !c["load_average"].empty()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", c["load_average"][0].get<double>());
    load = b;
  }
  os << "cpu=" << s("cpu_model") << " x" << s("cpu_cores_online") << ", numa_nodes=" << s("numa_nodes")
     << ", kernel=" << s("kernel") << ", thp=" << s("thp_enabled") << ", governor=" << s("cpu_governor")
     << ", load=" << load << ", rev=" << s("git_revision");
  return os.str();
}

}  // namespace engram
