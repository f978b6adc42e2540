// Experiment harness (see experiment.hpp): arms, placement proof, randomised repetitions, statistics, the
// acceptance chain and the Markdown/JSON report. Plots are drawn by the CLI (tools/engram/cmd_experiment.cpp)
// from report.json, so this library needs no plotting code.
#include "replay/experiment.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/json_num.hpp"
#include "core/splitmix.hpp"
#include "core/stats.hpp"
#include "sys/affinity.hpp"
#include "sys/numa.hpp"
#include "sys/process.hpp"

namespace engram {

namespace {

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * v);
  return b;
}

std::string num(double v, const char* fmt = "%.3g") {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// Pins the calling thread to a node's CPUs for its lifetime and restores the previous mask.
class NodePin {
 public:
  explicit NodePin(int node) {
    if (node < 0) return;
    auto prev = sys::thread_affinity();
    auto cpus = sys::node_cpus(node);
    if (!prev.is_ok() || !cpus.is_ok() || cpus->empty()) {
      note_ = "could not pin to node " + std::to_string(node);
      return;
    }
    prev_ = *prev;
    const Status st = sys::set_thread_affinity(*cpus);
    if (!st.is_ok()) note_ = st.to_string();
    pinned_ = st.is_ok();
  }
  ~NodePin() {
    if (pinned_) (void)sys::set_thread_affinity(prev_);
  }
  const std::string& note() const { return note_; }

 private:
  std::vector<int> prev_;
  bool pinned_ = false;
  std::string note_;
};

PlacementPolicy bind_to(int node) {
  PlacementPolicy p;
  p.kind = PlacementKind::kBind;
  p.nodes = {node};
  return p;
}

}  // namespace

namespace {

// Where an arm's table pages land on this machine, normalised so that two spellings of the same placement
// compare equal (interleave over one node is that node; one copy per node on one node is one copy).
std::string pages_where(const ArmSpec& a, const std::vector<int>& nodes) {
  const PlacementPolicy& p = a.rig.table.placement;
  std::vector<int> on = p.all_nodes || p.nodes.empty() ? nodes : p.nodes;
  auto list = [](const std::vector<int>& v) {
    std::string t;
    for (int n : v) t += (t.empty() ? "N" : ",N") + std::to_string(n);
    return t;
  };
  switch (p.kind) {
    case PlacementKind::kBind:
    case PlacementKind::kInterleave:
    case PlacementKind::kWeightedInterleave:
      return on.size() == 1 ? "pages on " + list(on) : "pages spread over " + list(on);
    case PlacementKind::kReplicaPerNode:
      return on.size() == 1 ? "pages on " + list(on) : std::to_string(on.size()) + " copies, one per node, reading N" +
                                                           std::to_string(a.rig.table.home_node);
    default:
      return "pages placed by the kernel (" + p.to_string() + ")";
  }
}

std::string effective_text(const ArmSpec& a, const std::vector<int>& nodes, BackendKind backend) {
  std::string t = pages_where(a, nodes) + ", consumer on " +
                  (a.consumer_node < 0 ? std::string("any node") : "N" + std::to_string(a.consumer_node)) + ", " +
                  prefetch_mode_name(a.mode) + " prefetch, ";
  if (backend == BackendKind::kCuda) return t + "grid " + num(a.rig.grid_cap.fraction(), "%.3f") + " of the SMs";
  return t + (a.rig.lookup_threads > 0 ? std::to_string(a.rig.lookup_threads) : std::string("default")) + " lookup threads";
}

// The one refusal rule: two arms that do the same thing on this machine would compare noise with itself.
Status check_arms_differ(const std::string& id, const std::vector<ArmSpec>& arms, const std::vector<int>& nodes,
                         int hardware_threads, BackendKind backend) {
  for (size_t i = 0; i < arms.size(); ++i)
    for (size_t k = i + 1; k < arms.size(); ++k) {
      if (arms[i].effective != arms[k].effective) continue;
      std::string why;
      if (id[0] == 'A')
        why = id + " needs two NUMA memory nodes; this machine has " + std::to_string(nodes.size()) +
              " (placement cannot change). B1 and B2 run here; scripts/numa-guest runs " + id + " in a 2-node guest";
      else if (id == "B2" && backend != BackendKind::kCuda)
        why = "B2's CPU analogue sets the lookup threads to cap x (cores - 1) = cap x " +
              std::to_string(std::max(1, hardware_threads - 1)) +
              " on this machine; give caps that differ by more than one thread, or run it on a GPU";
      else
        why = "the arms set the same thing";
      return Status(Code::kUnsupported, id + ": arms " + arms[i].name + " and " + arms[k].name +
                                            " would do the same on this machine (" + arms[i].effective + "): " + why);
    }
  return Status::ok();
}

}  // namespace

