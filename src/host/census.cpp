// Page census (see census.hpp): move_pages queries of our own mappings, and /proc parsing for any
// process. The counting rule that matters: a page whose status is negative is never a node. -ENOENT
// and -EFAULT mean "not resident"; other errors are kept by errno; a census whose syscall failed is
// "unknown" with the reason.
#include "host/census.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/units.hpp"
#include "sys/memfd.hpp"
#include "sys/memory.hpp"
#include "sys/numa.hpp"
#include "sys/numa_sysfs.hpp"

namespace engram {
namespace {

std::string hex_addr(uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, a);
  return buf;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

// numa_maps escapes blanks and backslashes in file names as \040, \134 (octal).
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) && std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The file name part of a maps path: "/memfd:engram:x (deleted)" -> "engram:x";
// "/dev/shm/engram:x.abcd (deleted)" -> "engram:x.abcd".
std::string backing_file_name(std::string path) {
  const std::string deleted = " (deleted)";
  if (path.size() >= deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
    path.resize(path.size() - deleted.size());
  if (path.rfind("/memfd:", 0) == 0) return path.substr(7);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

const char* census_point_name(CensusPoint p) noexcept {
  switch (p) {
    case CensusPoint::kAfterPlacement: return "after placement";
    case CensusPoint::kAfterRegistration: return "after registration";
    case CensusPoint::kAfterLoad: return "after load";
    case CensusPoint::kAfterReplay: return "after replay";
    case CensusPoint::kOnDemand: return "on demand";
  }
  return "unknown";
}

nlohmann::json TableIdentity::to_json() const {
  nlohmann::json j;
  j["layer_id"] = layer_id;
  j["head_begin"] = head_begin;
  j["head_end"] = head_end;
  j["bytes"] = bytes;
  j["base"] = hex_addr(base);
  j["group"] = group;
  j["backing"] = backing;
  if (replica_node >= 0) j["replica_node"] = replica_node;
  return j;
}

namespace host {

std::string table_backing_name(const TableIdentity& t) {
  std::string s = "engram:layer=" + std::to_string(t.layer_id) + ":heads=" + std::to_string(t.head_begin) + "-" +
                  std::to_string(t.head_end);
  if (!t.group.empty()) s += ":group=" + t.group;
  if (t.replica_node >= 0) s += ":replica=" + std::to_string(t.replica_node);
  return s;
}

bool parse_table_backing_name(const std::string& name_in, TableIdentity* t) {
  std::string name = backing_file_name(name_in);
  if (name.rfind("engram:", 0) != 0) return false;
  // A named file carries ".<16 hex>" after the name; placement adds ".node<N>" to replicas.
  const size_t dot = name.find('.');
  if (dot != std::string::npos) name.resize(dot);
  bool have_layer = false;
  size_t pos = 7;
  while (pos <= name.size()) {
    size_t colon = name.find(':', pos);
    if (colon == std::string::npos) colon = name.size();
    const std::string kv = name.substr(pos, colon - pos);
    pos = colon + 1;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "layer") {
      t->layer_id = std::atoi(v.c_str());
      have_layer = true;
    } else if (k == "heads") {
      int b = 0, e = 0;
      if (std::sscanf(v.c_str(), "%d-%d", &b, &e) == 2) {
        t->head_begin = b;
        t->head_end = e;
      }
    } else if (k == "group") {
      t->group = v;
    } else if (k == "replica") {
      t->replica_node = std::atoi(v.c_str());
    }
  }
  return have_layer;
}

int classify_page_status(int status) noexcept {
  if (status >= 0) return status;
  if (status == -ENOENT || status == -EFAULT) return kCensusNotResident;
  return kCensusError;
}

}  // namespace host

uint64_t PageCensus::resident() const {
  uint64_t n = 0;
  for (auto& [node, c] : pages_per_node) n += c;
  return n;
}

double PageCensus::fraction_on(int node) const {
  if (pages_sampled == 0) return 0.0;
  auto it = pages_per_node.find(node);
  return it == pages_per_node.end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(pages_sampled);
}

nlohmann::json PageCensus::to_json() const {
  nlohmann::json j;
  j["table"] = table.to_json();
  j["point"] = census_point_name(point);
  j["source"] = source;
  j["known"] = known;
  if (!known) {
    j["reason"] = reason;
    j["pages_per_node"] = "unknown";
    return j;
  }
  j["page_bytes"] = page_bytes;
  j["pages_total"] = pages_total;
  j["pages_sampled"] = pages_sampled;
  j["stride_pages"] = stride_pages;
  j["exact"] = stride_pages == 1 && pages_sampled == pages_total;
  nlohmann::json nodes = nlohmann::json::object();
  for (auto& [n, c] : pages_per_node) nodes[std::to_string(n)] = c;
  j["pages_per_node"] = nodes;
  j["not_resident"] = not_resident;
  j["zero_pages"] = zero_pages;
  j["zero_page_check"] = zero_page_check;
  nlohmann::json errs = nlohmann::json::object();
  for (auto& [e, c] : errors) {
    const char* name = strerrorname_np(e);
    errs[name ? name : std::to_string(e)] = c;
  }
  j["errors"] = errs;
  j["rss_bytes"] = rss_bytes >= 0 ? nlohmann::json(rss_bytes) : nlohmann::json(nullptr);
  j["pss_bytes"] = pss_bytes >= 0 ? nlohmann::json(pss_bytes) : nlohmann::json(nullptr);
  return j;
}

std::string PageCensus::to_text() const {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "table layer %d heads %d-%d, %s at %s, %s%s%s\n", table.layer_id, table.head_begin,
                table.head_end, format_bytes(static_cast<int64_t>(table.bytes)).c_str(), hex_addr(table.base).c_str(),
                table.backing.c_str(), table.group.empty() ? "" : (", group " + table.group).c_str(),
                table.replica_node >= 0 ? (", replica of node " + std::to_string(table.replica_node)).c_str() : "");
  s += buf;
  s += std::string("  census ") + census_point_name(point) + " (" + source + ")";
  if (!known) return s + ": unknown (" + reason + ")\n";
  std::snprintf(buf, sizeof buf, ", %s pages of %s, %s\n", std::to_string(pages_sampled).c_str(),
                format_bytes(static_cast<int64_t>(page_bytes)).c_str(),
                stride_pages == 1 ? "exact" : ("every " + std::to_string(stride_pages) + "th page").c_str());
  s += buf;
  s += "    node         pages    share\n";
  for (auto& [n, c] : pages_per_node) {
    std::snprintf(buf, sizeof buf, "    %-6d %12llu  %6.2f%%\n", n, static_cast<unsigned long long>(c),
                  100.0 * fraction_on(n));
    s += buf;
  }
  const double nr_share = pages_sampled ? 100.0 * static_cast<double>(not_resident) / static_cast<double>(pages_sampled) : 0;
  std::snprintf(buf, sizeof buf, "    %-6s %12llu  %6.2f%%\n", "not resident", static_cast<unsigned long long>(not_resident),
                nr_share);
  s += buf;
  for (auto& [e, c] : errors) {
    const char* name = strerrorname_np(e);
    std::snprintf(buf, sizeof buf, "    %-6s %12llu\n", name ? name : std::to_string(e).c_str(),
                  static_cast<unsigned long long>(c));
    s += buf;
  }
  if (pss_bytes >= 0) {
    std::snprintf(buf, sizeof buf, "    rss %s, pss %s\n", format_bytes(rss_bytes).c_str(), format_bytes(pss_bytes).c_str());
    s += buf;
  }
  return s;
}

namespace host {

PageCensus take_census(const void* addr, uint64_t len_bytes, const TableIdentity& table, CensusPoint point,
                       const CensusOptions& options) {
  PageCensus c;
  c.table = table;
  if (c.table.base == 0) c.table.base = reinterpret_cast<uintptr_t>(addr);
  if (c.table.bytes == 0) c.table.bytes = len_bytes;
  c.point = point;
  c.source = "move_pages";
  c.page_bytes = options.page_bytes ? options.page_bytes : sys::page_size_bytes();
  c.pages_total = (len_bytes + c.page_bytes - 1) / c.page_bytes;
  const uint64_t max_samples = std::max<uint64_t>(options.max_samples, 1);
  c.stride_pages = c.pages_total <= max_samples ? 1 : (c.pages_total + max_samples - 1) / max_samples;
  const uint8_t* base = static_cast<const uint8_t*>(addr);
  std::vector<const void*> pages;
  pages.reserve(static_cast<size_t>(c.pages_total / c.stride_pages + 1));
  for (uint64_t p = 0; p < c.pages_total; p += c.stride_pages) pages.push_back(base + p * c.page_bytes);
  c.pages_sampled = pages.size();

  if (options.map_resident && !pages.empty()) {
    // mincore works in base pages; look at the first base page of each sampled page.
    auto rc = sys::mincore_range(addr, len_bytes);
    if (rc.is_ok()) {
      const uint64_t base_page = sys::page_size_bytes();
      for (const void* p : pages) {
        const uint64_t idx = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base) / base_page;
        if (idx < rc->size() && ((*rc)[idx] & 1)) {
          // A read of a resident page maps it into our page tables without allocating anything.
          const volatile uint8_t* q = static_cast<const volatile uint8_t*>(p);
          (void)*q;
        }
      }
    }
  }
  std::vector<int> status;
  Status s = sys::move_pages_query(0, pages, &status);
  if (!s.is_ok()) {
    c.known = false;
    c.reason = s.to_string();
    c.pages_per_node.clear();
    return c;
  }
  c.known = true;
  // Newer kernels (seen on 6.18) report the shared zero page — what a read of a never-written private
  // page maps — with the zero page's node instead of -EFAULT. It holds none of the table's memory, so
  // it must not count as resident: pages that are not exclusively mapped get their frame checked in
  // /proc/kpageflags (KPF_ZERO_PAGE). Without the privilege to see frames the check is skipped and
  // the census says so.
  std::vector<uint64_t> pm;
  const uint64_t base_page = sys::page_size_bytes();
  if (c.page_bytes == base_page) {
    auto r = sys::pagemap_entries(addr, static_cast<size_t>(c.pages_total), static_cast<size_t>(c.stride_pages));
    if (r.is_ok()) pm = std::move(*r);
  }
  for (size_t i = 0; i < status.size(); ++i) {
    int k = classify_page_status(status[i]);
    if (k >= 0 && !pm.empty()) {
      const uint64_t e = i < pm.size() ? pm[i] : 0;
      const bool present = (e >> 63) & 1, exclusive = (e >> 56) & 1;
      const uint64_t pfn = e & ((uint64_t{1} << 55) - 1);
      if (present && !exclusive && pfn != 0) {
        auto z = sys::pfn_is_zero_page(pfn);
        if (z.is_ok() && *z) {
          k = kCensusNotResident;
          ++c.zero_pages;
        } else if (!z.is_ok()) {
          c.zero_page_check = false;
        }
      } else if (present && !exclusive && pfn == 0) {
        c.zero_page_check = false;
      }
    }
    if (k >= 0) ++c.pages_per_node[k];
    else if (k == kCensusNotResident) ++c.not_resident;
    else ++c.errors[-status[i]];
  }
  return c;
}

std::vector<MapsEntry> parse_maps(const std::string& text) {
  std::vector<MapsEntry> out;
  for (const std::string& line : lines(text)) {
    MapsEntry e;
    unsigned long long start = 0, end = 0, off = 0, inode = 0;
    char perms[8] = {0}, dev[32] = {0};
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %31s %llu %n", &start, &end, perms, &off, dev, &inode, &consumed) < 6)
      continue;
    e.start = static_cast<uintptr_t>(start);
    e.end = static_cast<uintptr_t>(end);
    e.perms = perms;
    e.offset = off;
    e.inode = inode;
    if (consumed > 0 && static_cast<size_t>(consumed) <= line.size()) {
      std::string p = line.substr(static_cast<size_t>(consumed));
      const size_t first = p.find_first_not_of(' ');
      e.path = first == std::string::npos ? "" : p.substr(first);
    }
    out.push_back(e);
  }
  return out;
}

std::vector<NumaMapsEntry> parse_numa_maps(const std::string& text) {
  std::vector<NumaMapsEntry> out;
  for (const std::string& line : lines(text)) {
    const auto w = words(line);
    if (w.size() < 2) continue;
    NumaMapsEntry e;
    char* end = nullptr;
    e.start = static_cast<uintptr_t>(std::strtoull(w[0].c_str(), &end, 16));
    if (end == w[0].c_str()) continue;
    e.policy = w[1];
    for (size_t i = 2; i < w.size(); ++i) {
      const std::string& t = w[i];
      const size_t eq = t.find('=');
      const std::string k = t.substr(0, eq), v = eq == std::string::npos ? "" : t.substr(eq + 1);
      if (k == "file") e.file = unescape_octal(v);
      else if (k == "anon") e.anon = true;
      else if (k == "huge") e.huge = true;
      else if (k == "kernelpagesize_kB") e.kernel_page_bytes = std::strtoull(v.c_str(), nullptr, 10) * 1024;
      else if (k.size() > 1 && k[0] == 'N' && std::isdigit(static_cast<unsigned char>(k[1])))
        e.pages_per_node[std::atoi(k.c_str() + 1)] = std::strtoull(v.c_str(), nullptr, 10);
    }
    // A name "file=/x y" with a blank escaped as \040 stays one word; nothing else to join.
    e.shared = e.policy.find("shared") != std::string::npos;
    out.push_back(e);
  }
  return out;
}

std::map<std::string, int64_t> parse_smaps_fields(const std::string& text) {
  std::map<std::string, int64_t> f;
  for (const std::string& line : lines(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    const std::string key = line.substr(0, colon);
    if (key.find(' ') != std::string::npos || key.find('-') != std::string::npos) continue;
    long long v = 0;
    char unit[8] = {0};
    const int n = std::sscanf(line.c_str() + colon + 1, " %lld %7s", &v, unit);
    if (n >= 1) f[key] = std::string(unit) == "kB" ? v * 1024 : v;
  }
  return f;
}

std::map<uintptr_t, std::map<std::string, int64_t>> parse_smaps(const std::string& text) {
  std::map<uintptr_t, std::map<std::string, int64_t>> out;
  uintptr_t cur = 0;
  bool have = false;
  std::string block;
  auto flush = [&] {
    if (have) out[cur] = parse_smaps_fields(block);
    block.clear();
  };
  for (const std::string& line : lines(text)) {
    unsigned long long s = 0, e = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &s, &e) == 2 && line.find('-') < 17 && line.find(':') > 17) {
      flush();
      cur = static_cast<uintptr_t>(s);
      have = true;
      continue;
    }
    block += line + "\n";
  }
  flush();
  return out;
}

