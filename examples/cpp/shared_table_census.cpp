// Shared table + census: HostTable::create gives one shared memfd backing per Engram layer (the default backing),
// placed before its first page exists and prefaulted; the census then reads from the kernel (move_pages) where
// its pages are, per NUMA node. A census that cannot be taken here says why (known = false), never zeros.
// Exits 0 when the table was created and every census line names its table; 1 otherwise.
#include <cstdio>

#include "engram/census.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"

int main() {
  auto layout = engram::make_preset_layout("tiny");
  if (!layout.is_ok()) return std::fprintf(stderr, "layout: %s\n", layout.status().to_string().c_str()), 1;
  engram::TableOptions options;  // memfd backing, no placement policy, prefaulted
  options.group = "example";
  auto table = engram::HostTable::create(*layout, options);
  if (!table.is_ok()) return std::fprintf(stderr, "create: %s\n", table.status().to_string().c_str()), 1;
  (*table)->fill_synthetic(/*seed=*/3, /*threads=*/1);

  const auto censuses = (*table)->census(engram::CensusPoint::kAfterLoad);
  if (censuses.empty()) return std::fprintf(stderr, "census: no lines for a created table\n"), 1;
  for (const engram::PageCensus& c : censuses) {
    std::printf("%s", c.to_text().c_str());
    if (c.table.backing.empty()) return std::fprintf(stderr, "census: a line without its backing\n"), 1;
  }
  std::printf("shared table: %zu backing(s), census %s\n", censuses.size(),
              censuses.front().known ? "taken" : ("not taken: " + censuses.front().reason).c_str());
  return 0;
}
