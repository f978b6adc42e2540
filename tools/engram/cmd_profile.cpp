// `engram profile`: a hot-row profile (src/host/hot_profile.hpp) of token files — each document hashed with the
// reference N-gram hash for every Engram layer of the layout, ids counted, written hottest first — to fill the GPU
// hot-row cache (`engram run --cache-profile`, `engram bench lookup --cache-profile`).
//
// Layouts: the presets of `engram hash` (v41-flash, v41-flash-mini with --table-size, tiny), or "bench": the table
// of `engram bench lookup` (V4.1-Flash rows, one Engram layer of 24 heads, --table-size, --row-format, --d), whose
// row counts depend on the table size, so a profile is made for one table size.
// Held-out measurement (docs/fastpath.md): either profile one token file (a corpus' train part, scripts/tokenize-
// corpus) and measure on another (its test part), or --holdout F: a deterministic share F of the documents (by a
// hash of path, index and --holdout-seed) is left out of the counts, listed in the header's info.holdout, and
// with --holdout-out FILE also written as a token file to measure on.
// Output: the profile file, and a summary on stdout (tokens, distinct ids, coverage of the top 1%/5% of the table
// rows and of the hottest 10/1000 ids); --json prints the summary as one JSON object.
// Exit codes: 0 done; 2 bad input (file, layout, vocabulary mismatch: nothing written); 1 anything else.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/lookup.hpp"
#include "args.hpp"
#include "command.hpp"
#include "engram/ngram_hash.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "host/token_io.hpp"
#include "host/hot_profile.hpp"

