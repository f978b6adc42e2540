// See bare_table.hpp.
#include "engine/bare_table.hpp"

#include "engine/guardian.hpp"

namespace engram::engine {

Result<BareTable> create_bare_table(const EngramLayout& layout, TableOptions options) {
  BareTable t;
  ENGRAM_ASSIGN_OR_RETURN(t.guardian, guard_named_backings(options));
  ENGRAM_ASSIGN_OR_RETURN(t.table, HostTable::create(layout, options));
  return t;
}

}  // namespace engram::engine
