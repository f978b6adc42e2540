// See model_table_check.hpp: the directory's files are probed (a missing tokenizer.json or table is reported, not
// an error); a table that is there but cannot be read, built or matched to config.json is the check's status.
#include "host/model_table_check.hpp"

#include "sys/file.hpp"

namespace engram::host {
namespace {

bool exists(const std::string& path) {
  auto r = sys::path_exists(path);
  return r.is_ok() && *r;
}

}  // namespace

ModelDirTableCheck check_model_dir_table(const ModelInfo& info, const std::string& compression_table) {
  ModelDirTableCheck c;
  c.tokenizer_path = info.path(kModelTokenizerFile);
  c.has_tokenizer = exists(c.tokenizer_path);
  if (c.has_tokenizer)
    if (auto sha = file_sha256(c.tokenizer_path); sha.is_ok()) c.tokenizer_sha256 = *sha;
  // The table: a named file (--compression-table), else the directory's own, cached or built one.
  c.table_path = compression_table;
  if (!compression_table.empty()) {
    c.has_table = exists(c.table_path);
    if (c.has_table) {
      auto t = read_model_compression_table(info, c.table_path);
      if (t.is_ok()) c.table = std::move(t).value();
      else c.status = t.status();
    }
    return c;
  }
  auto t = model_compression_table(info);
  // Absent only when the directory has neither a table nor a tokenizer.json to build one from.
  c.has_table = t.is_ok() || c.has_tokenizer || exists(model_compression_table_path(info));
  if (t.is_ok()) {
    c.table = std::move(t->table);
    c.table_path = t->path;
    c.source = compression_source_name(t->source);
    c.build_seconds = t->build_seconds;
    c.cache_note = t->cache_note;
  } else if (c.has_table) {
    c.status = t.status();
  }
  return c;
}

}  // namespace engram::host
