// A table's rows saved as a checkpoint: one safetensors file of this project's format (docs/format.md: per Engram
// layer an F8_E4M3 payload [rows, d] and U8 ue8m0 scales [rows, d/32], the layout in __metadata__), the file that
// TableContent::Kind::kCheckpoint reads back (Engine::create_local, fill_table) and content_layout describes.
//
// The write goes to a temporary name in the target directory, fsync'ed and renamed over the target only when
// complete: an error never leaves a half-written checkpoint under the target name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engram/export.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {
ENGRAM_API_BEGIN

struct CheckpointWriteOptions {
  bool overwrite = false;  // replace an existing file at the target path
  int threads = 0;         // writer threads; 0 = min(8, CPUs this process may run on)
  // Progress (bytes written, bytes in all, seconds): on the calling thread about every 100 ms and once at the end
  // (written == all). The library prints nothing.
  std::function<void(int64_t, int64_t, double)> on_progress;
  // Polled before each chunk (from the writer threads): true stops the write, removes the temporary file and
  // returns kIo "... cancelled ..." (sys_error EINTR).
  std::function<bool()> cancelled;
};

// Writes every layer of `table` (fused or split rows in memory; the file is always split) as a checkpoint at `path`.
// Thread safety: the table's rows must not change during the write.
// Errors: kInvalidArgument when the target exists and !overwrite (nothing is written) or for a TP slice (it does
// not hold whole layers); kNotFound when the directory does not exist; kNoSpace / kIo / kPermission from the file
// system (the temporary file is removed, the target is untouched).
Status write_table_checkpoint(const std::string& path, const HostTable& table,
                              const CheckpointWriteOptions& options = {});

ENGRAM_API_END
}  // namespace engram
