// Hugging Face model directories as released (DeepSeek-V4.1): reading the Engram tables out of them,
// and writing synthetic ones in exactly that format for tests and benchmarks.
//
// A model directory holds config.json, model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}) and the shards
// model-000NN-of-000MM.safetensors (host/safetensors.hpp). A single-file model (model.safetensors,
// no index) is read as one shard holding every tensor. Per Engram layer L the table is two tensors
// beside other tensors of the layer that are not ours (wkv, q_weight, ...):
//   layers.{L}.engram.embed.weight  F8_E4M3  [num_embeddings, head_dim]       FP8 payload
//   layers.{L}.engram.embed.scale   F8_E8M0  [num_embeddings, head_dim / 32]  ue8m0 scales
// (names overridable: ModelTensorNames). config.json (its "text_config" object when that holds the
// fields, else the top level) gives engram_layer_ids, engram_num_embeddings (per layer),
// engram_vocab_size, engram_max_ngram_size, engram_n_heads, engram_head_dim,
// engram_compressed_vocab_size and engram_pad_token_id (alias engram_pad_id; 2 when absent).
//
// The layout is the reference's prime walk from config.json: for every layer and order 2..N, heads
// take the next primes >= engram_vocab_size that no head has used (EngramLayout with
// vocab_size_per_order = engram_vocab_size for every order). DeepSeek-V4.1-Flash: layers 1 and 14, 24
// heads of ~16.0 M rows, engram_num_embeddings [384006168, 384016682], exactly the primes' sums. The
// tensors may have more rows than the primes (num_embeddings >= the sum): those rows are never read,
// and ModelLayer::unused_rows() says how many.
//
// The tokenizer compression table (V' = engram_compressed_vocab_size; every hash multiplier derives
// from it) comes from the directory's own tokenizer.json: an engram.compress.bin (+ .json) in the directory
// is used when its sidecar names that tokenizer.json's SHA-256; otherwise the library builds the table
// itself (host/tokenizer_table.hpp, C++ and ICU) and caches it outside the directory, which may be
// read-only, under compression_cache_dir() as <SHA-256 of tokenizer.json>.bin (+ .json).
//
// Every byte of the directory is untrusted. Errors: kNotFound for a missing directory, config.json,
// index or shard file; kInvalidArgument for malformed JSON, fields out of range, a tensor missing from
// the index or from the shard the index names, a dtype or shape that disagrees with config.json, a
// truncated shard, num_embeddings below the sum of the primes; every message starts with
// "model <dir>: " and names the file, the tensor and the shard.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/transfer.hpp"

