// Bad input on every command breaks the CLI contract no more: NaN/inf taken as numbers, integers clamped or
// wrapped, output paths checked only after the work, FIFOs that hang a reader, a directory that aborted `trace
// analyze` (uncaught exception, exit 134). One row per command x bad value (an option's value, or a file's content:
// a replay trace, a timeline): the exit code, stderr naming the option or the file and its line or field, no crash
// text, and nothing left in the working directory or in /dev/shm afterwards.
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
  const char* args;    // placeholders: {F} a regular file, {P} a FIFO, {S} an empty directory, {D} the working
                       // directory (with the malformed trace and timeline files of Fixture)
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
    {"replay --ids zipf --layout tiny --trace-file {D}/trace-nan.csv", 2, "trace-nan.csv:2: arrival_s"},
    {"replay --ids zipf --layout tiny --trace-file {D}/trace-neg.csv", 2, "trace-neg.csv:1: arrival_s"},
    {"replay --ids zipf --layout tiny --trace-file {D}/trace-frac.csv", 2, "trace-frac.csv:1: prompt_tokens"},
    {"replay --ids zipf --prompt 99999999999999999999999", 2, "'99999999999999999999999': more tokens"},
    {"replay --placement bogus", 2, "--placement"},
    {"replay --table-size 0", 2, "--table-size"},
    // experiment
    {"experiment A2 --out {F}", 2, "--out"},
    {"experiment A2 --out /nonexistent-engram-dir/x", 2, "--out"},
    {"experiment A2 --rate nan", 2, "--rate"},
    {"experiment A2 --order-seed -1", 2, "--order-seed"},
    {"experiment A2 --batches {P}", 2, "--batches"},
    {"experiment B2 --caps nan", 2, "--caps"},
    {"experiment B2 --caps 0", 2, "--caps"},
    {"experiment B2 --caps 0.5", 2, "--caps: expected two or more caps"},
    // census
    {"census --pid 0", 2, "--pid"},
    {"census --pid -5", 2, "--pid"},
    {"census --seed -1", 2, "--seed"},
    {"census --max-samples -1", 2, "--max-samples"},
    {"census --backing shm --shm-dir {P}", 2, "--shm-dir"},
    {"census --placement bogus", 2, "--placement"},
    {"census --backing bogus", 2, "--backing"},
    {"census --table-size 0", 2, "--table-size"},
    // soak
    {"soak --backing bogus --duration 2s", 2, "--backing"},
    {"soak --duration 0s", 2, "--duration"},
    {"soak --round 1y", 2, "--round"},
    {"soak --placement bogus", 2, "--placement"},
    {"soak --table-size 0", 2, "--table-size"},
    {"soak --table-size 512KiB", 2, "--table-size"},
    {"soak --ranks 0", 2, "--ranks"},
    {"soak --duration 1s --round 5s", 2, "--duration: duration '1s': below the minimum of 2 s"},
    {"soak --round 1500ms", 2, "--round: duration '1500ms': below the minimum of 2 s"},
    // serve-table
    {"serve-table --seed -1", 2, "--seed"},
    {"serve-table --seed 18446744073709551616", 2, "--seed"},
    {"serve-table --socket ''", 2, "--socket"},
    {"serve-table --group ''", 2, "--group"},
    {"serve-table --socket {F}", 2, "is not a socket"},
    {"serve-table --socket {S}", 2, "is not a socket"},
    {"serve-table --shm-dir {F}", 2, "--shm-dir"},
    {"serve-table --checkpoint {P}", 2, "--checkpoint"},
    {"serve-table --placement bogus", 2, "--placement"},
    // table
    {"table create --layout tiny --out {S} --force", 2, "--out"},
    {"table create --layout tiny --out {P} --force", 2, "--out"},
    {"table create --layout tiny --out /nonexistent-engram-dir/t.safetensors", 2, "--out"},
    {"table create --format hf-model --layout tiny --out {F}", 2, "--out"},
    {"table create --layout v41-flash-mini --table-size '' --out {D}/t.safetensors", 2, "--table-size"},
    {"table info {P}", 2, "{P}"},
    {"table load {P}", 2, "{P}"},
    {"table info /nonexistent-engram-dir/t.safetensors", 2, "/nonexistent-engram-dir"},
    {"table create --format hf-model --layout tiny --compressed-vocab-size 0 --out {D}/m", 2, "--compressed-vocab-size"},
    {"table create --format hf-model --layout tiny --compressed-vocab-size -1 --out {D}/m", 2, "--compressed-vocab-size"},
    {"table create --layout tiny --threads -1 --out {D}/t.safetensors", 2, "--threads"},
    {"table load --reader-node -1 {F}", 2, "--reader-node"},
    {"table create --format hf-model --layout tiny --shards -1 --out {D}/m", 2, "--shards"},
    {"table create --format hf-model --layout tiny --extra-rows -1 --out {D}/m", 2, "--extra-rows"},
    // hash
    {"hash --seed -1", 2, "--seed"},
    {"hash --out {S}", 2, "--out"},
    {"hash --out /nonexistent-engram-dir/ids", 2, "--out"},
    {"hash --tokens {P}", 2, "--tokens"},
    {"hash --text {S}", 2, "--text"},
    {"hash --pad-id -1", 2, "--pad-id"},
    {"hash --expect-vocab -1", 2, "--expect-vocab"},
    {"hash --pad-id 999999999", 2, "--pad-id 999999999: expected a token id"},
    {"hash --expect-vocab 5", 2, "--expect-vocab 5: the tables were built for V' = 5"},
    {"hash --kind bogus", 2, "--kind"},
    {"hash --seq-len -1", 2, "--seq-len"},
    // profile
    {"profile --tokens {F} --out {S}", 2, "--out"},
    {"profile --tokens {F} --out /nonexistent-engram-dir/p", 2, "--out"},
    {"profile --tokens {P} --out {D}/p", 2, "--tokens"},
    {"profile --tokens {F} --out {D}/p --holdout nan", 2, "--holdout"},
    {"profile --tokens {F} --out {D}/p --seed -1", 2, "--seed"},
    {"profile --tokens {F} --out {D}/p --holdout-seed -1", 2, "--holdout-seed"},
    {"profile --tokens {F} --out {D}/p --compression-table {P}", 2, "--compression-table"},
    {"profile --tokens {F} --out {D}/p --holdout 0.5 --holdout-out {S}", 2, "--holdout-out"},
    {"profile --tokens {F} --out {D}/p --top -1", 2, "--top"},
    {"profile --tokens {F} --out {D}/p --min-count 0", 2, "--min-count"},
    {"profile --tokens {F} --out {D}/p --seq-len -1", 2, "--seq-len"},
    {"profile --tokens {F} --out {D}/p --d 33", 2, "--d"},
    {"profile --tokens {F} --layout tiny --out {D}/p.bin --row-format bogus", 2, "--row-format"},
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
    {"trace analyze {D}/tl-abc.json", 2, "tl-abc.json: timeline: rows[0].c_ns"},
    {"trace analyze {D}/tl-neg.json", 2, "tl-neg.json: timeline: rows[1].c_ns"},
    {"trace analyze {D}/tl-step.json", 2, "tl-step.json: timeline: rows[0].step"},
    {"trace analyze {D}/tl-layer.json", 2, "tl-layer.json: timeline: rows[0].layer_index"},
    {"trace analyze {D}/tl-unit.json", 2, "tl-unit.json: timeline: unit"},
    {"trace analyze {D}/tl-nullc.json", 2, "tl-nullc.json: timeline: no row records both f_ns and c_ns"},
    {"trace analyze {D}/tl-good.json --step -1", 2, "--step"},
    {"trace analyze {D}/tl-good.json --rank -1", 2, "--rank"},
    {"trace analyze {D}/tl-good.json --plot {D}/p.png --rank 5", 2, "--rank 5"},
    // model
    {"model transfer --gbps nan", 2, "--gbps"},
    {"model transfer --gbps -1", 2, "--gbps"},
    {"model kv --layers 0", 2, "--layers"},
    {"model kv --params inf", 2, "--params"},
    {"model engram --tokens nan", 2, "--tokens"},
    {"model capacity --nodes -1", 2, "--nodes"},
    {"model kv --context 1e308", 2, "--context"},
    {"model kv --tflops 1e-300", 2, "--tflops"},
    {"model kv --gbps 1e-320", 2, "--gbps"},
    {"model kv --layers 99999999999", 2, "--layers"},
    {"model engram --tokens 1e308", 2, "--tokens"},
    {"model engram --tokens 0.5", 2, "--tokens"},
    {"model engram --table-size 0", 2, "--table-size"},
    {"model engram --table-size 1GiB", 2, "--table-size applies to --layout v41-flash-mini only"},
    {"model engram --rows-per-s 1e300", 2, "--rows-per-s"},
    {"model capacity --nodes 99999999999", 2, "--nodes"},
    {"model transfer --bytes 0", 2, "--bytes"},
    {"model transfer --path ''", 2, "--path"},
    {"model transfer --path bogus --gbps 10", 2, "--path"},
    {"model transfer --path pcie5-pinned --gbps 10", 2, "--path excludes --gbps"},
    {"model bogus", 2, "unknown subcommand 'bogus'; expected one of: transfer, kv, engram, capacity"},
    {"model", 2, "engram model: a subcommand is required, one of: transfer, kv, engram, capacity"},
    // an option where a subcommand is due: named, not "A subcommand is required"
    {"--bogus", 2, "engram: unknown option '--bogus'"},
    {"table --bogus", 2, "engram table: unknown option '--bogus'"},
    {"bench --bogus", 2, "engram bench: unknown option '--bogus'"},
    {"model --bogus", 2, "engram model: unknown option '--bogus'"},
    {"trace --bogus", 2, "engram trace: unknown option '--bogus'"},
    // bench
    {"bench --smoke", 2, "subcommand"},
    {"bench lookup --csv /nonexistent-engram-dir/b.csv", 2, "--csv"},
    {"bench lookup --json-out {S}", 2, "--json-out"},
    {"bench lookup --plot {P}", 2, "--plot"},
    {"bench hash --seed -1", 2, "--seed"},
    {"bench bogus", 2, "unknown subcommand 'bogus'; expected one of: numa"},
    {"bench numa --smoke --numa-bytes nan", 2, "--numa-bytes"},
    {"bench numa --smoke --gather-rows -1", 2, "--gather-rows"},
    {"bench numa --smoke --gather-rows 0", 2, "--gather-rows"},
    {"bench numa --smoke --chase-hops -1", 2, "--chase-hops"},
    {"bench numa --smoke --json-out {D}/same.out --csv {D}/same.out", 2, "--json-out and --csv"},
    {"bench numa --smoke --json-out {D}/same.out --plot {D}/sub/../same.out", 2, "--json-out and --plot"},
    {"bench numa --gather-rows -1", 2, "--gather-rows"},
    {"bench lookup --smoke --d -32", 2, "--d"},
    {"bench lookup --smoke --d 33", 2, "--d"},
    {"bench lookup --smoke --d 0", 2, "--d"},
    {"bench lookup --smoke --backends bogus", 2, "--backends"},
    {"bench lookup --smoke --backends cpu,bogus", 2, "--backends"},
    {"bench lookup --smoke --data-dir /nonexistent-engram-dir", 2, "--data-dir"},
    {"bench lookup --smoke --grid-fractions 0", 2, "--grid-fractions"},
    {"bench lookup --smoke --placement bogus", 2, "--placement"},
    {"bench hash --smoke --tokens {F}", 2, "--tokens"},
    {"bench hash --smoke --tokens {P}", 2, "--tokens"},
    {"bench cache-follow --smoke --first {P}", 2, "--first"},
    {"bench cache-counts --smoke --slots 0", 2, "--slots"},
    {"bench cache-counts --smoke --rows 10 --slots 10", 2, "--slots must be below --rows"},
    // bench cache-follow: its inputs are checked before it may be waived (77)
    {"bench cache-follow --smoke --cache-size abc", 2, "--cache-size"},
    {"bench cache-follow --smoke --cache-size ''", 2, "--cache-size"},
    {"bench cache-follow --smoke --updates every=x", 2, "--updates"},
    {"bench cache-follow --smoke --updates 'every=4;bogus'", 2, "--updates: cache update 'bogus'"},
    {"bench cache-follow --smoke --first {F}", 2, "--first"},
    {"bench lookup --smoke --backends cpu --cache-size abc", 2, "--cache-size"},
    {"bench lookup --smoke --backends cpu --cache-size ''", 2, "--cache-size"},
    {"bench lookup --smoke --backends cpu --cache-size 0%", 2, "--cache-size"},
    {"bench lookup --smoke --backends cpu --tokens {F}", 2, "--tokens"},
    // an option that has no effect in the combination given: refused, naming both options and why
    {"run --ids zipf --timeline none --timeline-absolute", 2, "--timeline-absolute: has no effect with --timeline none"},
    {"replay --ids zipf --timeline-absolute", 2, "--timeline-absolute: has no effect with --timeline none"},
    {"run --ids zipf --tokens {F}", 2, "--tokens: has no effect with --ids zipf"},
    {"run --ids uniform --tokens {F}", 2, "--tokens: has no effect with --ids uniform"},
    {"run --ids uniform --zipf-alpha 2", 2, "--zipf-alpha: has no effect with --ids uniform"},
    {"run --ids text --zipf-alpha 2", 2, "--zipf-alpha: has no effect with --ids text"},
    {"run --ids zipf --hash cpu", 2, "--hash: has no effect with --ids zipf"},
    {"run --ids zipf --switch-at 2 --switch-tokens {F}", 2, "--switch-tokens: has no effect with --ids zipf"},
    {"run --ids zipf --backing memfd --shm-dir {S}", 2, "--shm-dir: has no effect with --backing memfd"},
    {"replay --ids zipf --tokens {F}", 2, "--tokens: has no effect with --ids zipf"},
    {"replay --ids text --zipf-alpha 2", 2, "--zipf-alpha: has no effect with --ids text"},
    {"replay --ids zipf --batches {F} --rate 5", 2, "--rate: has no effect with --batches"},
    {"replay --ids zipf --trace-file {F} --prompt 16", 2, "--prompt: has no effect with --trace-file"},
    {"experiment B1 --caps 0.5 0.6", 2, "--caps: has no effect with B1 (only B2 sweeps grid caps)"},
    {"experiment B1 --prefetch early", 2, "--prefetch: has no effect with B1"},
    {"experiment A2 --batches {F} --requests 4", 2, "--requests: has no effect with --batches"},
    {"profile --tokens {F} --layout tiny --out {D}/p.bin --d 64", 2, "--d: has no effect with --layout tiny"},
    {"profile --tokens {F} --layout tiny --out {D}/p.bin --row-format split", 2, "--row-format: has no effect with --layout tiny"},
    {"profile --tokens {F} --out {D}/p --holdout-out {D}/h", 2, "--holdout-out: has no effect without --holdout"},
    {"hash --batch 5", 2, "--batch: has no effect without --stats"},
    {"hash --tokens {F} --no-bos", 2, "--no-bos: has no effect with --tokens"},
    {"hash --tokens {F} --text {F}", 2, "--text: has no effect with --tokens"},
    {"trace analyze {D}/tl-good.json --step 0", 2, "--step: has no effect without --plot"},
    {"census --layout tiny --prefix x", 2, "--prefix: has no effect without --pid"},
    {"census --layout tiny --shm-dir {S}", 2, "--shm-dir: has no effect with --backing memfd"},
    // a boolean flag given a value
    {"bench numa --smoke --verbose=1", 2, "--verbose: a flag takes no value"},
    {"table create --layout tiny --out {D}/o.safetensors --force=yes", 2, "--force: a flag takes no value"},
    {"trace analyze {D}/tl-good.json --include-warmup=0", 2, "--include-warmup: a flag takes no value"},
    {"run --json=true", 2, "--json: a flag takes no value"},
    // two options naming one file
    {"run --ids zipf --timeline {D}/same.out --metrics-file {D}/same.out", 2, "--timeline and --metrics-file: both name"},
    {"replay --ids zipf --record {D}/same.out --timeline {D}/sub/../same.out", 2, "--record and --timeline: both name"},
    {"profile --tokens {F} --out {F}", 2, "--tokens and --out: both name"},
    {"hash --tokens {F} --out {F}", 2, "--tokens and --out: both name"},
    // surrounding whitespace: refused, never trimmed
    {"model capacity --layout v41-flash-mini --table-size '1GiB '", 2, "--table-size"},
    {"run --table-size ' 64MiB'", 2, "--table-size"},
    {"replay --ids zipf --prompt '16 '", 2, "--prompt"},
    {"run --batch '4 '", 2, "--batch"},
    {"soak --duration '10s '", 2, "--duration"},
    {"soak --duration 1e1s", 2, "--duration"},
    {"soak --duration 0x10s", 2, "--duration"},
    // soak: a round longer than the soak
    {"soak --duration 2s --round 5s", 2, "--round: '5s' is longer than --duration '2s'"},
    // a cache of no rows
    {"run --ids zipf --cache-size 0%", 2, "--cache-size: '0%' is a cache of no rows: give --cache-size off"},
    {"run --ids zipf --cache-size 0", 2, "--cache-size off"},
    {"replay --ids zipf --cache-size 0B", 2, "--cache-size off"},
    // group names
    {"serve-table --group 'a b'", 2, "--group: 'a b' is not a group name"},
    {"serve-table --group a/b", 2, "--group: 'a/b' is not a group name"},
    {"census --pid 1 --prefix ''", 2, "--prefix"},
    // the hidden rank process: refused before it joins
    {"rank-worker --socket {F} --group g", 2, "is not a socket"},
    {"rank-worker --socket {D}/no.sock --group g --fault-at bogus", 2, "--fault-at"},
    {"rank-worker --socket {D}/no.sock --group ''", 2, "--group"},
    {"rank-worker --socket {D}/no.sock --group 'a b'", 2, "--group"},
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
    // Inputs whose content is wrong: a replay trace with a NaN / negative arrival or a fractional length, and
    // timelines with a string time, a time of -1e18 ns, a step of 1e300, a negative layer index and an unknown
    // unit.
    std::ofstream(work / "trace-nan.csv") << "10,5,0.5\n10,5,nan\n";
    std::ofstream(work / "trace-neg.csv") << "10,5,-1\n";
    std::ofstream(work / "trace-frac.csv") << "10.5,5\n";
    std::ofstream(work / "tl-abc.json") << R"({"rows":[{"step":0,"c_ns":"abc"}]})";
    std::ofstream(work / "tl-neg.json") << R"({"rows":[{"step":0,"c_ns":5},{"step":0,"c_ns":-1e18}]})";
    std::ofstream(work / "tl-step.json") << R"({"rows":[{"step":1e300}]})";
    std::ofstream(work / "tl-layer.json") << R"({"rows":[{"layer_index":-7}]})";
    std::ofstream(work / "tl-unit.json") << R"({"unit":"parsecs","rows":[{"rank":0,"step":0,"layer_index":0,"layer_id":1,)"
                                            R"("rows":4,"r_ns":0,"submit_ns":1,"s_ns":2,"f_ns":3,"c_ns":4,"wait_end_ns":5}]})";
    std::ofstream(work / "tl-good.json") << R"({"rows":[{"rank":0,"step":0,"layer_index":0,"layer_id":1,"rows":4,)"
                                            R"("r_ns":0,"submit_ns":1,"s_ns":2,"f_ns":3,"c_ns":4,"wait_end_ns":5}]})";
    std::ofstream(work / "tl-nullc.json") << R"({"rows":[{"rank":0,"step":0,"layer_index":0,"layer_id":1,"rows":4,)"
                                             R"("r_ns":0,"submit_ns":1,"s_ns":2,"f_ns":3,"c_ns":null,"wait_end_ns":5}]})";
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

