// `engram version`: prints the version and build configuration (CUDA backend on/off).
#include <cstdio>

#include "command.hpp"

namespace {
auto setup(CLI::App& sub) -> std::function<int()> {
  return [] {
#ifdef ENGRAM_HAVE_CUDA
    const char* cuda = "built";
#else
    const char* cuda = "not built";
#endif
    std::printf("engram-offload 0.1.0 (%s), CUDA backend %s\n", ENGRAM_GIT_REV, cuda);
    return 0;
  };
}
}  // namespace
ENGRAM_COMMAND(version, "version", "Print the version and build configuration", setup);
