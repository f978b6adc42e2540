// The text parsers of engram/options.hpp: the one place where option text becomes typed values.
//
// Each parser takes the text a user typed and either returns the value or kInvalidArgument quoting the text and
// listing what is accepted. They are pure functions (no I/O, no machine state): whether a node exists or a kernel
// supports a policy is checked where the value is applied (host/placement.cpp), not here.
#include "engram/options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/units.hpp"

namespace engram {
namespace {

constexpr int kMaxNodeId = 1024;  // Linux MAX_NUMNODES is at most 1 << 10

Status bad_placement(const std::string& text, const std::string& why) {
  return Status(Code::kInvalidArgument,
                "placement '" + text + "': " + why +
                    " (expected none, local, bind:NODES|all, preferred:N, interleave:NODES|all, "
                    "weighted-interleave:N=w,..., replica-per-node[:NODES]; NODES as numactl writes them: 0,2, 0-3, !LIST "
                    "(all but LIST), +LIST (relative to the nodes this process may use))");
}

Result<int> parse_node(const std::string& text, const std::string& item) {
  if (item.empty() || item.size() > 4) return bad_placement(text, "bad node '" + item + "'");
  for (char c : item)
    if (c < '0' || c > '9') return bad_placement(text, "bad node '" + item + "'");
  const int n = std::atoi(item.c_str());
  if (n >= kMaxNodeId) return bad_placement(text, "node " + item + " out of range");
  return n;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t k = s.find(sep, pos);
    out.push_back(s.substr(pos, k == std::string::npos ? std::string::npos : k - pos));
    if (k == std::string::npos) break;
    pos = k + 1;
  }
  return out;
}

// "0,1" or "0-3,5" -> nodes, refusing duplicates (the kernel would silently merge them).
Result<std::vector<int>> parse_nodes(const std::string& text, const std::string& list) {
  std::vector<int> nodes;
  if (list.empty()) return bad_placement(text, "empty node list");
  for (const std::string& item : split(list, ',')) {
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      ENGRAM_ASSIGN_OR_RETURN(int n, parse_node(text, item));
      nodes.push_back(n);
    } else {
      ENGRAM_ASSIGN_OR_RETURN(int lo, parse_node(text, item.substr(0, dash)));
      ENGRAM_ASSIGN_OR_RETURN(int hi, parse_node(text, item.substr(dash + 1)));
      if (hi < lo) return bad_placement(text, "bad range '" + item + "'");
      for (int n = lo; n <= hi; ++n) nodes.push_back(n);
    }
  }
  std::vector<int> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return bad_placement(text, "a node is listed twice");
  return sorted;
}

// NODES with numactl's prefixes: "!" (every allowed node but these), then "+" (positions among the allowed nodes).
Status parse_node_list(const std::string& text, std::string list, PlacementPolicy& p) {
  if (!list.empty() && list[0] == '!') {
    p.invert_nodes = true;
    list.erase(0, 1);
  }
  if (!list.empty() && list[0] == '+') {
    p.relative_nodes = true;
    list.erase(0, 1);
  }
  if (list == "all" && (p.invert_nodes || p.relative_nodes))
    return bad_placement(text, "'all' takes no '!' or '+'");
  ENGRAM_ASSIGN_OR_RETURN(p.nodes, parse_nodes(text, list));
  return Status::ok();
}

Status bad_word(const char* what, std::string_view text, const char* expected) {
  return Status(Code::kInvalidArgument, std::string(what) + " '" + std::string(text) + "': expected " + expected);
}

}  // namespace

// ---- backend ---------------------------------------------------------------------------------------------