Result<std::vector<ArmSpec>> make_arms(const std::string& id, const EngineOptions& base, const std::vector<int>& nodes,
                                       const std::vector<double>& caps, int hardware_threads) {
  std::vector<ArmSpec> arms;
  auto arm = [&](std::string name, std::string value) {
    ArmSpec a;
    a.name = std::move(name);
    a.value = std::move(value);
    a.rig = base;
    return a;
  };
  const std::vector<int> node_list = nodes.empty() ? std::vector<int>{0} : nodes;
  if (id == "A1" || id == "A2" || id == "A3") {
    const int n0 = node_list.front(), nl = node_list.back();
    if (id == "A1") {
      ArmSpec a = arm("node" + std::to_string(n0), "table bound to node " + std::to_string(n0) + " (consumer's node)");
      a.rig.table.placement = bind_to(n0);
      a.consumer_node = n0;
      ArmSpec b = arm(nl == n0 ? "remote" : "node" + std::to_string(nl),
                      "table bound to node " + std::to_string(nl) + " (remote)");
      b.rig.table.placement = bind_to(nl);
      b.consumer_node = n0;
      arms = {a, b};
    } else if (id == "A2") {
      ArmSpec a = arm("bound", "table bound to node " + std::to_string(n0));
      a.rig.table.placement = bind_to(n0);
      a.consumer_node = n0;
      PlacementPolicy il;
      il.kind = PlacementKind::kInterleave;
      il.nodes = node_list;
      ArmSpec b = arm("interleaved", "table interleaved over nodes " + il.to_string().substr(11));
      b.rig.table.placement = il;
      b.consumer_node = n0;
      arms = {a, b};
    } else {
      ArmSpec a = arm("shared", "one shared copy on node " + std::to_string(n0) + " (capacity 1 x W)");
      a.rig.table.placement = bind_to(n0);
      a.consumer_node = nl;
      ArmSpec b = arm("replica", "one copy per node, rank reads its node's copy (capacity " +
                                     std::to_string(node_list.size()) + " x W)");
      b.rig.table.placement.kind = PlacementKind::kReplicaPerNode;
      b.rig.table.placement.all_nodes = true;
      b.rig.table.home_node = nl;
      b.consumer_node = nl;
      arms = {a, b};
    }
  } else if (id == "B1") {
    ArmSpec a = arm("early", "lookups submitted when ids are ready (step start)");
    a.mode = PrefetchMode::kEarly;
    ArmSpec b = arm("on_demand", "lookups submitted at the consuming layer");
    b.mode = PrefetchMode::kOnDemand;
    arms = {a, b};
  } else if (id == "B2") {
    if (caps.size() < 2)
      return Status(Code::kInvalidArgument, "B2: --caps: expected two or more caps to compare (e.g. --caps 0.25 1.0), got " +
                                                std::to_string(caps.size()));
    for (double c : caps) {
      auto cap = GridCap::of_fraction(c);
      if (!cap.is_ok())
        return Status(Code::kInvalidArgument, "B2: --caps: expected fractions in (0, 1], got " + num(c, "%g"));
      ArmSpec a = arm("cap=" + num(c, "%.2f"), "");
      if (base.backend == BackendKind::kCuda) {
        a.rig.grid_cap = *cap;
        a.value = "lookup grid capped at " + num(100 * c, "%.0f") + "% of the SMs";
      } else {
        a.rig.lookup_threads = std::max(1, static_cast<int>(std::lround(c * std::max(1, hardware_threads - 1))));
        a.value = "CPU analogue: " + std::to_string(a.rig.lookup_threads) + " lookup threads (" + num(100 * c, "%.0f") +
                  "% of cores - 1)";
      }
      arms.push_back(a);
    }
  } else {
    return Status(Code::kInvalidArgument, "experiment '" + id + "': expected A1, A2, A3, B1 or B2");
  }
  for (auto& a : arms) a.effective = effective_text(a, node_list, base.backend);
  ENGRAM_RETURN_IF_ERROR(check_arms_differ(id, arms, nodes, hardware_threads, base.backend));
  return arms;
}

