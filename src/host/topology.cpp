// Topology (see topology.hpp). hwloc is loaded with I/O discovery (PCI devices kept when important),
// once per call; sysfs / procfs reads go through src/sys. Nothing here changes machine state.
#include "host/topology.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/units.hpp"
#include "sys/memfd.hpp"
#include "sys/numa.hpp"
#include "sys/numa_sysfs.hpp"

namespace engram::host {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

std::string read_or_na(const std::string& path, std::vector<std::string>* notes) {
  auto t = sys::read_text_file(path);
  if (!t.is_ok()) {
    notes->push_back(path + ": " + t.status().message());
    return "n/a";
  }
  return trim(*t);
}

// numa_node file of a PCI device: the kernel's answer; -1 (or missing) is unknown.
int sysfs_numa_node(const std::string& bus_id, std::string* source) {
  auto v = sys::read_int_file("/sys/bus/pci/devices/" + bus_id + "/numa_node");
  if (v.is_ok() && *v >= 0) {
    *source = "sysfs";
    return static_cast<int>(*v);
  }
  *source = "unknown";
  return -1;
}

std::string pci_bus_id(hwloc_obj_t o) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", o->attr->pcidev.domain, o->attr->pcidev.bus,
                o->attr->pcidev.dev, o->attr->pcidev.func);
  return buf;
}

std::vector<HugePagePool> node_hugepages(int node) {
  std::vector<HugePagePool> out;
  const std::string dir = "/sys/devices/system/node/node" + std::to_string(node) + "/hugepages";
  auto names = sys::list_dir(dir);
  if (!names.is_ok()) return out;
  std::sort(names->begin(), names->end());
  for (const std::string& n : *names) {
    unsigned long long kb = 0;
    if (std::sscanf(n.c_str(), "hugepages-%llukB", &kb) != 1) continue;
    HugePagePool p;
    p.page_bytes = kb * 1024;
    auto t = sys::read_int_file(dir + "/" + n + "/nr_hugepages");
    auto f = sys::read_int_file(dir + "/" + n + "/free_hugepages");
    if (t.is_ok()) p.total = *t;
    if (f.is_ok()) p.free = *f;
    out.push_back(p);
  }
  return out;
}

}  // namespace

std::string bracketed_choice(const std::string& text) {
  const size_t a = text.find('['), b = text.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return "";
  return text.substr(a + 1, b - a - 1);
}

