// See guardian.hpp.
#include "engine/guardian.hpp"

namespace engram::engine {

Result<std::shared_ptr<sys::FileGuardian>> guard_named_backings(TableOptions& table) {
  if (table.backing.kind != BackingKind::kShmFile) return std::shared_ptr<sys::FileGuardian>();
  ENGRAM_ASSIGN_OR_RETURN(sys::FileGuardian g, sys::FileGuardian::start());
  auto guardian = std::make_shared<sys::FileGuardian>(std::move(g));
  table.on_named_created = [guardian, next = table.on_named_created](const std::string& path) -> Status {
    ENGRAM_RETURN_IF_ERROR(guardian->arm(path));
    return next ? next(path) : Status::ok();
  };
  return guardian;
}

}  // namespace engram::engine
