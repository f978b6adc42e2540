// HostTable: each Engram layer's table in placed memory (the synthetic rows are table_fill.cpp's).
// `create` builds each layer's table on a placed backing (host/placement.hpp): the layer's split
// arrays (payload then scales) or fused records live in one backing, so a layer is one object with
// one policy, one identity in /proc/<pid>/maps and one census. With head-range shards (tensor
// parallelism) a layer is several backings, one per head range, each with its own policy and census,
// mapped side by side (MAP_FIXED) into one reserved address range: consumers still see one contiguous
// table and index it with global row ids. A shard boundary falls on a page edge, so the partial page
// that two head ranges share is the lower shard's; it is at most one page per boundary.
// A tensor-parallel slice (TableOptions::tp) is the other way round: the table holds only the rank's
// rows, so each layer's backing is the slice's bytes and nothing else (views say which global rows
// they hold); a rank without heads has no backing, its views no rows.
#include "engram/table.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/parallel.hpp"
#include "core/units.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "host/table_fit.hpp"
#include "sys/affinity.hpp"
#include "sys/memfd.hpp"
#include "sys/memory.hpp"
#include "sys/protect.hpp"

namespace engram {

struct HostTable::Storage {
  std::vector<std::vector<host::PlacedBacking>> layers;  // [layer][replica]; sharded: [layer][shard]
};

HostTable::HostTable() : replica_nodes_{-1} {}

TableSpan layer_span(uint8_t* base, const EngramLayout& layout, int layer_index, const TpSlice& tp) {
  TableSpan s;
  if (!tp.whole()) s.slice = layer_slice(layout, layer_index, tp);
  const int64_t rows = tp.whole() ? layout.rows(layer_index) : s.slice.rows();
  s.data = rows > 0 ? base : nullptr;
  s.rows = rows;
  s.d = layout.d;
  s.format = layout.format;
  if (layout.format == RowFormat::kFused) {
    s.stride_bytes = layout.row_stride_bytes();
  } else {
    s.stride_bytes = layout.d;
    s.scales = s.data ? s.data + rows * layout.d : nullptr;
  }
  return s;
}

Result<std::vector<HeadRange>> parse_head_shards(const std::string& text, int heads) {
  const auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "head shards \"" + text + "\": " + why);
  };
  if (heads <= 0) return bad("the layout has no heads");
  std::vector<HeadRange> out;
  if (text.empty() || text.find_first_not_of("0123456789") == std::string::npos) {
    const long n = text.empty() ? 1 : std::strtol(text.c_str(), nullptr, 10);
    if (n < 1 || n > heads) return bad("the shard count must be 1.." + std::to_string(heads));
    for (long i = 0; i < n; ++i)
      out.push_back({static_cast<int>(heads * i / n), static_cast<int>(heads * (i + 1) / n)});
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    int b = -1, e = -1;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d-%d%c", &b, &e, &tail) != 2) return bad("\"" + item + "\" is not a range a-b");
    const int expect = out.empty() ? 0 : out.back().end;
    if (b != expect) return bad("ranges must tile the heads in order: expected one starting at " + std::to_string(expect));
    if (e <= b) return bad("\"" + item + "\" is empty");
    out.push_back({b, e});
    pos = comma + 1;
  }
  if (out.empty() || out.back().end != heads)
    return bad("ranges must end at the layout's " + std::to_string(heads) + " heads");
  return out;
}


