// `engram table create --format hf-model | info DIR | load DIR` (see table_model.hpp).
//
// create checks what it can before anything is written (layout, seed, files to copy, the output
// directory) and the library writes into a temporary directory renamed into place, so bad input exits
// 2 and leaves nothing behind. info prints what read_model_dir found (config, layout, where each
// Engram tensor lies, rows past the primes) and the tokenizer and compression-table state; a cached
// compression table that disagrees with config.json exits 2 after the report, and so does load --verify (before
// it loads anything: host::check_model_dir_table is the check both make). load places a table
// (backing, placement), streams the rows in, and reports place and load time and GB/s; with
// --compare-sequential it first reads the same byte ranges sequentially on one thread with the same
// 64 MiB reads (what `dd bs=64M` of the tensor ranges measures) under the same page-cache condition,
// so the loader's rate is judged against the device's, measured side by side.
#include "table_model.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "command.hpp"
#include "core/units.hpp"
#include "engine/bare_table.hpp"
#include "host/json_text.hpp"
#include "host/model_io.hpp"
#include "host/model_table_check.hpp"
#include "host/table_verify.hpp"
#include "host/placement.hpp"
#include "host/sweep.hpp"
#include "report/progress_line.hpp"
#include "host/token_io.hpp"
#include "host/tokenizer_table.hpp"
#include "progress_args.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"
#include "sys/numa.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

// A --tokenizer-json to copy into a model directory: a readable JSON file with a model.vocab object (what
// build_compression_table and a Hugging Face loader read first), so that an empty, garbage or unreadable file is
// refused before the directory is written.
Status check_tokenizer_json(const std::string& path) {
  const std::string what = "--tokenizer-json " + path;
  if (Status s = sys::check_input_path(path, sys::InputKind::kFile); !s.is_ok()) return bad(what + ": " + s.message());
  auto text = sys::read_small_file(path, int64_t{1} << 30);
  if (!text.is_ok()) return bad(what + ": " + text.status().message());
  if (text->empty()) return bad(what + ": the file is empty, expected a tokenizer.json");
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad(what + ": not JSON, expected a tokenizer.json");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("vocab") ||
      !j["model"]["vocab"].is_object() || j["model"]["vocab"].empty())
    return bad(what + ": no model.vocab object, expected a tokenizer.json");
  return Status::ok();
}

bool exists(const std::string& path) {
  auto r = sys::path_exists(path);
  return r.is_ok() && *r;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

json gbps_json(double bytes, double secs) { return secs > 0 ? json(bytes / secs / 1e9) : json(nullptr); }

Result<host::ModelTensorNames> names_arg(const std::string& text) {
  if (text.empty()) return host::ModelTensorNames{};
  return host::parse_model_tensor_names(text);
}

// A byte range of a shard that a load reads.
struct Range {
  const sys::File* file;
  int64_t offset;
  int64_t bytes;
};

// One thread, `chunk`-byte preads over every range in order (dd bs=chunk of each range); drops what
// it read behind itself when `drop`. Returns the seconds it took.
Result<double> sequential_read(const std::vector<Range>& ranges, int64_t chunk, bool drop) {
  std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[static_cast<size_t>(chunk)]);
  if (!buf) return Status(Code::kOutOfMemory, "sequential read buffer of " + format_bytes(chunk));
  const auto t0 = Clock::now();
  for (const Range& r : ranges)
    for (int64_t off = 0; off < r.bytes; off += chunk) {
      const int64_t n = std::min(chunk, r.bytes - off);
      ENGRAM_RETURN_IF_ERROR(sys::pread_full(*r.file, buf.get(), static_cast<size_t>(n), r.offset + off));
      if (drop) (void)sys::fadvise(*r.file, r.offset + off, n, sys::Advice::kDontNeed);
    }
  return seconds_since(t0);
}

void drop_ranges(const std::vector<Range>& ranges) {
  for (const Range& r : ranges) (void)sys::fadvise(*r.file, r.offset, r.bytes, sys::Advice::kDontNeed);
}

