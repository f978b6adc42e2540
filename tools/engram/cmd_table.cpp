// `engram table create | load | info`: write a synthetic checkpoint, load one (GB/s, page-cache residue,
// optional check of every synthetic row), describe one.
//
// create validates everything it can before the first byte is written (preset, size, seed, output
// directory, an existing file without --force): bad input exits 2 and leaves nothing behind; the
// writer itself only ever renames a complete file into place. SIGINT / SIGTERM stop it and remove the
// temp file; after a SIGKILL, the next create in the directory sweeps the dead writer's temp file. info prints the layout rebuilt from the
// file's metadata and the tensor table, as text or (--json) as one JSON object.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/checkpoint.hpp"
#include "host/sweep.hpp"
#include "sys/file.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace {

namespace fs = std::filesystem;

struct CreateArgs {
  std::string layout;
  std::string table_size;
  bool table_size_given = false;  // --table-size was on the command line (an empty value is refused)
  std::string seed = "1";
  std::string out;
  bool force = false;
  int threads = 0;
};

struct LoadArgs {
  std::string path;
  std::string row_layout = "fused";
  int threads = 0;
  bool keep_cache = false;
  bool verify = false;
  bool json = false;
};

struct InfoArgs {
  std::string path;
  bool json = false;
};

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

Result<uint64_t> parse_seed(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 20)
    return bad("--seed '" + s + "': expected a non-negative integer below 2^64");
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return bad("--seed '" + s + "': expected a non-negative integer below 2^64");
  return static_cast<uint64_t>(v);
}

int create(const CreateArgs& a) {
  const char* cmd = "table create";
  int64_t size = 512LL << 20;
  if (a.table_size_given) {
    if (a.layout != "v41-flash-mini")
      return report_failure(cmd, bad("--table-size applies to the v41-flash-mini preset only (layout '" + a.layout +
                                     "' has a fixed size)"));
    auto s = parse_size_bytes(a.table_size);
    if (!s.is_ok()) return report_failure(cmd, s.status().with_context("--table-size"));
    size = *s;
  }
  auto seed = parse_seed(a.seed);
  if (!seed.is_ok()) return report_failure(cmd, seed.status());
  auto layout = make_preset_layout(a.layout, size, RowFormat::kSplit);
  if (!layout.is_ok()) return report_failure(cmd, layout.status().with_context("--layout"));
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = automatic)"));

  const fs::path out(a.out);
  if (a.out.empty() || !out.has_filename())
    return report_failure(cmd, bad("--out '" + a.out + "': expected a file path"));
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return report_failure(cmd, bad("--out " + a.out + ": directory " + dir.string() + " does not exist"));
  if (fs::exists(fs::symlink_status(out, ec)) && !a.force)
    return report_failure(cmd, bad("--out " + a.out + " already exists; pass --force to replace it"));

  // Temp files of writers killed by SIGKILL in this directory (their owner is dead): named, removed.
  const host::SweepReport swept = host::sweep_stale({{dir.string()}});
  for (const auto& line : swept.lines(false)) std::fprintf(stderr, "engram table create: %s\n", line.c_str());

  // SIGINT / SIGTERM stop the writers at their next chunk; the partial temp file is removed.
  Status handlers = sys::install_stop_handlers();
  if (!handlers.is_ok()) return report_failure(cmd, handlers);
  host::WriteOptions opt;
  opt.overwrite = a.force;
  opt.threads = a.threads;
  opt.cancelled = [] { return sys::stop_requested(); };
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = host::write_synthetic_checkpoint(a.out, *layout, *seed, opt);
  if (!s.is_ok() && sys::stop_requested()) {
    std::fprintf(stderr, "engram table create: stopped by signal %d; %s not written, no temp file left\n",
                 sys::stop_signal(), a.out.c_str());
    return 128 + sys::stop_signal();
  }
  if (!s.is_ok()) return report_failure(cmd, s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t row_bytes = layout->total_rows() * layout->source_bytes_per_row();
  std::printf("wrote %s: layout %s, %d Engram layers, %d heads, d %d, %lld rows (%s of rows) in %.2f s (%s), seed %llu\n",
              a.out.c_str(), layout->name.c_str(), layout->n_layers(), layout->heads(), layout->d,
              static_cast<long long>(layout->total_rows()), format_bytes(row_bytes).c_str(), secs,
              format_gbps(static_cast<double>(row_bytes), secs).c_str(), static_cast<unsigned long long>(*seed));
  return 0;
}

