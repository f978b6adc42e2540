// The engine is the one assembly point: no consumer (the CLI, the Python binding, the replay harnesses, the
// benches, the report writers) constructs a table, a backend, a prefetch queue, a registration or a shared group by
// itself. A consumer that does would drift from the engine (fast path, cache, fallback rule, named-file guardian,
// protocol order), as hand-wired copies did.
//
// What the compiler enforces: python/src compiles without src/ on its include path (python/CMakeLists.txt), except
// the one object library of bind_ids.cpp, so the binding cannot even name a backend, queue, registration or group;
// it reaches only include/engram. What it cannot enforce -- the CLI, the benches and src/ harnesses include internal
// headers -- this scan checks by reading the sources as text: a constructor below (also through a `using` alias of
// its type, a pointer to it, make_unique / make_shared, or a local object) outside the folders that define and
// assemble them fails, unless the file is listed with the reason it builds the thing itself. A second scan keeps
// the CUDA runtime inside src/cuda: the engine reaches the CUDA backend through its interface only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Type -> the static constructors of it that only src/engine calls. A type with no static constructor listed is
// constructed by its constructor (a local object, new, make_unique / make_shared).
const std::map<std::string, std::vector<std::string>> kConstructed = {
    {"HostTable", {"create", "attach"}},
    {"CpuPrefetchQueue", {"create"}},
    {"CudaPrefetchQueue", {"create"}},
    {"TableRegistration", {"create"}},
    {"HostRegistration", {"register_range"}},
    {"SharedTableGroup", {"lead", "join"}},
    {"FastLookup", {"create"}},
    {"CudaLayerCompute", {"create"}},
    {"CpuLayerCompute", {}},
};
// Free functions that build a backend.
const std::vector<std::string> kBuilders = {"make_cuda_backend"};

// Where these are defined or assembled: the engine, and each type's own folder (the CUDA backend builds its queue,
// registration and fast path inside make_cuda_backend; the shared-group protocol attaches the peers' tables).
const std::vector<std::string> kOwners = {"src/engine", "src/cuda", "src/cpu", "src/host"};

// Files outside the owners that construct one themselves, each with its reason.
const std::map<std::string, std::string> kAllowed = {
    {"bench/register.cpp", "times cudaHostRegister itself, chunk size by chunk size"},
    {"bench/lookup_cuda.cu", "times the plain kernel and the plain gather against the link ceiling"},
    {"bench/lookup_fast.cu", "times each fast-path technique forced (dedup, cache, hybrid) against the plain kernel"},
    {"bench/traffic_device.cu",
     "registers the split copy of the table that only the reference-style kernel reads (no engine serves it)"},
    {"python/src/bind_table.cpp",
     "the Python SharedTable is the public HostTable::create of include/engram/table.hpp (no src/ header compiles "
     "there)"},
};

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Comments cannot construct anything: line comments are dropped, so that a file may name what it does not do.
std::string code_of(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t c = line.find("//");
    out += (c == std::string::npos ? line : line.substr(0, c)) + "\n";
  }
  return out;
}

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cpp" || ext == ".hpp" || ext == ".cu" || ext == ".cuh";
}

bool owned(const std::string& rel) {
  for (const auto& o : kOwners)
    if (rel.rfind(o + "/", 0) == 0) return true;
  return false;
}

// The constructions of `code`, as "what (matched text)". Aliases: `using A = [ns::]Type;` makes A a name of Type in
// that file.
std::vector<std::string> constructions(const std::string& code) {
  std::map<std::string, std::string> names;  // name in this file -> type
  for (const auto& [type, ctors] : kConstructed) names[type] = type;
  static const std::regex alias(R"(using\s+(\w+)\s*=\s*(?:[\w:]*::)?(\w+)\s*;)");
  for (std::sregex_iterator it(code.begin(), code.end(), alias), end; it != end; ++it)
    if (kConstructed.count((*it)[2].str())) names[(*it)[1].str()] = (*it)[2].str();
  std::vector<std::string> found;
  auto scan = [&](const std::string& pattern, const std::string& what) {
    const std::regex re(pattern);
    std::smatch m;
    if (std::regex_search(code, m, re)) found.push_back(what + " (" + m.str() + ")");
  };
  for (const auto& [name, type] : names) {
    const auto& ctors = kConstructed.at(type);
    for (const auto& c : ctors) scan(R"(\b)" + name + R"(\s*::\s*)" + c + R"(\b)", type + "::" + c);
    if (ctors.empty()) {
      scan(R"(\bmake_(unique|shared)\s*<\s*(\w+::)*)" + name + R"(\s*>)", type);
      scan(R"(\bnew\s+(\w+::)*)" + name + R"(\b)", type);
      scan(R"(\b)" + name + R"(\s+\w+\s*[({])", type);
      scan(R"(\b)" + name + R"(\s*[({][^)}]*[)}]\s*[;,)])", type);
    }
  }
  for (const auto& b : kBuilders) scan(R"(\b)" + b + R"(\s*\()" + "|&\\s*(\\w+::)*" + b + R"(\b)", b);
  return found;
}

