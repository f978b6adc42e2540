// sys/subprocess: a helper program runs to completion with its exit code (or signal) reported and its stdout and
// stderr in the named file; a program that is not on PATH is kNotFound; make_temp_file gives distinct private files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <string>

#include "sys/file.hpp"
#include "sys/subprocess.hpp"

namespace engram::sys {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(Subprocess, ExitCodeAndBothStreamsInTheOutputFile) {
  auto out = make_temp_file("/tmp/engram-test-subprocess-");
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  auto e = run_program({"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, {.output_path = *out});
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_TRUE(e->exited);
  EXPECT_EQ(e->code, 3);
  const std::string text = slurp(*out);
  EXPECT_NE(text.find("to-stdout"), std::string::npos) << text;
  EXPECT_NE(text.find("to-stderr"), std::string::npos) << text;
  EXPECT_TRUE(unlink_path(*out).is_ok());
}

TEST(Subprocess, SignalIsReported) {
  auto e = run_program({"sh", "-c", "kill -9 $$"});
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_FALSE(e->exited);
  EXPECT_TRUE(e->signaled);
  EXPECT_EQ(e->signal, 9);
}

TEST(Subprocess, MissingProgramIsNotFound) {
  auto e = run_program({"engram-no-such-program-4f1c"});
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Code::kNotFound);
  EXPECT_NE(e.status().message().find("engram-no-such-program-4f1c"), std::string::npos);
  EXPECT_FALSE(program_on_path("engram-no-such-program-4f1c"));
  EXPECT_TRUE(program_on_path("sh"));
  EXPECT_EQ(run_program({}).status().code(), Code::kInvalidArgument);
}

TEST(Subprocess, TempFilesAreDistinctAndPrivate) {
  auto a = make_temp_file("/tmp/engram-test-tmp-");
  auto b = make_temp_file("/tmp/engram-test-tmp-");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->rfind("/tmp/engram-test-tmp-", 0), 0u);
  struct stat st {};
  ASSERT_EQ(::stat(a->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_TRUE(unlink_path(*a).is_ok());
  EXPECT_TRUE(unlink_path(*b).is_ok());
  EXPECT_EQ(make_temp_file("/nonexistent-dir-engram/x-").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace engram::sys
