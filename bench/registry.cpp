// The bench registry's storage (see registry.hpp): a function-local vector so that registrations from static
// initialisers in any translation unit find it constructed.
#include "bench/registry.hpp"

#include <algorithm>

namespace engram::bench {

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

bool register_entry(Entry e) {
  registry().push_back(std::move(e));
  return true;
}

const Entry* find_entry(const std::string& key) {
  for (const auto& e : registry())
    if (e.key == key) return &e;
  return nullptr;
}

}  // namespace engram::bench