TEST(EngineSpine, NoConsumerConstructsABackendQueueOrRegistration) {
  const fs::path root(ENGRAM_SOURCE_DIR);
  std::vector<std::string> violations;
  std::set<std::string> allowed_seen;
  int files = 0;
  for (const char* dir : {"tools", "python/src", "bench", "src", "fuzz"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      if (owned(rel)) continue;
      ++files;
      const std::vector<std::string> found = constructions(code_of(read(entry.path())));
      if (kAllowed.count(rel)) {
        if (!found.empty()) allowed_seen.insert(rel);
        continue;
      }
      for (const auto& f : found) violations.push_back(rel + " constructs " + f);
    }
  }
  EXPECT_GT(files, 60) << "the scan found too few files under " << root;
  for (const auto& v : violations) ADD_FAILURE() << v << " (build it through Engine: include/engram/engine.hpp)";
  // A listed file that no longer constructs anything should leave the list.
  for (const auto& [rel, why] : kAllowed)
    EXPECT_TRUE(allowed_seen.count(rel)) << rel << " is allowed to construct (" << why << ") but constructs nothing";
}

// The scan sees what a consumer would write: the direct call, an alias of the type, a pointer to the builder, a
// local object and make_unique; and passes over comments and look-alike names.
TEST(EngineSpine, TheScanSeesAliasesPointersAndObjects) {
  EXPECT_FALSE(constructions("auto t = HostTable::create(layout, o);").empty());
  EXPECT_FALSE(constructions("auto t = engram::HostTable::attach(layout, specs, o);").empty());
  EXPECT_FALSE(constructions("using T = engram::HostTable;\nauto t = T::create(layout, o);").empty());
  EXPECT_FALSE(constructions("using Q = cpu::CpuPrefetchQueue;\nauto q = Q :: create(v);").empty());
  EXPECT_FALSE(constructions("auto* build = &cuda::make_cuda_backend;").empty());
  EXPECT_FALSE(constructions("cpu::CpuLayerCompute compute(200.0);").empty());
  EXPECT_FALSE(constructions("auto c = std::make_unique<cpu::CpuLayerCompute>(200.0);").empty());
  EXPECT_FALSE(constructions("auto g = host::SharedTableGroup::join(ch, po, hooks, t);").empty());
  EXPECT_TRUE(constructions(code_of("// HostTable::create is the engine's\nint x = 1;")).empty());
  EXPECT_TRUE(constructions("const HostTable& t = engine.table();\nt.view(0);").empty());
  EXPECT_TRUE(constructions("auto t = MyHostTable::create();").empty());
  EXPECT_TRUE(constructions("CpuLayerCompute* compute = &engine.compute();").empty());
}

// CUDA only in src/cuda: outside it (the engine's cuda entry included, which builds cuda::CudaBackend from the
// options and hands it out as the engine's Backend) no source calls the CUDA runtime, includes a CUDA header or
// launches a kernel. The benches time CUDA themselves and are not scanned.
TEST(EngineSpine, CudaCallsStayInSrcCuda) {
  const fs::path root(ENGRAM_SOURCE_DIR);
  const std::regex cuda_use(R"(\bcuda[A-Z]\w*\s*\(|#\s*include\s*<(cuda|cublas|nvtx|cub/|thrust/)|<<<)");
  std::vector<std::string> violations;
  int files = 0;
  for (const char* dir : {"src", "tools", "python/src", "fuzz"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      if (rel.rfind("src/cuda/", 0) == 0) continue;
      ++files;
      const std::string code = code_of(read(entry.path()));
      std::smatch m;
      if (std::regex_search(code, m, cuda_use)) violations.push_back(rel + ": " + m.str());
    }
  }
  EXPECT_GT(files, 60) << "the scan found too few files under " << root;
  EXPECT_TRUE(std::regex_search(std::string("ENGRAM_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));"), cuda_use));
  EXPECT_TRUE(std::regex_search(std::string("#include <cuda_runtime.h>"), cuda_use));
  EXPECT_FALSE(std::regex_search(std::string("#include \"cuda/backend.cuh\""), cuda_use));
  EXPECT_FALSE(std::regex_search(std::string("void* stream = engine.main_stream();  // cudaStream_t"), cuda_use));
  for (const auto& v : violations) ADD_FAILURE() << v << " (CUDA calls belong in src/cuda)";
}

// The engine's own files are where the constructors live (so the scan above scans something real).
TEST(EngineSpine, TheEngineConstructsThem) {
  const fs::path root(ENGRAM_SOURCE_DIR);
  std::string all;
  for (const auto& entry : fs::directory_iterator(root / "src/engine")) all += read(entry.path());
  for (const char* c : {"CpuPrefetchQueue::create", "make_cuda_backend(", "TableRegistration::create",
                        "SharedTableGroup::lead", "SharedTableGroup::join", "HostTable::create"})
    EXPECT_NE(all.find(c), std::string::npos) << c << " is not in src/engine";
}

}  // namespace