namespace engram::cli {
namespace {

using nlohmann::json;

struct ProfileArgs {
  std::vector<std::string> tokens;
  std::string out;
  std::string layout = "bench";
  std::string table_size;
  std::string row_format = "fused";
  int d = 256;
  std::string table;  // compression table
  int64_t seed = 0;
  int64_t seq_len = 2048;
  int64_t top = 0;
  int64_t min_count = 1;
  double holdout = 0;
  uint64_t holdout_seed = 1;
  std::string holdout_out;
  bool json = false;
};

Status bad(const std::string& m) { return Status(Code::kInvalidArgument, m); }

// Writes tokens documents `docs` of `tf` as a token file (tools/tokenize's format: uint32le + sidecar).
Status write_token_subset(const std::string& path, const TokenFile& tf, const std::vector<int64_t>& docs) {
  std::vector<uint32_t> ids;
  json jd = json::array();
  for (int64_t d : docs) {
    const auto& doc = tf.documents[static_cast<size_t>(d)];
    jd.push_back({{"source", doc.source}, {"first_token", static_cast<int64_t>(ids.size())}, {"token_count", doc.token_count}});
    ids.insert(ids.end(), tf.ids.begin() + doc.first_token, tf.ids.begin() + doc.first_token + doc.token_count);
  }
  if (ids.empty()) return bad("--holdout-out: the held-out part holds no tokens");
  const json side = {{"format", "engram-tokens"},     {"format_version", 1},
                     {"dtype", "uint32le"},           {"tokenizer", tf.tokenizer},
                     {"tokenizer_package", tf.tokenizer_package}, {"tokenizer_version", tf.tokenizer_version},
                     {"vocab_size", tf.vocab_size},   {"token_count", ids.size()},
                     {"add_bos", tf.add_bos},         {"documents", jd},
                     {"derived_from", tf.path}};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  std::ofstream s(path + ".json", std::ios::trunc);
  s << side.dump(2) << "\n";
  if (!f || !s) return Status(Code::kIo, "cannot write " + path + " (+ .json)");
  return Status::ok();
}

int run(const ProfileArgs& a) {
  const char* cmd = "profile";
  if (a.tokens.empty()) return report_failure(cmd, bad("--tokens FILE is required (token files of tools/tokenize)"));
  if (a.out.empty()) return report_failure(cmd, bad("--out FILE is required"));
  if (!(a.holdout >= 0 && a.holdout < 1)) return report_failure(cmd, bad("--holdout must be in [0, 1)"));
  if (!a.holdout_out.empty() && a.holdout <= 0) return report_failure(cmd, bad("--holdout-out needs --holdout F > 0"));

  Result<EngramLayout> layout = Status(Code::kInternal, "unset");
  if (a.layout == "bench") {
    auto fmt = parse_row_format(a.row_format);
    if (!fmt.is_ok()) return report_failure(cmd, fmt.status().with_context("--row-format"));
    if (a.d <= 0 || a.d % 32 != 0) return report_failure(cmd, bad("--d must be a positive multiple of 32"));
    auto s = parse_size_bytes(a.table_size.empty() ? "32GiB" : a.table_size);
    if (!s.is_ok()) return report_failure(cmd, s.status().with_context("--table-size"));
    layout = bench::bench_layout(*s, *fmt, a.d);
  } else {
    int64_t size = 512LL << 20;
    if (!a.table_size.empty()) {
      if (a.layout != "v41-flash-mini")
        return report_failure(cmd, bad("--table-size applies to the bench layout and the v41-flash-mini preset only"));
      auto s = parse_size_bytes(a.table_size);
      if (!s.is_ok()) return report_failure(cmd, s.status().with_context("--table-size"));
      size = *s;
    }
    layout = make_preset_layout(a.layout, size);
  }
  if (!layout.is_ok()) return report_failure(cmd, layout.status().with_context("--layout"));

  const std::string table_path = a.table.empty() ? default_compression_table_path() : a.table;
  auto table = read_compression_table(table_path);
  if (!table.is_ok()) return report_failure(cmd, table.status().with_context("--compression-table"));
  std::vector<TokenFile> files;
  for (const auto& p : a.tokens) {
    auto tf = read_token_file(p);
    if (!tf.is_ok()) return report_failure(cmd, tf.status());
    if (Status st = check_token_file_matches_table(*tf, *table, table_path); !st.is_ok()) return report_failure(cmd, st);
    files.push_back(std::move(*tf));
  }
  NgramHashOptions ho;
  ho.seed = a.seed;
  auto hasher = NgramHasher::create(*layout, std::move(*table), ho);
  if (!hasher.is_ok()) return report_failure(cmd, hasher.status());

  // Held-out split by document, per file; the train part is every other document.
  std::vector<host::HotProfileInput> inputs;
  json held = json::array();
  std::vector<std::vector<int64_t>> held_docs(files.size());
  int64_t held_tokens = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    host::HotProfileInput in{&files[i], {}};
    if (a.holdout > 0) {
      held_docs[i] = host::holdout_documents(files[i], a.holdout, a.holdout_seed);
      std::vector<char> is_held(files[i].documents.size(), 0);
      for (int64_t d : held_docs[i]) is_held[static_cast<size_t>(d)] = 1;
      json names = json::array();
      for (size_t d = 0; d < files[i].documents.size(); ++d) {
        if (is_held[d]) {
          names.push_back(files[i].documents[d].source);
          held_tokens += files[i].documents[d].token_count;
        } else {
          in.documents.push_back(static_cast<int64_t>(d));
        }
      }
      if (in.documents.empty()) return report_failure(cmd, bad(files[i].path + ": --holdout left no document to profile"));
      held.push_back({{"path", files[i].path}, {"documents", held_docs[i]}, {"sources", names}});
    }
    inputs.push_back(std::move(in));
  }
  host::HotProfileOptions po;
  po.seq_len = a.seq_len;
  po.top = a.top;
  po.min_count = a.min_count;
  po.seed = a.seed;
  auto prof = host::compute_hot_profile(*hasher, inputs, po);
  if (!prof.is_ok()) return report_failure(cmd, prof.status());
  prof->info["command"] = "engram profile";
  prof->info["table_size"] = layout->table_bytes(0);
  prof->info["layout_arg"] = a.layout;
  prof->info["compression_table"] = table_path;
  if (a.holdout > 0)
    prof->info["holdout"] = {{"fraction", a.holdout}, {"seed", a.holdout_seed}, {"tokens", held_tokens}, {"files", held},
                             {"tokens_file", a.holdout_out.empty() ? json(nullptr) : json(a.holdout_out)}};
  if (Status st = host::write_hot_profile(a.out, *prof); !st.is_ok()) return report_failure(cmd, st);
  if (!a.holdout_out.empty()) {
    if (files.size() != 1) return report_failure(cmd, bad("--holdout-out needs exactly one --tokens file"));
    if (Status st = write_token_subset(a.holdout_out, files[0], held_docs[0]); !st.is_ok()) return report_failure(cmd, st);
  }

