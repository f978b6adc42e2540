// The tokenizer.json and compression table of a Hugging Face model directory as `engram table info DIR` reports
// them, and whether the table agrees with config.json; `engram table load DIR --verify` refuses the same
// directories with the same status.
#pragma once

#include <optional>
#include <string>

#include "engram/ngram_hash.hpp"
#include "engram/status.hpp"
#include "host/model_io.hpp"

namespace engram::host {

struct ModelDirTableCheck {
  std::string tokenizer_path;
  bool has_tokenizer = false;
  std::string tokenizer_sha256;      // "" when absent or unreadable
  std::string table_path;            // "" for a table built in memory and not cached
  bool has_table = false;            // a table or a tokenizer.json to build one from is there
  Status status = Status::ok();      // not ok when the table cannot be read or built, or its V' is not config.json's
  std::optional<CompressionTable> table;
  std::string source = "file";       // compression_source_name of where the table came from
  double build_seconds = 0;
  std::string cache_note;
};
// `compression_table`: a table file to check instead of the directory's own ("" = the directory's own, cached or
// built from its tokenizer.json).
ModelDirTableCheck check_model_dir_table(const ModelInfo& info, const std::string& compression_table);

}  // namespace engram::host