// Page-cache bytes of every shard holding a range (-1 when mincore could not be read).
int64_t resident_bytes(const std::map<std::string, sys::File>& files) {
  int64_t sum = 0;
  for (const auto& [name, f] : files) {
    auto size = sys::file_size_bytes(f);
    if (!size.is_ok()) return -1;
    auto r = sys::page_cache_resident_bytes(f, *size);
    if (!r.is_ok()) return -1;
    sum += *r;
  }
  return sum;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string resident_text(int64_t b) { return b < 0 ? "n/a" : format_bytes(b); }

// How the table's pages were allocated (the first backing's prefault method and huge-page advice) and how
// many of its bytes huge pages map once the rows are in (-1: not known).
struct PagesSeen {
  std::string prefault, huge_advice;
  int64_t huge_bytes = 0;
};
PagesSeen pages_seen(const HostTable& t) {
  PagesSeen p;
  for (int li = 0; li < t.n_layers(); ++li)
    for (int r = 0; r < t.n_replicas(); ++r) {
      const host::PlacedBacking* pb = t.backing(li, r);
      if (!pb) continue;
      if (p.prefault.empty()) p.prefault = pb->report.prefault;
      if (p.huge_advice.empty()) p.huge_advice = pb->report.huge_advice;
      auto h = host::huge_mapped_bytes(pb->backing.data(), pb->backing.mapped_bytes());
      if (!h.is_ok() || p.huge_bytes < 0) p.huge_bytes = -1;
      else p.huge_bytes += *h;
    }
  return p;
}
json resident_json(int64_t b) { return b < 0 ? json(nullptr) : json(b); }

}  // namespace

Result<uint64_t> parse_seed_arg(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 20)
    return bad("--seed '" + s + "': expected a non-negative integer below 2^64");
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return bad("--seed '" + s + "': expected a non-negative integer below 2^64");
  return static_cast<uint64_t>(v);
}

Result<EngramLayout> layout_arg(const std::string& preset, const std::string& table_size, bool table_size_given) {
  int64_t size = 512LL << 20;
  if (table_size_given || !table_size.empty()) {
    if (preset != "v41-flash-mini")
      return bad("--table-size applies to the v41-flash-mini preset only (layout '" + preset + "' has a fixed size)");
    auto s = parse_size_bytes(table_size);
    if (!s.is_ok()) return s.status().with_context("--table-size");
    size = *s;
  }
  auto layout = make_preset_layout(preset, size, RowFormat::kSplit);
  if (!layout.is_ok()) return layout.status().with_context("--layout");
  return layout;
}

// ---- create ------------------------------------------------------------------------------------