nlohmann::json ProcessCensus::to_json() const {
  nlohmann::json j;
  j["pid"] = pid;
  j["mems_allowed"] = mems_allowed;
  j["cpus_allowed"] = cpus_allowed;
  nlohmann::json r = nlohmann::json::object();
  for (auto& [k, v] : rollup) r[k] = v;
  j["smaps_rollup"] = r;
  j["tables"] = nlohmann::json::array();
  for (auto& t : tables) j["tables"].push_back(t.to_json());
  return j;
}

std::string ProcessCensus::to_text() const {
  std::string s = "process " + std::to_string(pid) + ": Cpus_allowed " + cpus_allowed + ", Mems_allowed " + mems_allowed;
  auto it = rollup.find("Pss");
  auto rss = rollup.find("Rss");
  if (it != rollup.end() && rss != rollup.end())
    s += ", Rss " + format_bytes(rss->second) + ", Pss " + format_bytes(it->second);
  s += "\n";
  if (tables.empty()) s += "no engram table mapped\n";
  for (auto& t : tables) s += t.to_text();
  return s;
}

Result<ProcessCensus> process_census(int pid, const std::string& name_prefix) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/";
  ENGRAM_ASSIGN_OR_RETURN(std::string maps_text, sys::read_text_file(dir + "maps"));
  ProcessCensus pc;
  pc.pid = pid;
  auto numa_text = sys::read_text_file(dir + "numa_maps");
  auto smaps_text = sys::read_text_file(dir + "smaps");
  auto rollup_text = sys::read_text_file(dir + "smaps_rollup");
  auto status_text = sys::read_text_file(dir + "status");
  if (rollup_text.is_ok()) pc.rollup = parse_smaps_fields(*rollup_text);
  if (status_text.is_ok()) {
    for (const std::string& line : lines(*status_text)) {
      const auto w = words(line);
      if (w.size() == 2 && w[0] == "Mems_allowed_list:") pc.mems_allowed = w[1];
      if (w.size() == 2 && w[0] == "Cpus_allowed_list:") pc.cpus_allowed = w[1];
    }
  }
  std::map<uintptr_t, NumaMapsEntry> numa;
  if (numa_text.is_ok())
    for (auto& e : parse_numa_maps(*numa_text)) numa[e.start] = e;
  std::map<uintptr_t, std::map<std::string, int64_t>> smaps;
  if (smaps_text.is_ok()) smaps = parse_smaps(*smaps_text);

  for (const MapsEntry& m : parse_maps(maps_text)) {
    if (m.path.empty()) continue;
    const std::string fname = backing_file_name(m.path);
    if (fname.rfind(name_prefix, 0) != 0) continue;
    PageCensus c;
    c.source = "numa_maps";
    c.point = CensusPoint::kOnDemand;
    (void)parse_table_backing_name(m.path, &c.table);
    c.table.base = m.start;
    c.table.bytes = m.end - m.start;
    const bool memfd = m.path.rfind("/memfd:", 0) == 0;
    c.table.backing = (memfd ? "memfd:" + fname : m.path) + " inode " + std::to_string(m.inode);
    auto sm = smaps.find(m.start);
    if (sm != smaps.end()) {
      auto r = sm->second.find("Rss");
      auto p = sm->second.find("Pss");
      if (r != sm->second.end()) c.rss_bytes = r->second;
      if (p != sm->second.end()) c.pss_bytes = p->second;
    }
    auto nm = numa.find(m.start);
    if (nm == numa.end()) {
      c.known = false;
      c.reason = numa_text.is_ok() ? "no numa_maps line for this mapping" : numa_text.status().to_string();
    } else {
      c.known = true;
      c.page_bytes = nm->second.kernel_page_bytes;
      c.pages_total = c.table.bytes / c.page_bytes;
      c.pages_sampled = c.pages_total;
      c.pages_per_node = nm->second.pages_per_node;
      const uint64_t res = c.resident();
      // numa_maps counts pages mapped in this process; the rest are not resident here.
      c.not_resident = c.pages_total > res ? c.pages_total - res : 0;
    }
    pc.tables.push_back(std::move(c));
  }
  return pc;
}

}  // namespace host
}  // namespace engram