Result<std::unique_ptr<HostTable>> HostTable::create(const EngramLayout& layout, const TableOptions& options) {
  if (layout.head_offsets.size() != layout.layer_ids.size())
    return Status(Code::kInvalidArgument, "HostTable: layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_tp_slice(options.tp).with_context("HostTable"));
  if (!options.tp.whole() && !options.head_shards.empty())
    return Status(Code::kInvalidArgument, "HostTable: head shards inside a tensor-parallel slice (" +
                                              options.tp.to_string() + "): a TP rank's table is one backing per layer");
  ENGRAM_RETURN_IF_ERROR(host::check_table_fits(layout, options));  // every layer, replica and shard at once
  const host::BackingKind kind = options.backing.kind;
  const uint64_t huge_page_bytes =
      kind == host::BackingKind::kHugetlb ? (options.backing.huge_page_bytes ? options.backing.huge_page_bytes : 2u << 20) : 0;
  std::vector<HeadRange> shards = options.head_shards;
  if (shards.empty()) shards.push_back({0, layout.heads()});
  const bool tp_slice = !options.tp.whole();
  if (tp_slice) {
    const LayerSlice sl = layer_slice(layout, 0, options.tp);
    shards = {{std::min(sl.head_begin, sl.heads), std::min(sl.head_begin, sl.heads) + sl.held_heads()}};
  }
  for (size_t i = 0; i < shards.size() && !tp_slice; ++i)
    if (shards[i].begin != (i == 0 ? 0 : shards[i - 1].end) || shards[i].end <= shards[i].begin ||
        (i + 1 == shards.size() && shards[i].end != layout.heads()))
      return Status(Code::kInvalidArgument, "head shards must tile the layout's " + std::to_string(layout.heads()) +
                                                " heads in order (shard " + std::to_string(i) + " is " +
                                                std::to_string(shards[i].begin) + "-" + std::to_string(shards[i].end) + ")");
  std::vector<host::PlacementPolicy> policies(shards.size(), options.placement);
  if (!options.shard_placements.empty()) {
    if (options.shard_placements.size() != shards.size())
      return Status(Code::kInvalidArgument, "shard placements: " + std::to_string(options.shard_placements.size()) +
                                                " given for " + std::to_string(shards.size()) + " head shards");
    policies = options.shard_placements;
  }
  for (const auto& policy : policies)
    if (shards.size() > 1 && policy.kind == host::PlacementKind::kReplicaPerNode)
      return Status(Code::kInvalidArgument, "head shards with replica-per-node: give each shard a node instead "
                                            "(--shard-placements \"bind:0;bind:1\")");
  if (shards.size() > 1 && layout.format != RowFormat::kFused)
    return Status(Code::kInvalidArgument, "head shards need fused rows: a split layout keeps a shard's payload and "
                                          "scales in two separate ranges");
  host::PlacementOptions popts;
  popts.prefault = options.prefault;
  popts.prefault_threads = options.prefault_threads;
  popts.prefault_fallocate = options.prefault_fallocate;
  popts.shmem_huge_pages = options.shmem_huge_pages;
  popts.allow_fallback = options.allow_fallback;
  // Shard boundaries are rounded to the backing's page (the allocation unit of mbind and of the census).
  const uint64_t page = kind == host::BackingKind::kHugetlb ? huge_page_bytes : 4096;

  std::unique_ptr<HostTable> t(new HostTable());
  t->layout_ = layout;
  t->shard_heads_ = shards;
  t->tp_ = options.tp;
  t->storage_ = std::make_unique<Storage>();
  if (tp_slice && shards.front().end == shards.front().begin) {
    // A rank without heads: no rows, no backing (its lookups write zeros).
    t->replicas_.resize(1);
    for (int li = 0; li < layout.n_layers(); ++li) t->replicas_[0].push_back(layer_span(nullptr, layout, li, options.tp));
    t->storage_->layers.resize(static_cast<size_t>(layout.n_layers()));
    t->spans_ = t->replicas_[0];
    return t;
  }
  for (int li = 0; li < layout.n_layers(); ++li) {
    const uint64_t layer_bytes = static_cast<uint64_t>(t->layer_bytes(li));
    uint8_t* reserved = nullptr;
    if (shards.size() > 1) {
      const uint64_t len = (layer_bytes + page - 1) / page * page;
      ENGRAM_ASSIGN_OR_RETURN(void* r, sys::reserve_range(len, std::max<uint64_t>(page, 2u << 20)));
      t->reservations_.emplace_back(r, len);
      reserved = static_cast<uint8_t*>(r);
    }
    std::vector<host::PlacedBacking> per_layer;
    for (size_t sh = 0; sh < shards.size(); ++sh) {
      host::TableIdentity id;
      id.layer_id = layout.layer_ids[li];
      id.head_begin = shards[sh].begin;
      id.head_end = shards[sh].end;
      id.group = options.group;
      host::BackingOptions bo;
      bo.kind = kind;
      bo.name = host::table_backing_name(id);
      bo.shm_dir = options.shm_dir;
      bo.on_named_created = options.on_named_created;
      if (huge_page_bytes) bo.huge_page_bytes = huge_page_bytes;
      const std::string what = "table of Engram layer " + std::to_string(id.layer_id) +
                               (shards.size() > 1 || tp_slice ? ", heads " + std::to_string(id.head_begin) + "-" +
                                                                    std::to_string(id.head_end)
                                                              : std::string());
      if (shards.size() == 1) {
        bo.size_bytes = layer_bytes;
      } else {
        const auto edge = [&](int head) {  // first byte of `head`'s rows, rounded up to the page
          const uint64_t b = static_cast<uint64_t>(layout.head_offsets[li][static_cast<size_t>(head)]) *
                             static_cast<uint64_t>(layout.row_stride_bytes());
          return std::min((b + page - 1) / page * page, (layer_bytes + page - 1) / page * page);
        };
        const uint64_t lo = sh == 0 ? 0 : edge(shards[sh].begin);
        const uint64_t hi = sh + 1 == shards.size() ? (layer_bytes + page - 1) / page * page : edge(shards[sh].end);
        if (hi <= lo)
          return Status(Code::kInvalidArgument, what + ": the head range holds less than one " +
                                                    format_bytes(static_cast<int64_t>(page)) + " page of its own");
        bo.size_bytes = hi - lo;
        bo.map_at = reserved + lo;
      }
      auto placed = host::create_placed_backings(bo, policies[sh], popts);
      if (!placed.is_ok()) return placed.status().with_context(what);
      if (shards.size() == 1) {
        per_layer = std::move(*placed);
      } else {
        per_layer.push_back(std::move(placed->front()));
      }
    }
    t->storage_->layers.push_back(std::move(per_layer));
  }
  if (shards.size() > 1) {
    t->replicas_.resize(1);
    for (int li = 0; li < layout.n_layers(); ++li)
      t->replicas_[0].push_back(layer_span(static_cast<uint8_t*>(t->reservations_[static_cast<size_t>(li)].first),
                                           layout, li));
    t->spans_ = t->replicas_[0];
    return t;
  }
  const auto& first = t->storage_->layers.front();
  t->replica_nodes_.clear();
  for (const auto& pb : first) t->replica_nodes_.push_back(pb.report.replica_node);
  t->replicas_.resize(first.size());
  for (size_t r = 0; r < first.size(); ++r)
    for (int li = 0; li < layout.n_layers(); ++li)
      t->replicas_[r].push_back(layer_span(t->storage_->layers[li][r].backing.data(), layout, li, options.tp));
  if (first.size() > 1) {
    const int home = options.home_node >= 0 ? options.home_node : sys::current_cpu_node().node;
    t->home_replica_ = std::max(0, host::choose_replica(t->replica_nodes_, -1, home));
  }
  t->spans_ = t->replicas_[static_cast<size_t>(t->home_replica_)];
  return t;
}

int HostTable::n_replicas() const { return replicas_.empty() ? 1 : static_cast<int>(replicas_.size()); }

int HostTable::replica_node(int replica) const { return replica_nodes_.at(static_cast<size_t>(replica)); }

TableView HostTable::view(int layer_index, int replica) const { return span(layer_index, replica).view(); }

TableSpan HostTable::span(int layer_index, int replica) const {
  if (replicas_.empty()) return spans_.at(layer_index);
  return replicas_.at(static_cast<size_t>(replica)).at(layer_index);
}

int64_t HostTable::layer_bytes(int layer_index) const {
  if (tp_.whole()) return layout_.table_bytes(layer_index);
  return layer_slice(layout_, layer_index, tp_).rows() * layout_.row_stride_bytes();
}

const host::PlacedBacking* HostTable::backing(int layer_index, int replica) const {
  if (!storage_ || storage_->layers.at(layer_index).empty()) return nullptr;
  if (n_shards() > 1) return replica == 0 ? &storage_->layers.at(layer_index).front() : nullptr;
  return &storage_->layers.at(layer_index).at(static_cast<size_t>(replica));
}

const host::PlacedBacking* HostTable::shard_backing(int layer_index, int shard) const {
  if (!storage_ || storage_->layers.at(layer_index).empty()) return nullptr;
  if (n_shards() == 1) return shard == 0 ? backing(layer_index, home_replica_) : nullptr;
  return &storage_->layers.at(layer_index).at(static_cast<size_t>(shard));
}

std::vector<host::PageCensus> HostTable::census(host::CensusPoint point, uint64_t max_samples) const {
  std::vector<host::PageCensus> out;
  host::CensusOptions co;
  co.max_samples = max_samples;
  const auto named_group = [](const host::PlacedBacking& pb, host::TableIdentity* id) {
    host::TableIdentity named;
    if (host::parse_table_backing_name(pb.backing.identity().name, &named)) id->group = named.group;
  };
  for (int li = 0; li < n_layers(); ++li) {
    if (n_shards() > 1) {
      // One line per shard: its own backing, counted over that backing's own pages.
      for (int sh = 0; sh < n_shards(); ++sh) {
        const host::PlacedBacking& pb = *shard_backing(li, sh);
        host::TableIdentity id;
        id.layer_id = layout_.layer_ids[li];
        id.head_begin = shard_heads_[static_cast<size_t>(sh)].begin;
        id.head_end = shard_heads_[static_cast<size_t>(sh)].end;
        id.bytes = pb.backing.size_bytes();
        id.base = reinterpret_cast<uintptr_t>(pb.backing.data());
        id.backing = pb.backing.identity().to_string();
        named_group(pb, &id);
        co.page_bytes = pb.backing.page_bytes();
        out.push_back(host::take_census(pb.backing.data(), id.bytes, id, point, co));
      }
      continue;
    }
    if (layer_bytes(li) == 0) continue;  // a TP rank without heads holds nothing to count
    for (int r = 0; r < n_replicas(); ++r) {
      host::TableIdentity id;
      id.layer_id = layout_.layer_ids[li];
      id.head_begin = shard_heads_.empty() ? 0 : shard_heads_.front().begin;
      id.head_end = shard_heads_.empty() ? layout_.heads() : shard_heads_.front().end;
      id.bytes = static_cast<uint64_t>(layer_bytes(li));
      const TableSpan s = span(li, r);
      id.base = reinterpret_cast<uintptr_t>(s.data);
      if (const host::PlacedBacking* pb = backing(li, r)) {
        id.backing = pb->backing.identity().to_string();
        id.replica_node = pb->report.replica_node;
        named_group(*pb, &id);
        co.page_bytes = pb->backing.page_bytes();
      } else {
        id.backing = "private anonymous";
        co.page_bytes = 0;
      }
      out.push_back(host::take_census(s.data, id.bytes, id, point, co));
    }
  }
  return out;
}

namespace {

// Closes the descriptors of AttachSpecs that were not handed to a Backing.
struct SpecFds {
  std::vector<AttachSpec>* parts;
  ~SpecFds() {
    for (auto& p : *parts)
      if (p.fd >= 0) (void)sys::close_fd(std::exchange(p.fd, -1));
  }
};

}  // namespace

Result<std::unique_ptr<HostTable>> HostTable::attach(const EngramLayout& layout, std::vector<AttachSpec> parts,
                                                     const AttachOptions& options) {
  SpecFds closer{&parts};
  if (layout.head_offsets.size() != layout.layer_ids.size())
    return Status(Code::kInvalidArgument, "HostTable::attach: layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_tp_slice(options.tp).with_context("HostTable::attach"));
  // replica-per-node: the copy on our GPU's node, else our CPU's node, else the first.
  std::vector<int> nodes;
  for (const auto& p : parts)
    if (p.replica_node >= 0 && std::find(nodes.begin(), nodes.end(), p.replica_node) == nodes.end())
      nodes.push_back(p.replica_node);
  int want_node = -1;
  if (!nodes.empty()) {
    const int pick = host::choose_replica(nodes, options.gpu_node, sys::current_cpu_node().node);
    want_node = nodes[static_cast<size_t>(std::max(0, pick))];
  }
  std::unique_ptr<HostTable> t(new HostTable());
  t->layout_ = layout;
  t->read_only_ = options.read_only;
  t->tp_ = options.tp;
  t->storage_ = std::make_unique<Storage>();
  t->storage_->layers.resize(static_cast<size_t>(layout.n_layers()));
  t->replica_nodes_ = {want_node};
  std::vector<TableSpan> spans(static_cast<size_t>(layout.n_layers()));
  for (int li = 0; li < layout.n_layers(); ++li) {
    std::vector<size_t> mine;
    for (size_t k = 0; k < parts.size(); ++k)
      if (parts[k].layer_index == li && (want_node < 0 || parts[k].replica_node == want_node)) mine.push_back(k);
    const uint64_t layer_bytes = static_cast<uint64_t>(t->layer_bytes(li));
    if (layer_bytes == 0) {  // a TP rank without heads: the leader made no backing
      if (!mine.empty())
        return Status(Code::kInvalidArgument, "attach: a backing for Engram layer index " + std::to_string(li) +
                                                  " of " + options.tp.to_string() + ", which holds no heads");
      const LayerSlice sl = layer_slice(layout, li, options.tp);
      t->shard_heads_ = {{sl.heads, sl.heads}};
      spans[static_cast<size_t>(li)] = layer_span(nullptr, layout, li, options.tp);
      continue;
    }
    if (mine.empty())
      return Status(Code::kInvalidArgument, "attach: no backing holds Engram layer index " + std::to_string(li));
    std::sort(mine.begin(), mine.end(), [&](size_t a, size_t b) { return parts[a].offset_bytes < parts[b].offset_bytes; });
    const bool sharded = mine.size() > 1;
    uint8_t* reserved = nullptr;
    uint64_t page = 4096;
    if (sharded) {
      for (size_t k : mine)
        if (parts[k].kind == BackingKind::kHugetlb) page = std::max<uint64_t>(page, uint64_t{2} << 20);
      const uint64_t len = (layer_bytes + page - 1) / page * page;
      ENGRAM_ASSIGN_OR_RETURN(void* r, sys::reserve_range(len, std::max<uint64_t>(page, 2u << 20)));
      t->reservations_.emplace_back(r, len);
      reserved = static_cast<uint8_t*>(r);
    }
    std::vector<HeadRange> heads;
    for (size_t k : mine) {
      AttachSpec& p = parts[k];
      const std::string what = "backing of Engram layer index " + std::to_string(li) + " (" +
                               backing_kind_name(p.kind) + " " + (p.path.empty() ? p.name : p.path) + ")";
      if (sharded ? p.offset_bytes + p.size_bytes > (layer_bytes + page - 1) / page * page
                  : p.offset_bytes != 0 || p.size_bytes < layer_bytes)
        return Status(Code::kInvalidArgument, what + ": holds " + format_bytes(static_cast<int64_t>(p.size_bytes)) +
                                                  " at offset " + std::to_string(p.offset_bytes) + ", the layer needs " +
                                                  format_bytes(static_cast<int64_t>(layer_bytes)));
      uint8_t* at = sharded ? reserved + p.offset_bytes : nullptr;
      Result<host::Backing> b = Status(Code::kInternal, "unreachable");
      if (p.kind == BackingKind::kShmFile) {
        b = host::Backing::attach_path(p.path, p.size_bytes, at);
      } else {
        if (p.fd < 0) return Status(Code::kInvalidArgument, what + ": descriptor announced but not received");
        b = host::Backing::attach_fd(std::exchange(p.fd, -1), p.kind, p.size_bytes, p.name, at);
      }
      if (!b.is_ok()) return b.status().with_context(what);
      const auto& id = b->identity();
      if (id.inode != p.inode || id.device != p.device)
        return Status(Code::kPermission, what + ": mapped inode " + std::to_string(id.inode) + " on device " +
                                             std::to_string(id.device) + ", the leader created inode " +
                                             std::to_string(p.inode) + " on device " + std::to_string(p.device) +
                                             " (the path names another file now)");
      if (options.read_only)
        ENGRAM_RETURN_IF_ERROR(sys::protect_read_only(b->data(), b->mapped_bytes()).with_context(what));
      host::PlacedBacking pb;
      pb.backing = std::move(*b);
      auto policy = host::parse_placement(p.placement_resolved);
      if (policy.is_ok()) pb.policy = *policy;
      pb.report.requested = p.placement_requested;
      pb.report.resolved = p.placement_resolved;
      pb.report.obtained = p.placement_obtained;
      pb.report.prefault = p.prefault;
      pb.report.replica_node = p.replica_node;
      heads.push_back(p.heads.end > p.heads.begin ? p.heads : HeadRange{0, layout.heads()});
      t->storage_->layers[static_cast<size_t>(li)].push_back(std::move(pb));
    }
    if (li == 0) t->shard_heads_ = heads;
    else if (heads.size() != t->shard_heads_.size())
      return Status(Code::kInvalidArgument, "attach: layers are sharded differently");
    uint8_t* base = sharded ? reserved : t->storage_->layers[static_cast<size_t>(li)].front().backing.data();
    spans[static_cast<size_t>(li)] = layer_span(base, layout, li, options.tp);
  }
  t->replicas_ = {spans};
  t->spans_ = spans;
  return t;
}

std::vector<HostTable::Part> HostTable::parts() const {
  std::vector<Part> out;
  if (!storage_) return out;
  for (int li = 0; li < n_layers(); ++li) {
    const auto& per = storage_->layers[static_cast<size_t>(li)];
    for (size_t k = 0; k < per.size(); ++k) {
      Part p;
      p.layer_index = li;
      p.replica = n_shards() > 1 ? 0 : static_cast<int>(k);
      p.shard = n_shards() > 1 ? static_cast<int>(k) : 0;
      p.backing = &per[k];
      out.push_back(p);
    }
  }
  return out;
}

Status HostTable::unlink_named_files(const std::function<void(const std::string&)>& on_unlinked) {
  Status first;
  if (!storage_) return first;
  for (auto& per : storage_->layers)
    for (auto& pb : per) {
      host::Backing& b = pb.backing;
      if (b.kind() != BackingKind::kShmFile || !b.owner() || b.unlinked()) continue;
      const std::string path = b.identity().path;
      Status u = b.unlink_name();
      if (u.is_ok() && on_unlinked) on_unlinked(path);
      if (!u.is_ok() && first.is_ok()) first = u;
    }
  return first;
}

Result<std::unique_ptr<HostTable>> HostTable::allocate(const EngramLayout& layout) {
  if (layout.head_offsets.size() != layout.layer_ids.size())
    return Status(Code::kInvalidArgument, "HostTable: layout is not finalized");
  std::unique_ptr<HostTable> t(new HostTable());
  t->layout_ = layout;
  for (int li = 0; li < layout.n_layers(); ++li) {
    const int64_t rows = layout.rows(li);
    const size_t bytes = static_cast<size_t>(rows * layout.row_stride_bytes());
    auto m = sys::map_anonymous(bytes);
    if (!m.is_ok())
      return m.status().with_context("table of Engram layer " + std::to_string(layout.layer_ids[li]));
    t->mappings_.emplace_back(*m, bytes);
    const TableSpan s = layer_span(static_cast<uint8_t*>(*m), layout, li);
    t->spans_.push_back(s);
  }
  return t;
}

HostTable::~HostTable() {
  storage_.reset();  // backings first: a sharded layer's backings go back to its reservation
  for (auto& [p, n] : reservations_) (void)sys::unmap_range(p, n);
  for (auto& [p, n] : mappings_) (void)sys::unmap(p, n);
}

}  // namespace engram
