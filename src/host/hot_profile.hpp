// Hot-row profiles: how often each row id of an Engram layer's table is looked up over a text corpus,
// hottest first. `engram profile` writes one from token files (hashed with the reference N-gram hash); the GPU
// hot-row cache (src/cuda/hot_cache.cuh) is filled from it (`engram run --cache-profile`, `engram bench lookup
// --cache-profile`), and a profile of one part of a corpus measured on another part is the held-out method of
// docs/fastpath.md.
//
// File format (format "engram-hot-profile", format_version 1), little-endian:
//   one line of JSON (the header) ended by '\n':
//     {"format": "engram-hot-profile", "format_version": 1,
//      "layout": {"name", "layer_ids": [..], "heads", "rows": [rows of each layer's table]},
//      "seed", "seq_len", "tokens" (tokens counted), "sources": [{"path", "tokens", "documents"}],
//      "layers": [{"layer_id", "lookups", "distinct", "entries"}],  "info": {...free-form (holdout, command)...}}
//   then, per layer in header order, `entries` records of {int64 id, int64 count} (16 B each).
// `lookups` and `distinct` count every id seen, also those left out of a truncated profile (--top, --min-count),
// so coverage stays relative to all lookups. Records are hottest first (count descending, ties by id ascending);
// ids are global row ids of the layer's table (head offset included), unique, in [0, rows); counts > 0.
// The reader checks all of that; a short, long or inconsistent file is kInvalidArgument naming the file and what
// is wrong (never a partial profile).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "host/token_io.hpp"

namespace engram::host {

inline constexpr const char* kHotProfileFormat = "engram-hot-profile";
inline constexpr int kHotProfileVersion = 1;

struct HotProfileLayer {
  int layer_id = 0;          // model layer index (EngramLayout::layer_ids)
  int64_t rows = 0;          // rows of this layer's table: every id is below it
  int64_t lookups = 0;       // sum of the counts of all ids seen (>= the sum over id_counts)
  int64_t distinct = 0;      // distinct ids seen (>= id_counts.size())
  std::vector<std::pair<int64_t, int64_t>> id_counts;  // (global row id, count), hottest first
};

struct HotProfileSource {
  std::string path;          // token file
  int64_t tokens = 0;        // tokens of it that were counted
  int64_t documents = 0;     // documents of it that were counted
};

struct HotProfile {
  std::string layout_name;
  int heads = 0;
  int64_t seed = 0;          // hash seed (EngramConfig.seed)
  int64_t seq_len = 0;       // sequences were cut at documents and every seq_len tokens (0 = documents only)
  int64_t tokens = 0;        // tokens counted, all sources
  std::vector<HotProfileSource> sources;
  std::vector<HotProfileLayer> layers;  // in layout order
  nlohmann::json info = nlohmann::json::object();  // free-form: holdout split, command line

  // Index of `layer_id` in layers, or -1.
  int layer_index(int layer_id) const;
  // Ids of layers[layer_index], hottest first (what HotRowCache::create takes). Empty for a bad index.
  std::vector<int64_t> hot_ids(int layer_index) const;
  // Share of layers[layer_index]'s lookups that its `top` hottest ids cover (NaN when lookups == 0).
  double coverage_of_top(int layer_index, int64_t top) const;
};

// kInvalidArgument unless `profile` was made for `layout`: same layer ids, same rows per layer, same heads.
Status check_hot_profile_layout(const HotProfile& profile, const EngramLayout& layout);

// Reads a profile file. kNotFound / kPermission / kIo from the file system; kInvalidArgument for a malformed
// header, a truncated or over-long body, or records breaking the rules above (naming layer and record).
Result<HotProfile> read_hot_profile(const std::string& path);
// The same checks on bytes in memory (`path` names the file in messages).
Result<HotProfile> parse_hot_profile(const std::string& path, std::string_view bytes);
// Writes atomically (path.tmp, then rename). kInvalidArgument when `profile` breaks the rules (unsorted, ids
// out of range, duplicate ids); kIo on a write failure.
Status write_hot_profile(const std::string& path, const HotProfile& profile);

// ---- Counting ----------------------------------------------------------------------------------------------
struct HotProfileOptions {
  int64_t seq_len = 2048;    // cut sequences every seq_len tokens inside a document (as TextIdSource); 0 = never
  int64_t top = 0;           // keep at most this many ids per layer (0 = all)
  int64_t min_count = 1;     // keep ids seen at least this often
  int64_t seed = 0;          // the hasher's seed (NgramHashOptions::seed), recorded in the header
};
// One token file's documents to count: all of them when `documents` is empty, else those indices.
struct HotProfileInput {
  const TokenFile* tokens = nullptr;
  std::vector<int64_t> documents;
};
// Hashes every counted document (from its start, cut every seq_len tokens) for every Engram layer of
// hasher.layout() and counts the global row ids. kInvalidArgument for a bad token id, a document index out of
// range, a token file whose vocabulary differs from the hasher's, or bad options.
Result<HotProfile> compute_hot_profile(const NgramHasher& hasher, const std::vector<HotProfileInput>& inputs,
                                       const HotProfileOptions& options = {});

// Deterministic held-out split by document: a document is held out when a hash of (its source path, its
// index in the file, `seed`) falls below `holdout_fraction`. Returns the held-out document indices, ascending.
// The same file, fraction and seed always give the same split.
std::vector<int64_t> holdout_documents(const TokenFile& tokens, double holdout_fraction, uint64_t seed);

}  // namespace engram::host
