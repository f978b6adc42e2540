// Topology: what `engram topo` reports agrees with the kernel's own files, unknowns stay unknown,
// and the CLI prints the same facts as JSON.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "host/topology.hpp"
#include "support/cli.hpp"
#include "sys/numa.hpp"
#include "sys/numa_sysfs.hpp"

using namespace engram;

namespace {
std::string run_cli(const std::string& args, int* rc) {
  auto r = engram::testing::run_engram(args, engram::testing::CliStderr::kDiscard);
  *rc = r.code;
  return r.out;
}
}  // namespace

TEST(Topology, NodesAndCpusMatchSysfs) {
  auto t = host::read_topology();
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  std::vector<int> ids;
  for (const auto& n : t->nodes) ids.push_back(n.id);
  EXPECT_EQ(ids, sys::memory_nodes());
  for (const auto& n : t->nodes) {
    auto cpus = sys::node_cpus(n.id);
    ASSERT_TRUE(cpus.is_ok());
    EXPECT_EQ(n.cpus, *cpus) << "node " << n.id;
    EXPECT_GT(n.total_bytes, 0);
    EXPECT_GE(n.free_bytes, 0);
    EXPECT_LE(n.free_bytes, n.total_bytes);
  }
  ASSERT_EQ(t->distances.size(), t->nodes.size()) << t->distances_source;
  for (size_t i = 0; i < t->distances.size(); ++i) EXPECT_EQ(t->distances[i][i], 10);
  EXPECT_EQ(t->kernel, sys::kernel_version().release);
  auto allowed = sys::read_text_file("/proc/self/status");
  ASSERT_TRUE(allowed.is_ok());
  EXPECT_NE(allowed->find("Mems_allowed_list:\t" + t->mems_allowed), std::string::npos);
  EXPECT_EQ(t->mempolicy, "default");
}

TEST(Topology, UnknownDeviceNodeIsNeverZero) {
  auto t = host::read_topology();
  ASSERT_TRUE(t.is_ok());
  const nlohmann::json j = t->to_json();
  for (const char* list : {"gpus", "nics"}) {
    for (size_t i = 0; i < j[list].size(); ++i) {
      const auto& d = (list[0] == 'g' ? t->gpus : t->nics)[i];
      auto v = sys::read_int_file("/sys/bus/pci/devices/" + d.bus_id + "/numa_node");
      if (!v.is_ok() || *v < 0) {
        EXPECT_TRUE(j[list][i]["numa_node"].is_null()) << d.bus_id;
        EXPECT_EQ(d.numa_node, -1);
      } else {
        EXPECT_EQ(j[list][i]["numa_node"], *v) << d.bus_id;
      }
    }
  }
}

TEST(Topology, ThpChoiceIsTheBracketedOne) {
  EXPECT_EQ(host::bracketed_choice("always [madvise] never"), "madvise");
  EXPECT_EQ(host::bracketed_choice("[always] madvise never\n"), "always");
  EXPECT_EQ(host::bracketed_choice("no brackets"), "");
  auto t = host::read_topology();
  ASSERT_TRUE(t.is_ok());
  auto raw = sys::read_text_file("/sys/kernel/mm/transparent_hugepage/enabled");
  if (raw.is_ok()) {
    EXPECT_EQ(t->thp_enabled, host::bracketed_choice(*raw));
  } else {
    EXPECT_EQ(t->thp_enabled, "n/a");
  }
}

TEST(TopologyCli, TopoJsonAndText) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  int rc = -1;
  const std::string out = run_cli("topo --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["nodes"].size(), sys::memory_nodes().size());
  EXPECT_TRUE(j.contains("dev_shm"));
  EXPECT_TRUE(j["process"].contains("mems_allowed"));
  const std::string text = run_cli("topo", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(text.find("distances"), std::string::npos);
  EXPECT_NE(text.find("/dev/shm"), std::string::npos);
}
