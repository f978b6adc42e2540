// The text of a multi-rank decode replay's report (run --ranks): table, group and protocol, census, memory, one
// line per rank and the aggregate, from the JSON report run_multi_rank returns. Numbers that could not be read
// print as n/a (report/numbers.hpp).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/units.hpp"
#include "host/conditions.hpp"
#include "replay/multi_rank.hpp"
#include "report/numbers.hpp"

namespace engram {

using nlohmann::json;
using report::fmt_num;

std::string multi_rank_text(const json& j) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  const auto& t = j["table"];
  line("engram run --ranks " + std::to_string(j["ranks"].get<int>()) + " — " +
       conditions_summary(j["conditions"]));
  line("");
  line("Table     " + t["layout"].get<std::string>() + ", " + t["row_layout"].get<std::string>() + " rows of d=" +
       std::to_string(t["d"].get<int>()) + ", Engram layers " + t["engram_layers"].dump() + " x " +
       std::to_string(t["heads"].get<int>()) + " heads, " + format_bytes(t["bytes"].get<int64_t>()) + ", " +
       t["content"].get<std::string>());
  line("Memory    ONE shared copy: " + t["backing"].get<std::string>() + " backing, placement " +
       t["placement_requested"].get<std::string>() + (t["read_only_ranks"].get<bool>() ? ", ranks map it read-only" : ""));
  for (const auto& p : t["placement"])
    line("          layer index " + std::to_string(p["layer_index"].get<int>()) + ": " + p["backing"].get<std::string>() +
         "; requested " + p["report"].value("requested", "?") + ", obtained " + p["report"].value("obtained", "?"));
  std::string proto;
  for (const auto& s : j["group"]["protocol"]) proto += " " + s["step"].get<std::string>() + " " + fmt_num(s["seconds"].get<double>() * 1e3, "%.1f") + " ms;";
  line("Group     " + j["group"]["name"].get<std::string>() + ", leader pid " +
       std::to_string(j["group"]["leader_pid"].get<int>()) + ", rank pids " + j["group"]["rank_pids"].dump());
  line("Protocol " + proto);
  for (const auto& c : j["census"]) {
    if (c.value("point", "") != "after load" && c.value("point", "") != "after replay") continue;
    std::string nodes;
    if (c.contains("pages_per_node") && c["pages_per_node"].is_object())
      for (auto it = c["pages_per_node"].begin(); it != c["pages_per_node"].end(); ++it) {
        const double sampled = c.value("pages_sampled", 0.0);
        nodes += " N" + it.key() + "=" + it.value().dump() + " pages" +
                 (sampled > 0 ? " (" + fmt_num(100.0 * it.value().get<double>() / sampled, "%.1f%%") + ")" : "");
      }
    line("Census    " + c.value("point", "?") + ", layer " + std::to_string(c["table"].value("layer_id", -1)) + ":" +
         (c.value("known", false) ? nodes : " unknown (" + c.value("reason", "") + ")") +
         (c.value("not_resident", 0) ? ", " + std::to_string(c.value("not_resident", 0)) + " not resident" : ""));
  }
  const auto& m = j["memory"];
  line("Pss       sum over leader and ranks " + format_bytes(m["pss_sum_bytes"].get<int64_t>()) + " for " +
       format_bytes(m["table_bytes"].get<int64_t>()) + " of table (one copy, not " + std::to_string(j["ranks"].get<int>() + 1) +
       "); rows identical on every rank: " + (j["same_bytes"].get<bool>() ? "yes" : "NO"));
  line("");
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-5s %-8s %-9s %-8s %12s %10s %12s %12s %s", "rank", "pid", "exit", "backend", "rows/s",
                "src GB/s", "step med us", "tokens/s", "E med us per layer");
  line(buf);
  for (const auto& r : j["per_rank"]) {
    const auto& rep = r["report"];
    std::string e;
    for (const auto& l : rep["layers"])
      e += " L" + std::to_string(l["layer_id"].get<int>()) + "=" +
           (l["exposed_wait_ns"]["median"].is_number() ? fmt_num(l["exposed_wait_ns"]["median"].get<double>() / 1e3, "%.1f") : "n/a");
    auto d = [](const json& v, double scale, const char* f) { return report::fmt_json_num(v, f, scale); };
    std::string be = rep.value("backend", "?");
    if (rep.contains("backend_details") && rep["backend_details"].is_object())
      be += ":" + std::to_string(rep["backend_details"].value("device", json::object()).value("ordinal", -1));
    std::snprintf(buf, sizeof buf, "%-5d %-8d %-9s %-8s %12s %10s %12s %12s%s", r["rank"].get<int>(), r["pid"].get<int>(),
                  r["exit"].get<std::string>().c_str(), be.c_str(), d(rep["lookup"]["rows_per_s"], 1e-6, "%.2f M").c_str(),
                  d(rep["lookup"]["source_gbps"], 1, "%.2f").c_str(), d(rep["steps"]["step_ns"]["median"], 1e-3, "%.1f").c_str(),
                  d(rep["steps"]["tokens_per_s"], 1, "%.0f").c_str(), e.c_str());
    line(buf);
  }
  const auto& a = j["aggregate"];
  line("");
  line("Aggregate " + fmt_num(a["rows_per_s_sum"].get<double>() / 1e6, "%.2f") + " M rows/s and " +
       fmt_num(a["tokens_per_s_sum"].get<double>(), "%.0f") + " tokens/s over all ranks; worst median step " +
       (a["step_ns_median_worst_rank"].is_number() ? fmt_num(a["step_ns_median_worst_rank"].get<double>() / 1e3, "%.1f") : "n/a") +
       " us; wall " + fmt_num(a["wall_s"].get<double>(), "%.2f") + " s");
  line("Ids       " + (j["per_rank"].empty() ? std::string("?") : j["per_rank"][0]["report"].value("ids", "?")) +
       (j["per_rank"].empty() ? std::string() : " (rank " + std::to_string(j["per_rank"][0]["rank"].get<int>()) + ";") +
       " each rank has its own stream)");
  // Each rank writes its own trace: name them, so none is written unseen.
  std::string traces;
  for (const auto& r : j["per_rank"])
    if (r.contains("report") && r["report"].contains("timeline") && r["report"]["timeline"].is_string())
      traces += (traces.empty() ? "" : ", ") + r["report"]["timeline"].get<std::string>();
  if (!traces.empty()) line("Timelines " + traces + " (one per rank; engram trace analyze FILE)");
  return out;
}

}  // namespace engram
