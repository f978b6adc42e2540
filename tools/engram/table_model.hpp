// `engram table` on Hugging Face model directories (host/model_io.hpp): create a synthetic one, describe
// one, load one (GB/s next to a sequential read of the same bytes, cold or warm page cache), and the
// row check every `table load --verify` shares. cmd_table.cpp declares the options and dispatches a
// directory argument here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/model_io.hpp"

namespace engram::cli {

struct ModelCreateArgs {
  std::string layout;
  std::string table_size;
  bool table_size_given = false;  // --table-size was on the command line (an empty value is refused)
  std::string seed = "1";
  std::string out;
  bool force = false;
  int threads = 0;
  int64_t extra_rows = 0;
  int shards = 2;
  std::string tokenizer_json = "auto";      // "auto": the bundled DeepSeek-V3 one when installed; "none"
  std::string compression_table = "auto";   // "auto": the committed DeepSeek-V3 table; "none"
  int64_t compressed_vocab_size = 0;        // 0: the compression table's
  int64_t pad_id = 2;
  std::string tensor_names;
  std::string progress = "auto";  // --progress (progress_args.hpp)
};

struct ModelInfoArgs {
  std::string dir;
  std::string tensor_names;
  std::string compression_table;  // "" = DIR/engram.compress.bin
  bool json = false;
};

struct ModelLoadArgs {
  std::string dir;
  std::string tensor_names;
  std::string row_layout = "fused";
  std::string backing = "memfd";
  std::string placement = "none";
  bool no_prefault = false;          // the readers' first writes allocate the table's pages
  std::vector<std::string> table_options;  // KEY=VALUE, as set_table_option takes them
  int threads = 0;
  int reader_node = -1;
  std::string cache = "as-is";       // as-is | cold | warm
  bool compare_sequential = false;
  bool keep_cache = false;
  bool verify = false;
  bool json = false;
  std::string progress = "auto";  // --progress (progress_args.hpp)
};

// --seed text: a non-negative integer below 2^64. kInvalidArgument otherwise.
Result<uint64_t> parse_seed_arg(const std::string& s);
// --layout PRESET [--table-size SIZE] as a split-row layout (--table-size for v41-flash-mini only).
Result<EngramLayout> layout_arg(const std::string& preset, const std::string& table_size, bool table_size_given);

int create_model_dir(const ModelCreateArgs& a);
int info_model_dir(const ModelInfoArgs& a);
int load_model_dir(const ModelLoadArgs& a);

}  // namespace engram::cli