std::string ids_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int info(const InfoArgs& a) {
  auto r = host::read_checkpoint_info(a.path);
  if (!r.is_ok()) return report_failure("table info", r.status());
  const host::CheckpointInfo& ci = *r;
  const EngramLayout& l = ci.layout;
  EngramLayout fused = l;
  fused.format = RowFormat::kFused;

  if (a.json) {
    nlohmann::json j;
    j["command"] = "table info";
    j["path"] = ci.path;
    j["file_bytes"] = ci.file_bytes;
    j["format_version"] = ci.format_version;
    j["header_bytes"] = ci.header.header_bytes;
    j["data_offset"] = ci.header.data_offset;
    nlohmann::json rows = nlohmann::json::array();
    for (int i = 0; i < l.n_layers(); ++i) rows.push_back(l.rows(i));
    j["layout"] = {{"name", l.name},
                   {"layer_ids", l.layer_ids},
                   {"max_ngram", l.max_ngram},
                   {"heads_per_order", l.heads_per_order},
                   {"heads", l.heads()},
                   {"d", l.d},
                   {"vocab_size_per_order", l.vocab_size_per_order},
                   {"head_rows", l.head_rows},
                   {"rows", rows},
                   {"split_bytes", l.total_bytes()},
                   {"fused_bytes", fused.total_bytes()}};
    j["generator"] = ci.generator ? nlohmann::json(*ci.generator) : nlohmann::json(nullptr);
    j["seed"] = ci.seed ? nlohmann::json(*ci.seed) : nlohmann::json(nullptr);
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : ci.header.tensors)
      tensors.push_back({{"name", t.name},
                         {"dtype", t.dtype},
                         {"shape", t.shape},
                         {"data_offsets", {t.begin, t.end}},
                         {"bytes", t.size_bytes()}});
    j["tensors"] = tensors;
    j["metadata"] = ci.header.metadata;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("checkpoint   %s (%s, safetensors, format_version %d)\n", ci.path.c_str(),
              format_bytes(ci.file_bytes).c_str(), ci.format_version);
  std::printf("layout       %s: Engram layers %s, orders 2..%d x %d heads (%d per layer), d %d\n", l.name.c_str(),
              ids_text(l.layer_ids).c_str(), l.max_ngram, l.heads_per_order, l.heads(), l.d);
  for (int i = 0; i < l.n_layers(); ++i) {
    const auto& hr = l.head_rows[static_cast<size_t>(i)];
    const auto [mn, mx] = std::minmax_element(hr.begin(), hr.end());
    std::printf("rows         layer %d: %lld (per head %lld .. %lld, primes)\n", l.layer_ids[static_cast<size_t>(i)],
                static_cast<long long>(l.rows(i)), static_cast<long long>(*mn), static_cast<long long>(*mx));
  }
  std::printf("in memory    split %s, fused %s (%lld-B records)\n", format_bytes(l.total_bytes()).c_str(),
              format_bytes(fused.total_bytes()).c_str(),
              static_cast<long long>(EngramLayout::fused_record_bytes(l.d)));
  if (ci.generator || ci.seed)
    std::printf("generator    %s, seed %s\n", ci.generator.value_or("?").c_str(),
                ci.seed ? std::to_string(*ci.seed).c_str() : "?");
  std::printf("tensors      (data section at byte %llu)\n", static_cast<unsigned long long>(ci.header.data_offset));
  std::printf("  %-28s %-8s %-18s %16s %12s\n", "name", "dtype", "shape", "offset", "size");
  for (const auto& t : ci.header.tensors)
    std::printf("  %-28s %-8s %-18s %16llu %12s\n", t.name.c_str(), t.dtype.c_str(), shape_text(t.shape).c_str(),
                static_cast<unsigned long long>(t.begin), format_bytes(static_cast<int64_t>(t.size_bytes())).c_str());
  return 0;
}

// Rows of `t` that differ from synth_row(seed, ...), counted with `threads` threads.
int64_t count_synthetic_mismatches(const HostTable& t, uint64_t seed, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> bad{0};
  for (int li = 0; li < t.n_layers(); ++li) {
    const TableView v = t.view(li);
    std::vector<std::thread> pool;
    const int64_t per = (v.rows + threads - 1) / threads;
    for (int k = 0; k < threads; ++k) {
      const int64_t lo = k * per, hi = std::min(v.rows, lo + per);
      if (lo >= hi) break;
      pool.emplace_back([&, li, v, lo, hi] {
        std::vector<uint8_t> p(static_cast<size_t>(v.d)), s(static_cast<size_t>(v.d / 32));
        int64_t n = 0;
        for (int64_t r = lo; r < hi; ++r) {
          synth_row(seed, li, r, v.d, p.data(), s.data());
          n += std::memcmp(v.payload_of(r), p.data(), p.size()) != 0 ||
               std::memcmp(v.scales_of(r), s.data(), s.size()) != 0;
        }
        bad += n;
      });
    }
    for (auto& th : pool) th.join();
  }
  return bad.load();
}

