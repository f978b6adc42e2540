// Whole-table room checks (see table_fit.hpp). A shard's size here is its head range's rows times
// the record stride, rounded up to the page; HostTable::create rounds each boundary up instead, so
// the two differ by at most a page per boundary -- far below what a room check can resolve.
#include "host/table_fit.hpp"

#include <sstream>

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
  uint64_t huge_page_bytes = 0;
  auto kind_r = parse_backing_kind(options.backing, &huge_page_bytes);
  auto shards_r = parse_head_shards(options.head_shards, layout.heads());
  if (!kind_r.is_ok() || !shards_r.is_ok()) return Status::ok();
  const BackingKind kind = *kind_r;
  const std::vector<HeadRange>& shards = *shards_r;
  std::vector<std::string> texts;
  if (options.shard_placements.empty()) {
    texts.assign(shards.size(), options.placement);
  } else {
    std::stringstream in(options.shard_placements);
    for (std::string item; std::getline(in, item, ';');) texts.push_back(item);
  }
  if (texts.size() != shards.size()) return Status::ok();
  std::vector<PlacementPolicy> policies;
  for (const std::string& t : texts) {
    auto p = parse_placement(t);
    if (!p.is_ok() || (shards.size() > 1 && p->kind == PlacementKind::kReplicaPerNode)) return Status::ok();
    policies.push_back(*p);
  }
  if (shards.size() > 1 && layout.format != RowFormat::kFused) return Status::ok();
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
      const uint64_t bytes = shards.size() == 1 ? static_cast<uint64_t>(layout.table_bytes(li))
                                                : rows * static_cast<uint64_t>(layout.row_stride_bytes());
      o.size_bytes = (bytes + page - 1) / page * page;
      if (o.size_bytes == 0) return Status::ok();  // create names the empty shard
      requests.emplace_back(o, policies[sh]);
    }
  }
  return room_only(check_backings_fit(requests, popts));
}

Status check_shared_table_fits(const SharedTableSpec& spec) {
  std::vector<std::pair<BackingOptions, PlacementPolicy>> requests;
  for (const auto& s : spec.segments) requests.emplace_back(s.backing, spec.placement);
  Status s = room_only(check_backings_fit(requests, spec.placement_options));
  return s.is_ok() ? s : s.with_context("shared group '" + spec.group + "'");
}

}  // namespace engram::host
