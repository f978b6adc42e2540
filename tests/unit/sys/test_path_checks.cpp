// A FIFO given as an input file blocked its reader forever in open(2), and output paths were checked only when the
// work was done. sys::open_read now opens without blocking and refuses what is not a regular file, and
// check_output_path / check_input_path refuse a directory, a FIFO or a missing directory up front, naming the path.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "sys/file.hpp"

namespace engram::sys {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    path = fs::path("/tmp") / ("engram-path-checks-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()));
    fs::create_directories(path / "sub");
    std::ofstream(path / "file") << "x";
    ::mkfifo((path / "fifo").c_str(), 0600);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string p(const char* name) const { return (path / name).string(); }
};

TEST(PathChecks, OpenReadRefusesAFifoWithoutBlocking) {
  Dir d;
  auto f = open_read(d.p("fifo"));
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_NE(f.status().message().find("FIFO"), std::string::npos) << f.status().message();
  EXPECT_EQ(open_read(d.p("sub")).status().code(), Code::kInvalidArgument);
  auto ok = open_read(d.p("file"));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  char c = 0;
  EXPECT_TRUE(pread_full(*ok, &c, 1, 0).is_ok());
  EXPECT_EQ(c, 'x');
  // read_small_file goes through open_read: the same refusal.
  EXPECT_EQ(read_small_file(d.p("fifo"), 1 << 20).status().code(), Code::kInvalidArgument);
}

TEST(PathChecks, OutputPaths) {
  Dir d;
  EXPECT_TRUE(check_output_path(d.p("new.json"), OutputKind::kFile).is_ok());
  EXPECT_TRUE(check_output_path(d.p("file"), OutputKind::kFile).is_ok());
  EXPECT_TRUE(check_output_path("/dev/null", OutputKind::kFile).is_ok());
  for (const std::string& bad : {d.p("sub"), d.p("fifo"), d.p("missing/x.json"), d.p("file/x.json"), std::string()}) {
    const Status s = check_output_path(bad, OutputKind::kFile);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    if (!bad.empty()) {
      EXPECT_NE(s.message().find(bad.substr(0, bad.find("/x.json"))), std::string::npos) << s.message();
    }
  }
  EXPECT_TRUE(check_output_path(d.p("sub"), OutputKind::kDirectory).is_ok());
  EXPECT_TRUE(check_output_path(d.p("newdir"), OutputKind::kDirectory).is_ok());
  EXPECT_EQ(check_output_path(d.p("file"), OutputKind::kDirectory).code(), Code::kInvalidArgument);
  EXPECT_EQ(check_output_path(d.p("missing/deeper"), OutputKind::kDirectory).code(), Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(d.path / "newdir"));  // a check makes nothing
}

TEST(PathChecks, InputPaths) {
  Dir d;
  EXPECT_TRUE(check_input_path(d.p("file"), InputKind::kFile).is_ok());
  EXPECT_EQ(check_input_path(d.p("sub"), InputKind::kFile).code(), Code::kInvalidArgument);
  EXPECT_TRUE(check_input_path(d.p("sub"), InputKind::kFileOrDirectory).is_ok());
  EXPECT_EQ(check_input_path(d.p("fifo"), InputKind::kFileOrDirectory).code(), Code::kInvalidArgument);
  EXPECT_EQ(check_input_path(d.p("missing"), InputKind::kFile).code(), Code::kInvalidArgument);
  EXPECT_EQ(check_input_path(d.p("file"), InputKind::kDirectory).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram::sys
