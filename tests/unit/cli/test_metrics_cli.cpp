// `engram run --metrics-port/--metrics-file` and `engram serve-table --metrics-port`: promtool accepts a scrape taken
// while the run is in progress and the final file, counters never go down between two scrapes, the figures agree
// with the run's own JSON report, and bad metrics arguments exit 2 (a port in use: 1) with nothing written.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "sys/subprocess.hpp"

namespace {

namespace fs = std::filesystem;
using engram::testing::run_engram;
using engram::testing::run_engram_split;
using engram::testing::run_shell;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Series ("name{labels}") -> value of every sample line.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// Sum of the samples of metric `name` (exact name, any labels).
double sum_of(const std::map<std::string, double>& s, const std::string& name) {
  double total = 0;
  for (const auto& [series, v] : s)
    if (series == name || series.rfind(name + "{", 0) == 0) total += v;
  return total;
}

// promtool's verdict on `text` ("" when it accepts it).
std::string promtool_problems(const std::string& text, const fs::path& dir) {
  const fs::path f = dir / "promtool-input.txt";
  std::ofstream(f) << text;
  auto r = run_shell("promtool check metrics < " + f.string() + " 2>&1");
  return r.code == 0 ? "" : "exit " + std::to_string(r.code) + ": " + r.out;
}

// The port a background command announced on its stderr file ("metrics at http://127.0.0.1:P/metrics"); 0 when it
// did not within the time given, or process `pid` (when > 0) ended first.
int announced_port(const fs::path& err, std::chrono::seconds within, int pid = 0) {
  const auto end = std::chrono::steady_clock::now() + within;
  const std::string key = "metrics at http://127.0.0.1:";
  while (std::chrono::steady_clock::now() < end) {
    const std::string e = read_file(err);
    if (size_t at = e.find(key); at != std::string::npos) return std::atoi(e.c_str() + at + key.size());
    if (pid > 0 && kill(pid, 0) != 0) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

std::string scrape(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) return "";
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  return res->body;
}

std::string skip_reason() {
  if (std::string m = engram::testing::cli_missing(); !m.empty()) return m;
  if (!engram::sys::program_on_path("promtool")) return "promtool is not installed (Debian package prometheus)";
  return "";
}

TEST(MetricsCli, RunScrapedTwiceAndFileAgreeWithJson) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("engram_metrics_run");
  const fs::path file = dir.path / "final.prom", err = dir.path / "stderr.txt";
  const int steps = 200, warmup = 2, batch = 8;
  // 16 layers x 500 us per step: the replay (after a compute-only pass as long) runs for seconds, time to scrape.
  const std::string args = "run --table-size 16MiB --batch " + std::to_string(batch) + " --steps " +
                           std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                           " --layer-us 500 --timeline none --json --metrics-port 0 --metrics-file " + file.string();
  auto run = std::async(std::launch::async, [&] { return run_engram_split(args, dir.path); });
  const int port = announced_port(err, std::chrono::seconds(120));
  ASSERT_GT(port, 0) << read_file(err);
  // First scrape once lookups are being counted, the second a little later.
  std::string first;
  for (int i = 0; i < 3000; ++i) {
    first = scrape(port);
    if (sum_of(parse_samples(first), "engram_lookups_total") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string second = scrape(port);
  auto result = run.get();
  ASSERT_EQ(result.code, 0) << result.err;
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(promtool_problems(first, dir.path), "") << first;
  if (!second.empty()) {  // the run may have ended between the two scrapes on a loaded machine
    EXPECT_EQ(promtool_problems(second, dir.path), "") << second;
    const auto a = parse_samples(first), b = parse_samples(second);
    for (const auto& [series, v] : a) {
      const std::string name = series.substr(0, series.find('{'));
      const bool monotonic = name.ends_with("_total") || name.ends_with("_count") || name.ends_with("_bucket");
      if (!monotonic) continue;
      ASSERT_TRUE(b.count(series)) << series << " vanished";
      EXPECT_GE(b.at(series), v) << series;
    }
  }
  // The final file: promtool accepts it, and it agrees with the JSON report (which leaves the warm-up steps out).
  ASSERT_TRUE(fs::exists(file));
  const std::string text = read_file(file);
  EXPECT_EQ(promtool_problems(text, dir.path), "") << text;
  const auto m = parse_samples(text);
  const auto j = nlohmann::json::parse(result.out);
  const int layers = static_cast<int>(j["layers"].size());
  const double measured_rows = j["lookup"]["rows"].get<double>();
  EXPECT_EQ(sum_of(m, "engram_lookups_total"), (steps + warmup) * layers);
  EXPECT_EQ(sum_of(m, "engram_lookup_rows_total"), measured_rows * (steps + warmup) / steps);
  EXPECT_EQ(sum_of(m, "engram_lookup_source_bytes_total"),
            j["bytes"]["b_source_per_step"].get<double>() * (steps + warmup));
  EXPECT_EQ(sum_of(m, "engram_lookup_duration_seconds_count"), (steps + warmup) * layers);
  EXPECT_EQ(sum_of(m, "engram_exposed_wait_seconds_count"), (steps + warmup) * layers);
  EXPECT_EQ(sum_of(m, "engram_steps_total"), steps + warmup);
  EXPECT_EQ(sum_of(m, "engram_table_bytes"), j["table"]["bytes"].get<double>());
  EXPECT_GT(sum_of(m, "engram_table_resident_pages") + sum_of(m, "engram_table_not_resident_pages"), 0);
  EXPECT_EQ(sum_of(m, "engram_errors_total"), 0);
  if (j["workload"]["backend"] == "cuda") {
    double hits = 0, probes = 0, avoided = 0;
    for (const auto& f : j["workload"]["backend_details"]["fast_path"]) {
      if (!f["cache"].is_object() || !f["cache"]["hits"].is_number()) continue;
      hits += f["cache"]["hits"].get<double>();
      probes += f["cache"]["probes"].get<double>();
      avoided += f["cache"]["link_bytes_avoided"].get<double>();
    }
    EXPECT_EQ(sum_of(m, "engram_cache_hits_total"), hits);
    EXPECT_EQ(sum_of(m, "engram_cache_probes_total"), probes);
    EXPECT_EQ(sum_of(m, "engram_cache_link_bytes_avoided_total"), avoided);
  } else {
    // Not measured on the cpu backend: absent, never 0.
    EXPECT_EQ(text.find("engram_cache_hits_total"), std::string::npos);
    EXPECT_EQ(text.find("engram_plan_predicted_seconds"), std::string::npos);
  }
}

TEST(MetricsCli, ServeTableScrapeAndFinalFile) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("engram_metrics_serve");
  fs::permissions(dir.path, fs::perms::owner_all, fs::perm_options::replace);  // the socket's directory: private
  const fs::path file = dir.path / "serve.prom", err = dir.path / "stderr.txt";
  auto bg = run_shell(std::string(ENGRAM_CLI_PATH) + " serve-table --layout tiny --socket " +
                      (dir.path / "s.sock").string() + " --metrics-port 0 --metrics-file " + file.string() +
                      " >/dev/null 2>" + err.string() + " & echo $!");
  const int pid = std::atoi(bg.out.c_str());
  ASSERT_GT(pid, 0);
  const int port = announced_port(err, std::chrono::seconds(60), pid);
  if (port == 0) kill(pid, SIGKILL);
  ASSERT_GT(port, 0) << read_file(err);
  const std::string text = scrape(port);
  EXPECT_EQ(promtool_problems(text, dir.path), "") << text;
  const auto m = parse_samples(text);
  EXPECT_GT(sum_of(m, "engram_table_bytes"), 0) << text;
  EXPECT_EQ(sum_of(m, "engram_group_ranks"), 1) << text;
  EXPECT_NE(text.find("engram_table_info{"), std::string::npos) << text;
  EXPECT_EQ(text.find("engram_lookups_total"), std::string::npos) << "no queue, no lookup families";
  EXPECT_EQ(text.find("engram_steps_total"), std::string::npos) << "no queue, no steps";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  for (int i = 0; i < 1000 && !fs::exists(file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(file)) << read_file(err);
  for (int i = 0; i < 1000 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(promtool_problems(read_file(file), dir.path), "");
}

TEST(MetricsCli, BadArgumentsExit2NothingWritten) {
  if (auto m = engram::testing::cli_missing(); !m.empty()) GTEST_SKIP() << m;
  TempDir dir("engram_metrics_args");
  const std::string run = "run --table-size 16MiB --steps 1 --warmup 0 --timeline none ";
  EXPECT_EQ(run_engram(run + "--metrics-port 70000").code, 2);
  EXPECT_EQ(run_engram(run + "--metrics-port http").code, 2);
  EXPECT_EQ(run_engram(run + "--metrics-file " + (dir.path / "no/such/dir/m.prom").string()).code, 2);
  EXPECT_EQ(run_engram(run + "--metrics-file " + dir.path.string()).code, 2);
  EXPECT_EQ(run_engram("serve-table --layout tiny --metrics-file " + dir.path.string()).code, 2);
  EXPECT_EQ(run_engram(run + "--ranks 2 --metrics-port 0").code, 2);
  EXPECT_TRUE(fs::is_empty(dir.path)) << "nothing left behind";
}

TEST(MetricsCli, PortInUseExits1NamingIt) {
  if (auto m = engram::testing::cli_missing(); !m.empty()) GTEST_SKIP() << m;
  httplib::Server holder;
  const int port = holder.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  TempDir dir("engram_metrics_port");
  auto r = run_engram_split("run --table-size 16MiB --steps 1 --warmup 0 --timeline none --metrics-port " +
                                std::to_string(port),
                            dir.path);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--metrics-port " + std::to_string(port)), std::string::npos) << r.err;
}

}  // namespace
