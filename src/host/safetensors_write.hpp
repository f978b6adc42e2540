// Writing safetensors files whose tensors are generated row by row: engram checkpoints and the
// shards of synthetic model directories.
//
// Tensors come in groups of the same row count (shape[0]) that one callback fills together, chunk
// by chunk, so that e.g. the payload and the scales of an Engram layer are made by one synth_row call
// per row. Chunks are generated and written by several threads (host/transfer.hpp) and pushed out of
// the page cache as they go (sync_file_range, then DONTNEED), so writing a 200 GB file neither holds
// a tensor in memory nor flushes everything else out of the page cache. The data section starts on a
// 4 KiB boundary and tensors follow each other without holes, in the order asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engram/status.hpp"
#include "host/transfer.hpp"

namespace engram::host {

struct TensorSpec {
  std::string name;
  std::string dtype;            // a safetensors dtype (safetensors_dtype_bytes(dtype) > 0)
  std::vector<int64_t> shape;   // shape[0] = the group's rows; at least one dimension
};

struct TensorGroup {
  int64_t rows = 0;
  std::vector<TensorSpec> tensors;
  // Writes rows [lo, hi) of every tensor of the group: out[k] has room for exactly (hi - lo) rows of
  // tensors[k]. Called from several threads at once for disjoint ranges.
  std::function<void(int64_t lo, int64_t hi, std::span<uint8_t* const> out)> fill;
};

struct SafetensorsWriteOptions {
  int threads = 0;                          // generator/writer threads; 0 = min(8, CPUs)
  int64_t chunk_bytes = int64_t{64} << 20;  // bytes of rows per work item (whole rows)
  bool drop_page_cache = true;              // write back and drop each chunk as it goes
  TransferProgressFn on_progress;           // phase "write", on the calling thread
  // Polled before each chunk (from the writer threads): true stops the write, removes the file and returns
  // kIo "... cancelled ..." (sys_error EINTR).
  std::function<bool()> cancelled;
};

// Writes a new file at `path` (which must not exist: create_new) holding the tensors of `groups`
// and `metadata` as __metadata__, then fsyncs and closes it. `data_order` lists every tensor once as
// (group, index in group) in the order its bytes follow each other in the data section; empty = the
// groups' order. Errors: kInvalidArgument (a spec: unknown dtype, shape[0] != rows, duplicate name,
// bad order), kNotFound / kPermission / kNoSpace / kIo from the file system. On error the file is
// removed.
Status write_safetensors_file(const std::string& path, std::span<const TensorGroup> groups,
                              const std::map<std::string, std::string>& metadata,
                              const std::vector<std::pair<size_t, size_t>>& data_order,
                              const SafetensorsWriteOptions& options);

// A name for a temporary sibling of `target` in the same directory: ".<name>.tmp-<16 hex digits>".
std::string temp_sibling_name(const std::string& target);

}  // namespace engram::host
