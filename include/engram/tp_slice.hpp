// TpSlice: a tensor-parallel rank's part of the Engram tables, sharded as vLLM's ParallelEngramEmbedding does.
//
// Heads of a layer (H of them) go to the ranks in runs of P = ceil(H / tp_size) consecutive heads: rank r holds
// heads [r*P, min(H, (r+1)*P)) and the rows of the layer's table those heads own, [vocab_start, vocab_end) =
// [head_offsets[r*P], head_offsets[min(H, (r+1)*P)]) (layout.hpp: head h owns rows [head_offsets[h],
// head_offsets[h+1]) of its layer). When H % tp_size != 0 the run of a last rank reaches past H: its heads past H
// are padding, and a rank whose run starts at or past H holds no heads and no rows (H = 6, tp_size = 4: rank 3).
//
// A rank's table holds only its rows (local row k is global row vocab_start + k). Its lookup takes the layer's
// whole ids [tokens][H] (global ids, as the hasher gives them) and writes staging [tokens][P][d]: local head j is
// global head r*P + j, decoded from local row id - vocab_start; zeros for padded heads, for negative ids and for
// ids of another rank's rows. That is vLLM's per-rank output: gathering the ranks' staging along the head axis and
// cutting it to H heads gives the full-table lookup, bit for bit (its forward: all_gather(dim=1)[:, :H]).
// These are the semantics of vLLM's ParallelEngramEmbedding (vllm/models/deepseek_v41/common/engram.py: heads
// sharded by cdiv, rows following the heads, its lookup kernel's owned = head < H & vocab_start <= id < vocab_end,
// zeros otherwise). One addition: an id >= the layer's rows is invalid on every rank (counted, or refused in
// checked mode), as on a whole table; vLLM writes its zero row without counting it.
#pragma once

#include <cstdint>
#include <string>

#include "engram/export.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

struct TpSlice {
  int size = 1;  // tensor-parallel world size (vLLM's tp_size); 1 = the whole table
  int rank = 0;  // this rank, in [0, size)
  bool whole() const { return size == 1; }
  std::string to_string() const;  // "whole", "tp rank 1 of 4"
  bool operator==(const TpSlice& o) const { return size == o.size && rank == o.rank; }
};

// kInvalidArgument naming the values: size < 1 or rank outside [0, size). A size above the layout's heads is
// allowed, as in vLLM: P is then 1 and the ranks from H on hold no heads.
Status check_tp_slice(const TpSlice& tp);

// Where one rank's slice of one Engram layer lies (TableView::slice carries it). local_heads == 0 marks the whole
// layer (no slice): ids and staging have the same H heads, global id = row.
struct LayerSlice {
  int heads = 0;           // H: heads of the layer, the ids' columns
  int head_begin = 0;      // first head of the rank's run (rank * P; >= heads for a rank without heads)
  int local_heads = 0;     // P = ceil(H / size): the staging's heads per token; 0 = the whole layer
  int64_t row_begin = 0;   // vocab_start: the global id of local row 0
  int64_t row_end = 0;     // vocab_end: one past the last global id held (row_begin when no heads are held)
  int64_t layer_rows = 0;  // rows of the whole layer: an id >= it is invalid
  bool sliced() const { return local_heads > 0; }
  int held_heads() const;  // heads of the run inside [0, H): P, fewer on a last rank, 0 on a rank without heads
  int64_t rows() const { return row_end - row_begin; }
  // Heads per token of the staging of a lookup whose ids have `ids_heads` columns.
  int out_heads(int ids_heads) const { return sliced() ? local_heads : ids_heads; }
};

// The slice of Engram layer `layer_index` held by `tp` (whole(): local_heads 0, rows [0, layer rows)). `layout` is
// finalized and tp passes check_tp_slice.
LayerSlice layer_slice(const EngramLayout& layout, int layer_index, const TpSlice& tp);

// P = ceil(heads / tp.size): the staging's heads per token on every rank (heads when tp.whole()).
int tp_local_heads(int heads, const TpSlice& tp);

ENGRAM_API_END
}  // namespace engram
