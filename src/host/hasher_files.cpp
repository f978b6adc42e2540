// The public hashers made from files (engram/ngram_hash.hpp): a compression table file, or a model directory's
// config.json and compression table (whole, or its parts: read_model_hashing). Here rather than in src/core because
// reading the files is host code; the checks are the ones the text id sources apply (host/token_io.hpp, host/model_io.hpp), so a consumer's hasher and
// the engine's replays agree on what a model's ids are.
#include <string>
#include <utility>

#include "engram/ngram_hash.hpp"
#include "host/model_io.hpp"
#include "host/token_io.hpp"

namespace engram {

Result<NgramHasher> ngram_hasher_from_table_file(const EngramLayout& layout, const std::string& path,
                                                 const NgramHashOptions& options) {
  ENGRAM_ASSIGN_OR_RETURN(CompressionTable table, read_compression_table(path));
  return NgramHasher::create(layout, std::move(table), options);
}

Result<NgramHasher> model_ngram_hasher(const std::string& model_dir, RowFormat format,
                                       const std::string& compression_table) {
  ENGRAM_ASSIGN_OR_RETURN(const host::ModelInfo info, host::read_model_dir(model_dir));
  ENGRAM_ASSIGN_OR_RETURN(EngramLayout layout, host::model_layout(info, format));
  CompressionTable table;
  if (compression_table.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(host::ModelCompressionTable found, host::model_compression_table(info));
    table = std::move(found.table);
  } else {
    ENGRAM_ASSIGN_OR_RETURN(table, host::read_model_compression_table(info, compression_table));
  }
  NgramHashOptions options;
  options.pad_id = info.config.pad_token_id;
  options.expected_compressed_vocab = info.config.compressed_vocab_size;
  return NgramHasher::create(layout, std::move(table), options);
}

Result<ModelHashing> read_model_hashing(const std::string& model_dir, RowFormat format,
                                        const std::string& tensor_names) {
  host::ModelTensorNames names;
  if (!tensor_names.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(names, host::parse_model_tensor_names(tensor_names));
  }
  ENGRAM_ASSIGN_OR_RETURN(const host::ModelInfo info, host::read_model_dir(model_dir, names));
  ModelHashing h;
  ENGRAM_ASSIGN_OR_RETURN(h.layout, host::model_layout(info, format));
  ENGRAM_ASSIGN_OR_RETURN(host::ModelCompressionTable t, host::model_compression_table(info));
  h.table = std::move(t.table);
  h.table_path = t.path;
  h.table_source = host::compression_source_name(t.source);
  h.hash.pad_id = info.config.pad_token_id;
  h.hash.expected_compressed_vocab = info.config.compressed_vocab_size;
  return h;
}

}  // namespace engram
