// The public view of a table's backing (engram/backing_info.hpp): a copy of what host::PlacedBacking holds that a
// consumer reads (identity, descriptor, sizes, the placement report as JSON), so that the Backing and
// PlacementReport types stay internal.
#include "engram/backing_info.hpp"
#include "host/placement.hpp"

namespace engram {

std::optional<BackingInfo> backing_info(const HostTable& table, int layer_index, int replica) {
  if (layer_index < 0 || layer_index >= table.n_layers() || replica < 0 || replica >= table.n_replicas())
    return std::nullopt;
  const host::PlacedBacking* b = table.backing(layer_index, replica);
  if (b == nullptr) return std::nullopt;
  BackingInfo info;
  info.identity = b->backing.identity().to_string();
  info.fd = b->backing.fd();
  info.size_bytes = b->backing.size_bytes();
  info.mapped_bytes = b->backing.mapped_bytes();
  info.page_bytes = b->backing.page_bytes();
  info.placement = b->report.to_json();
  return info;
}

}  // namespace engram
