// `engram hash`: real text (or a token file) -> Engram hash ids of every Engram layer, exactly as the
// reference NgramHashMapping computes them, printed, saved, or summarised as N-gram statistics.
//
// Input: --tokens FILE (written by tools/tokenize), or --text FILE... which runs the documented Node
// command (token_io.hpp: tokenize_command) into a temporary directory; with neither, the default text:
// the files under /usr/share/common-licenses (with --model, the default token file of scripts/setup when
// it exists, so no Node runs).
// --model DIR hashes with a Hugging Face model directory's own configuration: the layout, pad id and V' of
// its config.json and its compression table (host::model_compression_table: the directory's own, or built
// from its tokenizer.json in C++ and cached), so it excludes --layout, --table-size, --compression-table,
// --pad-id and --expect-vocab. Each document is one sequence (cut every --seq-len tokens
// when given), hashed from its start; --text puts the BOS id before each document unless --no-bos.
// Output: a summary and the first --limit positions on stdout (--json: one JSON object); --out FILE
// writes every id as little-endian int64 [layers][tokens][heads] plus FILE.json describing it;
// --stats adds distinct ids, top-10 share and in-batch repeat rates per layer and order.
// Exit codes: 0 done; 2 bad input (file, id, layout, vocabulary mismatch: nothing written);
// 77 --text without Node installed; 1 anything else.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "command.hpp"
#include "option_rules.hpp"
#include "engram/ngram_hash.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "host/model_io.hpp"
#include "host/token_io.hpp"
#include "replay/text_id_source.hpp"
#include "sys/subprocess.hpp"
#include "report.hpp"

namespace engram::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct HashArgs {
  std::vector<std::string> texts;
  std::string tokens;
  std::string layout = "v41-flash";
  std::string table_size;
  std::string table;  // compression table; default: the committed DeepSeek-V3 one
  std::string model;         // Hugging Face model directory: its layout, pad id, V' and compression table
  std::string tensor_names;  // with model: "WEIGHT,SCALE" ("" = the released names)
  int64_t seed = 0;
  int64_t pad_id = kDefaultPadId;
  int64_t expect_vocab = 0;
  std::string kind = "global";
  std::string out;
  bool json = false;
  int64_t limit = 8;
  bool stats = false;
  int batch = 64;
  int64_t seq_len = 0;
  bool no_bos = false;
};

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

// Runs the Node tokenizer on `texts` into a private temporary directory and reads the result.
Result<TokenFile> tokenize_texts(const std::vector<std::string>& texts, bool add_bos) {
  for (const auto& t : texts) {
    std::error_code ec;
    if (!fs::is_regular_file(t, ec)) return Status(Code::kNotFound, "--text " + t + ": no such file");
  }
  if (!sys::program_on_path("node"))
    return Status(Code::kUnsupported, "tokenizing text needs Node.js (node); install it and run scripts/tokenize-setup, "
                                      "or pass --tokens FILE written by tools/tokenize/tokenize.mjs (with --model and "
                                      "neither --text nor --tokens, the default text's token file " +
                                      default_token_file_path() + " is read when scripts/setup has written it)");
  if (!fs::exists(fs::path(tokenize_script_path()).parent_path() / "node_modules"))
    return Status(Code::kUnsupported, "tools/tokenize/node_modules is missing: run scripts/tokenize-setup (npm ci) first");
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("engram-hash-" + std::to_string(rd()) + std::to_string(rd()));
  std::error_code ec;
  if (!fs::create_directory(dir, ec)) return Status(Code::kIo, "cannot create temporary directory " + dir.string() + ": " + ec.message());
  const std::string out = (dir / "text.tokens").string();
  const std::string command = tokenize_command(texts, out, add_bos);
  const auto rc = sys::run_program({"/bin/sh", "-c", command});
  Result<TokenFile> tf = Status(Code::kInternal, "unset");
  if (!rc.is_ok() || !rc->exited)
    tf = Status(Code::kInternal, "the tokenizer command did not run (" +
                                     (rc.is_ok() ? rc->to_string() : rc.status().to_string()) + "): " + command);
  else if (rc->code == 2)
    tf = bad("the tokenizer rejected the input (its message is above)");
  else if (rc->code != 0)
    tf = Status(Code::kInternal, "the tokenizer failed with exit status " + std::to_string(rc->code));
  else
    tf = read_token_file(out);
  fs::remove_all(dir, ec);
  return tf;
}