bool census_proves_placement(const ArmSpec& arm, const std::vector<host::PageCensus>& censuses, int n_replicas,
                             int home_node, std::string* evidence, std::string* signature) {
  // Aggregate the after-placement censuses per replica node (-1: not replicated).
  std::map<int, std::map<int, uint64_t>> by_replica;  // replica node -> node -> pages
  std::map<int, uint64_t> sampled, not_resident;
  bool known = true;
  std::string reason;
  for (const auto& c : censuses) {
    if (c.point != host::CensusPoint::kAfterPlacement) continue;
    if (!c.known) {
      known = false;
      reason = c.reason;
      continue;
    }
    const int r = c.table.replica_node;
    for (auto& [n, p] : c.pages_per_node) by_replica[r][n] += p;
    sampled[r] += c.pages_sampled;
    not_resident[r] += c.not_resident;
  }
  if (!known || by_replica.empty()) {
    *evidence = "census unknown: " + (reason.empty() ? std::string("no census taken") : reason);
    *signature = "unknown";
    return false;
  }
  auto share = [&](int r, int node) {
    const uint64_t s = sampled[r];
    auto it = by_replica[r].find(node);
    return s == 0 || it == by_replica[r].end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(s);
  };
  std::ostringstream ev;
  for (auto& [r, m] : by_replica) {
    ev << (r >= 0 ? "replica on N" + std::to_string(r) + ": " : "");
    for (auto& [n, p] : m) ev << "N" << n << "=" << pct(share(r, n)) << " ";
    if (not_resident[r]) ev << "not resident " << not_resident[r] << " pages ";
    ev << "; ";
  }
  *evidence = ev.str();
  const PlacementPolicy& policy = arm.rig.table.placement;
  const std::string pol = policy.to_string();
  bool ok = true;
  std::string sig;
  if (policy.kind == PlacementKind::kBind && policy.nodes.size() == 1) {
    const int node = policy.nodes.front();
    ok = by_replica.size() == 1 && share(by_replica.begin()->first, node) >= 0.9;
    sig = "bound N" + std::to_string(node) + "=" + pct(share(by_replica.begin()->first, node));
  } else if (policy.kind == PlacementKind::kInterleave) {
    const int r = by_replica.begin()->first;
    int spread = 0;
    for (auto& [n, p] : by_replica[r]) spread += share(r, n) >= 0.25 ? 1 : 0;
    ok = spread >= 2;
    sig = "interleaved over " + std::to_string(spread) + " nodes";
  } else if (policy.kind == PlacementKind::kReplicaPerNode) {
    ok = n_replicas >= 2 && static_cast<int>(by_replica.size()) == n_replicas;
    for (auto& [r, m] : by_replica) ok = ok && r >= 0 && share(r, r) >= 0.9;
    sig = std::to_string(n_replicas) + " replicas, home N" + std::to_string(home_node);
  } else {
    // B experiments: the placement is held fixed; the census only documents it.
    sig = "fixed (" + pol + ")";
  }
  *signature = sig;
  return ok;
}