const char* backend_kind_name(BackendKind k) noexcept {
  switch (k) {
    case BackendKind::kAuto: return "auto";
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "unknown";
}

Result<BackendKind> parse_backend_kind(std::string_view t) {
  if (t == "auto") return BackendKind::kAuto;
  if (t == "cpu") return BackendKind::kCpu;
  if (t == "cuda") return BackendKind::kCuda;
  return bad_word("backend", t, "auto, cpu or cuda");
}

// ---- backing ---------------------------------------------------------------------------------------------

const char* backing_kind_name(BackingKind k) noexcept {
  switch (k) {
    case BackingKind::kMemfd: return "memfd";
    case BackingKind::kShmFile: return "shm";
    case BackingKind::kHugetlb: return "hugetlb";
    case BackingKind::kAnonThp: return "anon-thp";
  }
  return "unknown";
}

Result<BackingKind> parse_backing_kind(const std::string& text, uint64_t* huge_page_bytes) {
  ENGRAM_ASSIGN_OR_RETURN(BackingSpec b, parse_backing(text));
  if (huge_page_bytes) *huge_page_bytes = b.huge_page_bytes;
  return b.kind;
}

std::string BackingSpec::to_string() const {
  if (kind == BackingKind::kHugetlb && huge_page_bytes == (uint64_t{1} << 30)) return "hugetlb-1g";
  return backing_kind_name(kind);
}

Result<BackingSpec> parse_backing(const std::string& text) {
  BackingSpec b;
  if (text == "memfd") b.kind = BackingKind::kMemfd;
  else if (text == "shm") b.kind = BackingKind::kShmFile;
  else if (text == "hugetlb" || text == "hugetlb-2m") { b.kind = BackingKind::kHugetlb; b.huge_page_bytes = 2u << 20; }
  else if (text == "hugetlb-1g") { b.kind = BackingKind::kHugetlb; b.huge_page_bytes = 1u << 30; }
  else if (text == "anon-thp") b.kind = BackingKind::kAnonThp;
  else
    return Status(Code::kInvalidArgument,
                  "backing '" + text + "': expected memfd, shm, hugetlb, hugetlb-1g or anon-thp");
  return b;
}

// ---- placement -------------------------------------------------------------------------------------------

const char* placement_kind_name(PlacementKind k) noexcept {
  switch (k) {
    case PlacementKind::kNone: return "none";
    case PlacementKind::kLocal: return "local";
    case PlacementKind::kBind: return "bind";
    case PlacementKind::kPreferred: return "preferred";
    case PlacementKind::kInterleave: return "interleave";
    case PlacementKind::kWeightedInterleave: return "weighted-interleave";
    case PlacementKind::kReplicaPerNode: return "replica-per-node";
  }
  return "unknown";
}

std::string PlacementPolicy::to_string() const {
  std::string s = placement_kind_name(kind);
  if (kind == PlacementKind::kNone || kind == PlacementKind::kLocal) return s;
  if (all_nodes) return kind == PlacementKind::kReplicaPerNode ? s : s + ":all";
  if (nodes.empty()) return s;
  s += ":";
  if (invert_nodes) s += "!";
  if (relative_nodes) s += "+";
  if (kind == PlacementKind::kWeightedInterleave) {
    for (size_t i = 0; i < nodes.size(); ++i)
      s += (i ? "," : "") + std::to_string(nodes[i]) + "=" + std::to_string(i < weights.size() ? weights[i] : 1);
    return s;
  }
  for (size_t i = 0; i < nodes.size(); ++i) s += (i ? "," : "") + std::to_string(nodes[i]);
  return s;
}

Result<PlacementPolicy> parse_placement(const std::string& text) {
  PlacementPolicy p;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? text.substr(colon + 1) : "";
  if (kind == "none" || kind == "local") {
    if (has_arg) return bad_placement(text, kind + " takes no node list");
    p.kind = kind == "none" ? PlacementKind::kNone : PlacementKind::kLocal;
    return p;
  }
  if (kind == "bind" || kind == "preferred" || kind == "interleave") {
    if (!has_arg || arg.empty()) return bad_placement(text, kind + " needs a node list");
    p.kind = kind == "bind" ? PlacementKind::kBind : kind == "preferred" ? PlacementKind::kPreferred
                                                                          : PlacementKind::kInterleave;
    if (arg == "all") {  // numactl's --membind=all / --interleave=all: every node with memory this process may use
      if (p.kind == PlacementKind::kPreferred) return bad_placement(text, "preferred takes one node, not 'all'");
      p.all_nodes = true;
      return p;
    }
    ENGRAM_RETURN_IF_ERROR(parse_node_list(text, arg, p));
    // preferred:!LIST is checked when resolved (it must leave one node).
    if (p.kind == PlacementKind::kPreferred && !p.invert_nodes && p.nodes.size() != 1)
      return bad_placement(text, "preferred takes one node");
    return p;
  }
  if (kind == "weighted-interleave") {
    if (!has_arg || arg.empty()) return bad_placement(text, "weighted-interleave needs N=w pairs");
    if (arg[0] == '!' || arg[0] == '+')
      return bad_placement(text, "weighted-interleave names each node with its weight; '!' and '+' do not apply");
    p.kind = PlacementKind::kWeightedInterleave;
    std::vector<std::pair<int, int>> pairs;
    for (const std::string& item : split(arg, ',')) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) return bad_placement(text, "'" + item + "' is not N=weight");
      ENGRAM_ASSIGN_OR_RETURN(int n, parse_node(text, item.substr(0, eq)));
      const std::string w = item.substr(eq + 1);
      if (w.empty() || w.size() > 3 || w.find_first_not_of("0123456789") != std::string::npos)
        return bad_placement(text, "bad weight '" + w + "'");
      const int wv = std::atoi(w.c_str());
      if (wv < 1 || wv > 255) return bad_placement(text, "weight " + w + " outside 1..255");
      for (auto& [pn, pw] : pairs)
        if (pn == n) return bad_placement(text, "a node is listed twice");
      pairs.emplace_back(n, wv);
    }
    std::sort(pairs.begin(), pairs.end());
    for (auto& [n, w] : pairs) {
      p.nodes.push_back(n);
      p.weights.push_back(w);
    }
    return p;
  }
  if (kind == "replica-per-node") {
    p.kind = PlacementKind::kReplicaPerNode;
    if (!has_arg || arg == "all") {
      p.all_nodes = true;
      return p;
    }
    ENGRAM_RETURN_IF_ERROR(parse_node_list(text, arg, p));
    return p;
  }
  return bad_placement(text, "unknown policy '" + kind + "'");
}

