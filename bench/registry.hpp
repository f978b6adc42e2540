// The benchmark registry behind `engram bench` (nvbandwidth's pattern): each bench is an entry with a key, a
// one-line description, its own options, a filter() that waives it with a reason when this machine cannot run
// it (no GPU, one NUMA node), and run(), which measures and returns a Report: tables (units in the column
// names), plot figures, raw JSON and the conditions it created (policy requested vs census obtained, sizes).
// `engram bench <key>` runs one entry, `engram bench all` every entry; the CLI prints the tables, writes
// --json / --csv / --plot, and adds the machine's conditions block (src/host/conditions) to every report.
//
// Adding a bench touches no shared file: a bench/*.cpp (or *.cu, CUDA builds only) registers itself with
//   ENGRAM_BENCH(my_ident, {.key = "mykey", .description = "...", .add_options = ..., .filter = ..., .run = ...});
// (a static initialiser; bench/ is an OBJECT library so every registration is linked into the CLI).
//
// Rules every entry follows (docs/measurement.md): warm-up, then ctx.reps (>= 5 by default) repetitions;
// variants compared with each other run interleaved in a shuffled order per repetition (measure.hpp's
// run_interleaved); medians with p5/p95 (p99 for latencies); a metric that could not be read is NaN -> "n/a"
// in tables and null in JSON, never 0; --smoke sizes finish in seconds on a 2-core CI machine.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engram/status.hpp"
#include "report/plot.hpp"

namespace CLI {
class App;
}

namespace engram::bench {

// Options shared by every bench (set by `engram bench`, read by run()).
struct Context {
  int warmup = 2;              // untimed repetitions before the timed ones
  int reps = 7;                // timed repetitions (>= 5 by default)
  bool smoke = false;          // tiny sizes: seconds on a CI machine
  uint64_t seed = 1;           // every random choice (ids, orders, table content) derives from it
  int threads = 0;             // host threads (0 = all the process may use)
  std::string git_rev;         // build revision (git_revision())
  std::string data_dir;        // token files of scripts/tokenize-setup (text ids), "" = default search
  bool verbose = false;        // progress on stderr
  std::mt19937_64 rng{1};      // order of interleaved variants (seeded from `seed` by the CLI)
};

// One cell: a number (NaN = n/a), or a text.
struct Cell {
  double value = 0;
  std::string text;            // when non-empty, the cell is this text
  bool is_text() const { return !text.empty(); }
  Cell(double v) : value(v) {}                              // NOLINT(google-explicit-constructor)
  Cell(int64_t v) : value(static_cast<double>(v)) {}        // NOLINT(google-explicit-constructor)
  Cell(int v) : value(v) {}                                 // NOLINT(google-explicit-constructor)
  Cell(std::string t) : text(t.empty() ? "-" : std::move(t)) {}  // NOLINT(google-explicit-constructor)
  Cell(const char* t) : Cell(std::string(t)) {}             // NOLINT(google-explicit-constructor)
};

struct Column {
  std::string name;            // with its unit: "read BW [GB/s]", "latency p99 [ns]", "rows"
  int precision = 2;           // digits after the point in the human table (CSV/JSON keep full precision)
};

// A table of results: one per orientation/matrix (e.g. "CPU node (row) -> memory node (column), GB/s").
struct Table {
  std::string key;             // machine name for JSON/CSV ("seq_read_1t_gbps")
  std::string title;           // human title with units and orientation
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
  std::vector<std::string> notes;  // printed under the table
  // Leading columns that name a row rather than measure it (CPU node; source, direction, engine): the tidy CSV
  // puts their text in its `label` column instead of emitting them as figures.
  size_t label_columns = 1;
};

struct Report {
  std::string key;
  bool waived = false;
  std::string waived_reason;   // why (printed; exit stays 0 under `all`, 77 for a single waived bench)
  nlohmann::json method;       // warmup, reps, order, timer, what is counted
  nlohmann::json setup;        // sizes, placement requested vs census obtained, backing, device
  std::vector<Table> tables;
  std::vector<plot::Figure> figures;  // rendered into the --plot PNG (one panel each)
  nlohmann::json data;         // everything else a machine may want (per-case distributions)
  std::vector<std::string> notes;
};

struct Entry {
  std::string key;             // `engram bench <key>`
  std::string description;     // one line for --help
  // Declares this bench's own options on its subcommand (may be empty). Bind them to file-static storage.
  std::function<void(CLI::App&)> add_options;
  // Checks the bench's own option values (may be empty): a refusal is kInvalidArgument, bad input (exit 2), and it
  // runs before filter(), so a bad value is reported as such even where the bench would be waived.
  std::function<Status(const Context&)> check = nullptr;
  // Returns a reason when this machine cannot run the bench (waived), nullopt when it can.
  std::function<std::optional<std::string>(const Context&)> filter;
  std::function<Result<Report>(Context&)> run;
  int order = 50;              // position in `engram bench all` (lower first)
};

std::vector<Entry>& registry();
bool register_entry(Entry e);
const Entry* find_entry(const std::string& key);

}  // namespace engram::bench

#define ENGRAM_BENCH(ident, ...) \
  static const bool engram_bench_registered_##ident = ::engram::bench::register_entry(::engram::bench::Entry __VA_ARGS__)