// Sequences as [begin, end) ranges: each document, cut every seq_len tokens when seq_len > 0.
std::vector<std::pair<int64_t, int64_t>> sequences(const TokenFile& tf, int64_t seq_len) {
  std::vector<std::pair<int64_t, int64_t>> seqs;
  for (const auto& d : tf.documents) {
    const int64_t end = d.first_token + d.token_count;
    const int64_t step = seq_len > 0 ? seq_len : std::max<int64_t>(d.token_count, 1);
    for (int64_t s = d.first_token; s < end; s += step) seqs.emplace_back(s, std::min(end, s + step));
  }
  return seqs;
}

Status write_ids(const std::string& path, const std::vector<int64_t>& ids, const json& meta) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status(Code::kIo, "--out " + path + ": cannot create " + tmp);
    f.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(int64_t)));
    if (!f) {
      fs::remove(tmp, ec);
      return Status(Code::kIo, "--out " + path + ": write failed");
    }
  }
  {
    std::ofstream f(path + ".json", std::ios::trunc);
    f << meta.dump(2) << "\n";
    if (!f) {
      fs::remove(tmp, ec);
      return Status(Code::kIo, "--out " + path + ".json: write failed");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return Status(Code::kIo, "--out " + path + ": rename failed: " + why);
  }
  return Status::ok();
}

json stats_json(const NgramStats& s, const EngramLayout& l) {
  json layers = json::array();
  for (int li = 0; li < l.n_layers(); ++li) {
    json heads = json::array();
    for (const auto& h : s.heads[li])
      heads.push_back({{"lookups", h.lookups}, {"distinct", h.distinct}, {"top_k_share", json_num(h.top_k_share)},
                       {"repeat_rate", json_num(h.repeat_rate)}});
    layers.push_back({{"layer_id", l.layer_ids[li]}, {"heads", heads}});
  }
  return {{"top_k", s.top_k}, {"batches", s.batches}, {"layers", layers}};
}

// Mean of a head statistic over the heads of order n of layer li.
template <typename F>
double order_mean(const NgramStats& s, const EngramLayout& l, int li, int n, F f) {
  double sum = 0;
  for (int j = 0; j < l.heads_per_order; ++j) sum += f(s.heads[li][(n - 2) * l.heads_per_order + j]);
  return sum / l.heads_per_order;
}