// A malformed ENGRAM_FAULT would run a fault test that injects nothing: refused before any work, naming the variable.
TEST(CliEdges, MalformedFaultSpecIsRefusedBeforeAnyWork) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const std::string run = " run --layout tiny --backend cpu --ids zipf --steps 2 --warmup 0 --batch 4 --no-baseline "
                          "--timeline none --progress never";
  for (const char* spec : {"bogus", "mbind=EBOGUS", "mbind=", "=EPERM", "nosuchcall=EPERM", "mbind=EPERM,", "mbind=0"}) {
    const auto before = fx.snapshot();
    const Ran r = run_cli(run, fx.work, fx.root / "stderr.txt");  // the same command without the variable runs
    ASSERT_EQ(r.code, 0) << r.err;
    const auto bad = engram::testing::run_shell("cd '" + fx.work.string() + "' && ENGRAM_FAULT='" + spec + "' " +
                                                ENGRAM_CLI_PATH + run + " 2>&1 >/dev/null");
    EXPECT_EQ(bad.code, 2) << spec << "\n" << bad.out;
    EXPECT_NE(bad.out.find("ENGRAM_FAULT"), std::string::npos) << spec << "\n" << bad.out;
    if (std::string(spec) == "nosuchcall=EPERM") {
      EXPECT_NE(bad.out.find("'nosuchcall' is no fault point"), std::string::npos) << bad.out;
    }
    EXPECT_EQ(fx.snapshot(), before) << spec << ": the working directory changed";
  }
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
// no steps, {E} an empty file, {G} a file that is not JSON, {L} a socket path longer than sun_path holds, {O} a
// token file of 5 bytes, {N} a 10000-character group name.
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
    {"serve-table --layout tiny --progress never --group {N}", 2, "--group: 10000 bytes; the socket path it names"},
    // census: --pid and the options of a table built here exclude each other
    // bench lookup and cache-follow token files: a token file whose data is not whole uint32 ids
    {"bench lookup --smoke --backends cpu --tokens {O}", 2, "{O}: size 5 B is not a multiple of 4"},
    {"bench cache-follow --smoke --first {O}", 2, "--first: {O}: size 5 B is not a multiple of 4"},
    {"bench cache-follow --smoke --then {O}", 2, "--then: {O}: size 5 B is not a multiple of 4"},
    {"bench cache-follow --smoke --oracle-tokens {O}", 2, "--oracle-tokens: {O}: size 5 B is not a multiple of 4"},
    {"bench cache-follow --smoke --fill {O}", 2, "--fill: {O}: size 5 B is not a multiple of 4"},
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
  std::ofstream(fx.work / "odd.tokens") << "abcde";
  std::ofstream(fx.work / "odd.tokens.json") << R"({"format":"engram-tokens","format_version":1,"dtype":"uint32le",)"
                                               R"("tokenizer":"t","tokenizer_version":"1","vocab_size":100,"token_count":1})";
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
      s = replace_all(s, "{N}", std::string(10000, 'g'));
      s = replace_all(s, "{O}", (fx.work / "odd.tokens").string());
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

