// The backend registry and the one `auto` rule (see backend.hpp).
#include "engine/backend.hpp"

namespace engram {
bool cuda_backend_built() { return engine::cuda_backend_entry() != nullptr; }
}  // namespace engram

namespace engram::engine {

const std::vector<BackendEntry>& backend_registry() {
  static const std::vector<BackendEntry> entries = [] {
    std::vector<BackendEntry> v;
    if (const BackendEntry* c = cuda_backend_entry()) v.push_back(*c);
    v.push_back(cpu_backend_entry());
    return v;
  }();
  return entries;
}

Result<const BackendEntry*> choose_backend(const EngineOptions& o, std::string* note) {
  note->clear();
  if (o.backend == BackendKind::kAuto) {
    if (cuda_backend_entry() == nullptr)
      *note = "cuda not used: the CUDA backend was not built (configure with a CUDA toolkit, ENGRAM_CUDA=ON)";
    for (const BackendEntry& e : backend_registry()) {
      const Status usable = e.probe(o);
      if (usable.is_ok()) return &e;
      *note += std::string(note->empty() ? "" : "; ") + e.name + " not used: " + usable.message();
    }
    return Status(Code::kInternal, "no backend can run here (" + *note + ")");
  }
  if (o.backend == BackendKind::kCuda && cuda_backend_entry() == nullptr)
    return Status(Code::kUnsupported, "the CUDA backend was not built (configure with a CUDA toolkit, ENGRAM_CUDA=ON)");
  for (const BackendEntry& e : backend_registry()) {
    if (e.kind != o.backend) continue;
    ENGRAM_RETURN_IF_ERROR(e.probe(o).with_context(std::string("backend ") + e.name));
    return &e;
  }
  return Status(Code::kInvalidArgument, std::string("backend ") + backend_kind_name(o.backend) + " is not registered");
}

}  // namespace engram::engine