int create_model_dir(const ModelCreateArgs& a) {
  const char* cmd = "table create";
  auto layout = layout_arg(a.layout, a.table_size, a.table_size_given);
  if (!layout.is_ok()) return report_failure(cmd, layout.status());
  auto seed = parse_seed_arg(a.seed);
  if (!seed.is_ok()) return report_failure(cmd, seed.status());
  auto names = names_arg(a.tensor_names);
  if (!names.is_ok()) return report_failure(cmd, names.status());
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = one per CPU this process may run on)"));
  if (a.out.empty()) return report_failure(cmd, bad("--out: expected a directory path"));

  host::SyntheticModelOptions opt;
  opt.seed = *seed;
  opt.extra_rows = a.extra_rows;
  opt.other_shards = a.shards;
  opt.compressed_vocab_size = a.compressed_vocab_size;
  opt.pad_token_id = a.pad_id;
  opt.names = *names;
  opt.overwrite = a.force;
  opt.threads = sys::threads_or_auto(a.threads);
  std::string tokenizer_note;
  if (a.tokenizer_json == "auto") {
    const std::string bundled = bundled_tokenizer_json_path();
    if (exists(bundled)) opt.tokenizer_json = bundled;
    else tokenizer_note = " (no tokenizer.json: the bundled one needs `npm ci` in tools/tokenize)";
  } else if (a.tokenizer_json != "none") {
    if (Status t = check_tokenizer_json(a.tokenizer_json); !t.is_ok()) return report_failure(cmd, t);
    opt.tokenizer_json = a.tokenizer_json;
  }
  if (!opt.tokenizer_json.empty()) {
    const std::string cfg = opt.tokenizer_json.substr(0, opt.tokenizer_json.rfind('/') + 1) + "tokenizer_config.json";
    if (exists(cfg)) opt.tokenizer_config_json = cfg;
  }
  if (a.compression_table == "auto") opt.compression_table = default_compression_table_path();
  else if (a.compression_table != "none") opt.compression_table = a.compression_table;
  // config.json's V' must be the copied table's (table info and load refuse a model where they differ).
  if (a.compressed_vocab_size > 0 && !opt.compression_table.empty()) {
    auto t = read_compression_table(opt.compression_table);
    if (!t.is_ok()) return report_failure(cmd, t.status().with_context("--compression-table"));
    if (t->compressed_vocab != a.compressed_vocab_size)
      return report_failure(cmd, bad("--compressed-vocab-size " + std::to_string(a.compressed_vocab_size) +
                                     ": the compression table " + opt.compression_table + " copied into the model has V' = " +
                                     std::to_string(t->compressed_vocab) +
                                     " and config.json must agree with it (leave the option out, or give "
                                     "--compression-table none)"));
  }

  // Temporary directories of writers killed by SIGKILL beside --out (their owner is dead): named, removed.
  {
    const std::filesystem::path target = std::filesystem::absolute(a.out);
    const host::SweepReport swept = host::sweep_stale({{target.parent_path().string()}});
    for (const auto& l : swept.lines(false)) std::fprintf(stderr, "engram %s: %s\n", cmd, l.c_str());
  }
  // A termination signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2) stops the shard writers at their next
  // chunk and the temporary directory is removed, as for a checkpoint (table create without --format).
  if (Status handlers = sys::install_stop_handlers(); !handlers.is_ok()) return report_failure(cmd, handlers);
  opt.cancelled = [] { return sys::stop_requested(); };
  report::ProgressLine line("write " + a.out, progress_display(a.progress));
  opt.on_progress = [&line](const host::TransferProgress& p) { line.update(p); };
  const auto t0 = Clock::now();
  const Status s = host::write_synthetic_model_dir(a.out, *layout, opt);
  if (!s.is_ok() && sys::stop_requested()) {
    std::fprintf(stderr, "engram %s: stopped by signal %d; %s not written, no temporary directory left\n", cmd,
                 sys::stop_signal(), a.out.c_str());
    return 128 + sys::stop_signal();
  }
  if (!s.is_ok()) return report_failure(cmd, s);
  const double secs = seconds_since(t0);
  const int64_t row_bytes = layout->total_rows() * layout->source_bytes_per_row();
  std::printf("wrote %s: hf-model directory, %d shards (%d of other tensors, one per Engram layer), layout %s, "
              "Engram layers %s, d %d, %lld table rows (%s) + %lld rows past the primes per layer, in %.2f s (%s), "
              "seed %llu%s%s\n",
              a.out.c_str(), a.shards + layout->n_layers(), a.shards, layout->name.c_str(),
              host::list_text(layout->layer_ids).c_str(), layout->d, static_cast<long long>(layout->total_rows()),
              format_bytes(row_bytes).c_str(), static_cast<long long>(a.extra_rows), secs,
              format_gbps(static_cast<double>(row_bytes), secs).c_str(), static_cast<unsigned long long>(*seed),
              opt.compression_table.empty() ? "" : ", compression table copied", tokenizer_note.c_str());
  return 0;
}

// ---- info --------------------------------------------------------------------------------------

