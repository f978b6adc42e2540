// `engram table create | load | info`: write a synthetic checkpoint or model directory, load one (GB/s,
// page-cache residue, optional check of every synthetic row), describe one.
//
// A FILE argument is an engram checkpoint (one safetensors file, host/checkpoint.hpp); a DIR argument
// (and `create --format hf-model`) is a Hugging Face model directory (host/model_io.hpp), handled in
// table_model.cpp. create validates everything it can before the first byte is written (preset,
// size, seed, output directory, an existing file without --force): bad input exits 2 and leaves
// nothing behind; the writers only ever rename a complete file or directory into place. SIGINT /
// SIGTERM stop a checkpoint write and remove the temp file; after a SIGKILL, the next create in the
// directory sweeps the dead writer's temp file. info prints the layout and the tensor table, as text
// or (--json) as one JSON object.
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

#include "args.hpp"
#include "command.hpp"
#include "table_model.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/checkpoint.hpp"
#include "host/json_text.hpp"
#include "host/sweep.hpp"
#include "host/table_verify.hpp"
#include "report/progress_line.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"
#include "sys/process.hpp"
#include "progress_args.hpp"

namespace engram::cli {
namespace {

namespace fs = std::filesystem;

struct LoadArgs {
  std::string path;
  std::string row_layout = "fused";
  int threads = 0;
  bool keep_cache = false;
  bool verify = false;
  bool json = false;
  std::string progress = "auto";
};

struct InfoArgs {
  std::string path;
  bool json = false;
};

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

int create(const ModelCreateArgs& a) {
  const char* cmd = "table create";
  auto seed = parse_seed_arg(a.seed);
  if (!seed.is_ok()) return report_failure(cmd, seed.status());
  auto layout = layout_arg(a.layout, a.table_size, a.table_size_given);
  if (!layout.is_ok()) return report_failure(cmd, layout.status());
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = one per CPU this process may run on)"));

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

  // A termination signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2) stops the writers at their next chunk; the
  // partial temp file is removed.
  Status handlers = sys::install_stop_handlers();
  if (!handlers.is_ok()) return report_failure(cmd, handlers);
  host::WriteOptions opt;
  opt.overwrite = a.force;
  opt.threads = sys::threads_or_auto(a.threads);
  opt.cancelled = [] { return sys::stop_requested(); };
  opt.on_progress = report::with_progress_line(a.out, progress_display(a.progress), nullptr);
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
    j["schema"] = "engram.table-info/1";
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("checkpoint   %s (%s, safetensors, format_version %d)\n", ci.path.c_str(),
              format_bytes(ci.file_bytes).c_str(), ci.format_version);
  std::printf("layout       %s: Engram layers %s, orders 2..%d x %d heads (%d per layer), d %d\n", l.name.c_str(),
              host::list_text(l.layer_ids).c_str(), l.max_ngram, l.heads_per_order, l.heads(), l.d);
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
    std::printf("  %-28s %-8s %-18s %16llu %12s\n", t.name.c_str(), t.dtype.c_str(), host::list_text(t.shape).c_str(),
                static_cast<unsigned long long>(t.begin), format_bytes(static_cast<int64_t>(t.size_bytes())).c_str());
  return 0;
}

int load(const LoadArgs& a) {
  const char* cmd = "table load";
  auto fmt = parse_row_format(a.row_layout);
  if (!fmt.is_ok()) return report_failure(cmd, fmt.status().with_context("--row-layout"));
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = one per CPU this process may run on)"));
  auto info = host::read_checkpoint_info(a.path);
  if (!info.is_ok()) return report_failure(cmd, info.status());
  if (a.verify && !(info->generator == std::string("synth_row") && info->seed))
    return report_failure(cmd, bad("--verify: " + a.path + " is not a synthetic checkpoint (no generator/seed)"));
  auto layout = host::read_checkpoint_layout(a.path, *fmt);
  if (!layout.is_ok()) return report_failure(cmd, layout.status());
  auto table = HostTable::allocate(*layout);
  if (!table.is_ok()) return report_failure(cmd, table.status());

  host::LoadOptions opt;
  opt.threads = sys::threads_or_auto(a.threads);
  opt.drop_page_cache = !a.keep_cache;
  opt.on_progress = report::with_progress_line(a.path, progress_display(a.progress), nullptr);
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
  if (a.verify) mismatches = host::count_synthetic_mismatches(**table, *info->seed, a.threads);