Result<Topology> read_topology() {
  Topology t;
  t.kernel = sys::kernel_version().release;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return Status(Code::kInternal, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return Status(Code::kInternal, "hwloc_topology_load failed");
  }
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);

  const int n_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  std::vector<hwloc_obj_t> node_objs;
  for (int i = 0; i < n_nodes; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    node_objs.push_back(o);
    NumaNodeInfo n;
    n.id = static_cast<int>(o->os_index);
    for (int cpu = hwloc_bitmap_first(o->cpuset); cpu >= 0; cpu = hwloc_bitmap_next(o->cpuset, cpu))
      n.cpus.push_back(cpu);
    n.total_bytes = static_cast<int64_t>(o->attr->numanode.local_memory);
    auto mem = sys::node_memory(n.id);
    if (mem.is_ok()) n.free_bytes = mem->free_bytes;
    else t.notes.push_back("node " + std::to_string(n.id) + " free memory: " + mem.status().message());
    n.hugepages = node_hugepages(n.id);
    t.nodes.push_back(n);
  }

  // Distance matrix: hwloc's (from the ACPI SLIT via sysfs), else sysfs directly.
  unsigned nr = 1;
  struct hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &nr, &dist, HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) == 0 &&
      nr >= 1 && dist != nullptr) {
    t.distances.assign(t.nodes.size(), std::vector<int>(t.nodes.size(), -1));
    for (unsigned i = 0; i < dist->nbobjs; ++i)
      for (unsigned j = 0; j < dist->nbobjs; ++j) {
        const auto a = std::find(node_objs.begin(), node_objs.end(), dist->objs[i]);
        const auto b = std::find(node_objs.begin(), node_objs.end(), dist->objs[j]);
        if (a != node_objs.end() && b != node_objs.end())
          t.distances[static_cast<size_t>(a - node_objs.begin())][static_cast<size_t>(b - node_objs.begin())] =
              static_cast<int>(dist->values[i * dist->nbobjs + j]);
      }
    t.distances_source = "hwloc";
    hwloc_distances_release(topo, dist);
  } else {
    bool ok = !t.nodes.empty();
    for (const NumaNodeInfo& n : t.nodes) {
      auto text = sys::read_text_file("/sys/devices/system/node/node" + std::to_string(n.id) + "/distance");
      if (!text.is_ok()) {
        ok = false;
        break;
      }
      std::istringstream in(*text);
      std::vector<int> row;
      int v;
      while (in >> v) row.push_back(v);
      t.distances.push_back(row);
    }
    if (!ok) t.distances.clear();
    t.distances_source = ok ? "sysfs" : "n/a";
  }

  // PCI devices: GPUs (class 03xx: VGA / 3D controller) and network controllers (class 02xx).
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o != nullptr; o = hwloc_get_next_pcidev(topo, o)) {
    const unsigned cls = o->attr->pcidev.class_id >> 8;
    if (cls != 0x03 && cls != 0x02) continue;
    PciDeviceInfo d;
    d.bus_id = pci_bus_id(o);
    d.kind = cls == 0x03 ? "gpu" : "nic";
    char ids[32];
    std::snprintf(ids, sizeof ids, "%04x:%04x", o->attr->pcidev.vendor_id, o->attr->pcidev.device_id);
    d.name = o->name ? std::string(o->name) + " (" + ids + ")" : ids;
    for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE && c->name) d.name += " [" + std::string(c->name) + "]";
    d.numa_node = sysfs_numa_node(d.bus_id, &d.numa_source);
    (cls == 0x03 ? t.gpus : t.nics).push_back(d);
  }
  hwloc_topology_destroy(topo);

  // NICs that hwloc filtered out (virtio and other non-"important" classes) but the kernel lists.
  auto nets = sys::list_dir("/sys/class/net");
  if (nets.is_ok()) {
    std::sort(nets->begin(), nets->end());
    for (const std::string& ifname : *nets) {
      auto dev = sys::real_path("/sys/class/net/" + ifname + "/device");
      if (!dev.is_ok()) continue;  // virtual interface (lo, bridges, ifb)
      // The PCI function is the last path component shaped like "0000:00:03.0" (a virtio NIC's device
      // link ends in "virtio2", a child of its PCI function).
      std::string bus;
      for (size_t pos = 0; pos < dev->size();) {
        size_t slash = dev->find('/', pos);
        if (slash == std::string::npos) slash = dev->size();
        const std::string comp = dev->substr(pos, slash - pos);
        unsigned d = 0, b = 0, sl = 0, f = 0;
        if (comp.size() == 12 && std::sscanf(comp.c_str(), "%4x:%2x:%2x.%1x", &d, &b, &sl, &f) == 4) bus = comp;
        pos = slash + 1;
      }
      if (bus.empty()) bus = dev->substr(dev->rfind('/') + 1);
      bool known = false;
      for (PciDeviceInfo& n : t.nics)
        if (n.bus_id == bus) {
          known = true;
          if (n.name.find("[" + ifname + "]") == std::string::npos) n.name += " [" + ifname + "]";
        }
      if (known) continue;
      PciDeviceInfo d;
      d.bus_id = bus;
      d.kind = "nic";
      d.name = ifname;
      d.numa_node = sysfs_numa_node(bus, &d.numa_source);
      if (d.numa_source == "unknown") {
        auto v = sys::read_int_file("/sys/class/net/" + ifname + "/device/numa_node");
        if (v.is_ok() && *v >= 0) {
          d.numa_node = static_cast<int>(*v);
          d.numa_source = "sysfs";
        }
      }
      t.nics.push_back(d);
    }
  }

  t.thp_enabled = bracketed_choice(read_or_na("/sys/kernel/mm/transparent_hugepage/enabled", &t.notes));
  t.thp_defrag = bracketed_choice(read_or_na("/sys/kernel/mm/transparent_hugepage/defrag", &t.notes));
  t.thp_shmem_enabled = bracketed_choice(read_or_na("/sys/kernel/mm/transparent_hugepage/shmem_enabled", &t.notes));
  for (std::string* s : {&t.thp_enabled, &t.thp_defrag, &t.thp_shmem_enabled})
    if (s->empty()) *s = "n/a";
  auto nb = sys::read_int_file("/proc/sys/kernel/numa_balancing");
  if (nb.is_ok()) t.numa_balancing = static_cast<int>(*nb);
  else t.notes.push_back("numa_balancing: " + nb.status().message());

  auto mi = sys::read_text_file("/proc/self/mountinfo");
  t.shm_fs = "n/a";
  if (mi.is_ok()) {
    std::istringstream in(*mi);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::vector<std::string> f;
      std::string x;
      while (w >> x) f.push_back(x);
      if (f.size() < 10 || f[4] != "/dev/shm") continue;
      // "<id> <parent> <dev> <root> <mount point> <mount options> [optional...] - <fs> <source> <super options>"
      const size_t dash = static_cast<size_t>(std::find(f.begin() + 6, f.end(), "-") - f.begin());
      if (dash + 1 >= f.size()) continue;
      t.shm_fs = f[dash + 1];
      t.shm_options = "mount " + f[5] + (dash + 3 < f.size() ? "; fs " + f[dash + 3] : "");
    }
  }
  if (t.shm_fs == "n/a") t.notes.push_back("/dev/shm is not a mount point here");
  auto space = sys::fs_space_path("/dev/shm");
  if (space.is_ok() && space->total_bytes > 0) {
    t.shm_total_bytes = static_cast<int64_t>(space->total_bytes);
    t.shm_free_bytes = static_cast<int64_t>(space->free_bytes);
  }

  auto st = sys::read_text_file("/proc/self/status");
  if (st.is_ok()) {
    std::istringstream in(*st);
    std::string k, v;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream w(line);
      w >> k >> v;
      if (k == "Cpus_allowed_list:") t.cpus_allowed = v;
      if (k == "Mems_allowed_list:") t.mems_allowed = v;
    }
  }
  auto pol = sys::get_thread_mempolicy();
  if (pol.is_ok()) {
    t.mempolicy = sys::mem_policy_mode_name(pol->mode);
    if (pol->mode != sys::MemPolicyMode::kDefault && pol->mode != sys::MemPolicyMode::kLocal)
      t.mempolicy += ":" + sys::format_int_list(pol->nodes);
  } else {
    t.mempolicy = "n/a";
    t.notes.push_back("get_mempolicy: " + pol.status().message());
  }
  return t;
}