  json summary = {{"schema", "engram.profile/1"}, {"command", "profile"}, {"out", a.out}, {"layout", layout->name}, {"tokens", prof->tokens}, {"layers", json::array()}};
  if (!a.json)
    std::printf("profile %s: layout %s (%d heads), %lld tokens of %zu file(s)%s\n", a.out.c_str(), layout->name.c_str(),
                layout->heads(), static_cast<long long>(prof->tokens), files.size(),
                a.holdout > 0 ? (", " + std::to_string(held_tokens) + " tokens held out").c_str() : "");
  for (int li = 0; li < layout->n_layers(); ++li) {
    const auto& l = prof->layers[static_cast<size_t>(li)];
    const int64_t r1 = std::max<int64_t>(l.rows / 100, 1), r5 = std::max<int64_t>(l.rows / 20, 1);
    json lj = {{"layer_id", l.layer_id}, {"rows", l.rows}, {"lookups", l.lookups}, {"distinct", l.distinct},
               {"entries", l.id_counts.size()}, {"coverage_top10", prof->coverage_of_top(li, 10)},
               {"coverage_top1000", prof->coverage_of_top(li, 1000)},
               {"coverage_1pct_rows", prof->coverage_of_top(li, r1)}, {"coverage_5pct_rows", prof->coverage_of_top(li, r5)}};
    summary["layers"].push_back(lj);
    if (!a.json)
      std::printf("  layer %d: %lld rows, %lld lookups, %lld distinct ids (%.2f%% of rows), %zu written; in-sample "
                  "coverage: top 10 ids %.1f%%, top 1000 %.1f%%, hottest 1%% of rows %.1f%%, 5%% %.1f%%\n",
                  l.layer_id, static_cast<long long>(l.rows), static_cast<long long>(l.lookups),
                  static_cast<long long>(l.distinct), 100.0 * static_cast<double>(l.distinct) / static_cast<double>(l.rows),
                  l.id_counts.size(), 100 * prof->coverage_of_top(li, 10), 100 * prof->coverage_of_top(li, 1000),
                  100 * prof->coverage_of_top(li, r1), 100 * prof->coverage_of_top(li, r5));
  }
  if (a.json) std::printf("%s\n", summary.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  else if (!a.holdout_out.empty()) std::printf("held-out documents written to %s (+ .json)\n", a.holdout_out.c_str());
  return 0;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<ProfileArgs>();
  sub.add_option("--tokens", a->tokens, "token file(s) written by tools/tokenize (FILE + FILE.json)")
      ->delimiter(',')
      ->check(input_file());
  sub.add_option("--out", a->out, "profile file to write")->check(output_file());
  sub.add_option("--layout", a->layout, "bench (the engram bench lookup table), v41-flash, v41-flash-mini or tiny")
      ->capture_default_str();
  sub.add_option("--table-size", a->table_size, "table size of the bench layout (default 32GiB) or of v41-flash-mini")
      ->check(size_in(1, int64_t{1} << 50));
  sub.add_option("--row-format", a->row_format, "bench layout rows: fused or split")
      ->check(parsed_by([](const std::string& t) { return parse_row_format(t).status(); }))
      ->capture_default_str();
  sub.add_option("--d", a->d, "bench layout row width")->check(multiple_in(32, 8192, 32))->capture_default_str();
  sub.add_option("--compression-table", a->table, "compression table (default: tools/tokenize/data/deepseek_v3.compress.bin)")
      ->check(input_file());
  sub.add_option("--seed", a->seed, "EngramConfig.seed of the reference hash")->capture_default_str();
  sub.add_option("--seq-len", a->seq_len, "cut documents into sequences of this many tokens, as the text id source "
                                          "does (0 = whole documents)")
      ->check(integer_in(0, int64_t{1} << 30))
      ->capture_default_str();
  sub.add_option("--top", a->top, "keep the hottest N ids per layer (0 = all)")
      ->check(integer_in(0, int64_t{1} << 40))
      ->capture_default_str();
  sub.add_option("--min-count", a->min_count, "keep ids seen at least N times")
      ->check(integer_in(1, int64_t{1} << 40))
      ->capture_default_str();
  sub.add_option("--holdout", a->holdout, "leave this share of the documents out (deterministic, by document)");
  sub.add_option("--holdout-seed", a->holdout_seed, "seed of the held-out split")->check(unsigned_integer())->capture_default_str();
  sub.add_option("--holdout-out", a->holdout_out, "write the held-out documents as a token file (one --tokens file)")
      ->check(output_file());
  sub.add_flag("--json", a->json, "print the summary as JSON");
  // Options read only with others are refused without them (option_rules.hpp): a named layout fixes its rows.
  CLI::Option* layout = sub.get_option("--layout");
  for (const char* name : {"--row-format", "--d"})
    refuse_unless_value(sub, sub.get_option(name), layout, &a->layout, {"bench"}, "the named layout fixes its rows");
  CLI::Option* holdout = sub.get_option("--holdout");
  for (const char* name : {"--holdout-seed", "--holdout-out"})
    refuse_without(sub, sub.get_option(name), holdout, "no documents are held out without it");
  check_derived_outputs(sub, sub.get_option("--holdout-out"), [a]() -> std::vector<std::string> {
    if (a->holdout_out.empty()) return {};
    return {a->holdout_out + ".json"};
  });
  return [a] { return run(*a); };
}

}  // namespace

ENGRAM_COMMAND(profile, "profile", "Count Engram row ids of token files into a hot-row profile (fills the GPU cache)", setup);

}  // namespace engram::cli
