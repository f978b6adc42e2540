// The public checkpoint writer (engram/checkpoint.hpp): host::write_checkpoint with the public option types, so
// that a consumer saves a table without the loader's internals (chunk sizes, page-cache policy, transfer records).
#include <utility>

#include "engram/checkpoint.hpp"
#include "host/checkpoint.hpp"

namespace engram {

Status write_table_checkpoint(const std::string& path, const HostTable& table, const CheckpointWriteOptions& options) {
  host::WriteOptions o;
  o.overwrite = options.overwrite;
  o.threads = options.threads;
  o.cancelled = options.cancelled;
  if (options.on_progress) {
    auto fn = options.on_progress;
    o.on_progress = [fn](const host::CheckpointProgress& p) { fn(p.done_bytes, p.total_bytes, p.elapsed_s); };
  }
  return host::write_checkpoint(path, table, o);
}

}  // namespace engram
