// Every `--json` document the CLI can produce on this machine is checked against docs/json.md: its `schema` is
// one the document table lists, it has that row's keys, and it keeps the conventions (no "n/a" strings: what
// could not be read is null). The commands run at tiny sizes on the CPU backend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"

namespace {

namespace fs = std::filesystem;
using engram::testing::run_engram;

// schema name -> required top-level keys, read from the table of docs/json.md.
std::map<std::string, std::vector<std::string>> documented_schemas() {
  std::ifstream f(std::string(ENGRAM_SOURCE_DIR) + "/docs/json.md");
  std::map<std::string, std::vector<std::string>> out;
  const std::regex row(R"(^\| `(engram\.[a-z-]+/[0-9]+)` \|.*\| ([^|]*) \|$)");
  const std::regex key("`([a-z_]+)`");
  std::string line;
  while (std::getline(f, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    std::vector<std::string> keys;
    const std::string cell = m[2];
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), key); it != std::sregex_iterator(); ++it)
      keys.push_back((*it)[1]);
    out[m[1]] = keys;
  }
  return out;
}

// Paths of the string values that read "n/a" (a missing value must be null).
void find_na(const nlohmann::json& j, const std::string& path, std::vector<std::string>* bad) {
  if (j.is_string() && j.get<std::string>() == "n/a") bad->push_back(path);
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) find_na(it.value(), path + "." + it.key(), bad);
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) find_na(j[i], path + "[" + std::to_string(i) + "]", bad);
}

class JsonSchema : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
    schemas_ = documented_schemas();
    ASSERT_GE(schemas_.size(), 10u) << "docs/json.md: document table not found";
    dir_ = fs::temp_directory_path() / ("engram_json_schema_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs `args` (stdout only), parses it and checks it against docs/json.md; returns the document.
  nlohmann::json check(const std::string& args, const std::string& expected_schema) {
    auto o = run_engram(args);
    EXPECT_EQ(o.code, 0) << args << "\n" << o.out;
    auto j = nlohmann::json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << args << ": not JSON:\n" << o.out;
    if (j.is_discarded()) return {};
    check_document(j, expected_schema, args);
    return j;
  }
  void check_document(const nlohmann::json& j, const std::string& expected_schema, const std::string& what) {
    ASSERT_TRUE(j.is_object()) << what;
    ASSERT_TRUE(j.contains("schema") && j["schema"].is_string()) << what << ": no schema";
    EXPECT_EQ(j["schema"], expected_schema) << what;
    auto s = schemas_.find(j["schema"].get<std::string>());
    ASSERT_NE(s, schemas_.end()) << what << ": schema " << j["schema"] << " is not in docs/json.md";
    for (const auto& k : s->second) EXPECT_TRUE(j.contains(k)) << what << ": missing key '" << k << "'";
    std::vector<std::string> bad;
    find_na(j, "", &bad);
    EXPECT_TRUE(bad.empty()) << what << ": \"n/a\" strings at " << ::testing::PrintToString(bad);
    if (j.contains("conditions")) {
      const auto& c = j["conditions"];
      for (const char* k : {"numa_balancing", "hugepages_2m_total", "cpu_cores_online"})
        EXPECT_TRUE(c[k].is_number() || c[k].is_null()) << what << ": conditions." << k << " = " << c[k];
      EXPECT_TRUE(c["load_average"].is_array() || c["load_average"].is_null()) << what;
      EXPECT_TRUE(c.contains("cpu_governor")) << what;
    }
  }
  std::map<std::string, std::vector<std::string>> schemas_;
  fs::path dir_;
};

const std::string kServing =
    " --layout tiny --model tiny --backend cpu --ids zipf --threads 1 --unit-us 5 --requests 4 --rate 2000"
    " --prompt uniform:4-24 --output 3 --token-budget 32 --prefill-chunk 16";

TEST_F(JsonSchema, RunItsTraceAndTraceAnalyze) {
  const std::string trace = (dir_ / "t.json").string();
  check("run --table-size 16MiB --batch 4 --steps 2 --warmup 1 --layer-us 5 --ids uniform --no-baseline --json "
        "--timeline " + trace, "engram.run/1");
  std::ifstream f(trace);
  check_document(nlohmann::json::parse(f), "engram.trace/1", trace);
  check("trace analyze " + trace + " --json", "engram.trace-analyze/1");
}

TEST_F(JsonSchema, ReplayTopoCensusModelCleanup) {
  check("replay" + kServing + " --json", "engram.replay/2");
  check("topo --json", "engram.topo/1");
  check("census --table-size 16MiB --json", "engram.census/1");
  check("census --pid " + std::to_string(getpid()) + " --json", "engram.census-pid/1");
  for (const char* m : {"transfer", "kv", "engram", "capacity"}) check(std::string("model ") + m + " --json", "engram.model/1");
  check("cleanup --dir " + dir_.string() + " --dry-run --json", "engram.cleanup/1");
}

TEST_F(JsonSchema, BenchJsonAndCsvOnStdout) {
  const std::string bench = "bench numa --smoke --reps 1 --warmup 0 --numa-bytes 1MiB";
  check(bench + " --json", "engram.bench/1");
  // --json-out FILE writes the same document to FILE and keeps the human text on stdout.
  const std::string file = (dir_ / "bench.json").string();
  auto o = run_engram(bench + " --json-out " + file);
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("== bench numa"), std::string::npos) << o.out;
  std::ifstream jf(file);
  ASSERT_TRUE(jf.good()) << file << " not written";
  check_document(nlohmann::json::parse(jf), "engram.bench/1", file);

  auto csv = run_engram(bench + " --csv -");
  EXPECT_EQ(csv.code, 0) << csv.out;
  EXPECT_FALSE(fs::exists("-")) << "--csv - wrote a file named '-'";
  // Every line has the header's six fields; the row label is a field of each figure's line, never a figure.
  std::istringstream lines(csv.out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(line, "bench,table,row,label,column,value");
  int figures = 0;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (line.back() == ',') f.emplace_back();
    ASSERT_EQ(f.size(), 6u) << line;
    EXPECT_EQ(f[0], "numa") << line;
    EXPECT_NE(f[4], "CPU node") << "the row label is emitted as a figure: " << line;
    EXPECT_FALSE(f[3].empty()) << "no row label: " << line;
    ++figures;
  }
  EXPECT_GT(figures, 0) << csv.out;

  EXPECT_EQ(run_engram(bench + " --json --csv -").code, 2);
  EXPECT_EQ(run_engram(bench + " --json --json-out " + file).code, 2);
}

}  // namespace