nlohmann::json Topology::to_json() const {
  using nlohmann::json;
  // What could not be read is null in the JSON (the text report prints it as n/a).
  auto na = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  auto text = [](const std::string& v) { return v == "n/a" || v.empty() ? json(nullptr) : json(v); };
  json j;
  j["kernel"] = kernel;
  j["packages"] = na(packages);
  j["cores"] = na(cores);
  j["pus"] = na(pus);
  j["nodes"] = json::array();
  for (const NumaNodeInfo& n : nodes) {
    json h = json::array();
    for (const HugePagePool& p : n.hugepages) h.push_back({{"page_bytes", p.page_bytes}, {"total", na(p.total)}, {"free", na(p.free)}});
    j["nodes"].push_back({{"id", n.id}, {"cpus", sys::format_int_list(n.cpus)}, {"total_bytes", na(n.total_bytes)},
                          {"free_bytes", na(n.free_bytes)}, {"hugepages", h}});
  }
  j["distances"] = distances.empty() ? json(nullptr) : json(distances);
  j["distances_source"] = text(distances_source);
  for (const auto* list : {&gpus, &nics}) {
    json a = json::array();
    for (const PciDeviceInfo& d : *list)
      a.push_back({{"bus_id", d.bus_id}, {"name", d.name}, {"numa_node", d.numa_node < 0 ? json(nullptr) : json(d.numa_node)},
                   {"numa_source", d.numa_source}});
    j[list == &gpus ? "gpus" : "nics"] = a;
  }
  j["thp"] = {{"enabled", text(thp_enabled)}, {"defrag", text(thp_defrag)}, {"shmem_enabled", text(thp_shmem_enabled)}};
  j["numa_balancing"] = na(numa_balancing);
  j["dev_shm"] = {{"fs", text(shm_fs)}, {"options", shm_options}, {"total_bytes", na(shm_total_bytes)}, {"free_bytes", na(shm_free_bytes)}};
  j["process"] = {{"cpus_allowed", cpus_allowed}, {"mems_allowed", mems_allowed}, {"mempolicy", text(mempolicy)}};
  j["notes"] = notes;
  return j;
}

