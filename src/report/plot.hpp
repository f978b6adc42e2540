// PNG plots through a gnuplot subprocess, for `engram bench --plot`, `engram run`/experiments and anything
// else that wants a picture of its figures. One Figure is one panel: a title, axis labels (put the unit in the
// label: "rows/s [M]", "latency [ns]"), and either
//   - x/y series (lines, points or both; optional error bars y_low..y_high, e.g. p5..p95), numeric x,
//     optionally log-scaled axes;
//   - bars: categories on x (e.g. batch sizes or node names), one bar per series in each category (grouped);
//   - lanes: horizontal segments [start, end) on named lanes (a timeline / Gantt chart: one lane per stream).
// Several figures render into one PNG as a grid of panels (gnuplot multiplot).
//
// Why gnuplot: it is a Debian package (gnuplot-nox, no X11), a plain subprocess keeps the binary free of
// plotting libraries, and the data travel inline in the script (gnuplot 5 datablocks), so nothing but the
// PNG is written. If gnuplot is missing, render_png returns kUnsupported with the install hint; callers print
// it and carry on (a plot is never the only output). gnuplot_script() is the pure part (tests check it).
#pragma once

#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::plot {

enum class Style { kLinesPoints, kLines, kPoints, kBars, kLanes };

struct Series {
  std::string name;             // legend entry
  std::vector<double> x;        // numeric x (ignored for kBars: values follow Figure::categories)
  std::vector<double> y;        // one y per x (or per category); NaN = no point (gap), never plotted as 0
  std::vector<double> y_low;    // optional error bar low end (same length as y), e.g. p5
  std::vector<double> y_high;   // optional error bar high end, e.g. p95
};

struct LaneSegment {
  int lane = 0;                 // index into Figure::lanes
  double start = 0, end = 0;    // x units of the figure (e.g. us)
  int color = 0;                // palette index (segments of one kind share a colour)
  std::string label;            // optional text drawn at the segment's start
};

struct Figure {
  std::string title;
  std::string x_label;          // with unit, e.g. "batch [tokens]"
  std::string y_label;          // with unit, e.g. "throughput [M rows/s]"
  Style style = Style::kLinesPoints;
  bool log_x = false, log_y = false;
  bool y_from_zero = true;      // linear y axis starts at 0 (honest bars/throughput); false: autoscale
  std::vector<Series> series;
  std::vector<std::string> categories;  // kBars: x tick labels (series[i].y[k] is category k)
  std::vector<std::string> lanes;       // kLanes: lane names, top to bottom
  std::vector<LaneSegment> segments;    // kLanes
  std::vector<std::string> color_names; // kLanes: legend names of the palette indices (optional)
};

struct Canvas {
  int width_px = 1200;          // whole image
  int height_px = 0;            // 0: 420 per row of panels
  int columns = 0;              // panels per row; 0: 1 for one figure, 2 for more
  std::string caption;          // optional line under the panels (conditions, command)
};

// The gnuplot script that draws `figures` into `png_path` (pure; no I/O).
std::string gnuplot_script(const std::vector<Figure>& figures, const std::string& png_path, const Canvas& canvas = {});

// True when a gnuplot executable is on PATH; otherwise `why` says what to install.
bool gnuplot_available(std::string* why = nullptr);

// Renders the figures into `png_path`. kUnsupported when gnuplot is absent ("install gnuplot-nox"),
// kInvalidArgument for an empty or malformed figure (series with mismatched lengths), kIo when gnuplot
// fails (its stderr in the message) or writes no file.
Status render_png(const std::vector<Figure>& figures, const std::string& png_path, const Canvas& canvas = {});

}  // namespace engram::plot
