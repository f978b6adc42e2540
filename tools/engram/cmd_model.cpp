// `engram model`: the cost arithmetic of the seeds as a calculator, formulas in --help (core/cost_model.hpp).
//   transfer  t = B / BW over a named path or a given GB/s
//   kv        KV swap-in vs prefill recompute for a model shape and context length
//   engram    B_source, B_staging and the request-bound lookup time for a layout and batch
//   capacity  host bytes of one shared copy (W) vs one replica per NUMA node (nodes x W)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "command.hpp"
#include "core/cost_model.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "report.hpp"

namespace engram::cli {
namespace {

struct CostModelArgs {
  std::string bytes = "16GB", path, layout = "v41-flash", table_size = "512MiB";
  double gbps = 0, tflops = 600, params = 70e9, rows_per_s = 0;
  int layers = 80, kv_heads = 8, head_dim = 128, nodes = 2;
  double elem_bytes = 2;
  int64_t context = 32768, tokens = 64;
  bool table_size_given = false;
  bool json = false;
};

// The bounds of every input: wide enough for any real model, machine or batch, narrow enough that no product of
// them leaves a double's range (finite() below still refuses one that would).
constexpr double kMinGbps = 1e-3, kMaxGbps = 1e7;          // 1 MB/s .. 10 PB/s
constexpr double kMinTflops = 1e-6, kMaxTflops = 1e9;      // 1 MFLOP/s .. 1 ZFLOP/s
constexpr double kMaxParams = 1e16;
constexpr int64_t kMaxTokens = int64_t{1} << 40;          // context / batch tokens
constexpr double kMinRowsPerS = 1e-3, kMaxRowsPerS = 1e15;

// Exit 2 when a result is not a finite number (the inputs multiply past a double's range).
bool finite(const char* cmd, std::initializer_list<double> results) {
  for (double r : results)
    if (!std::isfinite(r)) {
      report_failure(cmd, Status(Code::kInvalidArgument, "the inputs give a result outside a double's range; "
                                                         "smaller values are needed"));
      return false;
    }
  return true;
}

// The layout of `engram model engram / capacity`: --table-size sizes v41-flash-mini only.
Result<EngramLayout> cost_model_layout(const CostModelArgs& a) {
  if (a.table_size_given && a.layout != "v41-flash-mini")
    return Status(Code::kInvalidArgument, "--table-size applies to --layout v41-flash-mini only (layout '" + a.layout +
                                              "' has a fixed size)");
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return size.status().with_context("--table-size");
  auto l = make_preset_layout(a.layout, *size);
  if (!l.is_ok()) return l.status().with_context("--layout");
  return l;
}

int print(nlohmann::json j, bool json, const std::string& text) {
  j["schema"] = "engram.model/1";
  if (json) std::printf("%s\n", j.dump(2).c_str());
  else std::printf("%s", text.c_str());
  return 0;
}

int transfer(const CostModelArgs& a) {
  auto b = parse_size_bytes(a.bytes);
  if (!b.is_ok()) return report_failure("model transfer", b.status().with_context("--bytes"));
  nlohmann::json rows = nlohmann::json::array();
  std::string text = "t = B / BW, B = " + std::to_string(*b) + " B\n";
  auto add = [&](const std::string& name, double bw, const std::string& src) {
    const double t = cost_model::transfer_s(static_cast<double>(*b), bw);
    rows.push_back({{"path", name}, {"gbps", bw / 1e9}, {"seconds", t}, {"source", src}});
    char line[256];
    std::snprintf(line, sizeof line, "  %-16s %8.1f GB/s  %10.1f ms   (%s)\n", name.c_str(), bw / 1e9, t * 1e3, src.c_str());
    text += line;
  };
  if (a.gbps > 0) {
    add("given", a.gbps * 1e9, "--gbps");
  } else {
    bool found = false;
    for (const auto& p : cost_model::named_paths())
      if (a.path.empty() || a.path == p.name) {
        add(p.name, p.bytes_per_s, p.source);
        found = true;
      }
    if (!found) return report_failure("model transfer", Status(Code::kInvalidArgument, "unknown --path '" + a.path + "'"));
  }
  return print({{"bytes", *b}, {"paths", rows}}, a.json, text);
}

int kv(const CostModelArgs& a) {
  const cost_model::KvShape s{a.layers, a.kv_heads, a.head_dim, a.elem_bytes};
  const double bw = (a.gbps > 0 ? a.gbps : 50) * 1e9;
  const double per_token = cost_model::kv_bytes_per_token(s), total = per_token * static_cast<double>(a.context);
  const double swap_s = cost_model::transfer_s(total, bw);
  const double context = static_cast<double>(a.context);
  const double flops = cost_model::recompute_flops(a.params, context), recompute_s = flops / (a.tflops * 1e12);
  if (!finite("model kv", {per_token, total, swap_s, flops, recompute_s})) return 2;
  char text[768];
  std::snprintf(text, sizeof text,
                "KV per token = layers*kv_heads*head_dim*2*bytes = %.0f B; context %.0f tokens -> %.3f GB (%.2f GiB)\n"
                "swap-in   = KV / BW = %.3f s at %.1f GB/s\n"
                "recompute = 2*params*tokens / FLOPS = %.3g FLOP / %.0f TFLOPS = %.3f s\n",
                per_token, context, total / 1e9, total / (1u << 30), swap_s, bw / 1e9, flops, a.tflops, recompute_s);
  return print({{"kv_bytes_per_token", per_token}, {"kv_bytes", total}, {"swap_s", swap_s}, {"recompute_flops", flops},
                {"recompute_s", recompute_s}},
               a.json, text);
}

int engram_bytes(const CostModelArgs& a) {
  auto l = cost_model_layout(a);
  if (!l.is_ok()) return report_failure("model engram", l.status());
  const double h = l->heads(), n = static_cast<double>(a.tokens);
  const double src = cost_model::engram_source_bytes(n, h, l->d), stg = cost_model::engram_staging_bytes(n, h, l->d);
  const double rows = n * h;
  const double t = a.rows_per_s > 0 ? cost_model::lookup_s(rows, a.rows_per_s) : std::numeric_limits<double>::quiet_NaN();
  if (!finite("model engram", {src, stg, rows, a.rows_per_s > 0 ? t : 0.0})) return 2;
  char text[768];
  std::snprintf(text, sizeof text,
                "%s: N=%.0f tokens, H=%.0f heads, d=%d, per Engram layer\n"
                "B_source  = N*H*(d + d/32) = %.0f B (host -> device reads)\n"
                "B_staging = 2*N*H*d        = %.0f B (BF16 written on the device; a different path: never add them)\n"
                "lookup    = N*H / rows_per_s = %s\n",
                l->name.c_str(), n, h, l->d, src, stg,
                a.rows_per_s > 0 ? fmt_num(t * 1e6, "%.1f us").c_str() : "n/a (give --rows-per-s from a bench)");
  return print({{"rows", rows}, {"b_source_bytes", src}, {"b_staging_bytes", stg}, {"lookup_s", json_num(t)}}, a.json, text);
}

int capacity(const CostModelArgs& a) {
  auto l = cost_model_layout(a);
  if (!l.is_ok()) return report_failure("model capacity", l.status());
  const double w = static_cast<double>(l->total_bytes());
  char text[512];
  std::snprintf(text, sizeof text,
                "%s: W = %.2f GB (all Engram layers)\n"
                "one shared copy (bind / interleave):  W          = %.2f GB\n"
                "one replica per NUMA node (%d nodes):  nodes * W = %.2f GB\n",
                l->name.c_str(), w / 1e9, w / 1e9, a.nodes, a.nodes * w / 1e9);
  return print({{"w_bytes", w}, {"shared_bytes", w}, {"replica_per_node_bytes", a.nodes * w}, {"nodes", a.nodes}}, a.json, text);
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<CostModelArgs>();
  sub.require_subcommand(1);
  const CLI::Validator gbps = finite_number(kMinGbps, kMaxGbps);
  const CLI::Validator table_size = size_in(1, int64_t{1} << 50);
  auto* t = sub.add_subcommand("transfer", "t = B / BW over named paths (practical link rates) or --gbps");
  t->add_option("--bytes", a->bytes, "Bytes to move, e.g. 16GB (default), 10GiB")->check(size_in(1, INT64_MAX));
  std::string path_names;
  for (const auto& p : cost_model::named_paths()) path_names += (path_names.empty() ? "" : ", ") + p.name;
  const CLI::Validator named_path = parsed_by([path_names](const std::string& text) -> Status {
    for (const auto& p : cost_model::named_paths())
      if (text == p.name) return Status::ok();
    return Status(Code::kInvalidArgument, "'" + text + "' is not one of: " + path_names);
  });
  CLI::Option* path = t->add_option("--path", a->path, "One named path (default: all): " + path_names)->check(named_path);
  t->add_option("--gbps", a->gbps, "A measured bandwidth in GB/s instead of a named path")->check(gbps)->excludes(path);
  auto* k = sub.add_subcommand("kv", "KV swap-in (KV/BW) vs prefill recompute (2*params*tokens/FLOPS)");
  k->add_option("--layers", a->layers, "Decoder layers (default 80)")->check(integer_in(1, 100000));
  k->add_option("--kv-heads", a->kv_heads, "KV heads (default 8, GQA)")->check(integer_in(1, 1 << 16));
  k->add_option("--head-dim", a->head_dim, "Head dimension (default 128)")->check(integer_in(1, 1 << 16));
  k->add_option("--elem-bytes", a->elem_bytes, "Bytes per element (default 2, BF16)")->check(finite_number(0.125, 64));
  k->add_option("--context", a->context, "Context tokens (default 32768)")->check(integer_in(1, kMaxTokens));
  k->add_option("--params", a->params, "Model parameters (default 70e9)")->check(finite_number(1, kMaxParams));
  k->add_option("--gbps", a->gbps, "Link bandwidth in GB/s (default 50, PCIe 5.0 pinned)")->check(gbps);
  k->add_option("--tflops", a->tflops, "Effective compute in TFLOP/s (default 600)")
      ->check(finite_number(kMinTflops, kMaxTflops));
  auto* e = sub.add_subcommand("engram", "B_source = N*H*(d+d/32), B_staging = 2*N*H*d, lookup = N*H/rows_per_s");
  e->add_option("--layout", a->layout, "Layout preset (default v41-flash)")->check(CLI::IsMember(preset_names()));
  CLI::Option* e_size = e->add_option("--table-size", a->table_size, "Total size for v41-flash-mini (default 512MiB)")
                            ->check(table_size);
  e->add_option("--tokens", a->tokens, "Tokens N in the batch (default 64)")->check(integer_in(1, kMaxTokens));
  e->add_option("--rows-per-s", a->rows_per_s, "Measured lookup rows/s (engram run / bench) for the lookup time")
      ->check(finite_number(kMinRowsPerS, kMaxRowsPerS));
  auto* c = sub.add_subcommand("capacity", "Host bytes: one shared copy W vs one replica per node (nodes x W)");
  c->add_option("--layout", a->layout, "Layout preset (default v41-flash)")->check(CLI::IsMember(preset_names()));
  CLI::Option* c_size = c->add_option("--table-size", a->table_size, "Total size for v41-flash-mini (default 512MiB)")
                            ->check(table_size);
  c->add_option("--nodes", a->nodes, "NUMA nodes with a replica (default 2)")->check(integer_in(1, 4096));
  for (auto* s : {t, k, e, c}) s->add_flag("--json", a->json, "Print JSON");
  return [a, t, k, e, e_size, c_size] {
    a->table_size_given = e_size->count() > 0 || c_size->count() > 0;
    if (t->parsed()) return transfer(*a);
    if (k->parsed()) return kv(*a);
    if (e->parsed()) return engram_bytes(*a);
    return capacity(*a);  // require_subcommand(1): the only one left
  };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(model, "model", "Cost calculator: transfer paths, KV swap vs recompute, Engram bytes, placement capacity",
               engram::cli::setup);