namespace {

// The contract by class of input, with fixtures of their own: {H} a hard link to {F} (the same file by device and
// inode under another name), {OF}/{OD} output names whose derived sidecar (<name>.json) is a FIFO / a directory,
// {TR} a --timeline whose rank-0 file (<name>.rank0.json) is a FIFO, {ML} a model directory whose last shard is a
// symlink loop, {M} the tiny model directory it was copied from.
const Row kContractRows[] = {
    // an output naming an input (data loss): refused before any work, naming the output
    {"hash --layout tiny --tokens {F} --out {F}", 2, "--out"},
    {"hash --layout tiny --tokens {F} --out {H}", 2, "--out"},
    {"profile --layout tiny --tokens {F} --out {F}", 2, "--out"},
    {"profile --layout tiny --tokens {F} --out {H}", 2, "--out"},
    {"trace analyze {F} --plot {F}", 2, "--plot"},
    {"replay --layout tiny --ids zipf --batches {F} --record {F}", 2, "--record"},
    // two outputs naming one file
    {"run --layout tiny --ids zipf --steps 2 --warmup 0 --no-baseline --timeline {D}/x --metrics-file {D}/x", 2, "--metrics-file"},
    {"replay --layout tiny --ids zipf --record {D}/x.json --timeline {D}/x.json", 2, "--timeline"},
    {"profile --layout tiny --tokens {F} --out {D}/p --holdout 0.2 --holdout-out {D}/p", 2, "--holdout-out"},
    // derived outputs checked like the output, before any work
    {"hash --layout tiny --tokens {F} --out {OF}", 2, "--out: derived output '{OF}.json'"},
    {"hash --layout tiny --tokens {F} --out {OD}", 2, "--out: derived output '{OD}.json'"},
    {"profile --layout tiny --tokens {F} --out {D}/p --holdout 0.2 --holdout-out {OF}", 2, "--holdout-out: derived output"},
    {"profile --layout tiny --tokens {F} --out {D}/p --holdout 0.2 --holdout-out {OD}", 2, "--holdout-out: derived output"},
    {"run --layout tiny --ids zipf --steps 2 --warmup 0 --no-baseline --ranks 2 --timeline {TR}", 2,
     "--timeline: derived output '{TR}.rank0.json'"},
    // empty strings
    {"run --model ''", 2, "--model"},
    {"hash --model ''", 2, "--model"},
    {"replay --tokens ''", 2, "--tokens"},
    {"serve-table --model ''", 2, "--model"},
    // options with no effect in the combination given
    {"serve-table --layout tiny --shm-dir {S}", 2, "--shm-dir"},
    {"replay --layout tiny --ids zipf --table-size 1MiB", 2, "--table-size"},
    // exit classes
    {"table info {ML}", 2, "{ML}"},
    {"table load {ML}", 2, "{ML}"},
    {"run --model {ML} --steps 2 --timeline none", 2, "{ML}"},
    {"bench cache-follow --smoke --switch-at 2000 --steps 1000", 2, "--switch-at 2000"},
    {"soak --duration 2s --round 2s --ranks 1 --table-size 1MiB --placement bind:999", 2, "--placement bind:999"},
    // declared ranges
    {"run --table-size 2PiB", 2, "--table-size"},
    {"table create --layout v41-flash-mini --out {D}/t.safetensors --table-size 1.5PiB", 2, "--table-size"},
    {"run --layout tiny --ids zipf --steps 2 --warmup 0 --no-baseline --timeline none --tp-size 1000", 2, "--tp-size 1000"},
    {"census --layout tiny --max-samples 0", 2, "--max-samples"},
    {"table create --format hf-model --layout tiny --out {D}/m3 --compressed-vocab-size 5", 2, "--compressed-vocab-size 5"},
};

}  // namespace

