// gnuplot-subprocess PNG helper (see plot.hpp). The script is self-contained: every series is an inline
// datablock ($dK_S << EOD), NaN is declared missing so an unreadable point is a gap, the terminal is pngcairo
// when this gnuplot has it (gnuplot-nox does) and the plain png terminal otherwise, and text is `noenhanced`
// so names with underscores print as written. The subprocess is `gnuplot SCRIPT` (sys::run_program) with its
// output kept in a temporary file for the error message; both temporaries are removed afterwards.
#include "report/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sys/file.hpp"
#include "sys/subprocess.hpp"

namespace engram::plot {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "NaN";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

Status validate(const Figure& f, size_t index) {
  const std::string where = "plot: figure " + std::to_string(index) + " (" + f.title + ")";
  if (f.style == Style::kLanes) {
    for (const auto& s : f.segments)
      if (s.lane < 0 || static_cast<size_t>(s.lane) >= f.lanes.size())
        return Status(Code::kInvalidArgument, where + ": segment on lane " + std::to_string(s.lane) + " of " +
                                                  std::to_string(f.lanes.size()) + "; expected an index into lanes");
    return Status::ok();
  }
  for (const auto& s : f.series) {
    const size_t n = f.style == Style::kBars ? f.categories.size() : s.x.size();
    if (s.y.size() != n)
      return Status(Code::kInvalidArgument, where + ": series '" + s.name + "' has " + std::to_string(s.y.size()) +
                                                " y values; expected " + std::to_string(n) +
                                                (f.style == Style::kBars ? " (one per category)" : " (one per x)"));
    if ((!s.y_low.empty() && s.y_low.size() != n) || (!s.y_high.empty() && s.y_high.size() != n) ||
        (s.y_low.empty() != s.y_high.empty()))
      return Status(Code::kInvalidArgument,
                    where + ": series '" + s.name + "' error bars; expected y_low and y_high both empty or of length " +
                        std::to_string(n));
  }
  return Status::ok();
}

void panel(std::ostringstream& o, const Figure& f, size_t k) {
  // The legend goes under the panel: beside it, it takes the width the data need; inside, it can hide them.
  o << "reset\nset datafile missing \"NaN\"\nset grid\nset key below horizontal\n";
  o << "set title " << quote(f.title) << "\nset xlabel " << quote(f.x_label) << "\nset ylabel " << quote(f.y_label)
    << "\n";
  if (f.log_x && f.style != Style::kBars) o << "set logscale x\n";
  if (f.log_y) o << "set logscale y\n";
  if (f.y_from_zero && !f.log_y && f.style != Style::kLanes) o << "set yrange [0:*]\n";

  if (f.style == Style::kLanes) {
    const int n = static_cast<int>(f.lanes.size());
    o << "set yrange [-0.6:" << n - 0.4 << "]\nset ytics (";
    for (int i = 0; i < n; ++i) o << (i ? ", " : "") << quote(f.lanes[static_cast<size_t>(i)]) << " " << n - 1 - i;
    o << ")\nset style fill solid 0.75 border -1\n";
    int max_color = 0;
    for (const auto& s : f.segments) max_color = std::max(max_color, s.color);
    std::vector<bool> used(static_cast<size_t>(max_color) + 1, false);
    for (const auto& s : f.segments) used[static_cast<size_t>(s.color)] = true;
    std::string plot;
    for (int c = 0; c <= max_color; ++c) {
      if (!used[static_cast<size_t>(c)]) continue;
      o << "$d" << k << "_" << c << " << EOD\n";
      for (const auto& s : f.segments)
        if (s.color == c) o << n - 1 - s.lane << " " << num(s.start) << " " << num(s.end) << "\n";
      o << "EOD\n";
      const std::string name = static_cast<size_t>(c) < f.color_names.size() ? f.color_names[static_cast<size_t>(c)]
                                                                                : "kind " + std::to_string(c);
      plot += std::string(plot.empty() ? "plot " : ", ") + "$d" + std::to_string(k) + "_" + std::to_string(c) +
              " using 2:1:2:3:($1-0.35):($1+0.35) with boxxyerror lc " + std::to_string(c + 1) + " title " +
              quote(name);
    }
    for (const auto& s : f.segments)
      if (!s.label.empty())
        o << "set label " << quote(s.label) << " at " << num(s.start) << "," << n - 1 - s.lane + 0.42
          << " font \",7\"\n";
    o << (plot.empty() ? "plot NaN notitle" : plot) << "\n";
    return;
  }

  if (f.style == Style::kBars) {
    // Error bars (y_low..y_high) on any series: every series writes y, low, high (a series without them gets
    // a zero-length bar at y) and the histogram draws them as whiskers.
    bool err = false;
    for (const auto& s : f.series) err = err || !s.y_low.empty();
    o << "set style data histogram\nset style histogram " << (err ? "errorbars lw 1.5" : "clustered")
      << " gap 1\nset style fill solid 0.8 border -1\nset boxwidth 0.9\n";
    size_t longest = 0;
    for (const auto& c : f.categories) longest = std::max(longest, c.size());
    if (longest > 8 && f.categories.size() > 2) o << "set xtics rotate by -30\n";
    o << "$d" << k << " << EOD\n";
    for (size_t c = 0; c < f.categories.size(); ++c) {
      o << quote(f.categories[c]);
      for (const auto& s : f.series) {
        o << " " << num(s.y[c]);
        if (err) o << " " << num(s.y_low.empty() ? s.y[c] : s.y_low[c]) << " " << num(s.y_high.empty() ? s.y[c] : s.y_high[c]);
      }
      o << "\n";
    }
    o << "EOD\n";
    if (f.series.empty()) {
      o << "plot NaN notitle\n";
      return;
    }
    o << "plot ";
    const size_t per = err ? 3 : 1;
    for (size_t i = 0; i < f.series.size(); ++i) {
      const size_t col = 2 + i * per;
      o << (i ? ", '' " : "$d" + std::to_string(k) + " ") << "using " << col;
      if (err) o << ":" << col + 1 << ":" << col + 2;
      o << (i == 0 ? ":xtic(1)" : "") << " title " << quote(f.series[i].name);
    }
    o << "\n";
    return;
  }

  const char* with = f.style == Style::kLines ? "lines" : f.style == Style::kPoints ? "points" : "linespoints";
  std::string plot;
  for (size_t i = 0; i < f.series.size(); ++i) {
    const Series& s = f.series[i];
    const bool err = !s.y_low.empty();
    o << "$d" << k << "_" << i << " << EOD\n";
    for (size_t j = 0; j < s.x.size(); ++j) {
      o << num(s.x[j]) << " " << num(s.y[j]);
      if (err) o << " " << num(s.y_low[j]) << " " << num(s.y_high[j]);
      o << "\n";
    }
    o << "EOD\n";
    plot += std::string(plot.empty() ? "plot " : ", ") + "$d" + std::to_string(k) + "_" + std::to_string(i) +
            (err ? std::string(" using 1:2:3:4 with ") + (f.style == Style::kPoints ? "yerrorbars" : "yerrorlines")
                 : std::string(" using 1:2 with ") + with) +
            " lw 2 title " + quote(s.name);
  }
  o << (plot.empty() ? "plot NaN notitle" : plot) << "\n";
}

}  // namespace

