// `engram version`: prints the library's version (engram/version.hpp, from project(VERSION) in CMakeLists.txt),
// the git revision of the build and its configuration (CUDA backend on/off).
#include <cstdio>

#include "command.hpp"
#include "core/git_rev.hpp"
#include "engram/version.hpp"

namespace {
auto setup(CLI::App& sub) -> std::function<int()> {
  return [] {
#ifdef ENGRAM_HAVE_CUDA
    const char* cuda = "built";
#else
    const char* cuda = "not built";
#endif
    std::printf("engram-offload %s (%s), CUDA backend %s\n", engram::kVersion, engram::git_revision(), cuda);
    return 0;
  };
}
}  // namespace
ENGRAM_COMMAND(version, "version", "Print the version and build configuration", setup);