TEST(CliEdges, ContractRowsByClassOfInput) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const fs::path model = fx.work / "model";
  const auto made = engram::testing::run_shell(std::string(ENGRAM_CLI_PATH) + " table create --format hf-model --layout tiny --out '" +
                                               model.string() + "' --progress never --tokenizer-json none 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  // The loop model: a copy whose last shard (by name) is a symlink to itself.
  const fs::path loop = fx.work / "loop-model";
  fs::copy(model, loop, fs::copy_options::recursive);
  std::string last;
  for (auto& e : fs::directory_iterator(loop))
    if (e.path().extension() == ".safetensors" && e.path().filename().string() > last) last = e.path().filename().string();
  ASSERT_FALSE(last.empty());
  fs::remove(loop / last);
  fs::create_symlink(last, loop / last);
  fs::create_hard_link(fx.work / "file.txt", fx.work / "hardlink.txt");
  ::mkfifo((fx.work / "of.json").c_str(), 0600);
  fs::create_directory(fx.work / "od.json");
  ::mkfifo((fx.work / "t.json.rank0.json").c_str(), 0600);
  const auto before_shm = dead_owner_records();
  for (const Row& row : kContractRows) {
    auto expand = [&](std::string s) {
      s = replace_all(s, "{ML}", loop.string());
      s = replace_all(s, "{M}", model.string());
      s = replace_all(s, "{H}", (fx.work / "hardlink.txt").string());
      s = replace_all(s, "{OF}", (fx.work / "of").string());
      s = replace_all(s, "{OD}", (fx.work / "od").string());
      s = replace_all(s, "{TR}", (fx.work / "t.json").string());
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
}

// --backing hugetlb where the machine has no hugepage pool of that size: not possible here (77), saying how to
// reserve pages. Skipped on a machine with a pool (there it is a runtime shortage or a success).
TEST(CliEdges, HugetlbWithoutAPoolIsNotPossibleHere) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  auto read_int = [](const std::string& p) {
    std::ifstream f(p);
    long long v = -1;
    f >> v;
    return v;
  };
  const std::string dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
  if (read_int(dir + "/nr_hugepages") != 0 || read_int(dir + "/nr_overcommit_hugepages") != 0)
    GTEST_SKIP() << "this machine has a 2 MiB hugepage pool (or none of that size at all)";
  Fixture fx;
  for (const char* args : {"run --layout tiny --ids zipf --steps 2 --warmup 0 --no-baseline --timeline none --backing hugetlb",
                           "census --layout tiny --backing hugetlb", "serve-table --layout tiny --backing hugetlb"}) {
    const auto before = fx.snapshot();
    const Ran r = run_cli(args, fx.work, fx.root / "stderr.txt");
    EXPECT_EQ(r.code, 77) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("nr_hugepages"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(fx.snapshot(), before) << args;
  }
}

// The user's cache directory is made only by a command that writes a default output there: a refused command
// line or `engram version` leaves HOME as it was.
TEST(CliEdges, NothingIsCreatedInHomeByACommandThatWritesNothingThere) {
  if (const std::string why = engram::testing::cli_missing(); !why.empty()) GTEST_SKIP() << why;
  Fixture fx;
  const fs::path home = fx.root / "home";
  fs::create_directories(home);
  // A copy outside the build tree: the build tree's binary writes its default outputs under build/, never HOME.
  const fs::path exe = fx.root / "engram";
  fs::copy_file(ENGRAM_CLI_PATH, exe);
  for (const char* args : {"bogus", "version", "run --steps nan", "run --help"}) {
    const auto r = engram::testing::run_shell("cd '" + fx.work.string() + "' && env -u XDG_CACHE_HOME HOME='" + home.string() +
                                              "' '" + exe.string() + "' " + args + " >/dev/null 2>&1");
    EXPECT_TRUE(fs::is_empty(home)) << args << ": HOME holds " << fs::begin(fs::directory_iterator(home))->path();
    (void)r;
  }
}