Result<std::vector<PlacementPolicy>> parse_placement_list(const std::string& text) {
  std::vector<PlacementPolicy> out;
  for (const std::string& item : split(text, ';')) {
    ENGRAM_ASSIGN_OR_RETURN(PlacementPolicy p, parse_placement(item));
    out.push_back(std::move(p));
  }
  return out;
}

// ---- lookup path -----------------------------------------------------------------------------------------

const char* fast_path_mode_name(FastPathMode m) noexcept {
  switch (m) {
    case FastPathMode::kPlanner: return "planner";
    case FastPathMode::kPlain: return "plain";
    case FastPathMode::kOff: return "off";
  }
  return "unknown";
}

Result<FastPathMode> parse_fast_path_mode(std::string_view t) {
  if (t == "planner") return FastPathMode::kPlanner;
  if (t == "plain") return FastPathMode::kPlain;
  if (t == "off") return FastPathMode::kOff;
  return bad_word("fast path", t, "planner, plain or off");
}

const char* prefetch_mode_name(PrefetchMode m) noexcept {
  return m == PrefetchMode::kEarly ? "early" : "on_demand";
}

Result<PrefetchMode> parse_prefetch_mode(std::string_view t) {
  if (t == "early") return PrefetchMode::kEarly;
  if (t == "on_demand" || t == "on-demand") return PrefetchMode::kOnDemand;
  return bad_word("prefetch mode", t, "early or on_demand");
}

// ---- cache -----------------------------------------------------------------------------------------------

const char* cache_format_name(CacheFormat f) noexcept { return f == CacheFormat::kFp8 ? "fp8" : "bf16"; }

Result<CacheFormat> parse_cache_format(std::string_view t) {
  if (t == "fp8") return CacheFormat::kFp8;
  if (t == "bf16") return CacheFormat::kBf16;
  return bad_word("cache format", t, "fp8 or bf16");
}

int64_t CacheSize::bytes_for(int64_t table_bytes) const {
  switch (kind) {
    case Kind::kOff: return 0;
    case Kind::kBytes: return bytes;
    case Kind::kShare: return static_cast<int64_t>(std::floor(share * static_cast<double>(table_bytes)));
  }
  return 0;
}

std::string CacheSize::to_string() const {
  switch (kind) {
    case Kind::kOff: return "off";
    case Kind::kBytes: return format_bytes(bytes);
    case Kind::kShare: {
      char b[32];
      std::snprintf(b, sizeof b, "%g%%", 100 * share);
      return b;
    }
  }
  return "off";
}

