// Output of a bench Report (registry.hpp) in the three forms `engram bench` offers: the human table (units in the
// column headers, "n/a" for NaN cells), JSON (NaN -> null) and tidy CSV (bench,table,row,label,column,value;
// empty value = n/a). Kept apart from the CLI so that other drivers of the registry print the same tables: the
// statically linked NUMA-guest test (tests/numa/test_bench_numa.cpp) runs `numa` inside the 2-node QEMU guest
// and prints its matrices exactly as `engram bench numa` does.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "bench/registry.hpp"

namespace engram::bench {

// Prints t to stdout: a blank line, the title, a header row, one line per row (first column left-aligned, the
// others right-aligned), then the notes indented.
void print_table(const Table& t);

// The JSON object of one report (key, description, waived[_reason], method, setup, tables with columns and rows,
// data, notes). The conditions block is the caller's to add.
nlohmann::json report_json(const Report& r, const std::string& description);

// Tidy CSV of `reports`: the header kCsvHeader, then one line per figure (a cell outside the label columns):
// the bench and table keys, the row's index in its table, its label (the text of its label columns, joined by
// " / "), the figure's column name (with its unit) and its value (empty = n/a).
inline constexpr const char* kCsvHeader = "bench,table,row,label,column,value";
void write_csv(std::ostream& o, const std::vector<Report>& reports);

}  // namespace engram::bench
