// `engram topo [--json]`: the machine's NUMA topology and the settings that decide where a table's pages
// go (host/topology.hpp): nodes, CPUs, memory, distances, GPU/NIC nodes (unknown when the kernel does not
// say), THP, /dev/shm, this process's Cpus_allowed / Mems_allowed / memory policy.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "host/topology.hpp"

namespace {
auto setup(CLI::App& sub) -> std::function<int()> {
  auto json = std::make_shared<bool>(false);
  sub.add_flag("--json", *json, "Print JSON instead of the table");
  return [json] {
    auto t = engram::host::read_topology();
    if (!t.is_ok()) return engram::cli::report_failure("topo", t.status());
    if (*json) {
      nlohmann::json j = t->to_json();
      j["schema"] = "engram.topo/1";
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s", t->to_text().c_str());
    }
    return 0;
  };
}
}  // namespace
ENGRAM_COMMAND(topo, "topo", "NUMA nodes, CPUs, memory, distances, GPU/NIC nodes, THP, /dev/shm, process policy", setup);