std::string gnuplot_script(const std::vector<Figure>& figures, const std::string& png_path, const Canvas& canvas) {
  const int n = static_cast<int>(figures.size());
  const int cols = canvas.columns > 0 ? canvas.columns : (n <= 1 ? 1 : 2);
  const int rows = (n + cols - 1) / cols;
  const int w = canvas.width_px;
  const int h = canvas.height_px > 0 ? canvas.height_px : 420 * std::max(1, rows) + (canvas.caption.empty() ? 0 : 30);
  std::ostringstream o;
  o << "# written by engram (src/report/plot.cpp)\n";
  o << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n  set terminal pngcairo size " << w << "," << h
    << " noenhanced font \"sans,10\"\n} else {\n  set terminal png size " << w << "," << h << " noenhanced\n}\n";
  o << "set output " << quote(png_path) << "\n";
  o << "set multiplot layout " << std::max(1, rows) << "," << cols;
  if (!canvas.caption.empty()) o << " title " << quote(canvas.caption) << " font \",9\"";
  o << "\n";
  for (size_t k = 0; k < figures.size(); ++k) panel(o, figures[k], k);
  o << "unset multiplot\nset output\n";
  return o.str();
}

bool gnuplot_available(std::string* why) {
  if (sys::program_on_path("gnuplot")) return true;
  if (why) *why = "gnuplot not found on PATH; install it (Debian: apt-get install gnuplot-nox) to get PNG plots";
  return false;
}

Status render_png(const std::vector<Figure>& figures, const std::string& png_path, const Canvas& canvas) {
  if (figures.empty()) return Status(Code::kInvalidArgument, "plot: no figures; expected at least one");
  if (png_path.empty()) return Status(Code::kInvalidArgument, "plot: empty output path; expected FILE.png");
  for (size_t i = 0; i < figures.size(); ++i) ENGRAM_RETURN_IF_ERROR(validate(figures[i], i));
  std::string why;
  if (!gnuplot_available(&why)) return Status(Code::kUnsupported, "plot " + png_path + ": " + why);

  auto script_path = sys::make_temp_file("/tmp/engram-plot-");
  if (!script_path.is_ok()) return script_path.status().with_context("plot");
  auto err_path = sys::make_temp_file("/tmp/engram-plot-err-");
  if (!err_path.is_ok()) {
    (void)sys::unlink_path(*script_path);
    return err_path.status().with_context("plot");
  }
  Status result;
  {
    std::ofstream sf(*script_path, std::ios::binary | std::ios::trunc);
    sf << gnuplot_script(figures, png_path, canvas);
    sf.close();
    if (!sf) result = Status(Code::kIo, "plot: cannot write the script to " + *script_path);
  }
  (void)sys::unlink_path(png_path);  // so that "no file" below means gnuplot wrote none
  if (result.is_ok()) {
    auto exit = sys::run_program({"gnuplot", *script_path}, {.output_path = *err_path});
    if (!exit.is_ok()) {
      result = exit.status().with_context("plot " + png_path);
    } else {
      std::ifstream ef(*err_path);
      std::string err((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
      if (err.size() > 600) err = err.substr(0, 600) + "...";
      std::error_code ec;
      const auto size = std::filesystem::file_size(png_path, ec);
      if (!exit->exited || exit->code != 0)
        result = Status(Code::kIo, "plot " + png_path + ": gnuplot exited with status " +
                                       std::to_string(exit->exited ? exit->code : -1) + ": " + err);
      else if (ec || size == 0)
        result = Status(Code::kIo, "plot " + png_path + ": gnuplot wrote no image: " + err);
    }
  }
  (void)sys::unlink_path(*script_path);
  (void)sys::unlink_path(*err_path);
  return result;
}

}  // namespace engram::plot
