// Bad input on every command breaks the CLI contract no more: NaN/inf taken as numbers, integers clamped or
// wrapped, output paths checked only after the work, FIFOs that hang a reader, a directory that aborted `trace
// analyze` (uncaught exception, exit 134). One row per command x bad value: the exit code, stderr naming the
// option or file, no crash text, and nothing left in the working directory or in /dev/shm afterwards.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>

#include "support/cli.hpp"
#include "sys/owner.hpp"

namespace fs = std::filesystem;

namespace {

struct Row {
  const char* args;    // placeholders: {F} a regular file, {P} a FIFO, {S} an empty directory, {N} a path whose
                       // directory does not exist
  int code;            // expected exit code
  const char* needle;  // stderr must name this (the option or the file)
};

// Per command. Every example of the brief is among them.
const Row kRows[] = {
    // run
    {"run --layer-us NaN", 2, "--layer-us"},
    {"run --layer-us inf", 2, "--layer-us"},
    {"run --layer-us -inf", 2, "--layer-us"},
    {"run --zipf-alpha nan", 2, "--zipf-alpha"},
    {"run --grid-fraction nan", 2, "--grid-fraction"},
    {"run --seed 18446744073709551616", 2, "--seed"},
    {"run --seed -1", 2, "--seed"},
    {"run --steps 99999999999", 2, "--steps"},
    {"run --batch 0x10", 2, "--batch"},
    {"run --timeline /nonexistent-engram-dir/dir/x.json", 2, "--timeline"},
    {"run --timeline {S}", 2, "--timeline"},
    {"run --timeline {P}", 2, "--timeline"},
    {"run --timeline /proc/engram-edges.json", 2, "--timeline"},  // root may write anywhere but /proc takes no file
    {"run --metrics-file {P}", 2, "--metrics-file"},
    {"run --metrics-file ''", 2, "--metrics-file"},
    {"run --metrics-file {S}", 2, "--metrics-file"},
    {"experiment B1 --reps 5 --layout tiny --out /proc/engram-edges", 2, "--out"},
    {"run --checkpoint {P}", 2, "--checkpoint"},
    {"run --checkpoint {S}", 2, "--checkpoint"},
    {"run --tokens {P}", 2, "--tokens"},
    {"run --cache-profile {P}", 2, "--cache-profile"},
    {"run --switch-at 4 --switch-tokens {P}", 2, "--switch-tokens"},
    {"run --backing shm --shm-dir {F}", 2, "--shm-dir"},
    // replay
    {"replay --rate nan", 2, "--rate"},
    {"replay --rate inf", 2, "--rate"},
    {"replay --slo-ttft-ms nan", 2, "--slo-ttft-ms"},
    {"replay --slo-itl-ms inf", 2, "--slo-itl-ms"},
    {"replay --compute-tflops NaN", 2, "--compute-tflops"},
    {"replay --weight-gbps inf", 2, "--weight-gbps"},
    {"replay --unit-us nan", 2, "--unit-us"},
    {"replay --zipf-alpha nan", 2, "--zipf-alpha"},
    {"replay --seed -1", 2, "--seed"},
    {"replay --seed 18446744073709551616", 2, "--seed"},
    {"replay --ids zipf --prompt 99999999999", 2, "--prompt"},
    {"replay --ids zipf --prompt nan", 2, "--prompt"},
    {"replay --ids zipf --prompt 12abc", 2, "--prompt"},
    {"replay --ids zipf --output lognormal:nan,1", 2, "--output"},
    {"replay --token-budget 99999999999", 2, "--token-budget"},
    {"replay --record /nonexistent-engram-dir/r.json", 2, "--record"},
    {"replay --record {S}", 2, "--record"},
    {"replay --timeline {S}", 2, "--timeline"},
    {"replay --batches {P}", 2, "--batches"},
    {"replay --trace-file {P}", 2, "--trace-file"},
    {"replay --tokens {S}", 2, "--tokens"},
    {"replay --cache-profile {P}", 2, "--cache-profile"},
    // experiment
    {"experiment A2 --out {F}", 2, "--out"},
    {"experiment A2 --out /nonexistent-engram-dir/x", 2, "--out"},
    {"experiment A2 --rate nan", 2, "--rate"},
    {"experiment A2 --order-seed -1", 2, "--order-seed"},
    {"experiment A2 --batches {P}", 2, "--batches"},
    {"experiment B2 --caps nan", 2, "--caps"},
    // census
    {"census --pid 0", 2, "--pid"},
    {"census --pid -5", 2, "--pid"},
    {"census --seed -1", 2, "--seed"},
    {"census --max-samples -1", 2, "--max-samples"},
    {"census --backing shm --shm-dir {P}", 2, "--shm-dir"},
    // serve-table
    {"serve-table --seed -1", 2, "--seed"},
    {"serve-table --seed 18446744073709551616", 2, "--seed"},
    // table
    {"table create --layout tiny --out {S} --force", 2, "--out"},
    {"table create --layout tiny --out {P} --force", 2, "--out"},
    {"table create --layout tiny --out /nonexistent-engram-dir/t.safetensors", 2, "--out"},
    {"table create --format hf-model --layout tiny --out {F}", 2, "--out"},
    {"table create --layout v41-flash-mini --table-size '' --out {D}/t.safetensors", 2, "--table-size"},
    {"table info {P}", 2, "{P}"},
    {"table load {P}", 2, "{P}"},
    {"table info /nonexistent-engram-dir/t.safetensors", 2, "/nonexistent-engram-dir"},
    // hash
    {"hash --seed -1", 2, "--seed"},
    {"hash --out {S}", 2, "--out"},
    {"hash --out /nonexistent-engram-dir/ids", 2, "--out"},
    {"hash --tokens {P}", 2, "--tokens"},
    {"hash --text {S}", 2, "--text"},
    // profile
    {"profile --tokens {F} --out {S}", 2, "--out"},
    {"profile --tokens {F} --out /nonexistent-engram-dir/p", 2, "--out"},
    {"profile --tokens {P} --out {D}/p", 2, "--tokens"},
    {"profile --tokens {F} --out {D}/p --holdout nan", 2, "--holdout"},
    {"profile --tokens {F} --out {D}/p --seed -1", 2, "--seed"},
    {"profile --tokens {F} --out {D}/p --holdout-seed -1", 2, "--holdout-seed"},
    {"profile --tokens {F} --out {D}/p --compression-table {P}", 2, "--compression-table"},
    {"profile --tokens {F} --out {D}/p --holdout 0.5 --holdout-out {S}", 2, "--holdout-out"},
    // trace
    {"trace analyze {S}", 2, "{S}"},
    {"trace analyze {P}", 2, "{P}"},
    {"trace analyze /nonexistent-engram-dir/t.json", 2, "/nonexistent-engram-dir"},
    {"trace analyze {F}", 2, "{F}"},
    {"trace analyze {F} --scale-lookup nan", 2, "--scale-lookup"},
    {"trace analyze {F} --advance-ready-us inf", 2, "--advance-ready-us"},
    {"trace analyze {F} --move-layer 99999999999", 2, "--move-layer"},
    {"trace analyze {F} --plot /nonexistent-engram-dir/p.png", 2, "--plot"},
    {"trace analyze {F} --plot {S}", 2, "--plot"},
    // model
    {"model transfer --gbps nan", 2, "--gbps"},
    {"model transfer --gbps -1", 2, "--gbps"},
    {"model kv --layers 0", 2, "--layers"},
    {"model kv --params inf", 2, "--params"},
    {"model engram --tokens nan", 2, "--tokens"},
    {"model capacity --nodes -1", 2, "--nodes"},
    // bench
    {"bench --smoke", 2, "subcommand"},
    {"bench lookup --csv /nonexistent-engram-dir/b.csv", 2, "--csv"},
    {"bench lookup --json-out {S}", 2, "--json-out"},
    {"bench lookup --plot {P}", 2, "--plot"},
    {"bench hash --seed -1", 2, "--seed"},
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

struct Fixture {
  fs::path root;  // holds work/ (the command's working directory and its paths) and stderr.txt
  fs::path work;
  Fixture() {
    std::random_device rd;
    root = fs::path("/tmp") / ("engram-cli-edges-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    work = root / "work";
    fs::create_directories(work / "sub");
    std::ofstream(work / "file.txt") << "not a table\n";
    ::mkfifo((work / "fifo").c_str(), 0600);
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string expand(const std::string& s) const {
    std::string r = replace_all(s, "{F}", (work / "file.txt").string());
    r = replace_all(r, "{P}", (work / "fifo").string());
    r = replace_all(r, "{S}", (work / "sub").string());
    return replace_all(r, "{D}", work.string());
  }
  // Every path under work/ with its size: what a command must leave as it found it.
  std::map<std::string, uintmax_t> snapshot() const {
    std::map<std::string, uintmax_t> m;
    for (auto& e : fs::recursive_directory_iterator(work)) {
      std::error_code ec;
      const uintmax_t size = e.is_regular_file(ec) ? e.file_size(ec) : 0;
      m[e.path().string()] = size;
    }
    return m;
  }
};

// Owner records in /dev/shm whose owner is dead: what a command that died or failed mid-way would leave (another
// test's live tables beside ours have live owners and are not counted).
std::set<std::string> dead_owner_records() {
  std::set<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    std::string object;
    if (!engram::sys::parse_owner_record_name(name, &object)) continue;
    auto rec = engram::sys::read_owner_record(e.path().string());
    if (!rec.is_ok()) continue;
    std::string why;
    if (engram::sys::owner_state(rec->owner, &why) == engram::sys::OwnerState::kDead) out.insert(name);
  }
  return out;
}

struct Ran {
  int code = -1;
  std::string err;
};

// Runs the CLI in `cwd` with a time limit: a read that blocks (a FIFO) fails the row instead of hanging the test.
Ran run_cli(const std::string& args, const fs::path& cwd, const fs::path& err_path) {
  const std::string cmd = "cd '" + cwd.string() + "' && timeout -k 5 60 " + std::string(ENGRAM_CLI_PATH) + " " + args +
                          " >/dev/null 2>'" + err_path.string() + "' </dev/null";
  auto r = engram::testing::run_shell(cmd);
  std::ifstream ef(err_path);
  return {r.code, std::string(std::istreambuf_iterator<char>(ef), std::istreambuf_iterator<char>())};
}

}  // namespace

TEST(CliEdges, EveryBadInputRowExitsWithItsCodeNamesItAndLeavesNothing) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const auto before_shm = dead_owner_records();
  std::map<std::string, int> per_command;
  for (const Row& row : kRows) {
    const std::string args = fx.expand(row.args);
    const std::string needle = fx.expand(row.needle);
    const auto before = fx.snapshot();
    const Ran r = run_cli(args, fx.work, fx.root / "stderr.txt");
    EXPECT_EQ(r.code, row.code) << row.args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << row.args << ": stderr does not name " << needle << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << row.args << "\n" << r.err;
    // DBL_MAX printed in full (a 309-digit number) is no message.
    EXPECT_EQ(r.err.find("17976931348623157"), std::string::npos) << row.args << "\n" << r.err;
    EXPECT_EQ(fx.snapshot(), before) << row.args << ": the working directory changed";
    ++per_command[std::string(row.args).substr(0, std::string(row.args).find(' '))];
  }
  EXPECT_EQ(dead_owner_records(), before_shm) << "a row left a named object of a dead owner in /dev/shm";
  for (const auto& [cmd, n] : per_command) std::printf("[rows] %-12s %d\n", cmd.c_str(), n);
}

// The slowdown of a run without its compute-only pass reads "n/a", not "xn/a"; and an output path that is fine
// is still accepted ("none", an existing regular file).
TEST(CliEdges, GoodValuesBesideTheChecksStillRun) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const Ran r = run_cli("run --layout tiny --backend cpu --ids zipf --steps 2 --warmup 0 --batch 4 --layer-us 1e1 "
                        "--no-baseline --seed 18446744073709551615 --timeline " + (fx.work / "file.txt").string(),
                        fx.work, fx.root / "stderr.txt");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(fx.work / "file.txt");
  const std::string trace((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(trace.find("traceEvents"), std::string::npos);
  auto out = engram::testing::run_shell("cd '" + fx.work.string() + "' && " + ENGRAM_CLI_PATH +
                                        " run --layout tiny --backend cpu --ids zipf --steps 2 --warmup 0 --batch 4 "
                                        "--no-baseline --timeline none 2>/dev/null");
  ASSERT_EQ(out.code, 0);
  EXPECT_NE(out.out.find("slowdown n/a"), std::string::npos) << out.out;
  EXPECT_EQ(out.out.find("xn/a"), std::string::npos) << out.out;
}

namespace {

// More rows, with fixtures of their own: {M} a tiny model directory (engram table create --format hf-model),
// {BH} a recorded schedule with a 99999999999-token chunk, {BN} one with a negative arrival time, {BE} one with
// no steps, {E} an empty file, {G} a file that is not JSON, {L} a socket path longer than sun_path holds.
const Row kFixtureRows[] = {
    // replay --batches: every field in range, the file named
    {"replay --batches {BH}", 2, "{BH}: schedule: step 0, chunk of request 0: tokens"},
    {"replay --batches {BN}", 2, "{BN}: schedule: request 0: arrival_ns"},
    {"replay --batches {BE}", 2, "{BE}"},
    {"replay --table-size abc", 2, "--table-size"},
    {"replay --table-size 1e308", 2, "--table-size"},
    // table create --format hf-model
    {"table create --format hf-model --layout tiny --out {D}/m2 --shards -1", 2, "--shards"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --shards 65", 2, "--shards"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --tokenizer-json {E}", 2, "{E}"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --tokenizer-json {G}", 2, "{G}"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --tokenizer-json {S}", 2, "{S}"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --tokenizer-json {F}", 2, "--tokenizer-json"},
    {"table create --format hf-model --layout tiny --out {D}/m2 --tensor-names ''", 2, "--tensor-names"},
    // the model directory's readers
    {"run --model {M} --tensor-names ''", 2, "--tensor-names"},
    {"table load {M} --tensor-names ''", 2, "--tensor-names"},
    {"table info {M} --tensor-names ''", 2, "--tensor-names"},
    {"table load {M} --reader-node 99", 2, "--reader-node 99: no such NUMA node"},
    {"table info {M} --compression-table /nonexistent-engram-dir/c.bin", 2, "/nonexistent-engram-dir/c.bin"},
    {"table info {M} --compression-table {S}", 2, "--compression-table"},
    // profile, hash
    {"profile --tokens {F} --out {D}/p --top -1", 2, "--top"},
    {"profile --tokens {F} --out {D}/p --table-size 0", 2, "--table-size"},
    {"profile --tokens {F} --out {D}/p --table-size ''", 2, "--table-size"},
    {"hash --table-size ''", 2, "--table-size"},
    {"hash --table-size 0", 2, "--table-size"},
    // run
    {"run --ids text --switch-tokens {F} --switch-at 1000 --steps 2", 2, "--switch-at 1000"},
    {"run --ids text --switch-tokens {F} --switch-at 6 --steps 2 --warmup 4", 2, "--switch-at 6"},
    {"run --ids zipf --cache-update every=4,every=5", 2, "'every' is given twice"},
    // serve-table --socket
    {"serve-table --socket {L}", 2, "--socket"},
    {"serve-table --socket /tmp/engram-edges.sock", 2, "--socket"},
    {"serve-table --socket /proc/engram-edges.sock", 2, "--socket"},
    {"serve-table --socket /nonexistent-engram-dir/s.sock", 2, "--socket"},
    // census: --pid and the options of a table built here exclude each other
    {"census --pid 1 --table-size 64MiB", 2, "--table-size"},
    {"census --pid 1 --head-shards 2", 2, "--head-shards"},
    {"census --table-size 64MiB --head-shards ''", 2, "--head-shards"},
    {"census --table-size 64MiB --head-shards 2 --shard-placements ''", 2, "--shard-placements"},
};

std::string schedule_json(const std::string& request, const std::string& chunk) {
  return R"({"format":"engram-serving-schedule/1","requests":[)" + request + R"(],"rejected":[],"steps":[[)" + chunk + "]]}";
}

}  // namespace

TEST(CliEdges, RowsWithFixturesExitWithTheirCodeNameItAndLeaveNothing) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const fs::path model = fx.work / "model";
  const auto made = engram::testing::run_shell(std::string(ENGRAM_CLI_PATH) + " table create --format hf-model --layout tiny --out '" +
                                               model.string() + "' --progress never --tokenizer-json none 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  std::ofstream(fx.work / "huge.json") << schedule_json("[0,0,16,4,0]", "[0,0,99999999999,1]");
  std::ofstream(fx.work / "negative.json") << schedule_json("[0,-5e9,16,4,0]", "[0,0,16,1]");
  std::ofstream(fx.work / "nosteps.json")
      << R"({"format":"engram-serving-schedule/1","requests":[],"rejected":[],"steps":[]})";
  std::ofstream(fx.work / "empty.txt").flush();
  std::ofstream(fx.work / "garbage.json") << "\x01\x02 not json {";
  const std::string long_socket = "/tmp/" + std::string(120, 's') + ".sock";
  const auto before_shm = dead_owner_records();
  for (const Row& row : kFixtureRows) {
    auto expand = [&](std::string s) {
      s = replace_all(s, "{M}", model.string());
      s = replace_all(s, "{BH}", (fx.work / "huge.json").string());
      s = replace_all(s, "{BN}", (fx.work / "negative.json").string());
      s = replace_all(s, "{BE}", (fx.work / "nosteps.json").string());
      s = replace_all(s, "{E}", (fx.work / "empty.txt").string());
      s = replace_all(s, "{G}", (fx.work / "garbage.json").string());
      s = replace_all(s, "{L}", long_socket);
      return fx.expand(s);
    };
    const std::string args = expand(row.args);
    const std::string needle = expand(row.needle);
    const auto before = fx.snapshot();
    const Ran r = run_cli(args, fx.work, fx.root / "stderr.txt");
    EXPECT_EQ(r.code, row.code) << row.args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << row.args << ": stderr does not name " << needle << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << row.args << "\n" << r.err;
    EXPECT_EQ(fx.snapshot(), before) << row.args << ": the working directory changed";
  }
  EXPECT_EQ(dead_owner_records(), before_shm) << "a row left a named object of a dead owner in /dev/shm";
  EXPECT_FALSE(fs::exists("/tmp/engram-edges.sock"));
}
