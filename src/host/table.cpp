// HostTable: private anonymous memory for each Engram layer's table, and synthetic row content.
//
// Filling is parallel over row ranges; each row's bytes depend only on (seed, layer, row), so the
// result does not depend on the thread count and a checkpoint writer can stream rows one at a time.
// `create` builds each layer's table on a placed backing (host/placement.hpp): the layer's split
// arrays (payload then scales) or fused records live in one backing, so a layer is one object with
// one policy, one identity in /proc/<pid>/maps and one census.
#include "engram/table.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/splitmix.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/affinity.hpp"
#include "sys/memory.hpp"

namespace engram {

void synth_row(uint64_t seed, int layer_index, int64_t row, int d, uint8_t* payload, uint8_t* scales) {
  uint64_t state = mix_seed(seed, static_cast<uint64_t>(layer_index), static_cast<uint64_t>(row));
  for (int i = 0; i < d; i += 8) {
    uint64_t r = splitmix64(state);
    for (int k = 0; k < 8 && i + k < d; ++k) {
      uint8_t b = static_cast<uint8_t>(r >> (8 * k));
      if ((b & 0x7F) == 0x7F) b ^= 0x01;  // never a NaN code
      if ((b & 0x7F) == 0) b |= 0x08;     // non-zero data: zeros hide unwritten outputs
      payload[i + k] = b;
    }
  }
  uint64_t r = splitmix64(state);
  for (int j = 0; j < d / 32; ++j) {
    if (j % 8 == 0 && j > 0) r = splitmix64(state);
    scales[j] = static_cast<uint8_t>(119 + (r >> (8 * (j % 8))) % 17);
  }
}

struct HostTable::Storage {
  std::vector<std::vector<host::PlacedBacking>> layers;  // [layer][replica]
};

HostTable::HostTable() : replica_nodes_{-1} {}

namespace {
TableSpan span_over(uint8_t* base, const EngramLayout& layout, int li) {
  const int64_t rows = layout.rows(li);
  TableSpan s;
  s.data = base;
  s.rows = rows;
  s.d = layout.d;
  s.format = layout.format;
  if (layout.format == RowFormat::kFused) {
    s.stride_bytes = layout.row_stride_bytes();
  } else {
    s.stride_bytes = layout.d;
    s.scales = s.data + rows * layout.d;
  }
  return s;
}
}  // namespace

Result<std::unique_ptr<HostTable>> HostTable::create(const EngramLayout& layout, const TableOptions& options) {
  if (layout.head_offsets.size() != layout.layer_ids.size())
    return Status(Code::kInvalidArgument, "HostTable: layout is not finalized");
  uint64_t huge_page_bytes = 0;
  ENGRAM_ASSIGN_OR_RETURN(host::BackingKind kind, host::parse_backing_kind(options.backing, &huge_page_bytes));
  ENGRAM_ASSIGN_OR_RETURN(host::PlacementPolicy policy, host::parse_placement(options.placement));
  host::PlacementOptions popts;
  popts.prefault = options.prefault;
  popts.prefault_threads = options.prefault_threads;
  popts.allow_fallback = options.allow_fallback;

  std::unique_ptr<HostTable> t(new HostTable());
  t->layout_ = layout;
  t->storage_ = std::make_unique<Storage>();
  for (int li = 0; li < layout.n_layers(); ++li) {
    host::TableIdentity id;
    id.layer_id = layout.layer_ids[li];
    id.head_begin = 0;
    id.head_end = layout.heads();
    id.group = options.group;
    host::BackingOptions bo;
    bo.kind = kind;
    bo.size_bytes = static_cast<uint64_t>(layout.table_bytes(li));
    bo.name = host::table_backing_name(id);
    bo.shm_dir = options.shm_dir;
    if (huge_page_bytes) bo.huge_page_bytes = huge_page_bytes;
    auto placed = host::create_placed_backings(bo, policy, popts);
    if (!placed.is_ok())
      return placed.status().with_context("table of Engram layer " + std::to_string(id.layer_id));
    t->storage_->layers.push_back(std::move(*placed));
  }
  const auto& first = t->storage_->layers.front();
  t->replica_nodes_.clear();
  for (const auto& pb : first) t->replica_nodes_.push_back(pb.report.replica_node);
  t->replicas_.resize(first.size());
  for (size_t r = 0; r < first.size(); ++r)
    for (int li = 0; li < layout.n_layers(); ++li)
      t->replicas_[r].push_back(span_over(t->storage_->layers[li][r].backing.data(), layout, li));
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

const host::PlacedBacking* HostTable::backing(int layer_index, int replica) const {
  if (!storage_) return nullptr;
  return &storage_->layers.at(layer_index).at(static_cast<size_t>(replica));
}

std::vector<host::PageCensus> HostTable::census(host::CensusPoint point, uint64_t max_samples) const {
  std::vector<host::PageCensus> out;
  host::CensusOptions co;
  co.max_samples = max_samples;
  for (int li = 0; li < n_layers(); ++li) {
    for (int r = 0; r < n_replicas(); ++r) {
      host::TableIdentity id;
      id.layer_id = layout_.layer_ids[li];
      id.head_end = layout_.heads();
      id.bytes = static_cast<uint64_t>(layout_.table_bytes(li));
      const TableSpan s = span(li, r);
      id.base = reinterpret_cast<uintptr_t>(s.data);
      if (const host::PlacedBacking* pb = backing(li, r)) {
        id.backing = pb->backing.identity().to_string();
        id.replica_node = pb->report.replica_node;
        host::TableIdentity named;
        if (host::parse_table_backing_name(pb->backing.identity().name, &named)) id.group = named.group;
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
    TableSpan s;
    s.data = static_cast<uint8_t*>(*m);
    s.rows = rows;
    s.d = layout.d;
    s.format = layout.format;
    if (layout.format == RowFormat::kFused) {
      s.stride_bytes = layout.row_stride_bytes();
    } else {
      s.stride_bytes = layout.d;
      s.scales = s.data + rows * layout.d;
    }
    t->spans_.push_back(s);
  }
  return t;
}

HostTable::~HostTable() {
  for (auto& [p, n] : mappings_) (void)sys::unmap(p, n);
}

void HostTable::fill_synthetic(uint64_t seed, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int rl = 0; rl < n_layers() * n_replicas(); ++rl) {
    const int li = rl % n_layers();
    const TableSpan s = span(li, rl / n_layers());
    const int64_t per = (s.rows + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const int64_t lo = t * per, hi = std::min(s.rows, lo + per);
      if (lo >= hi) break;
      pool.emplace_back([=] {
        const int64_t pad = s.format == RowFormat::kFused ? s.stride_bytes - s.d - s.d / 32 : 0;
        for (int64_t r = lo; r < hi; ++r) {
          synth_row(seed, li, r, s.d, s.payload_of(r), s.scales_of(r));
          if (pad > 0) std::memset(s.scales_of(r) + s.d / 32, 0, static_cast<size_t>(pad));
        }
      });
    }
    for (auto& th : pool) th.join();
  }
}

}  // namespace engram
