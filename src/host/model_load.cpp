// Loading a model directory's Engram tables into table spans (see model_io.hpp): the located tensors
// become RowSources for host/row_load, which does the streaming. The shards are opened again here
// (read_model_dir keeps no descriptors) and each is checked to still hold its tensors' byte ranges,
// so a file replaced or truncated since read_model_dir is an error before the first read rather than
// a short read midway.
#include <algorithm>
#include <iterator>
#include <map>

#include "host/checkpoint.hpp"
#include "host/model_io.hpp"
#include "host/row_load.hpp"
#include "sys/affinity.hpp"
#include "sys/file.hpp"
#include "sys/numa.hpp"

namespace engram::host {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

// Reader CPUs: the explicit list, else the node's CPUs this process may run on.
Result<std::vector<int>> reader_cpus(const ModelLoadOptions& opt) {
  if (!opt.reader_cpus.empty() || opt.reader_node < 0) return opt.reader_cpus;
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<int> node, sys::node_cpus(opt.reader_node));
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<int> allowed, sys::thread_affinity());
  std::vector<int> cpus;
  std::set_intersection(node.begin(), node.end(), allowed.begin(), allowed.end(), std::back_inserter(cpus));
  if (cpus.empty())
    return invalid("reader node " + std::to_string(opt.reader_node) + ": none of its CPUs is in this process's affinity");
  return cpus;
}

Status load_impl(const ModelInfo& info, const EngramLayout& layout, std::span<const TableSpan> spans,
                 const ModelLoadOptions& opt) {
  if (layout.head_offsets.size() != layout.layer_ids.size()) return invalid("the requested layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_layout_matches(info.layout, layout));
  if (info.layers.size() != layout.layer_ids.size()) return invalid("ModelInfo lists no tensors for its layers");
  ENGRAM_RETURN_IF_ERROR(check_table_spans(layout, spans));
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<int> cpus, reader_cpus(opt));

  std::map<std::string, sys::File> files;
  auto open_checked = [&](const ModelTensor& t, int64_t rows, int64_t row_bytes) -> Result<const sys::File*> {
    auto it = files.find(t.shard);
    if (it == files.end()) {
      auto f = sys::open_read(info.path(t.shard));
      if (!f.is_ok()) return f.status().with_context("shard " + t.shard);
      it = files.emplace(t.shard, std::move(f).value()).first;
    }
    ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(it->second));
    if (t.file_offset < 0 || rows * row_bytes > t.size_bytes || t.file_offset + t.size_bytes > size)
      return invalid("tensor " + t.name + " in shard " + t.shard + ": bytes [" + std::to_string(t.file_offset) + ", " +
                     std::to_string(t.file_offset + t.size_bytes) + ") are not in the file of " + std::to_string(size) +
                     " bytes (changed since it was read?)");
    return &it->second;
  };
  std::vector<RowSource> sources;
  for (int i = 0; i < layout.n_layers(); ++i) {
    const ModelLayer& ml = info.layers[static_cast<size_t>(i)];
    ENGRAM_ASSIGN_OR_RETURN(const sys::File* wf, open_checked(ml.weight, layout.rows(i), layout.d));
    ENGRAM_ASSIGN_OR_RETURN(const sys::File* sf, open_checked(ml.scale, layout.rows(i), layout.d / 32));
    sources.push_back({wf, ml.weight.file_offset, sf, ml.scale.file_offset});
  }
  RowLoadOptions ro;
  ro.threads = opt.threads;
  ro.thread_cap = 16;
  ro.chunk_bytes = opt.chunk_bytes;
  ro.drop_page_cache = opt.drop_page_cache;
  ro.reader_cpus = cpus;
  ro.on_progress = opt.on_progress;
  return load_rows(layout, sources, spans, ro);
}

}  // namespace

Status load_model(const ModelInfo& info, const EngramLayout& layout, std::span<const TableSpan> spans,
                  const ModelLoadOptions& options) {
  try {
    const Status s = load_impl(info, layout, spans, options);
    return s.is_ok() ? s : s.with_context("model " + info.dir);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "model " + info.dir + ": out of memory while loading");
  }
}

}  // namespace engram::host