const std::vector<MetricInfo>& run_metric_infos() {
  static const std::vector<MetricInfo> v = {
      {"ttft_p50_ms", "TTFT p50 [ms]", true, &RunMetrics::ttft_p50_ms},
      {"ttft_p95_ms", "TTFT p95 [ms]", true, &RunMetrics::ttft_p95_ms},
      {"ttft_p99_ms", "TTFT p99 [ms]", true, &RunMetrics::ttft_p99_ms},
      {"itl_p50_ms", "ITL p50 [ms]", true, &RunMetrics::itl_p50_ms},
      {"itl_p95_ms", "ITL p95 [ms]", true, &RunMetrics::itl_p95_ms},
      {"itl_p99_ms", "ITL p99 [ms]", true, &RunMetrics::itl_p99_ms},
      {"goodput_rps", "goodput [req/s]", false, &RunMetrics::goodput_rps},
      {"rejection_rate", "rejection rate", true, &RunMetrics::rejection_rate},
      {"step_p50_us", "step p50 [us]", true, &RunMetrics::step_p50_us},
      {"main_compute_p50_us", "main compute/step p50 [us]", true, &RunMetrics::main_compute_p50_us},
      {"lookup_p50_us", "lookup L p50 [us]", true, &RunMetrics::lookup_p50_us},
      {"wait_per_step_us", "consumer wait/step p50 [us]", true, &RunMetrics::wait_per_step_us},
      {"exposed_wait_p95_us", "exposed wait E p95 [us]", true, &RunMetrics::exposed_wait_p95_us},
  };
  return v;
}

RunMetrics summarize_run(const ServingReport& r, int rep, int order) {
  RunMetrics m;
  m.rep = rep;
  m.order = order;
  m.ttft_p50_ms = r.ttft_ns.median / 1e6;
  m.ttft_p95_ms = r.ttft_ns.p95 / 1e6;
  m.ttft_p99_ms = r.ttft_ns.p99 / 1e6;
  m.itl_p50_ms = r.itl_ns.median / 1e6;
  m.itl_p95_ms = r.itl_ns.p95 / 1e6;
  m.itl_p99_ms = r.itl_ns.p99 / 1e6;
  m.goodput_rps = r.goodput_rps;
  m.rejection_rate = r.rejection_rate;
  m.step_p50_us = r.step_ns.median / 1e3;
  m.main_compute_p50_us = r.main_compute_ns.median / 1e3;
  m.lookup_p50_us = r.lookup_ns.median / 1e3;
  std::vector<double> waits;
  for (size_t i = 0; i < r.step_samples_ns.size() && i < r.main_compute_samples_ns.size(); ++i)
    waits.push_back(r.step_samples_ns[i] - r.main_compute_samples_ns[i]);
  m.wait_per_step_us = stats::median(waits) / 1e3;
  m.exposed_wait_p95_us = r.exposed_wait_ns.p95 / 1e3;
  return m;
}

namespace {

std::vector<double> column(const std::vector<RunMetrics>& runs, double RunMetrics::*f) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.*f);
  return v;
}

