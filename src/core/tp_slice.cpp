// Tensor-parallel slices of a layout (see include/engram/tp_slice.hpp): the head run and row range of a rank,
// computed from the layout's head offsets exactly as vLLM's ParallelEngramEmbedding computes part_n_hash_cols,
// head_start, vocab_start_idx and vocab_end_idx (the sums of the head sizes before head_start and before
// head_start + part, the latter clamped at H as a Python slice is).
#include "engram/tp_slice.hpp"

#include <algorithm>

namespace engram {

std::string TpSlice::to_string() const {
  if (whole()) return "whole";
  return "tp rank " + std::to_string(rank) + " of " + std::to_string(size);
}

Status check_tp_slice(const TpSlice& tp) {
  if (tp.size < 1)
    return Status(Code::kInvalidArgument, "tp size " + std::to_string(tp.size) + ": must be >= 1");
  if (tp.rank < 0 || tp.rank >= tp.size)
    return Status(Code::kInvalidArgument, "tp rank " + std::to_string(tp.rank) + ": must be in [0, " +
                                              std::to_string(tp.size) + ") for tp size " + std::to_string(tp.size));
  return Status::ok();
}

int tp_local_heads(int heads, const TpSlice& tp) {
  if (tp.size <= 1) return heads;
  return (heads + tp.size - 1) / tp.size;
}

int LayerSlice::held_heads() const {
  if (!sliced()) return heads;
  return std::max(0, std::min(heads, head_begin + local_heads) - head_begin);
}

LayerSlice layer_slice(const EngramLayout& layout, int layer_index, const TpSlice& tp) {
  const auto& offsets = layout.head_offsets.at(static_cast<size_t>(layer_index));
  LayerSlice s;
  s.heads = layout.heads();
  s.layer_rows = offsets.back();
  if (tp.whole()) {
    s.row_end = s.layer_rows;
    return s;
  }
  s.local_heads = tp_local_heads(s.heads, tp);
  s.head_begin = tp.rank * s.local_heads;
  const int first = std::min(s.head_begin, s.heads);
  const int last = std::min(s.head_begin + s.local_heads, s.heads);
  s.row_begin = offsets[static_cast<size_t>(first)];
  s.row_end = offsets[static_cast<size_t>(last)];
  return s;
}

}  // namespace engram