std::string Topology::to_text() const {
  std::string s;
  char buf[512];
  auto bytes = [](int64_t b) { return b < 0 ? std::string("n/a") : format_bytes(b); };
  std::snprintf(buf, sizeof buf, "kernel %s; %d package(s), %d core(s), %d PU(s), %zu NUMA node(s)\n", kernel.c_str(),
                packages, cores, pus, nodes.size());
  s += buf;
  s += "node  cpus                 memory        free          hugepages (size: free/total)\n";
  for (const NumaNodeInfo& n : nodes) {
    std::string hp;
    for (const HugePagePool& p : n.hugepages)
      hp += (hp.empty() ? "" : ", ") + format_bytes(static_cast<int64_t>(p.page_bytes)) + ": " +
            (p.free < 0 ? "n/a" : std::to_string(p.free)) + "/" + (p.total < 0 ? "n/a" : std::to_string(p.total));
    std::snprintf(buf, sizeof buf, "%-5d %-20s %-13s %-13s %s\n", n.id, sys::format_int_list(n.cpus).c_str(),
                  bytes(n.total_bytes).c_str(), bytes(n.free_bytes).c_str(), hp.empty() ? "none" : hp.c_str());
    s += buf;
  }
  s += "distances (" + distances_source + "):";
  if (distances.empty()) s += " n/a";
  s += "\n";
  for (size_t i = 0; i < distances.size(); ++i) {
    s += "  node " + std::to_string(nodes[i].id) + ":";
    for (int d : distances[i]) s += " " + std::to_string(d);
    s += "\n";
  }
  for (const auto* list : {&gpus, &nics}) {
    s += list == &gpus ? "GPUs:" : "NICs:";
    if (list->empty()) s += " none found";
    s += "\n";
    for (const PciDeviceInfo& d : *list)
      s += "  " + d.bus_id + "  node " + (d.numa_node < 0 ? std::string("unknown") : std::to_string(d.numa_node)) +
           "  " + d.name + "\n";
  }
  s += "THP enabled " + thp_enabled + ", defrag " + thp_defrag + ", shmem_enabled " + thp_shmem_enabled +
       "; numa_balancing " + (numa_balancing < 0 ? std::string("n/a") : std::to_string(numa_balancing)) + "\n";
  s += "/dev/shm: " + shm_fs + " " + shm_options + ", " + bytes(shm_free_bytes) + " free of " + bytes(shm_total_bytes) + "\n";
  s += "this process: Cpus_allowed " + cpus_allowed + ", Mems_allowed " + mems_allowed + ", memory policy " +
       mempolicy + "\n";
  for (const std::string& n : notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace engram::host
