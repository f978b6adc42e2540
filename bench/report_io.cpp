// The three output forms of a bench Report (see report_io.hpp).
#include "bench/report_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/numbers.hpp"

namespace engram::bench {
namespace {

using report::fmt_num;
using report::json_num;

std::string cell_text(const Cell& c, int precision) {
  if (c.is_text()) return c.text;
  return fmt_num(c.value, ("%." + std::to_string(precision) + "f").c_str());
}

nlohmann::json cell_json(const Cell& c) { return c.is_text() ? nlohmann::json(c.text) : json_num(c.value); }

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

void print_table(const Table& t) {
  std::printf("\n%s\n", t.title.c_str());
  std::vector<size_t> w(t.columns.size());
  for (size_t i = 0; i < t.columns.size(); ++i) w[i] = t.columns[i].name.size();
  std::vector<std::vector<std::string>> text;
  for (const auto& r : t.rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < t.columns.size(); ++i) {
      line.push_back(i < r.size() ? cell_text(r[i], t.columns[i].precision) : "n/a");
      w[i] = std::max(w[i], line.back().size());
    }
    text.push_back(std::move(line));
  }
  for (size_t i = 0; i < t.columns.size(); ++i)
    std::printf("%s%*s", i ? "  " : "", -static_cast<int>(w[i]) * (i == 0 ? 1 : -1), t.columns[i].name.c_str());
  std::printf("\n");
  for (const auto& line : text) {
    for (size_t i = 0; i < line.size(); ++i)
      std::printf("%s%*s", i ? "  " : "", -static_cast<int>(w[i]) * (i == 0 ? 1 : -1), line[i].c_str());
    std::printf("\n");
  }
  for (const auto& n : t.notes) std::printf("  %s\n", n.c_str());
}

nlohmann::json report_json(const Report& r, const std::string& description) {
  nlohmann::json j = {{"key", r.key}, {"description", description}, {"waived", r.waived}};
  if (r.waived) j["waived_reason"] = r.waived_reason;
  j["method"] = r.method;
  j["setup"] = r.setup;
  j["tables"] = nlohmann::json::array();
  for (const auto& t : r.tables) {
    nlohmann::json tj = {{"key", t.key}, {"title", t.title}, {"notes", t.notes}};
    tj["columns"] = nlohmann::json::array();
    for (const auto& c : t.columns) tj["columns"].push_back(c.name);
    tj["rows"] = nlohmann::json::array();
    for (const auto& row : t.rows) {
      nlohmann::json rj = nlohmann::json::array();
      for (const auto& c : row) rj.push_back(cell_json(c));
      tj["rows"].push_back(rj);
    }
    j["tables"].push_back(tj);
  }
  j["data"] = r.data;
  j["notes"] = r.notes;
  return j;
}

void write_csv(std::ostream& o, const std::vector<Report>& reports) {
  o << kCsvHeader << '\n';
  for (const auto& r : reports)
    for (const auto& t : r.tables)
      for (size_t ri = 0; ri < t.rows.size(); ++ri) {
        const auto& row = t.rows[ri];
        const size_t labels = std::min(t.label_columns, row.size());
        std::string label;
        for (size_t ci = 0; ci < labels; ++ci)
          label += (ci ? " / " : "") + cell_text(row[ci], t.columns[ci].precision);
        for (size_t ci = labels; ci < t.columns.size() && ci < row.size(); ++ci) {
          const auto& c = row[ci];
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.9g", c.value);
          const std::string v = c.is_text() ? c.text : (std::isfinite(c.value) ? buf : "");  // empty = n/a
          o << csv_escape(r.key) << ',' << csv_escape(t.key) << ',' << ri << ',' << csv_escape(label) << ','
            << csv_escape(t.columns[ci].name) << ',' << csv_escape(v) << '\n';
        }
      }
}

}  // namespace engram::bench