int info_model_dir(const ModelInfoArgs& a) {
  const char* cmd = "table info";
  auto names = names_arg(a.tensor_names);
  if (!names.is_ok()) return report_failure(cmd, names.status());
  auto r = host::read_model_dir(a.dir, *names);
  if (!r.is_ok()) return report_failure(cmd, r.status());
  const host::ModelInfo& info = *r;
  const host::ModelEngramConfig& c = info.config;
  const EngramLayout& l = info.layout;
  EngramLayout fused = l;
  fused.format = RowFormat::kFused;

  const host::ModelDirTableCheck check = host::check_model_dir_table(info, a.compression_table);
  const std::string& tok_path = check.tokenizer_path;
  const bool has_tok = check.has_tokenizer;
  const std::string& tok_sha = check.tokenizer_sha256;
  const std::string& table_path = check.table_path;
  const bool has_table = check.has_table;
  const Status& table_status = check.status;
  const std::optional<CompressionTable>& table = check.table;
  const std::string& source = check.source;
  const double build_s = check.build_seconds;
  const std::string& cache_note = check.cache_note;

  if (a.json) {
    json layers = json::array();
    for (const host::ModelLayer& ml : info.layers) {
      auto tensor = [](const host::ModelTensor& t) {
        return json{{"name", t.name}, {"shard", t.shard},     {"dtype", t.dtype},
                    {"shape", t.shape}, {"file_offset", t.file_offset}, {"bytes", t.size_bytes}};
      };
      layers.push_back({{"layer_id", ml.layer_id},
                        {"num_embeddings", ml.num_embeddings},
                        {"prime_rows", ml.prime_rows},
                        {"unused_rows", ml.unused_rows()},
                        {"weight", tensor(ml.weight)},
                        {"scale", tensor(ml.scale)}});
    }
    json shards = json::array();
    for (const host::ModelShard& s : info.shards)
      shards.push_back({{"name", s.name}, {"file_bytes", s.file_bytes}, {"index_tensors", s.index_tensors}});
    json j;
    j["command"] = "table info";
    j["path"] = info.dir;
    j["format"] = "hf-model";
    j["has_index"] = info.has_index;
    j["index_entries"] = info.index_entries;
    j["index_total_size"] = info.index_total_size ? json(*info.index_total_size) : json(nullptr);
    j["config"] = {{"section", c.section},
                   {"engram_layer_ids", c.layer_ids},
                   {"engram_num_embeddings", c.num_embeddings},
                   {"engram_vocab_size", c.vocab_size},
                   {"engram_max_ngram_size", c.max_ngram_size},
                   {"engram_n_heads", c.n_heads},
                   {"engram_head_dim", c.head_dim},
                   {"engram_compressed_vocab_size", c.compressed_vocab_size},
                   {"engram_pad_token_id", c.pad_token_id},
                   {"pad_token_id_given", c.pad_token_id_given}};
    json rows = json::array();
    for (int i = 0; i < l.n_layers(); ++i) rows.push_back(l.rows(i));
    j["layout"] = {{"layer_ids", l.layer_ids},     {"max_ngram", l.max_ngram}, {"heads_per_order", l.heads_per_order},
                   {"heads", l.heads()},           {"d", l.d},                 {"head_rows", l.head_rows},
                   {"rows", rows},                 {"split_bytes", l.total_bytes()},
                   {"fused_bytes", fused.total_bytes()}, {"load_bytes", info.table_bytes()}};
    j["layers"] = layers;
    j["shards"] = shards;
    j["generator"] = c.synthetic_generator ? json(*c.synthetic_generator) : json(nullptr);
    j["seed"] = c.synthetic_seed ? json(*c.synthetic_seed) : json(nullptr);
    j["tokenizer"] = {{"path", tok_path}, {"present", has_tok}, {"sha256", tok_sha.empty() ? json(nullptr) : json(tok_sha)}};
    j["compression_table"] = {
        {"path", table_path},
        {"present", has_table},
        {"compressed_vocab_size", table ? json(table->compressed_vocab) : json(nullptr)},
        {"vocab_size", table ? json(table->vocab_size()) : json(nullptr)},
        {"matches_config", has_table ? json(table_status.is_ok()) : json(nullptr)},
        {"error", table_status.is_ok() ? json(nullptr) : json(table_status.to_string())},
        {"source", table ? json(source) : json(nullptr)},
        {"build_seconds", table && source == "built" ? json(build_s) : json(nullptr)},
        {"cache_note", cache_note.empty() ? json(nullptr) : json(cache_note)},
        {"unicode_version", host::unicode_version()}};
    j["schema"] = "engram.table-info-model/1";
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    int64_t shard_bytes = 0;
    for (const host::ModelShard& s : info.shards) shard_bytes += s.file_bytes;
    std::printf("model        %s (hf-model: %zu shards, %s; %s, %lld tensors)\n", info.dir.c_str(), info.shards.size(),
                format_bytes(shard_bytes).c_str(), info.has_index ? host::kModelIndexFile : host::kModelSingleShardFile,
                static_cast<long long>(info.index_entries));
    std::printf("config       %s%s: Engram layers %s, orders 2..%d x %d heads (%d per layer), d %d, "
                "engram_vocab_size %lld, V' %lld, pad id %lld%s\n",
                host::kModelConfigFile, c.section.empty() ? "" : (" " + c.section).c_str(),
                host::list_text(c.layer_ids).c_str(), c.max_ngram_size, c.n_heads, l.heads(), c.head_dim,
                static_cast<long long>(c.vocab_size), static_cast<long long>(c.compressed_vocab_size),
                static_cast<long long>(c.pad_token_id), c.pad_token_id_given ? "" : " (not given: the default)");
    for (const host::ModelLayer& ml : info.layers) {
      std::printf("layer %-6d %lld rows = %lld in the %d primes + %lld past them (not loaded)\n", ml.layer_id,
                  static_cast<long long>(ml.num_embeddings), static_cast<long long>(ml.prime_rows), l.heads(),
                  static_cast<long long>(ml.unused_rows()));
      for (const host::ModelTensor* t : {&ml.weight, &ml.scale})
        std::printf("  %-36s %-8s %-18s %s at byte %lld (%s)\n", t->name.c_str(), t->dtype.c_str(),
                    host::list_text(t->shape).c_str(), t->shard.c_str(), static_cast<long long>(t->file_offset),
                    format_bytes(t->size_bytes).c_str());
    }
    std::printf("in memory    split %s, fused %s (%lld-B records); a load reads %s\n", format_bytes(l.total_bytes()).c_str(),
                format_bytes(fused.total_bytes()).c_str(), static_cast<long long>(EngramLayout::fused_record_bytes(l.d)),
                format_bytes(info.table_bytes()).c_str());
    if (c.synthetic_generator)
      std::printf("generator    %s, seed %llu\n", c.synthetic_generator->c_str(),
                  static_cast<unsigned long long>(c.synthetic_seed.value_or(0)));
    if (has_tok) std::printf("tokenizer    %s (sha256 %s)\n", tok_path.c_str(), tok_sha.empty() ? "n/a" : tok_sha.c_str());
    else std::printf("tokenizer    n/a: no %s\n", tok_path.c_str());
    if (table) {
      std::string from = source == "directory" ? "the directory's own table"
                         : source == "cache"   ? "cached, built from this tokenizer.json"
                         : source == "built"   ? "built from this tokenizer.json in " + fmt_seconds(build_s) +
                                                   (table_path.empty() ? "; " + cache_note : ", cached")
                         : table->tokenizer_json_sha256.empty() ? "source tokenizer.json not recorded"
                         : has_tok                              ? "built from this tokenizer.json"
                                                                : "built from a tokenizer.json not in the directory";
      std::printf("compression  %s: V' %lld = engram_compressed_vocab_size, %lld token ids (%s)\n",
                  table_path.empty() ? "(in memory)" : table_path.c_str(), static_cast<long long>(table->compressed_vocab),
                  static_cast<long long>(table->vocab_size()), from.c_str());
    } else if (has_table) {
      std::printf("compression  %s\n", table_status.to_string().c_str());
    } else {
      std::printf("compression  V' n/a: no %s in the directory (the table is built from it)%s\n", host::kModelTokenizerFile,
                  a.compression_table.empty() ? "" : (" and no " + a.compression_table).c_str());
    }
  }
  if (!table_status.is_ok()) return report_failure(cmd, table_status);
  return 0;
}