Result<CacheSize> parse_cache_size(const std::string& text) {
  CacheSize c;
  if (text == "0" || text == "off") return c;
  if (!text.empty() && text.back() == '%') {
    const std::string num = text.substr(0, text.size() - 1);
    char* end = nullptr;
    const double pct = std::strtod(num.c_str(), &end);
    if (num.empty() || end == nullptr || *end != '\0' || !std::isfinite(pct) || pct < 0 || pct > 100)
      return Status(Code::kInvalidArgument, "cache size '" + text + "': a share must be 0%..100%");
    if (pct == 0) return c;
    c.kind = CacheSize::Kind::kShare;
    c.share = pct / 100;
    return c;
  }
  auto b = parse_size_bytes(text);
  if (!b.is_ok())
    return Status(Code::kInvalidArgument,
                  "cache size '" + text + "': expected bytes (256MiB), a share of the table (5%) or off (" +
                      b.status().message() + ")");
  if (*b == 0) return c;
  c.kind = CacheSize::Kind::kBytes;
  c.bytes = *b;
  return c;
}

Result<GridCap> GridCap::of_fraction(double f) {
  if (!(f > 0.0 && f <= 1.0))
    return Status(Code::kInvalidArgument, "grid cap: fraction " + std::to_string(f) + " of the SMs not in (0, 1]");
  return GridCap(f, 0);
}

Result<GridCap> GridCap::of_blocks(int64_t n) {
  if (n < 1 || n > (int64_t{1} << 20))
    return Status(Code::kInvalidArgument, "grid cap: " + std::to_string(n) + " blocks not in [1, 1048576]");
  return GridCap(1.0, static_cast<int>(n));
}

int GridCap::blocks_for(int sm_count) const {
  const int sm = std::max(1, sm_count);
  if (blocks_ > 0) return std::min(blocks_, sm);
  return std::max(1, static_cast<int>(std::floor(fraction_ * sm)));
}

std::string GridCap::to_string() const {
  if (blocks_ > 0) return std::to_string(blocks_) + " blocks";
  char b[32];
  std::snprintf(b, sizeof b, "fraction %.2f", fraction_);
  return b;
}

// The ranges are the factories' (GridCap::of_fraction / of_blocks); these parsers read the number and quote the text.
Result<GridCap> parse_grid_fraction(const std::string& t) {
  char* end = nullptr;
  const double v = t.empty() ? 0.0 : std::strtod(t.c_str(), &end);
  Result<GridCap> cap = t.empty() || *end != '\0' ? Status(Code::kInvalidArgument, "not a number") : GridCap::of_fraction(v);
  if (!cap.is_ok()) return Status(Code::kInvalidArgument, "'" + t + "': expected a fraction of the SMs in (0, 1]");
  return cap;
}

Result<GridCap> parse_grid_blocks(const std::string& t) {
  const bool digits = !t.empty() && t.size() <= 8 && t.find_first_not_of("0123456789") == std::string::npos;
  Result<GridCap> cap = digits ? GridCap::of_blocks(std::strtol(t.c_str(), nullptr, 10))
                               : Result<GridCap>(Status(Code::kInvalidArgument, "not a number"));
  if (!cap.is_ok()) return Status(Code::kInvalidArgument, "'" + t + "': expected a number of blocks in [1, 1048576]");
  return cap;
}

std::string CacheUpdate::to_string() const {
  if (every <= 0) return "off";
  std::string s = "every=" + std::to_string(every) + ",rows=" + std::to_string(rows);
  if (slice != kDefaultSlice) s += ",slice=" + std::to_string(slice);
  if (burst != kDefaultBurst) s += ",burst=" + std::to_string(burst);
  return s;
}

Result<CacheUpdate> parse_cache_update(const std::string& text, const CacheUpdate& base) {
  CacheUpdate u = base;
  if (text == "off" || text == "0") {
    u.every = 0;
    return u;
  }
  auto bad = [&] {
    return Status(Code::kInvalidArgument, "cache update '" + text + "': expected every=K,rows=M,slice=S,burst=B (K, M, S, B >= 1) or off");
  };
  bool any = false;
  std::set<std::string> seen;
  for (const std::string& item : split(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) return bad();
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (!seen.insert(key).second)
      return Status(Code::kInvalidArgument, "cache update '" + text + "': '" + key + "' is given twice");
    char* end = nullptr;
    const long long v = std::strtoll(val.c_str(), &end, 10);
    if (val.empty() || *end != '\0' || v < 1 || v > (int64_t{1} << 30)) return bad();
    if (key == "every") u.every = static_cast<int>(v);
    else if (key == "rows") u.rows = v;
    else if (key == "slice") u.slice = v;
    else if (key == "burst") u.burst = v;
    else return bad();
    any = true;
  }
  if (!any) return bad();
  return u;
}

}  // namespace engram
