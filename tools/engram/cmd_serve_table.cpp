// `engram serve-table`: a leader that holds one shared table for other processes until SIGINT/SIGTERM.
//
// It builds the table once (placement before first touch, every page allocated, rows written: synthetic
// a checkpoint or a model directory), prints the socket path, the group name and the census, then admits peers round after
// round: each round waits for --peers processes, runs the shared-table protocol with them (host/group.hpp)
// and prints what happened, including each rank's census text. Connections of earlier rounds stay open
// until the server stops, so a peer can watch for the leader's exit. A memfd table can be admitted any
// number of times; a named (shm) table is unlinked after the first round, so a later peer gets the
// protocol's "joined late" error (printed, and the server goes on). At its start it sweeps the shm and socket
// directories (host/sweep.hpp): tables and sockets of dead leaders are removed and named. The table is an
// Engine::serve_group; the layout travels with the protocol's description, and the group's job text is a RankJob
// (src/engine/rank_job.hpp) naming the content.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "core/units.hpp"
#include "engine_args.hpp"
#include "metrics_serve.hpp"
#include "progress_args.hpp"
#include "engram/engine.hpp"
#include "host/census.hpp"
#include "host/group.hpp"
#include "host/sweep.hpp"
#include "engine/rank_job.hpp"
#include "report.hpp"
#include "sys/process.hpp"
#include "sys/unix_socket.hpp"

namespace engram::cli {
namespace {

struct ServeArgs {
  MetricsArgs metrics;  // --metrics-port, --metrics-file
  std::string layout = "v41-flash-mini";
  std::string table_size = "512MiB";
  std::string row_layout = "fused";
  std::string checkpoint;
  std::string model;         // Hugging Face model directory
  std::string tensor_names;
  uint64_t seed = 1;
  std::string backing = "memfd";
  std::string placement = "none";
  TpArgs tp;
  std::string shm_dir = "/dev/shm";
  std::string socket;
  std::string group = "engram-table";
  int peers = 1;
  int64_t step_timeout_ms = 30000;
  int64_t join_timeout_ms = 0;
  bool json = false;
  std::string progress = "auto";  // --progress (progress_args.hpp)
};

// The length of the socket path a leader without --socket makes for `group` (UnixGroupListener::listen):
// DIR/GROUP.<8 hex digits>.sock in the private runtime directory.
size_t default_socket_bytes(const std::string& group) {
  return sys::private_runtime_dir_name().size() + 1 + group.size() + 1 + 8 + 5;
}

// A --socket given on the command line, checked before anything is swept or built: a path that sun_path cannot
// hold, or a directory other users could reach (mode 1777 /tmp) or this process cannot use (/proc), is bad input.
// Empty: the default path in the private runtime directory.
Status check_socket_arg(const std::string& path) {
  if (path.empty()) return Status::ok();
  if (path.size() > sys::kMaxSocketPathBytes)
    return Status(Code::kInvalidArgument, "--socket " + path + ": " + std::to_string(path.size()) +
                                              " bytes; a socket path holds at most " +
                                              std::to_string(sys::kMaxSocketPathBytes) + " (sun_path)");
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (Status s = sys::check_private_dir(dir); !s.is_ok())
    return Status(Code::kInvalidArgument, "--socket " + path + ": " + s.message() +
                                              " (give a path in a directory of mode 0700 owned by this user, or no "
                                              "--socket for the private default)");
  return Status::ok();
}

// The table's backings as the protocol describes them to peers (layer, replica, head range, placement).
nlohmann::json table_json(const HostTable& t) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : t.parts())
    parts.push_back({{"layer_index", p.layer_index}, {"replica", p.replica}, {"shard", p.shard},
                     {"backing", p.backing->backing.identity().to_string()}, {"placement", p.backing->report.to_json()}});
  return {{"layout", nlohmann::json::parse(layout_to_json(t.layout()))}, {"backings", parts}};
}

// One census (PageCensus::to_json) as a line.
std::string census_json_line(const nlohmann::json& c) {
  std::string s = c.value("point", std::string("?")) + ", layer " +
                  std::to_string(c.contains("table") ? c["table"].value("layer_id", -1) : -1) + ": ";
  if (!c.value("known", false)) return s + "unknown (" + c.value("reason", std::string()) + ")";
  if (c.contains("pages_per_node") && c["pages_per_node"].is_object())
    for (auto it = c["pages_per_node"].begin(); it != c["pages_per_node"].end(); ++it)
      s += "N" + it.key() + "=" + it.value().dump() + " pages ";
  return s + std::to_string(c.value("not_resident", int64_t{0})) + " not resident";
}

