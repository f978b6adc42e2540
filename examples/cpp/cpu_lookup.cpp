// CPU lookup: a private table of the "tiny" layout filled with synthetic rows, one lookup of a few ids (one of
// them dead) through engram::cpu::lookup (engram/cpu_lookup.hpp) on the calling thread, checked row by row
// against the scalar reference decoder of engram/format.hpp. Exits 0 when every row matches, 1 otherwise.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "engram/cpu_lookup.hpp"
#include "engram/format.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "engram/version.hpp"

int main() {
  auto layout = engram::make_preset_layout("tiny");
  if (!layout.is_ok()) return std::fprintf(stderr, "layout: %s\n", layout.status().to_string().c_str()), 1;
  auto table = engram::HostTable::allocate(*layout);
  if (!table.is_ok()) return std::fprintf(stderr, "allocate: %s\n", table.status().to_string().c_str()), 1;
  (*table)->fill_synthetic(/*seed=*/7, /*threads=*/1);

  const engram::TableView view = (*table)->view(0);
  const int heads = layout->heads(), d = layout->d;
  const int64_t tokens = 3;
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 97 + 5) % view.rows);
  ids[1] = engram::kDeadId;
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(d), 0xFFFF);  // poisoned

  engram::LookupRequest req;
  req.ids = ids.data();
  req.tokens = tokens;
  req.heads = heads;
  req.out = out.data();
  req.checked = true;
  auto stats = engram::cpu::lookup(view, req);
  if (!stats.is_ok()) return std::fprintf(stderr, "lookup: %s\n", stats.status().to_string().c_str()), 1;

  int bad = 0;
  std::vector<uint16_t> want(static_cast<size_t>(d));
  for (size_t p = 0; p < ids.size(); ++p) {
    if (ids[p] < 0) {
      std::fill(want.begin(), want.end(), 0);
    } else {
      engram::decode_row_reference(view.payload_of(ids[p]), view.scales_of(ids[p]), d, want.data());
    }
    for (int i = 0; i < d; ++i) bad += out[p * static_cast<size_t>(d) + static_cast<size_t>(i)] != want[i];
  }
  std::printf("engram_offload %s: cpu lookup of %lld rows (%lld dead) over %lld rows x d=%d: %s\n",
              engram::kVersion, static_cast<long long>(stats->rows), static_cast<long long>(stats->dead_rows),
              static_cast<long long>(view.rows), d, bad == 0 ? "matches the reference" : "MISMATCH");
  return bad == 0 ? 0 : 1;
}