int load(const LoadArgs& a) {
  const char* cmd = "table load";
  auto fmt = parse_row_format(a.row_layout);
  if (!fmt.is_ok()) return report_failure(cmd, fmt.status().with_context("--row-layout"));
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = automatic)"));
  auto info = host::read_checkpoint_info(a.path);
  if (!info.is_ok()) return report_failure(cmd, info.status());
  if (a.verify && !(info->generator == std::string("synth_row") && info->seed))
    return report_failure(cmd, bad("--verify: " + a.path + " is not a synthetic checkpoint (no generator/seed)"));
  auto layout = host::read_checkpoint_layout(a.path, *fmt);
  if (!layout.is_ok()) return report_failure(cmd, layout.status());
  auto table = HostTable::allocate(*layout);
  if (!table.is_ok()) return report_failure(cmd, table.status());

  host::LoadOptions opt;
  opt.threads = a.threads;
  opt.drop_page_cache = !a.keep_cache;
  if (a.json) opt.display = host::ProgressDisplay::kOff;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = host::load_checkpoint(a.path, **table, opt);
  if (!s.is_ok()) return report_failure(cmd, s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t bytes = layout->total_rows() * layout->source_bytes_per_row();

  // Page-cache pages of the file left after the load: the second copy the loader should not leave.
  nlohmann::json resident = nullptr;
  std::string resident_text = "n/a";
  if (auto f = sys::open_read(a.path); f.is_ok()) {
    if (auto r = sys::page_cache_resident_bytes(*f, info->file_bytes); r.is_ok()) {
      resident = *r;
      resident_text = format_bytes(*r);
    }
  }
  int64_t mismatches = -1;
  if (a.verify) mismatches = count_synthetic_mismatches(**table, *info->seed, a.threads);

  if (a.json) {
    nlohmann::json j = {{"command", "table load"},
                        {"path", a.path},
                        {"row_layout", row_format_name(*fmt)},
                        {"bytes", bytes},
                        {"table_bytes", layout->total_bytes()},
                        {"seconds", secs},
                        {"gbps", secs > 0 ? nlohmann::json(static_cast<double>(bytes) / secs / 1e9) : nlohmann::json(nullptr)},
                        {"drop_page_cache", opt.drop_page_cache},
                        {"page_cache_resident_bytes_after", resident},
                        {"verified", a.verify},
                        {"mismatched_rows", a.verify ? nlohmann::json(mismatches) : nlohmann::json(nullptr)}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("loaded %s into a %s %s table: %s of rows in %.2f s (%s); page cache holds %s of the file afterwards\n",
                a.path.c_str(), format_bytes(layout->total_bytes()).c_str(), row_format_name(*fmt),
                format_bytes(bytes).c_str(), secs, format_gbps(static_cast<double>(bytes), secs).c_str(),
                resident_text.c_str());
    if (a.verify)
      std::printf("verify: %lld of %lld rows differ from synth_row(seed %llu)\n", static_cast<long long>(mismatches),
                  static_cast<long long>(layout->total_rows()), static_cast<unsigned long long>(*info->seed));
  }
  return mismatches > 0 ? 1 : 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  sub.require_subcommand(1);
  auto create_args = std::make_shared<CreateArgs>();
  auto info_args = std::make_shared<InfoArgs>();

  CLI::App* c = sub.add_subcommand("create", "Write a synthetic checkpoint (deterministic non-zero pseudo-random rows)");
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  c->add_option("--layout", create_args->layout, "Layout preset: " + presets)->required();
  CLI::Option* size_opt = c->add_option("--table-size", create_args->table_size,
                                        "Total table bytes for v41-flash-mini, e.g. 512MiB, 2GiB, 1GB (default 512MiB)");
  c->add_option("--seed", create_args->seed, "Row generator seed (default 1)");
  c->add_option("--out", create_args->out, "Output file (.safetensors)")->required();
  c->add_flag("--force", create_args->force, "Replace an existing file");
  c->add_option("--threads", create_args->threads, "Writer threads (0 = automatic)");

  auto load_args = std::make_shared<LoadArgs>();
  CLI::App* ld = sub.add_subcommand("load", "Load a checkpoint into memory, report GB/s and page-cache residue; --verify checks synthetic rows");
  ld->add_option("file", load_args->path, "Checkpoint file")->required();
  ld->add_option("--row-layout", load_args->row_layout, "In-memory row layout: fused or split (default fused)");
  ld->add_option("--threads", load_args->threads, "Reader threads (0 = automatic)");
  ld->add_flag("--keep-page-cache", load_args->keep_cache, "Do not drop the file's pages from the page cache");
  ld->add_flag("--verify", load_args->verify, "Check every row against synth_row (synthetic checkpoints)");
  ld->add_flag("--json", load_args->json, "Print JSON");

  CLI::App* i = sub.add_subcommand("info", "Describe a checkpoint: layout, tensors, sizes");
  i->add_option("file", info_args->path, "Checkpoint file")->required();
  i->add_flag("--json", info_args->json, "Print JSON");

  c->footer("SIGINT or SIGTERM stops the write and removes the partial file (exit 128 + signal). A writer killed\n"
            "by SIGKILL leaves a hidden temp file; the next create in that directory removes it and says so.");
  return [c, i, ld, create_args, info_args, load_args, size_opt]() -> int {
    create_args->table_size_given = size_opt->count() > 0;
    if (c->parsed()) return create(*create_args);
    if (ld->parsed()) return load(*load_args);
    if (i->parsed()) return info(*info_args);
    return 2;
  };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(table, "table", "Create, load or describe Engram table checkpoints (safetensors)", engram::cli::setup);