  if (a.json) {
    nlohmann::json j = {{"schema", "engram.table-load/1"},
                        {"command", "table load"},
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

// Options that only a model directory takes, given with a checkpoint file: a usage error.
Status model_only(const CLI::App* app, std::initializer_list<const char*> names, const char* what) {
  for (const char* n : names)
    if (app->count(n) > 0) return bad(std::string(n) + " applies to " + what + " only");
  return Status::ok();
}

auto setup(CLI::App& sub) -> std::function<int()> {
  sub.require_subcommand(1);
  auto create_args = std::make_shared<ModelCreateArgs>();
  auto create_format = std::make_shared<std::string>("safetensors");
  auto info_args = std::make_shared<ModelInfoArgs>();
  auto load_args = std::make_shared<ModelLoadArgs>();
  const std::string names_help =
      "Engram tensor names of a model directory as WEIGHT,SCALE with {L} for the layer id (default "
      "layers.{L}.engram.embed.weight,layers.{L}.engram.embed.scale)";

  CLI::App* c = sub.add_subcommand(
      "create", "Write a synthetic checkpoint (--format safetensors, one file) or model directory (--format hf-model)");
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  c->add_option("--format", *create_format,
                "safetensors (one engram checkpoint file, the default) or hf-model (a Hugging Face model directory "
                "in the released DeepSeek-V4.1 layout: config.json, index, shards, tokenizer)")
      ->check(CLI::IsMember({"safetensors", "hf-model"}));
  c->add_option("--layout", create_args->layout, "Layout preset: " + presets)->required();
  CLI::Option* size_opt = c->add_option("--table-size", create_args->table_size,
                                        "Total table bytes for v41-flash-mini, e.g. 512MiB, 2GiB, 1GB (default 512MiB), counted in "
                                        "stored rows of d + d/32 bytes; engram run's default fused rows are padded to "
                                        "a multiple of 16 B, so its same --table-size holds fewer rows (run "
                                        "--row-layout split matches this file)")
                            ->check(size_in(1, int64_t{1} << 50));
  c->add_option("--seed", create_args->seed, "Row generator seed (default 1)");
  c->add_option("--out", create_args->out, "Output file (.safetensors), or directory for --format hf-model")->required();
  c->add_flag("--force", create_args->force, "Replace an existing file (hf-model: an existing synthetic model directory)");
  c->add_option("--threads", create_args->threads, std::string("Writer threads (default 0; ") + kAutoThreadsHelp + ")")
      ->check(integer_in(0, 4096));
  add_progress_option(*c, create_args->progress);
  c->add_option("--extra-rows", create_args->extra_rows,
                "hf-model: rows past the sum of the primes in every Engram tensor (never loaded; default 0)")
      ->check(integer_in(0, int64_t{1} << 32));
  c->add_option("--shards", create_args->shards, "hf-model: shards of unrelated tensors before the Engram shards (default 2)")
      ->check(integer_in(1, 64));
  c->add_option("--tokenizer-json", create_args->tokenizer_json,
                "hf-model: tokenizer.json to copy in; auto = the DeepSeek-V3 one tools/tokenize bundles when npm ci has "
                "run; none");
  c->add_option("--compression-table", create_args->compression_table,
                "hf-model: compression table (+ .json) to copy in as engram.compress.bin; auto = the committed "
                "DeepSeek-V3 table; none");
  c->add_option("--compressed-vocab-size", create_args->compressed_vocab_size,
                "hf-model: config.json engram_compressed_vocab_size, 1..2^32 (default: the compression table's V')")
      ->check(integer_in(1, int64_t{1} << 32));
  c->add_option("--pad-id", create_args->pad_id, "hf-model: config.json engram_pad_token_id (default 2)")
      ->check(integer_in(0, int64_t{1} << 32));
  c->add_option("--tensor-names", create_args->tensor_names, "hf-model: " + names_help);

  CLI::App* ld = sub.add_subcommand(
      "load", "Load a checkpoint FILE or model DIR into memory, report GB/s and page-cache residue; --verify checks synthetic rows");
  ld->add_option("path", load_args->dir, "Checkpoint file or model directory")->required()->check(input_path());
  ld->add_option("--row-layout", load_args->row_layout, "In-memory row layout: fused or split (default fused)");
  ld->add_option("--threads", load_args->threads, std::string("Reader threads (default 0; ") + kAutoThreadsHelp + ")")
      ->check(integer_in(0, 4096));
  ld->add_flag("--keep-page-cache", load_args->keep_cache, "Do not drop the file's pages from the page cache");
  ld->add_flag("--verify", load_args->verify, "Check every row against synth_row (synthetic checkpoints)");
  ld->add_flag("--json", load_args->json, "Print JSON");
  add_progress_option(*ld, load_args->progress);
  ld->add_option("--tensor-names", load_args->tensor_names, "DIR: " + names_help);
  ld->add_option("--backing", load_args->backing, "DIR: backing of the table (memfd, shm, hugetlb, anon-thp; default memfd)");
  ld->add_option("--placement", load_args->placement, "DIR: placement of the table (none, bind:N, interleave:all, ...)");
  ld->add_option("--reader-node", load_args->reader_node, "DIR: pin the reader threads to this NUMA node's CPUs")
      ->check(integer_in(0, 4095));
  ld->add_flag("--no-prefault", load_args->no_prefault,
               "DIR: do not allocate the table's pages when placing it; the readers' first writes do (under the "
               "placement policy already set)");
  ld->add_option("--table-option", load_args->table_options,
                 "DIR: KEY=VALUE of the table (repeatable): prefault_threads, prefault_fallocate, shmem_huge_pages, ...")
      ->allow_extra_args(false);
  ld->add_option("--cache", load_args->cache,
                 "DIR: page cache of the shards before the load: as-is, cold (their pages dropped first) or warm "
                 "(read once first; implies --keep-page-cache)");
  ld->add_flag("--compare-sequential", load_args->compare_sequential,
               "DIR: also time one thread reading the same bytes sequentially in 64 MiB preads (as dd bs=64M) under "
               "the same --cache condition, and report the load's rate against it");

  // '' would mean the released names: a name list given empty is refused instead.
  c->get_option("--tensor-names")->check(non_empty());
  c->get_option("--shards")->check(integer_in(1, 64));
  ld->get_option("--tensor-names")->check(non_empty());

  CLI::App* i = sub.add_subcommand("info", "Describe a checkpoint FILE or model DIR: layout, tensors, sizes, tokenizer");
  i->add_option("path", info_args->dir, "Checkpoint file or model directory")->required()->check(input_path());
  i->add_flag("--json", info_args->json, "Print JSON");
  i->add_option("--tensor-names", info_args->tensor_names, "DIR: " + names_help)->check(non_empty());
  i->add_option("--compression-table", info_args->compression_table,
                "DIR: compression table to check against config.json (default: the directory's own, else the one "
                "built from its tokenizer.json and cached)")
      ->check(input_file());

  c->footer("SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2 stops a checkpoint write and removes the partial\n"
            "file (exit 128 + signal). A writer killed by SIGKILL leaves a hidden temp file; the next create in that\n"
            "directory removes it and says so.");
  return [c, i, ld, create_args, create_format, info_args, load_args, size_opt]() -> int {
    create_args->table_size_given = size_opt->count() > 0;
    if (c->parsed()) {
      // The output is checked before any row is made: a directory given for a file (or a file for a directory), a
      // FIFO, a directory that is missing or not writable are bad input, nothing written.
      const bool to_dir = *create_format == "hf-model";
      if (Status st = sys::check_output_path(create_args->out, to_dir ? sys::OutputKind::kDirectory : sys::OutputKind::kFile);
          !st.is_ok())
        return report_failure("table create", st.with_context("--out"));
      if (to_dir) return create_model_dir(*create_args);
      const Status s = model_only(c, {"--extra-rows", "--shards", "--tokenizer-json", "--compression-table",
                                      "--compressed-vocab-size", "--pad-id", "--tensor-names"}, "--format hf-model");
      if (!s.is_ok()) return report_failure("table create", s);
      return create(*create_args);
    }
    if (ld->parsed()) {
      if (sys::is_directory(load_args->dir)) return load_model_dir(*load_args);
      const Status s = model_only(ld, {"--tensor-names", "--backing", "--placement", "--reader-node", "--cache",
                                       "--compare-sequential", "--no-prefault", "--table-option"}, "a model directory");
      if (!s.is_ok()) return report_failure("table load", s);
      return load({load_args->dir, load_args->row_layout, load_args->threads, load_args->keep_cache, load_args->verify,
                   load_args->json, load_args->progress});
    }
    if (i->parsed()) {
      if (sys::is_directory(info_args->dir)) return info_model_dir(*info_args);
      const Status s = model_only(i, {"--tensor-names", "--compression-table"}, "a model directory");
      if (!s.is_ok()) return report_failure("table info", s);
      return info({info_args->dir, info_args->json});
    }
    return 2;
  };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(table, "table", "Create, load or describe Engram tables: checkpoints (safetensors) and model directories",
               engram::cli::setup);