// ---- load --------------------------------------------------------------------------------------

int load_model_dir(const ModelLoadArgs& a) {
  const char* cmd = "table load";
  auto names = names_arg(a.tensor_names);
  if (!names.is_ok()) return report_failure(cmd, names.status());
  auto fmt = parse_row_format(a.row_layout);
  if (!fmt.is_ok()) return report_failure(cmd, fmt.status().with_context("--row-layout"));
  if (a.threads < 0) return report_failure(cmd, bad("--threads must be >= 0 (0 = one per CPU this process may run on)"));
  if (a.cache != "as-is" && a.cache != "cold" && a.cache != "warm")
    return report_failure(cmd, bad("--cache '" + a.cache + "': expected as-is, cold or warm"));
  if (a.reader_node >= 0) {
    const std::vector<int> nodes = sys::online_nodes();
    if (std::find(nodes.begin(), nodes.end(), a.reader_node) == nodes.end()) {
      std::string list;
      for (int n : nodes) list += (list.empty() ? "" : ", ") + std::to_string(n);
      return report_failure(cmd, bad("--reader-node " + std::to_string(a.reader_node) +
                                     ": no such NUMA node (this machine's nodes: " + list + ")"));
    }
  }
  auto info = host::read_model_dir(a.dir, *names);
  if (!info.is_ok()) return report_failure(cmd, info.status());
  const host::ModelEngramConfig& c = info->config;
  if (a.verify && !(c.synthetic_generator == std::string("synth_row") && c.synthetic_seed))
    return report_failure(cmd, bad("--verify: " + a.dir + " is not a synthetic model directory (no generator/seed)"));
  // --verify also checks what `table info` checks: the tokenizer.json and compression table agree with config.json.
  if (a.verify)
    if (const host::ModelDirTableCheck check = host::check_model_dir_table(*info, ""); !check.status.is_ok())
      return report_failure(cmd, check.status);
  auto layout = host::model_layout(*info, *fmt);
  if (!layout.is_ok()) return report_failure(cmd, layout.status());

  // The byte ranges the load reads, for the sequential reference read and the page-cache conditions.
  std::map<std::string, sys::File> files;
  std::vector<Range> ranges;
  for (int i = 0; i < layout->n_layers(); ++i) {
    const host::ModelLayer& ml = info->layers[static_cast<size_t>(i)];
    for (const auto& [t, row_bytes] : {std::pair{&ml.weight, int64_t{layout->d}}, std::pair{&ml.scale, int64_t{layout->d / 32}}}) {
      auto it = files.find(t->shard);
      if (it == files.end()) {
        auto f = sys::open_read(info->path(t->shard));
        if (!f.is_ok()) return report_failure(cmd, f.status());
        it = files.emplace(t->shard, std::move(f).value()).first;
      }
      ranges.push_back({&it->second, t->file_offset, layout->rows(i) * row_bytes});
    }
  }
  const int64_t bytes = info->table_bytes();
  const int64_t chunk = int64_t{64} << 20;
  const bool keep_cache = a.keep_cache || a.cache == "warm";
  if (a.cache == "warm") {
    auto s = sequential_read(ranges, chunk, false);  // untimed: fills the page cache
    if (!s.is_ok()) return report_failure(cmd, s.status());
  }
  double seq_s = -1;
  if (a.compare_sequential) {
    if (a.cache == "cold") drop_ranges(ranges);
    auto s = sequential_read(ranges, chunk, a.cache == "cold" || !keep_cache);
    if (!s.is_ok()) return report_failure(cmd, s.status());
    seq_s = *s;
  }
  if (a.cache == "cold") drop_ranges(ranges);
  const int64_t resident_before = resident_bytes(files);

  TableOptions topt;
  for (const auto& [key, value] : {std::pair<const char*, const std::string&>{"--backing", a.backing},
                                   {"--placement", a.placement}})
    if (Status st = set_table_option(topt, key, value); !st.is_ok()) return report_failure(cmd, st);
  topt.prefault = !a.no_prefault;
  for (const std::string& kv : a.table_options) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return report_failure(cmd, bad("--table-option '" + kv + "': expected KEY=VALUE"));
    if (Status st = set_table_option(topt, kv.substr(0, eq), kv.substr(eq + 1)); !st.is_ok())
      return report_failure(cmd, Status(Code::kInvalidArgument, st.message()).with_context("--table-option"));
  }
  const auto t_place = Clock::now();
  auto built = engine::create_bare_table(*layout, topt);
  if (!built.is_ok()) return report_failure(cmd, built.status());
  const std::unique_ptr<HostTable>* table = &built->table;
  const double place_s = seconds_since(t_place);
  std::vector<TableSpan> spans;
  for (int i = 0; i < (*table)->n_layers(); ++i) spans.push_back((*table)->span(i));

  host::ModelLoadOptions opt;
  opt.threads = sys::threads_or_auto(a.threads);
  opt.drop_page_cache = !keep_cache;
  opt.reader_node = a.reader_node;
  report::ProgressLine line("load " + a.dir, progress_display(a.progress));
  opt.on_progress = [&line](const host::TransferProgress& p) { line.update(p); };
  const auto t_load = Clock::now();
  const Status s = host::load_model(*info, *layout, spans, opt);
  if (!s.is_ok()) return report_failure(cmd, s);
  const double load_s = seconds_since(t_load);
  const int64_t resident_after = resident_bytes(files);
  const PagesSeen pages = pages_seen(**table);
  int64_t mismatches = -1;
  if (a.verify) mismatches = host::count_synthetic_mismatches(**table, *c.synthetic_seed, a.threads);
  int64_t unused = 0;
  for (const host::ModelLayer& ml : info->layers) unused += ml.unused_rows();
  const double b = static_cast<double>(bytes);

  if (a.json) {
    json unused_rows = json::array();
    for (const host::ModelLayer& ml : info->layers) unused_rows.push_back(ml.unused_rows());
    json j = {{"command", "table load"},
                    {"path", a.dir},
                    {"format", "hf-model"},
                    {"row_layout", row_format_name(*fmt)},
                    {"backing", a.backing},
                    {"placement", a.placement},
                    {"prefault", !a.no_prefault},
                    {"rows", layout->total_rows()},
                    {"unused_rows", unused_rows},
                    {"bytes", bytes},
                    {"table_bytes", layout->total_bytes()},
                    {"cache", a.cache},
                    {"page_cache_resident_bytes_before", resident_json(resident_before)},
                    {"page_cache_resident_bytes_after", resident_json(resident_after)},
                    {"table_options", a.table_options},
                    {"prefault_method", pages.prefault.empty() ? json(nullptr) : json(pages.prefault)},
                    {"huge_advice", pages.huge_advice.empty() ? json(nullptr) : json(pages.huge_advice)},
                    {"huge_page_bytes_after_load", pages.huge_bytes < 0 ? json(nullptr) : json(pages.huge_bytes)},
                    {"place_seconds", place_s},
                    {"load_seconds", load_s},
                    {"load_gbps", gbps_json(b, load_s)},
                    {"place_load_gbps", gbps_json(b, place_s + load_s)},
                    {"sequential_seconds", seq_s >= 0 ? json(seq_s) : json(nullptr)},
                    {"sequential_gbps", seq_s >= 0 ? gbps_json(b, seq_s) : json(nullptr)},
                    {"load_vs_sequential", seq_s > 0 && load_s > 0 ? json(seq_s / load_s) : json(nullptr)},
                    {"drop_page_cache", opt.drop_page_cache},
                    {"verified", a.verify},
                    {"mismatched_rows", a.verify ? json(mismatches) : json(nullptr)}};
    j["schema"] = "engram.table-load-model/1";
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("loaded %s into a %s %s table (%s, placement %s%s): %s of rows in %.2f s (%s); placing it took "
                "%.2f s (place+load %s)\n",
                a.dir.c_str(), format_bytes(layout->total_bytes()).c_str(), row_format_name(*fmt), a.backing.c_str(),
                a.placement.c_str(), a.no_prefault ? ", not prefaulted" : "", format_bytes(bytes).c_str(), load_s,
                format_gbps(b, load_s).c_str(), place_s, format_gbps(b, place_s + load_s).c_str());
    std::printf("pages        %s; after the load %s of %s in huge pages%s%s\n",
                pages.prefault.empty() ? "not prefaulted" : ("prefault " + pages.prefault).c_str(),
                pages.huge_bytes < 0 ? "n/a" : format_bytes(pages.huge_bytes).c_str(),
                format_bytes(layout->total_bytes()).c_str(), pages.huge_advice.empty() ? "" : "; ",
                pages.huge_advice.c_str());
    std::printf("rows         %lld loaded, %lld past the primes not loaded\n",
                static_cast<long long>(layout->total_rows()), static_cast<long long>(unused));
    std::printf("page cache   %s: %s of the shards before the load, %s after\n", a.cache.c_str(),
                resident_text(resident_before).c_str(), resident_text(resident_after).c_str());
    if (seq_s >= 0)
      std::printf("sequential   one thread, 64 MiB preads of the same bytes: %.2f s (%s); the load ran at %.0f%% of it\n",
                  seq_s, format_gbps(b, seq_s).c_str(), load_s > 0 ? 100.0 * seq_s / load_s : 0.0);
    if (a.verify)
      std::printf("verify: %lld of %lld rows differ from synth_row(seed %llu)\n", static_cast<long long>(mismatches),
                  static_cast<long long>(layout->total_rows()), static_cast<unsigned long long>(*c.synthetic_seed));
  }
  return mismatches > 0 ? 1 : 0;
}

}  // namespace engram::cli
