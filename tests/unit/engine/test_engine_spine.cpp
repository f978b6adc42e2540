// The engine is the one assembly point: no consumer (the CLI, the Python binding, the replay harnesses, the
// benches) constructs a backend, a prefetch queue, a registration or a shared group by itself. A consumer that
// does would drift from the engine (fast path, cache, fallback rule, protocol order), as hand-wired copies did.
// The scan reads the sources as text: any of the constructors below outside src/engine fails, unless the file is
// a primitive benchmark listed with the reason it times the primitive itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kConstructors = {
    "CpuPrefetchQueue::create", "CudaPrefetchQueue::create", "make_cuda_backend(",   "TableRegistration::create",
    "HostRegistration::register_range", "SharedTableGroup::lead", "SharedTableGroup::join", "FastLookup::create",
    "CpuLayerCompute(",          "CudaLayerCompute::create"};

// Benchmarks of a primitive (not of an engine path): they time exactly what the engine would hide.
const std::map<std::string, std::string> kPrimitiveBenches = {
    {"bench/register.cpp", "times cudaHostRegister itself, chunk size by chunk size"},
    {"bench/lookup_cuda.cu", "times the plain kernel and the plain gather against the link ceiling"},
    {"bench/lookup_fast.cu", "times each fast-path technique forced (dedup, cache, hybrid) against the plain kernel"},
};

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(EngineSpine, NoConsumerConstructsABackendQueueOrRegistration) {
  const fs::path root(ENGRAM_SOURCE_DIR);
  std::vector<std::string> violations;
  int files = 0;
  for (const char* dir : {"tools", "python/src", "src/replay", "bench"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      if (kPrimitiveBenches.count(rel)) continue;
      ++files;
      const std::string text = read(entry.path());
      for (const auto& c : kConstructors)
        if (text.find(c) != std::string::npos) violations.push_back(rel + " calls " + c);
    }
  }
  EXPECT_GT(files, 20) << "the scan found too few files under " << root;
  for (const auto& v : violations) ADD_FAILURE() << v << " (build it through Engine: include/engram/engine.hpp)";
}

// The engine's own files are where the constructors live (so the scan above scans something real).
TEST(EngineSpine, TheEngineConstructsThem) {
  const fs::path root(ENGRAM_SOURCE_DIR);
  std::string all;
  for (const auto& entry : fs::directory_iterator(root / "src/engine")) all += read(entry.path());
  for (const char* c : {"CpuPrefetchQueue::create", "make_cuda_backend(", "TableRegistration::create",
                        "SharedTableGroup::lead", "SharedTableGroup::join"})
    EXPECT_NE(all.find(c), std::string::npos) << c << " is not in src/engine";
}

}  // namespace