namespace engram::host {

inline constexpr const char* kModelConfigFile = "config.json";
inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";
inline constexpr const char* kModelSingleShardFile = "model.safetensors";
inline constexpr const char* kModelTokenizerFile = "tokenizer.json";
inline constexpr const char* kModelCompressionTableFile = "engram.compress.bin";  // + ".json" sidecar

// Names of an Engram layer's two tensors; "{L}" stands for the model layer id.
struct ModelTensorNames {
  std::string weight = "layers.{L}.engram.embed.weight";
  std::string scale = "layers.{L}.engram.embed.scale";
  std::string weight_of(int layer_id) const;
  std::string scale_of(int layer_id) const;
};
// Parses "WEIGHT,SCALE" (`engram ... --tensor-names`): two different names, each holding "{L}" once.
// kInvalidArgument naming the text otherwise.
Result<ModelTensorNames> parse_model_tensor_names(const std::string& text);

// The Engram fields of config.json.
struct ModelEngramConfig {
  std::string section;                  // "text_config" or "" (top level): where the fields are
  std::vector<int> layer_ids;           // engram_layer_ids
  std::vector<int64_t> num_embeddings;  // engram_num_embeddings[layer]: rows of each layer's tensors
  int64_t vocab_size = 0;               // engram_vocab_size: where every order's prime walk starts
  int max_ngram_size = 0;               // engram_max_ngram_size: N, orders 2..N
  int n_heads = 0;                      // engram_n_heads: hash heads per order
  int head_dim = 0;                     // engram_head_dim: d (a multiple of 32)
  int64_t compressed_vocab_size = 0;    // engram_compressed_vocab_size: V'
  int64_t pad_token_id = kDefaultPadId; // engram_pad_token_id / engram_pad_id
  bool pad_token_id_given = false;      // false: absent, the reference's default 2 is used
  // Synthetic directories (write_synthetic_model_dir): top-level "engram_offload_synthetic".
  std::optional<std::string> synthetic_generator;  // "synth_row"
  std::optional<uint64_t> synthetic_seed;
};

// Parses the text of a config.json (pure; `path` names it in messages). kInvalidArgument for invalid
// JSON, a missing field, a wrong type or a value out of range, naming the field.
Result<ModelEngramConfig> parse_model_config(std::string_view text, const std::string& path);

// One tensor located in a shard.
struct ModelTensor {
  std::string name;
  std::string shard;            // file name inside the model directory
  std::string dtype;            // safetensors dtype
  std::vector<int64_t> shape;
  int64_t file_offset = 0;      // absolute byte offset of the tensor in the shard file
  int64_t size_bytes = 0;
};

struct ModelLayer {
  int layer_id = 0;
  ModelTensor weight;           // F8_E4M3 [num_embeddings, d]
  ModelTensor scale;            // F8_E8M0 [num_embeddings, d/32]
  int64_t num_embeddings = 0;   // rows of both tensors (config.json)
  int64_t prime_rows = 0;       // sum of the layer's primes: the rows a table holds and a load reads
  int64_t unused_rows() const { return num_embeddings - prime_rows; }
};

struct ModelShard {
  std::string name;             // file name inside the model directory
  int64_t file_bytes = 0;
  int64_t index_tensors = 0;    // weight_map entries naming it
};

struct ModelInfo {
  std::string dir;
  ModelEngramConfig config;
  ModelTensorNames names;
  bool has_index = false;                 // false: a single model.safetensors
  std::optional<int64_t> index_total_size;  // index.json metadata.total_size, when present
  int64_t index_entries = 0;              // weight_map entries (tensors of the single file otherwise)
  std::vector<ModelShard> shards;         // every shard the index names, sorted by name
  std::vector<ModelLayer> layers;         // one per config.layer_ids entry, in that order
  EngramLayout layout;                    // the prime walk from config.json, split rows, finalized
  std::string path(const std::string& file) const;  // dir + "/" + file
  int64_t table_bytes() const;            // payload + scale bytes of the rows a load reads
};

// Reads config.json, the index and the headers of the shards holding the Engram tensors (no tensor
// data), locates both tensors of every Engram layer and checks them against config.json and the
// layout. Shards the index names but that hold no Engram tensor must exist; their headers are not
// read. Errors as the file comment says.
Result<ModelInfo> read_model_dir(const std::string& dir, const ModelTensorNames& names = {});

// info.layout with the in-memory row format `format` (re-finalized: fused records are wider).
Result<EngramLayout> model_layout(const ModelInfo& info, RowFormat format);

struct ModelLoadOptions {
  int threads = 0;                          // reader threads; 0 = min(16, reader CPUs or all CPUs)
  int64_t chunk_bytes = int64_t{64} << 20;  // bytes of rows per read item
  bool drop_page_cache = true;              // posix_fadvise DONTNEED behind the readers
  std::vector<int> reader_cpus;             // pin the readers to these CPUs
  int reader_node = -1;                     // ... or, when reader_cpus is empty, to this node's CPUs
                                            // (those the process may use); -1 = not pinned
  TransferProgressFn on_progress;           // bytes done / total, elapsed; on the calling thread
};

// Streams the first layout.rows(i) rows of every Engram layer i from the shards into spans[i] (fused
// or split, as the spans are; a TP slice's span: only its rows [row_begin, row_end) of each tensor;
// host/row_load.hpp): bounded buffers, parallel readers, page cache
// dropped behind them. The library prints nothing; the progress line is the caller's (report/progress_line.hpp).
// `layout` must describe the same tables as info.layout (check_layout_matches); rows past the primes
// (ModelLayer::unused_rows) are not read. Errors: kInvalidArgument (layout, spans, a shard that
// shrank since read_model_dir, reader CPUs outside the process's affinity), kNotFound (a shard gone,
// no such node), kIo (a read failed). On error the spans hold partial data.
Status load_model(const ModelInfo& info, const EngramLayout& layout, std::span<const TableSpan> spans,
                  const ModelLoadOptions& options = {});

// ---- tokenizer compression table ---------------------------------------------------------------

// DIR/engram.compress.bin: where a directory may carry its own compression table.
std::string model_compression_table_path(const ModelInfo& info);

// kInvalidArgument unless a table's V' equals config.json's engram_compressed_vocab_size, naming both
// numbers and both files: every hash multiplier derives from V', so a mismatch would rehash the table.
Status check_compressed_vocab_size(int64_t table_compressed_vocab, const std::string& table_path,
                                   int64_t config_compressed_vocab, const std::string& config_path);

// SHA-256 (hex) of a file. kNotFound / kPermission / kIo.
Result<std::string> file_sha256(const std::string& path);

// Reads the compression table at `path` (default model_compression_table_path) and checks it belongs
// to the model: its V' against engram_compressed_vocab_size (check_compressed_vocab_size), its pad id
// against engram_pad_token_id, and, when both the directory's tokenizer.json and the sidecar's
// tokenizer_json_sha256 exist, that the table was built from that very file. Errors: as
// read_compression_table; kInvalidArgument for each disagreement, naming both values.
Result<CompressionTable> read_model_compression_table(const ModelInfo& info, const std::string& path = "");

// Where built compression tables are cached: $ENGRAM_CACHE_DIR/compress when set, else
// $XDG_CACHE_HOME/engram/compress (an absolute XDG_CACHE_HOME), else $HOME/.cache/engram/compress; "" when
// none of these is set.
std::string compression_cache_dir();

// A model directory's compression table and where it came from.
struct ModelCompressionTable {
  enum class Source { kDirectory, kCache, kBuilt };
  CompressionTable table;
  Source source = Source::kBuilt;
  std::string path;           // the file read (directory, cache) or written (built; "" when not cached)
  double build_seconds = 0;   // kBuilt: time to build it from tokenizer.json
  std::string cache_note;     // kBuilt and not cached: why
};
const char* compression_source_name(ModelCompressionTable::Source s);  // "directory", "cache", "built"

// The directory's compression table, without Node: DIR/engram.compress.bin when present (checked as
// read_model_compression_table), else the cached table of DIR/tokenizer.json's SHA-256, else built from
// DIR/tokenizer.json (build_compression_table) and cached atomically (temporary file + rename; a cache that
// cannot be written is no error: cache_note says why). Nothing is written into DIR. Then V' must equal
// engram_compressed_vocab_size (kInvalidArgument naming both numbers). kNotFound when the directory has
// neither tokenizer.json nor engram.compress.bin; errors of the table's reading or building otherwise.
Result<ModelCompressionTable> model_compression_table(const ModelInfo& info);

// The shell command that builds a model directory's compression table from its tokenizer.json with
// tools/tokenize (Node, a developer cross-check of the C++ build), quoted: node '<tokenize.mjs>' table
// --tokenizer-json '<DIR>/tokenizer.json' --pad-id <P> --out '<out>' (out default model_compression_table_path).
std::string model_compression_table_command(const ModelInfo& info, const std::string& out_path = "");

// ---- synthetic model directories ---------------------------------------------------------------

struct SyntheticModelOptions {
  uint64_t seed = 1;                     // row r of Engram layer index i is synth_row(seed, i, r, ...)
  int64_t extra_rows = 0;                // rows past the primes in every Engram tensor (not loaded)
  int other_shards = 2;                  // shards of unrelated tensors before the Engram shards
  std::string tokenizer_json;            // copied to DIR/tokenizer.json; "" = none
  std::string tokenizer_config_json;     // copied to DIR/tokenizer_config.json; "" = none
  std::string compression_table;         // copied with its sidecar to DIR/engram.compress.bin; "" = none
  int64_t compressed_vocab_size = 0;     // config.json V'; 0 = the compression table's (required then)
  int64_t pad_token_id = kDefaultPadId;
  ModelTensorNames names;
  bool overwrite = false;                // replace an existing synthetic model directory
  int threads = 0;                       // writer threads; 0 = min(8, CPUs)
  int64_t chunk_bytes = int64_t{64} << 20;
  bool drop_page_cache = true;
  TransferProgressFn on_progress;        // phase "write", bytes of every shard together
  // Polled between chunks of every shard: true stops the write, removes the temporary directory and returns kIo
  // "... cancelled ..." (a signal handler's flag, as for a checkpoint write).
  std::function<bool()> cancelled;
};

// Writes a model directory in the released format with the Engram tables of `layout` (finalized, one
// vocab size for every order: config.json has one engram_vocab_size): config.json (with
// "engram_offload_synthetic": {"generator": "synth_row", "seed": S}), the index, other_shards shards of
// unrelated tensors (embeddings, attention and FFN weights of every layer) and one last shard per
// Engram layer holding its table with the layer's other Engram tensors interleaved (wkv, q/k weights),
// plus the optional tokenizer and compression table copies. Atomic: everything is written into a
// temporary sibling directory that is renamed to `dir` when complete; on any error it is removed and
// `dir` is untouched. With overwrite, only a directory that is itself a synthetic model directory is
// replaced. Errors: kInvalidArgument (layout, options, `dir` exists), kNotFound (parent directory,
// files to copy), kNoSpace / kIo / kPermission from the file system.
Status write_synthetic_model_dir(const std::string& dir, const EngramLayout& layout,
                                 const SyntheticModelOptions& options);

}  // namespace engram::host