// Acceptance chain of one comparison (arm vs baseline).
nlohmann::json acceptance_chain(const std::string& id, const ArmResult& base, const ArmResult& arm,
                                const std::map<std::string, stats::MedianDiff>& d) {
  auto sig = [&](const char* k) { return d.at(k).significant(); };
  auto lower = [&](const char* k) { return d.at(k).ci_high < 0; };
  auto higher = [&](const char* k) { return d.at(k).ci_low > 0; };
  nlohmann::json links = nlohmann::json::array();
  const bool is_a = id[0] == 'A';
  // 1. placement
  nlohmann::json placement;
  bool p_ok;
  if (is_a) {
    p_ok = base.valid && arm.valid && base.signature != arm.signature;
    placement = {{"link", "placement changed"}, {"holds", p_ok},
                 {"evidence", base.spec.name + ": " + base.signature + " -> " + arm.spec.name + ": " + arm.signature}};
  } else {
    p_ok = base.valid && arm.valid && base.signature == arm.signature;
    placement = {{"link", "placement changed"}, {"holds", nullptr},
                 {"evidence", "n/a: " + id + " holds placement fixed (census: " + arm.signature + ")"}};
  }
  links.push_back(placement);
  // 2. mechanism
  const bool m_changed = sig("lookup_p50_us") || sig("wait_per_step_us") || sig("exposed_wait_p95_us");
  links.push_back({{"link", "lookup or wait changed"}, {"holds", m_changed},
                   {"evidence", "lookup L p50 diff " + num(d.at("lookup_p50_us").diff) + " us [" + num(d.at("lookup_p50_us").ci_low) +
                                    ", " + num(d.at("lookup_p50_us").ci_high) + "]; wait/step diff " +
                                    num(d.at("wait_per_step_us").diff) + " us [" + num(d.at("wait_per_step_us").ci_low) + ", " +
                                    num(d.at("wait_per_step_us").ci_high) + "]"}});
  // 3. main compute not regressed: the CI does not lie wholly above +2% of the baseline median.
  const auto& mc = d.at("main_compute_p50_us");
  const double base_mc = stats::median(column(base.runs, &RunMetrics::main_compute_p50_us));
  const bool regressed = std::isfinite(mc.ci_low) && std::isfinite(base_mc) && mc.ci_low > 0.02 * base_mc;
  links.push_back({{"link", "main compute not regressed"}, {"holds", std::isfinite(mc.ci_low) ? nlohmann::json(!regressed) : nlohmann::json(nullptr)},
                   {"evidence", "main compute/step diff " + num(mc.diff) + " us [" + num(mc.ci_low) + ", " + num(mc.ci_high) +
                                    "] vs baseline " + num(base_mc) + " us (regressed = CI above +2%)"}});
  // 4. end to end: a client metric significantly better and none significantly worse.
  const bool better = lower("ttft_p50_ms") || lower("itl_p50_ms") || higher("goodput_rps");
  const bool worse = higher("ttft_p50_ms") || higher("itl_p50_ms") || lower("goodput_rps");
  links.push_back({{"link", "end-to-end improved"}, {"holds", better && !worse},
                   {"evidence", "TTFT p50 diff " + num(d.at("ttft_p50_ms").diff) + " ms, ITL p50 diff " + num(d.at("itl_p50_ms").diff) +
                                    " ms, goodput diff " + num(d.at("goodput_rps").diff) + " req/s" +
                                    (worse ? " (a client metric is significantly worse)" : "")}});
  // The chain holds only link by link (a link after a failed one is not claimed).
  bool chain = is_a ? p_ok : true;
  std::string stops;
  for (size_t i = is_a ? 0 : 1; i < links.size(); ++i) {
    const auto& h = links[i]["holds"];
    if (!(h.is_boolean() && h.get<bool>())) {
      chain = false;
      stops = links[i]["link"].get<std::string>();
      break;
    }
  }
  return {{"arm", arm.spec.name}, {"baseline", base.spec.name}, {"links", links}, {"chain_holds", chain},
          {"stops_at", stops.empty() ? nlohmann::json(nullptr) : nlohmann::json(stops)}};
}

}  // namespace