std::string census_line(const host::PageCensus& c) {
  std::string s = std::string(host::census_point_name(c.point)) + ", layer " + std::to_string(c.table.layer_id) + ": ";
  if (!c.known) return s + "unknown (" + c.reason + ")";
  for (auto& [node, pages] : c.pages_per_node)
    s += "N" + std::to_string(node) + "=" + std::to_string(pages) + " pages (" + fmt_num(100.0 * c.fraction_on(node), "%.1f%%") + ") ";
  s += std::to_string(c.not_resident) + " not resident; " + std::to_string(c.pages_sampled) + " of " +
       std::to_string(c.pages_total) + " pages sampled";
  return s;
}

int serve(const ServeArgs& a) {
  if (const std::string note = sys::runtime_dir_fallback_note(); !note.empty())
    std::fprintf(stderr, "engram serve-table: note: %s\n", note.c_str());
  // With --json one document per line, each with its schema (docs/json.md) and an "event" key.
  auto emit = [&](const nlohmann::json& event, const std::string& text) {
    nlohmann::json doc = event;
    doc["schema"] = "engram.serve-table/1";
    if (a.json) std::printf("%s\n", doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    else std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  };
  if (Status st = check_metrics_args(a.metrics); !st.is_ok()) return report_failure("serve-table", st);
  if (Status st = check_socket_arg(a.socket); !st.is_ok()) return report_failure("serve-table", st);
  Status sig = sys::install_stop_handlers();
  if (!sig.is_ok()) return report_failure("serve-table", sig);
  // What killed leaders left behind (a whole process group killed takes their guardians too).
  std::vector<std::string> sweep_dirs = host::default_sweep_dirs(a.shm_dir);
  if (const size_t slash = a.socket.rfind('/'); slash != std::string::npos && slash > 0)
    sweep_dirs.push_back(a.socket.substr(0, slash));
  const host::SweepReport swept = host::sweep_stale({sweep_dirs});
  if (!a.json)
    for (const auto& line : swept.lines(false)) std::fprintf(stderr, "engram serve-table: %s\n", line.c_str());
  RankJob job;
  job.layout = a.layout;
  job.row_layout = a.row_layout;
  job.checkpoint = a.checkpoint;
  job.model_dir = a.model;
  job.tensor_names = a.tensor_names;
  job.seed = a.seed;
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return report_failure("serve-table", size.status().with_context("--table-size"));
  job.table_bytes = *size;
  auto layout = job_layout(job);
  if (!layout.is_ok()) return report_failure("serve-table", layout.status().with_context(!a.model.empty() ? "--model" : a.checkpoint.empty() ? "--layout" : "--checkpoint"));
  EngineOptions eo;
  if (Status st = set_engine_option(eo, "--backing", a.backing); !st.is_ok()) return report_failure("serve-table", st);
  if (Status st = set_engine_option(eo, "--placement", a.placement); !st.is_ok()) return report_failure("serve-table", st);
  if (Status st = apply_tp_args(a.tp, eo.table); !st.is_ok()) return report_failure("serve-table", st);
  eo.table.shm_dir = a.shm_dir;
  eo.step_timeout_ms = a.step_timeout_ms;
  eo.content = job.content();
  show_load_progress(eo, progress_display(a.progress));

  auto guard = sys::FileGuardian::start();
  if (!guard.is_ok()) return report_failure("serve-table", guard.status());
  auto guardian = std::make_shared<sys::FileGuardian>(std::move(*guard));
  host::UnixGroupOptions gopt;
  gopt.group = a.group;
  gopt.socket_path = a.socket;
  auto listener = host::UnixGroupListener::listen(gopt);
  if (!listener.is_ok()) return report_failure("serve-table", listener.status().with_context("--socket"));
  (void)guardian->arm((*listener)->socket_path());

  if (!a.json)
    std::fprintf(stderr, "engram serve-table: building %s table (%s, %s backing, placement %s) ...\n", layout->name.c_str(),
                 format_bytes(layout->total_bytes()).c_str(), a.backing.c_str(), a.placement.c_str());
  auto served_engine = Engine::serve_group(*layout, eo, a.group, job.to_json().dump());
  if (!served_engine.is_ok()) return report_failure("serve-table", served_engine.status());
  Engine& engine = **served_engine;
  const std::vector<host::PageCensus> census = engine.censuses();
  auto metrics_server =
      start_metrics_server("serve-table", a.metrics, [&engine] { return prometheus_text(engine.metrics()); });
  if (!metrics_server.is_ok()) return report_failure("serve-table", metrics_server.status());

  nlohmann::json ready = {{"event", "ready"},
                          {"socket", (*listener)->socket_path()},
                          {"group", a.group},
                          {"pid", sys::process_id()},
                          {"peers_per_round", a.peers},
                          {"job", job.to_json()},
                          {"table", table_json(engine.table())},
                          {"census", nlohmann::json::array()},
                          {"swept", swept.to_json()}};
  std::string text = "engram serve-table: group '" + a.group + "' at " + (*listener)->socket_path() + " (leader pid " +
                     std::to_string(sys::process_id()) + ")\n" + "table " + layout->name + ", " +
                     format_bytes(layout->total_bytes()) + ", " + std::to_string(layout->n_layers()) + " Engram layers, " +
                     a.backing + " backing, placement " + a.placement + ", " +
                     (a.checkpoint.empty() ? "synthetic(seed=" + std::to_string(a.seed) + ")" : "checkpoint " + a.checkpoint);
  for (const auto& p : engine.table().parts())
    text += "\n  " + p.backing->backing.identity().to_string() + ": " + p.backing->report.to_string();
  for (const auto& c : census) {
    ready["census"].push_back(c.to_json());
    text += "\n  census " + census_line(c);
  }
  text += "\nready: " + std::to_string(a.peers) + " peer(s) per round; SIGINT or SIGTERM stops";
  emit(ready, text);

  const host::Millis join = host::Millis(a.join_timeout_ms > 0 ? a.join_timeout_ms : int64_t{365} * 24 * 3600 * 1000);
  std::vector<std::unique_ptr<host::UnixGroupChannel>> rounds;  // kept open until we stop
  int served = 0, failed = 0;
  while (!sys::stop_requested()) {
    auto ch = (*listener)->accept_group(a.peers, join, [] { return sys::stop_requested(); });
    if (!ch.is_ok()) {
      if (sys::stop_requested()) break;
      emit({{"event", "round"}, {"round", rounds.size() + 1}, {"ok", false}, {"error", ch.status().to_string()}},
           "round " + std::to_string(rounds.size() + 1) + ": " + ch.status().to_string());
      ++failed;
      continue;
    }
    Status s = engine.admit(**ch);
    const int round = static_cast<int>(rounds.size()) + 1;
    nlohmann::json ev = {{"event", "round"}, {"round", round}, {"ok", s.is_ok()}, {"pids", (*ch)->pids()}};
    std::string t = "round " + std::to_string(round) + ": pids " + nlohmann::json((*ch)->pids()).dump() + " " +
                    (s.is_ok() ? "attached" : "FAILED: " + s.to_string());
    if (!s.is_ok()) ev["error"] = s.to_string();
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& r : engine.group_steps()) {
      nlohmann::json e = nlohmann::json::array();
      for (const auto& x : r.entries) {
        const nlohmann::json m = nlohmann::json::parse(x.message, nullptr, false);
        const nlohmann::json census_of_rank = m.is_object() && m.contains("censuses") ? m["censuses"] : nlohmann::json(nullptr);
        e.push_back({{"rank", x.rank}, {"pid", x.pid}, {"ok", x.status.is_ok()},
                     {"backend", m.is_object() ? m.value("backend", nlohmann::json(nullptr)) : nlohmann::json(nullptr)},
                     {"census", census_of_rank}});
        if (r.step == std::string(host::kStepCensusLoaded) && census_of_rank.is_array())
          for (const auto& c : census_of_rank) t += "\n  rank " + std::to_string(x.rank) + " census " + census_json_line(c);
      }
      steps.push_back({{"step", r.step}, {"seconds", r.seconds}, {"entries", e}});
    }
    ev["steps"] = steps;
    emit(ev, t);
    if (s.is_ok()) served += (*ch)->world_size() - 1;
    else ++failed;
    rounds.push_back(std::move(*ch));
  }
  const int signo = sys::stop_signal();
  rounds.clear();  // peers see the leader's end of each connection close
  if (Status st = write_metrics_file(a.metrics, prometheus_text(engine.metrics())); !st.is_ok())
    return report_failure("serve-table", st);
  emit({{"event", "stopped"}, {"signal", signo}, {"peers_served", served}, {"rounds_failed", failed}},
       "stopping on signal " + std::to_string(signo) + ": " + std::to_string(served) + " peer(s) served, " +
           std::to_string(failed) + " round(s) failed");
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<ServeArgs>();
  sub.add_option("--layout", a->layout, "Layout preset: v41-flash-mini (default), v41-flash, tiny")
      ->check(CLI::IsMember(preset_names()));
  sub.add_option("--table-size", a->table_size, "Total table bytes for v41-flash-mini, e.g. 512MiB (default), 2GiB")
      ->check(size_in(1, int64_t{1} << 50));
  sub.add_option("--row-layout", a->row_layout, "Row layout: fused (default) or split")->check(CLI::IsMember({"fused", "split"}));
  CLI::Option* ckpt =
      sub.add_option("--checkpoint", a->checkpoint, "Load the table from this safetensors checkpoint (engram table create)")
          ->check(input_file());
  CLI::Option* model = sub.add_option("--model", a->model,
                 "Load the table from this Hugging Face model directory (config.json, index, shards; its layout comes "
                 "from config.json)")
      ->check(input_dir())
      ->excludes(ckpt);
  sub.add_option("--tensor-names", a->tensor_names,
                 "With --model: Engram tensor names WEIGHT,SCALE with {L} for the layer id (default "
                 "layers.{L}.engram.embed.weight,layers.{L}.engram.embed.scale)")
      ->needs(model);
  sub.add_option("--seed", a->seed, "Seed of the synthetic rows (default 1)")->check(unsigned_integer());
  sub.add_option("--backing", a->backing, "memfd (default; passed to peers over the socket), shm (named file, "
                                          "unlinked after the first round), hugetlb, hugetlb-1g")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g"}));
  sub.add_option("--placement", a->placement,
                 "NUMA placement applied before first touch: none (default), local, bind:N, preferred:N, "
                 "interleave:N,M|all, weighted-interleave:N=w,..., replica-per-node")
      ->check(parsed_by([](const std::string& t) { return parse_placement(t).status(); }));
  add_tp_options(sub, a->tp);
  sub.add_option("--shm-dir", a->shm_dir, "Directory of the named file for --backing shm (default /dev/shm)")
      ->check(input_dir());
  refuse_shm_dir_without_shm(sub, &a->backing);
  sub.add_option("--socket", a->socket,
                 "Socket path (its directory must be 0700 and yours); default: $XDG_RUNTIME_DIR/engram or "
                 "/tmp/engram-<uid>, with a random name")
      ->check(socket_path());
  sub.add_option("--group", a->group,
                 "Group name peers must present (default engram-table; no whitespace, control character or '/')")
      ->check(group_name());
  // Without --socket the group names the socket (see default_socket_bytes): it must fit sun_path.
  add_parse_check(sub, [a] {
    if (!a->socket.empty()) return;
    const size_t bytes = default_socket_bytes(a->group);
    if (bytes > sys::kMaxSocketPathBytes)
      throw CLI::ValidationError("--group", std::to_string(a->group.size()) + " bytes; the socket path it names (" +
                                                std::to_string(bytes) + " bytes in " + sys::private_runtime_dir_name() +
                                                ") holds at most " + std::to_string(sys::kMaxSocketPathBytes) +
                                                " (sun_path): give a shorter --group or a --socket");
  });
  sub.add_option("--peers", a->peers, "Peers per round (default 1)")->check(range(1, 4096));
  sub.add_option("--step-timeout-ms", a->step_timeout_ms, "Timeout of each protocol step (default 30000)")
      ->check(range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--join-timeout-ms", a->join_timeout_ms,
                 "Give up on a round whose peers did not all arrive in this time (default 0: wait)")
      ->check(range(int64_t{0}, int64_t{1} << 40));
  sub.add_flag("--json", a->json, "One JSON object per line: ready (socket, census), round, stopped");
  add_metrics_options(sub, a->metrics);
  add_progress_option(sub, a->progress);
  sub.footer(
      "Example: engram serve-table --layout tiny --backing memfd --placement interleave:all\n"
      "A peer joins with UnixGroupChannel::connect(socket, {group}) and Engine::join_group (C++), or\n"
      "engram_offload.SharedTable.attach(engram_offload.UnixGroupChannel.connect(socket, group)) (Python).");
  return [a] { return serve(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(serve_table, "serve-table", "Hold one shared table for other processes (shared-group leader) until SIGINT/SIGTERM",
               engram::cli::setup);