int run(const HashArgs& a) {
  const char* cmd = "hash";
  if (!a.texts.empty() && !a.tokens.empty()) return report_failure(cmd, bad("give --text or --tokens, not both"));
  if (a.kind != "global" && a.kind != "local")
    return report_failure(cmd, bad("--kind '" + a.kind + "': expected 'global' (row ids) or 'local' (per-head ids)"));
  if (a.limit < 0) return report_failure(cmd, bad("--limit must be >= 0"));
  if (a.batch < 1) return report_failure(cmd, bad("--batch must be >= 1"));
  if (a.seq_len < 0) return report_failure(cmd, bad("--seq-len must be >= 0 (0 = whole documents)"));

  Result<EngramLayout> layout = Status(Code::kInternal, "unset");
  Result<CompressionTable> table = Status(Code::kInternal, "unset");
  std::string table_path;
  NgramHashOptions opt;
  opt.seed = a.seed;
  opt.pad_id = a.pad_id;
  opt.expected_compressed_vocab = a.expect_vocab;
  if (!a.model.empty()) {
    host::ModelTensorNames names;
    if (!a.tensor_names.empty()) {
      auto n = host::parse_model_tensor_names(a.tensor_names);
      if (!n.is_ok()) return report_failure(cmd, n.status().with_context("--tensor-names"));
      names = *n;
    }
    auto info = host::read_model_dir(a.model, names);
    if (!info.is_ok()) return report_failure(cmd, info.status());
    layout = host::model_layout(*info, RowFormat::kSplit);
    if (!layout.is_ok()) return report_failure(cmd, layout.status().with_context("--model"));
    auto hashing = read_model_hashing(a.model, RowFormat::kSplit, a.tensor_names);
    if (!hashing.is_ok()) return report_failure(cmd, hashing.status().with_context("--model"));
    table = std::move(hashing->table);
    table_path = hashing->table_path.empty() ? info->path(host::kModelTokenizerFile) : hashing->table_path;
    opt.pad_id = hashing->hash.pad_id;
    opt.expected_compressed_vocab = hashing->hash.expected_compressed_vocab;
  } else {
    int64_t size = 512LL << 20;
    if (!a.table_size.empty()) {
      if (a.layout != "v41-flash-mini")
        return report_failure(cmd, bad("--table-size applies to the v41-flash-mini preset only"));
      auto s = parse_size_bytes(a.table_size);
      if (!s.is_ok()) return report_failure(cmd, s.status().with_context("--table-size"));
      size = *s;
    }
    layout = make_preset_layout(a.layout, size);
    if (!layout.is_ok()) return report_failure(cmd, layout.status().with_context("--layout"));
    table_path = a.table.empty() ? default_compression_table_path() : a.table;
    table = read_compression_table(table_path);
    if (!table.is_ok()) return report_failure(cmd, table.status().with_context("--compression-table"));
  }

  // The hasher first: a pad id or V' that the table refuses is bad input, told before any text is tokenized.
  if (a.model.empty()) {
    if (a.pad_id >= table->vocab_size())
      return report_failure(cmd, bad("--pad-id " + std::to_string(a.pad_id) + ": expected a token id of the compression "
                                     "table, 0.." + std::to_string(table->vocab_size() - 1)));
    if (a.expect_vocab != 0 && a.expect_vocab != table->compressed_vocab)
      return report_failure(cmd, bad("--expect-vocab " + std::to_string(a.expect_vocab) + ": the tables were built for V' = " +
                                     std::to_string(a.expect_vocab) + ", the compression table " + table_path +
                                     " gives V' = " + std::to_string(table->compressed_vocab) +
                                     " (hashing with it would address other rows)"));
  }
  auto hasher = NgramHasher::create(*layout, *table, opt);
  if (!hasher.is_ok()) return report_failure(cmd, hasher.status());

  Result<TokenFile> tf = Status(Code::kInternal, "unset");
  std::string source;  // what the summary names: the token file, or the text file(s)
  const bool model_tokens = !a.model.empty() && a.tokens.empty() && a.texts.empty() && fs::exists(default_token_file_path());
  if (!a.tokens.empty() || model_tokens) {
    source = model_tokens ? default_token_file_path() : a.tokens;
    tf = read_token_file(source);
  } else {
    std::vector<std::string> texts = a.texts;
    if (texts.empty()) texts = default_text_files();
    if (texts.empty()) return report_failure(cmd, Status(Code::kNotFound, "no --text given and no default text under /usr/share/common-licenses"));
    tf = tokenize_texts(texts, !a.no_bos);
    source = texts.size() == 1 ? texts[0] : std::to_string(texts.size()) + " text files (" + texts[0] + ", ...)";
  }
  if (!tf.is_ok()) return report_failure(cmd, tf.status());
  if (Status st = check_token_file_matches_table(*tf, *table, table_path); !st.is_ok()) return report_failure(cmd, st);

  const HashIdKind kind = a.kind == "global" ? HashIdKind::kGlobalRow : HashIdKind::kHeadLocal;
  const EngramLayout& l = *layout;
  const size_t heads = static_cast<size_t>(l.heads());
  const size_t n_tok = tf->ids.size();
  // ids[layer][token][heads]
  std::vector<int64_t> ids(static_cast<size_t>(l.n_layers()) * n_tok * heads);
  std::vector<int64_t> raw, part;
  for (const auto& [s, e] : sequences(*tf, a.seq_len)) {
    raw.assign(tf->ids.begin() + s, tf->ids.begin() + e);
    part.resize(raw.size() * heads);
    for (int li = 0; li < l.n_layers(); ++li) {
      Status st = hasher->hash(raw, li, part, kind);
      if (!st.is_ok()) return report_failure(cmd, st.with_context(tf->path));
      std::copy(part.begin(), part.end(), ids.begin() + static_cast<std::ptrdiff_t>((li * n_tok + s) * heads));
    }
  }

  json meta = {{"format", "engram-hash-ids"},
               {"format_version", 1},
               {"dtype", "int64le"},
               {"shape", {l.n_layers(), n_tok, heads}},
               {"kind", a.kind == "global" ? "global_row" : "head_local"},
               {"layout", l.name},
               {"layer_ids", l.layer_ids},
               {"max_ngram", l.max_ngram},
               {"heads_per_order", l.heads_per_order},
               {"head_rows", l.head_rows},
               {"head_offsets", l.head_offsets},
               {"seed", a.seed},
               {"pad_id", opt.pad_id},
               {"model", a.model.empty() ? json(nullptr) : json(a.model)},
               {"compression_table", table_path},
               {"compressed_pad_id", hasher->compressed_pad_id()},
               {"compressed_vocab_size", hasher->compressed_vocab()},
               {"tokenizer", tf->tokenizer},
               {"tokenizer_version", tf->tokenizer_version},
               {"tokens", n_tok},
               {"documents", tf->documents.size()},
               {"seq_len", a.seq_len},
               {"source", source}};
  if (!a.out.empty()) {
    if (Status st = write_ids(a.out, ids, meta); !st.is_ok()) return report_failure(cmd, st);
  }
  std::vector<json> multipliers;
  for (int li = 0; li < l.n_layers(); ++li) multipliers.push_back(hasher->multipliers(li));
  meta["multipliers"] = multipliers;

  std::optional<TextNgramStats> stats;
  if (a.stats) {
    auto s = compute_text_ngram_stats(*hasher, *tf, a.batch, a.seq_len > 0 ? a.seq_len : 512);
    if (!s.is_ok()) return report_failure(cmd, s.status());
    stats = std::move(*s);
  }

  const size_t shown = a.limit == 0 ? n_tok : std::min<size_t>(n_tok, static_cast<size_t>(a.limit));
  std::vector<int64_t> compressed(shown);
  {
    std::vector<int64_t> head(tf->ids.begin(), tf->ids.begin() + static_cast<std::ptrdiff_t>(shown));
    if (Status st = hasher->compress(head, compressed); !st.is_ok()) return report_failure(cmd, st);
  }
  if (a.json) {
    json out = meta;
    json per_layer = json::object();
    for (int li = 0; li < l.n_layers(); ++li) {
      json rows = json::array();
      for (size_t t = 0; t < shown; ++t)
        rows.push_back(std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>((li * n_tok + t) * heads),
                                            ids.begin() + static_cast<std::ptrdiff_t>((li * n_tok + t + 1) * heads)));
      per_layer[std::to_string(l.layer_ids[li])] = rows;
    }
    out["shown_tokens"] = shown;
    out["token_ids"] = std::vector<uint32_t>(tf->ids.begin(), tf->ids.begin() + static_cast<std::ptrdiff_t>(shown));
    out["compressed_ids"] = compressed;
    out["ids"] = per_layer;
    if (stats) {
      out["stats"] = {{"tokens", stats->tokens}, {"sequences", stats->sequences}, {"batch", a.batch},
                      {"seq_len", a.seq_len > 0 ? a.seq_len : 512}, {"prefill", stats_json(stats->prefill, l)},
                      {"decode_step", stats_json(stats->decode_step, l)}};
    }
    if (!a.out.empty()) out["out"] = a.out;
    out["schema"] = "engram.hash/1";
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }

  std::printf("engram hash: %zu tokens in %zu document(s) of %s (%s %s), V' = %lld, pad %lld -> %lld\n", n_tok,
              tf->documents.size(), source.c_str(), tf->tokenizer.c_str(), tf->tokenizer_version.c_str(),
              static_cast<long long>(hasher->compressed_vocab()), static_cast<long long>(opt.pad_id),
              static_cast<long long>(hasher->compressed_pad_id()));
  std::printf("layout %s: Engram layers", l.name.c_str());
  for (int id : l.layer_ids) std::printf(" %d", id);
  std::printf(", orders 2..%d x %d heads, seed %lld, %s ids\n", l.max_ngram, l.heads_per_order,
              static_cast<long long>(a.seed), a.kind == "global" ? "global row" : "per-head");
  for (int li = 0; li < l.n_layers(); ++li) {
    std::printf("layer %d multipliers:", l.layer_ids[li]);
    for (int64_t m : hasher->multipliers(li)) std::printf(" %lld", static_cast<long long>(m));
    std::printf("\n");
    for (size_t t = 0; t < shown; ++t) {
      std::printf("  t=%-4zu tok %-6u c %-6lld", t, tf->ids[t], static_cast<long long>(compressed[t]));
      for (int n = 2; n <= l.max_ngram; ++n) {
        std::printf(" | %d-gram", n);
        for (int j = 0; j < l.heads_per_order; ++j)
          std::printf(" %lld", static_cast<long long>(ids[(li * n_tok + t) * heads + (n - 2) * l.heads_per_order + j]));
      }
      std::printf("\n");
    }
  }
  if (stats) {
    std::printf("N-gram statistics: %lld sequences of <= %lld tokens, batches of %d sequences\n",
                static_cast<long long>(stats->sequences), static_cast<long long>(a.seq_len > 0 ? a.seq_len : 512), a.batch);
    std::printf("  %-6s %-6s %14s %12s %12s %18s %18s\n", "layer", "order", "lookups/head", "distinct", "top-10",
                "repeat(prefill)", "repeat(decode)");
    for (int li = 0; li < l.n_layers(); ++li)
      for (int n = 2; n <= l.max_ngram; ++n) {
        const auto& p = stats->prefill;
        const auto& d = stats->decode_step;
        std::printf("  %-6d %-6d %14.0f %12.0f %11s%% %17s%% %17s%%\n", l.layer_ids[li], n,
                    order_mean(p, l, li, n, [](auto& h) { return static_cast<double>(h.lookups); }),
                    order_mean(p, l, li, n, [](auto& h) { return static_cast<double>(h.distinct); }),
                    fmt_num(100 * order_mean(p, l, li, n, [](auto& h) { return h.top_k_share; }), "%.2f").c_str(),
                    fmt_num(100 * order_mean(p, l, li, n, [](auto& h) { return h.repeat_rate; }), "%.2f").c_str(),
                    fmt_num(100 * order_mean(d, l, li, n, [](auto& h) { return h.repeat_rate; }), "%.2f").c_str());
      }
    std::printf("  (distinct, top-10 share and repeat rates are means over the heads of an order; repeat = lookups whose id\n"
                "   already occurred in the same batch: prefill = %d sequences x their tokens, decode = one token of each)\n",
                a.batch);
  }
  if (!a.out.empty()) std::printf("wrote %s (+ .json): int64 [%d][%zu][%zu]\n", a.out.c_str(), l.n_layers(), n_tok, heads);
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<HashArgs>();
  sub.add_option("--text", a->texts, "UTF-8 text file(s) to tokenize with tools/tokenize (needs node); "
                                     "default: /usr/share/common-licenses/*")
      ->check(input_file());
  sub.add_option("--tokens", a->tokens, "token file written by tools/tokenize/tokenize.mjs (FILE + FILE.json)")
      ->check(input_file());
  CLI::Option* model = sub.add_option("--model", a->model,
                                      "Hugging Face model directory: hash with its config.json (layout, pad id, V') and its "
                                      "compression table (its own, or built from its tokenizer.json and cached)");
  sub.add_option("--tensor-names", a->tensor_names, "with --model: Engram tensor names WEIGHT,SCALE with {L}")
      ->check(non_empty())
      ->needs(model);
  sub.add_option("--layout", a->layout, "layout preset: v41-flash, v41-flash-mini or tiny")->capture_default_str()->excludes(model);
  sub.add_option("--table-size", a->table_size, "total table size of v41-flash-mini, e.g. 512MiB")
      ->check(size_in(1, int64_t{1} << 50))
      ->excludes(model);
  sub.add_option("--compression-table", a->table, "compression table (default: tools/tokenize/data/deepseek_v3.compress.bin)")
      ->excludes(model);
  sub.add_option("--seed", a->seed, "EngramConfig.seed of the reference")->capture_default_str();
  sub.add_option("--pad-id", a->pad_id, "pad token id before compression")
      ->check(integer_in(0, int64_t{1} << 32))
      ->capture_default_str()
      ->excludes(model);
  sub.add_option("--expect-vocab", a->expect_vocab, "V' the tables were built for (0: not checked)")
      ->check(integer_in(0, int64_t{1} << 32))
      ->excludes(model);
  sub.add_option("--kind", a->kind, "global (row ids, head offsets added) or local (per-head ids)")
      ->check(CLI::IsMember({"global", "local"}))
      ->capture_default_str();
  sub.add_option("--out", a->out, "write all ids: int64 [layers][tokens][heads] + OUT.json")->check(output_file());
  sub.add_flag("--json", a->json, "print one JSON object");
  sub.add_option("--limit", a->limit, "positions to print (0 = all)")->check(integer_in(0, INT64_MAX))->capture_default_str();
  sub.add_flag("--stats", a->stats, "N-gram statistics: distinct ids, top-10 share, in-batch repeat rate");
  sub.add_option("--batch", a->batch, "sequences per batch for --stats")->check(integer_in(1, 1 << 20))->capture_default_str();
  sub.add_option("--seq-len", a->seq_len, "cut documents into sequences of this many tokens (0 = whole documents; --stats uses 512)")
      ->check(integer_in(0, int64_t{1} << 30))
      ->capture_default_str();
  sub.add_flag("--no-bos", a->no_bos,
               "when text is tokenized here (--text, or the default text): do not put the BOS id 0 before each document");
  // Options read only with others are refused without them (option_rules.hpp).
  refuse_without(sub, sub.get_option("--batch"), sub.get_option("--stats"), "it sizes the batches of the N-gram statistics");
  refuse_with(sub, sub.get_option("--no-bos"), sub.get_option("--tokens"), "a token file is read as it is, its BOS ids included");
  refuse_with(sub, sub.get_option("--text"), sub.get_option("--tokens"), "give text to tokenize or a token file, not both");
  check_derived_outputs(sub, sub.get_option("--out"), [a]() -> std::vector<std::string> {
    if (a->out.empty()) return {};
    return {a->out + ".json"};
  });
  return [a] { return run(*a); };
}

}  // namespace

ENGRAM_COMMAND(hash, "hash", "Hash real text (or a token file) into Engram ids exactly as the reference does", setup);

}  // namespace engram::cli
