// report/plot: the gnuplot script carries every value (NaN as a gap, never 0), quotes names, and draws
// lines with error bars, grouped bars and lanes; malformed figures are refused before gnuplot runs; when
// gnuplot is installed the PNG is written (a PNG signature check), otherwise render_png says kUnsupported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "report/plot.hpp"

namespace engram::plot {
namespace {

Figure lines() {
  Figure f;
  f.title = "lookup \"fused\"";
  f.x_label = "batch [tokens]";
  f.y_label = "throughput [M rows/s]";
  f.log_x = true;
  f.series.push_back({"uvA_lookup", {1, 64, 2048}, {2.5, 21.0, std::nan("")}, {2.4, 20.0, std::nan("")},
                      {2.6, 22.0, std::nan("")}});
  f.series.push_back({"gather", {1, 64, 2048}, {3.0, 22.0, 28.0}, {}, {}});
  return f;
}

TEST(Plot, ScriptCarriesSeriesNaNAndQuotes) {
  const std::string s = gnuplot_script({lines()}, "/tmp/x.png");
  EXPECT_NE(s.find("set output \"/tmp/x.png\""), std::string::npos);
  EXPECT_NE(s.find("set title \"lookup \\\"fused\\\"\""), std::string::npos) << s;
  EXPECT_NE(s.find("set logscale x"), std::string::npos);
  EXPECT_NE(s.find("2048 NaN NaN NaN"), std::string::npos) << s;
  EXPECT_NE(s.find("64 21 20 22"), std::string::npos) << s;
  EXPECT_NE(s.find("yerrorlines"), std::string::npos);
  EXPECT_NE(s.find("title \"uvA_lookup\""), std::string::npos);
  EXPECT_NE(s.find("set datafile missing \"NaN\""), std::string::npos);
  EXPECT_NE(s.find("noenhanced"), std::string::npos);
}

TEST(Plot, BarsAndLanes) {
  Figure b;
  b.style = Style::kBars;
  b.title = "NUMA read BW";
  b.categories = {"cpu N0", "cpu N1"};
  b.series = {{"mem N0", {}, {10, 5}, {}, {}}, {"mem N1", {}, {4.5, 9}, {}, {}}};
  Figure l;
  l.style = Style::kLanes;
  l.title = "timeline";
  l.lanes = {"main", "prefetch"};
  l.segments = {{1, 0, 10, 0, "L1"}, {0, 12, 20, 1, ""}};
  l.color_names = {"lookup", "wait"};
  const std::string s = gnuplot_script({b, l}, "/tmp/y.png", Canvas{800, 0, 2, "caption"});
  EXPECT_NE(s.find("\"cpu N0\" 10 4.5"), std::string::npos) << s;
  EXPECT_NE(s.find("xtic(1)"), std::string::npos);
  EXPECT_NE(s.find("set multiplot layout 1,2 title \"caption\""), std::string::npos) << s;
  EXPECT_NE(s.find("boxxyerror"), std::string::npos);
  EXPECT_NE(s.find("\"prefetch\" 0"), std::string::npos) << s;  // lane 1 of 2 is drawn at y = 0
  EXPECT_NE(s.find("title \"lookup\""), std::string::npos);
}

TEST(Plot, BarsDrawWhiskersAndTheLegendLeavesThePanelToTheData) {
  Figure b;
  b.style = Style::kBars;
  b.title = "TTFT p50";
  b.y_label = "ms";
  b.categories = {"early", "on-demand"};
  b.series = {{"median, whiskers p5..p95", {}, {2.0, 3.5}, {1.5, 3.0}, {2.5, 4.25}}};
  const std::string s = gnuplot_script({b}, "/tmp/z.png");
  EXPECT_NE(s.find("set style histogram errorbars"), std::string::npos) << s;
  EXPECT_NE(s.find("\"on-demand\" 3.5 3 4.25"), std::string::npos) << s;  // y, p5, p95 per category
  EXPECT_NE(s.find("using 2:3:4:xtic(1)"), std::string::npos) << s;
  EXPECT_NE(s.find("set key below"), std::string::npos) << s;
  EXPECT_EQ(s.find("outside right"), std::string::npos) << s;
}

TEST(Plot, MalformedFiguresAreRefused) {
  Figure f = lines();
  f.series[1].y.pop_back();
  const Status st = render_png({f}, "/tmp/engram-test-plot-bad.png");
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("gather"), std::string::npos);
  EXPECT_EQ(render_png({}, "/tmp/a.png").code(), Code::kInvalidArgument);
  Figure l;
  l.style = Style::kLanes;
  l.segments = {{3, 0, 1, 0, ""}};
  EXPECT_EQ(render_png({l}, "/tmp/a.png").code(), Code::kInvalidArgument);
}

TEST(Plot, RendersPngWhenGnuplotIsInstalled) {
  std::string why;
  const std::string path = ::testing::TempDir() + "engram-test-plot.png";
  const Status st = render_png({lines()}, path);
  if (!gnuplot_available(&why)) {
    EXPECT_EQ(st.code(), Code::kUnsupported);
    EXPECT_NE(st.message().find("gnuplot-nox"), std::string::npos);
    GTEST_SKIP() << why;
  }
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace engram::plot