Result<ExperimentResult> run_experiment(const ExperimentOptions& o) {
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  if (o.reps < kMinExperimentReps)
    return Status(Code::kInvalidArgument, "experiment: --reps " + std::to_string(o.reps) + " is too few: with fewer than " +
                                              std::to_string(kMinExperimentReps) +
                                              " repetitions the bootstrap interval is a point and every difference "
                                              "looks significant");
  if (!o.make_ids) return Status(Code::kInvalidArgument, "experiment: no id source");
  const int hw = sys::usable_cpu_count();
  ENGRAM_ASSIGN_OR_RETURN(std::vector<ArmSpec> specs, make_arms(o.id, o.base, sys::memory_nodes(), o.caps, hw));
  // Every arm runs in the caller's prefetch mode except B1, whose one change is the mode.
  if (o.id != "B1")
    for (auto& s : specs) s.mode = o.serving.mode;
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<ServingIdSource> ids, o.make_ids());

  ExperimentResult res;
  res.id = o.id;
  static const std::map<std::string, std::pair<std::string, std::string>> what = {
      {"A1", {"table node: consumer's node <-> remote node", "one shared table, kernel/grid, prefetch mode, recorded batches"}},
      {"A2", {"bound <-> interleaved", "shared group, capacity, prefetch mode, recorded batches"}},
      {"A3", {"one shared copy <-> one copy per node", "heads, requests, output precision, recorded batches"}},
      {"B1", {"early <-> on-demand submission", "UVA lookup, background grid, staging, placement, recorded batches"}},
      {"B2", {"background grid cap", "placement, lookup order, other kernel parameters, recorded batches"}}};
  res.changes = what.at(o.id).first;
  res.holds = what.at(o.id).second;
  for (const auto& s : specs) {
    ArmResult a;
    a.spec = s;
    a.valid = true;
    res.arms.push_back(a);
  }

  ServingSchedule schedule = o.schedule;
  std::string schedule_note = "recorded schedule given";
  if (schedule.steps.empty()) {
    NodePin pin(specs[0].consumer_node);
    log("recording the schedule live on arm " + specs[0].name + " (untimed) ...");
    ENGRAM_ASSIGN_OR_RETURN(auto rig, Engine::create_local(o.layout, specs[0].rig));
    ServingOptions so = o.serving;
    so.mode = specs[0].mode;
    ids->reset();
    ENGRAM_ASSIGN_OR_RETURN(auto rep, run_serving_live(o.layout, o.schedule.requests, *ids, rig->queue(), rig->compute(), so, &schedule));
    (void)rep;
    schedule_note = "recorded live once on arm " + specs[0].name + " (not timed), replayed by every arm";
  }
  if (schedule.steps.empty()) return Status(Code::kInvalidArgument, "experiment: the schedule has no steps (no requests?)");

  std::vector<size_t> order(specs.size());
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    uint64_t s = mix_seed(o.order_seed, static_cast<uint64_t>(rep));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix64(s) % i]);  // Fisher-Yates
    for (size_t pos = 0; pos < order.size(); ++pos) {
      ArmResult& arm = res.arms[order[pos]];
      if (!arm.valid) continue;
      NodePin pin(arm.spec.consumer_node);
      log("rep " + std::to_string(rep + 1) + "/" + std::to_string(o.reps) + ": arm " + arm.spec.name + " (" +
          arm.spec.rig.table.placement.to_string() + ", " + prefetch_mode_name(arm.spec.mode) + ") ...");
      ENGRAM_ASSIGN_OR_RETURN(auto rig, Engine::create_local(o.layout, arm.spec.rig));
      std::string evidence, signature;
      const HostTable& table = rig->table();
      const int home = table.n_replicas() > 1 ? table.replica_node(table.home_replica()) : -1;
      const bool ok = census_proves_placement(arm.spec, rig->censuses(), table.n_replicas(), home, &evidence, &signature);
      if (rep == 0 || arm.censuses.empty()) {
        for (const auto& c : rig->censuses()) arm.censuses.push_back(c.to_json());
        arm.evidence = evidence;
        arm.signature = signature;
      }
      if (!ok) {
        arm.valid = false;
        arm.evidence = "INVALID (census does not show the requested placement): " + evidence;
        log("arm " + arm.spec.name + " invalid: " + evidence);
        continue;
      }
      ServingOptions so = o.serving;
      so.mode = arm.spec.mode;
      ids->reset();
      ENGRAM_ASSIGN_OR_RETURN(ServingReport r, run_serving_recorded(o.layout, schedule, *ids, rig->queue(), rig->compute(), so));
      arm.runs.push_back(summarize_run(r, rep, static_cast<int>(pos)));
      if (!o.out_dir.empty() && rep == o.reps - 1) {
        std::error_code ec;
        std::filesystem::create_directories(o.out_dir, ec);
        arm.trace_file = o.out_dir + "/trace-" + arm.spec.name + ".json";
        std::ofstream f(arm.trace_file);
        if (f) f << rig->queue().timeline().to_chrome_trace({sys::process_id()}).dump() << "\n";
        else arm.trace_file.clear();
      }
    }
  }

  // ---- statistics and the chain ----
  nlohmann::json j;
  j["experiment"] = o.id;
  j["changes"] = res.changes;
  j["holds"] = res.holds;
  j["conditions"] = o.conditions;
  j["repetitions"] = o.reps;
  j["order"] = "arms shuffled per repetition (Fisher-Yates, seed " + std::to_string(o.order_seed) + ")";
  j["schedule"] = {{"note", schedule_note}, {"requests", schedule.requests.size()}, {"steps", schedule.steps.size()},
                   {"rejected_in_schedule", schedule.rejected.size()}};
  j["serving"] = {{"model", o.serving.model.name},
                  {"model_note", o.serving.model.note},
                  {"layers", o.serving.model.layers},
                  {"hidden", o.serving.model.hidden},
                  {"compute_tflops", o.serving.rates.tflops},
                  {"weight_gbps", o.serving.rates.weight_gbps},
                  {"compute_unit_us", o.serving.rates.unit_us},
                  {"slo_ttft_ms", o.serving.slo_ttft_ms},
                  {"slo_itl_ms", o.serving.slo_itl_ms},
                  {"ids", ids->describe()}};
  j["table"] = {{"layout", o.layout.name}, {"bytes", o.layout.total_bytes()}, {"backing", o.base.table.backing.to_string()},
                {"backend", backend_kind_name(o.base.backend)}};
  nlohmann::json arms = nlohmann::json::array();
  for (const auto& a : res.arms) {
    nlohmann::json m;
    for (const auto& mi : run_metric_infos()) {
      const auto s = stats::summarize(column(a.runs, mi.field));
      m[mi.key] = {{"median", json_num(s.median)}, {"p5", json_num(s.p5)}, {"p95", json_num(s.p95)}, {"n", s.n},
                   {"runs", column(a.runs, mi.field)}};
      for (auto& v : m[mi.key]["runs"])
        if (v.is_number() && !std::isfinite(v.get<double>())) v = nullptr;
    }
    arms.push_back({{"name", a.spec.name}, {"value", a.spec.value}, {"placement", a.spec.rig.table.placement.to_string()},
                    {"prefetch", prefetch_mode_name(a.spec.mode)}, {"grid_fraction", a.spec.rig.grid_cap.fraction()},
                    {"lookup_threads", a.spec.rig.lookup_threads}, {"consumer_node", a.spec.consumer_node},
                    {"valid", a.valid}, {"census_evidence", a.evidence}, {"census_signature", a.signature},
                    {"census", a.censuses}, {"metrics", m}, {"trace_file", a.trace_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.trace_file)}});
  }
  j["arms"] = arms;
  nlohmann::json comps = nlohmann::json::array();
  const ArmResult& base = res.arms[0];
  for (size_t i = 1; i < res.arms.size(); ++i) {
    const ArmResult& a = res.arms[i];
    std::map<std::string, stats::MedianDiff> d;
    nlohmann::json diffs;
    for (const auto& mi : run_metric_infos()) {
      const auto md = (base.valid && a.valid) ? stats::bootstrap_median_diff(column(base.runs, mi.field), column(a.runs, mi.field))
                                              : stats::MedianDiff{};
      d[mi.key] = md;
      diffs[mi.key] = {{"diff", json_num(md.diff)}, {"ci_low", json_num(md.ci_low)}, {"ci_high", json_num(md.ci_high)},
                       {"ratio", json_num(md.ratio)}, {"significant", md.significant()}};
    }
    nlohmann::json c = acceptance_chain(o.id, base, a, d);
    c["diff_of_medians"] = diffs;
    c["confidence"] = 0.95;
    comps.push_back(c);
  }
  j["comparisons"] = comps;
  res.json = j;

  // ---- Markdown ----
  std::ostringstream md;
  md << "# Experiment " << o.id << ": " << res.changes << "\n\n";
  md << "Held fixed: " << res.holds << ".  \n";
  md << "Schedule: " << schedule_note << " (" << schedule.requests.size() << " requests, " << schedule.steps.size()
     << " steps).  \n";
  md << "Repetitions: " << o.reps << ", arm order shuffled per repetition (seed " << o.order_seed << ").  \n";
  md << "Table: " << o.layout.name << ", " << o.layout.total_bytes() << " B, " << o.base.table.backing.to_string() << " backing; backend "
     << backend_kind_name(o.base.backend) << "; ids " << ids->describe() << ".  \n";
  md << "Model: " << o.serving.model.note << "; compute " << o.serving.rates.tflops << " TFLOPS, weights "
     << o.serving.rates.weight_gbps << " GB/s, unit " << o.serving.rates.unit_us << " us. SLO: TTFT <= " << o.serving.slo_ttft_ms
     << " ms, mean ITL <= " << o.serving.slo_itl_ms << " ms.\n";
  if (o.conditions.is_object() && o.conditions.contains("git_revision"))
    md << "Revision: " << o.conditions["git_revision"].dump() << "\n";
  md << "\n## Arms and placement evidence (census after placement)\n\n| arm | sets | valid | census |\n|---|---|---|---|\n";
  for (const auto& a : res.arms)
    md << "| " << a.spec.name << " | " << a.spec.value << " | " << (a.valid ? "yes" : "**no**") << " | " << a.evidence << " |\n";
  md << "\n## Per-arm medians over repetitions [p5, p95]\n\n| metric |";
  for (const auto& a : res.arms) md << " " << a.spec.name << " |";
  md << "\n|---|";
  for (size_t i = 0; i < res.arms.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& mi : run_metric_infos()) {
    md << "| " << mi.label << " |";
    for (const auto& a : res.arms) {
      const auto s = stats::summarize(column(a.runs, mi.field));
      md << " " << num(s.median) << " [" << num(s.p5) << ", " << num(s.p95) << "] |";
    }
    md << "\n";
  }
  for (const auto& c : comps) {
    md << "\n## " << c["arm"].get<std::string>() << " vs " << c["baseline"].get<std::string>()
       << ": difference of medians (arm - baseline), bootstrap 95% CI\n\n| metric | diff | CI | significant |\n|---|---|---|---|\n";
    for (const auto& mi : run_metric_infos()) {
      const auto& x = c["diff_of_medians"][mi.key];
      auto g = [&](const char* k) { return x[k].is_null() ? std::string("n/a") : num(x[k].get<double>()); };
      md << "| " << mi.label << " | " << g("diff") << " | [" << g("ci_low") << ", " << g("ci_high") << "] | "
         << (x["significant"].get<bool>() ? "yes" : "no") << " |\n";
    }
    md << "\nAcceptance chain:\n\n";
    int k = 1;
    for (const auto& l : c["links"]) {
      const auto& h = l["holds"];
      md << k++ << ". " << l["link"].get<std::string>() << ": **"
         << (h.is_null() ? "n/a" : (h.get<bool>() ? "yes" : "no")) << "** — " << l["evidence"].get<std::string>() << "\n";
    }
    md << "\nChain holds: **" << (c["chain_holds"].get<bool>() ? "yes" : "no") << "**"
       << (c["stops_at"].is_null() ? "" : " (stops at: " + c["stops_at"].get<std::string>() + ")") << "\n";
  }
  res.markdown = md.str();
  return res;
}

Status write_experiment_report(const ExperimentResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kIo, "cannot create results folder '" + dir + "': " + ec.message());
  {
    std::ofstream f(dir + "/report.md");
    if (!(f << r.markdown)) return Status(Code::kIo, "cannot write " + dir + "/report.md");
  }
  std::ofstream f(dir + "/report.json");
  if (!(f << r.json.dump(2) << "\n")) return Status(Code::kIo, "cannot write " + dir + "/report.json");
  return Status::ok();
}

}  // namespace engram
