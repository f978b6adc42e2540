// Whole-table room checks (see table_fit.hpp). A shard's size here is its head range's rows times
// the record stride, rounded up to the page; HostTable::create rounds each boundary up instead, so
// the two differ by at most a page per boundary -- far below what a room check can resolve. A TP
// slice is one backing per layer of exactly the slice's rows (none for a rank without heads).
#include "host/table_fit.hpp"

#include "host/backing.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"

namespace engram::host {

namespace {

// Only "does not fit" is this check's to say; anything else (bad text, a node that does not exist, no
// hugepage pool, a missing directory) the builder reports itself, naming the layer or shard.
Status room_only(const Status& s) { return s.code() == Code::kNoSpace ? s : Status::ok(); }

}  // namespace

Status check_table_fits(const EngramLayout& layout, const TableOptions& options) {
  if (layout.head_offsets.size() != layout.layer_ids.size()) return Status::ok();
  const BackingKind kind = options.backing.kind;
  const uint64_t huge_page_bytes =
      kind == BackingKind::kHugetlb ? (options.backing.huge_page_bytes ? options.backing.huge_page_bytes : 2u << 20) : 0;
  if (!options.tp.whole() && (!options.head_shards.empty() || !check_tp_slice(options.tp).is_ok()))
    return Status::ok();  // create names it
  std::vector<HeadRange> shards = options.head_shards;
  if (shards.empty()) shards.push_back({0, layout.heads()});
  if (!options.tp.whole()) {
    const LayerSlice sl = layer_slice(layout, 0, options.tp);
    if (sl.held_heads() == 0) return Status::ok();  // nothing to allocate
    shards = {{sl.head_begin, sl.head_begin + sl.held_heads()}};
  }
  const std::vector<PlacementPolicy> policies =
      options.shard_placements.empty() ? std::vector<PlacementPolicy>(shards.size(), options.placement)
                                       : options.shard_placements;
  if (policies.size() != shards.size()) return Status::ok();
  for (const auto& p : policies)
    if (shards.size() > 1 && p.kind == PlacementKind::kReplicaPerNode) return Status::ok();
  if (shards.size() > 1 && layout.format != RowFormat::kFused) return Status::ok();
  for (const auto& sh : shards)
    if (sh.begin < 0 || sh.end > layout.heads() || sh.end <= sh.begin) return Status::ok();  // create names it
  const uint64_t page = kind == BackingKind::kHugetlb ? huge_page_bytes : 4096;
  PlacementOptions popts;
  popts.allow_fallback = options.allow_fallback;
  std::vector<std::pair<BackingOptions, PlacementPolicy>> requests;
  for (int li = 0; li < layout.n_layers(); ++li) {
    for (size_t sh = 0; sh < shards.size(); ++sh) {
      BackingOptions o;
      o.kind = kind;
      o.shm_dir = options.shm_dir;
      if (huge_page_bytes) o.huge_page_bytes = huge_page_bytes;
      TableIdentity id;
      id.layer_id = layout.layer_ids[static_cast<size_t>(li)];
      id.head_begin = shards[sh].begin;
      id.head_end = shards[sh].end;
      id.group = options.group;
      o.name = table_backing_name(id);
      const auto& offsets = layout.head_offsets[static_cast<size_t>(li)];
      const uint64_t rows = static_cast<uint64_t>(offsets[static_cast<size_t>(shards[sh].end)] -
                                                  offsets[static_cast<size_t>(shards[sh].begin)]);
      const uint64_t bytes = shards.size() == 1 && options.tp.whole()
                                 ? static_cast<uint64_t>(layout.table_bytes(li))
                                 : rows * static_cast<uint64_t>(layout.row_stride_bytes());
      o.size_bytes = (bytes + page - 1) / page * page;
      if (o.size_bytes == 0) return Status::ok();  // create names the empty shard
      requests.emplace_back(o, policies[sh]);
    }
  }
  return room_only(check_backings_fit(requests, popts));
}

}  // namespace engram::host
