// Description: `engram bench traffic` checks its options before anything else (exit 2, naming the option, on every
// machine) and, where no GPU is usable, is waived with the reason (exit 77) instead of failing.
#include <gtest/gtest.h>

#include <unistd.h>

#include "support/cli.hpp"

namespace engram {
namespace {

using testing::CliStderr;
using testing::run_engram;

TEST(BenchTrafficCli, BadOptionsExitTwoNamingTheOption) {
  if (auto m = testing::cli_missing(); !m.empty()) GTEST_SKIP() << m;
  const std::pair<const char*, const char*> cases[] = {
      {"bench traffic --arms engine,bogus", "--arms"},
      {"bench traffic --arms plain,plain", "--arms"},
      {"bench traffic --decode 64,64", "--decode"},
      {"bench traffic --decode 0", "--decode"},
      {"bench traffic --domains same,elsewhere", "--domains"},
      {"bench traffic --engine-grid-fraction 0", "--engine-grid-fraction"},
      {"bench traffic --cache-size lots", "--cache-size"},
      {"bench traffic --same-tokens /nonexistent-engram-dir/x.tokens", "--same-tokens"},
      {"bench traffic --cache-profile /nonexistent-engram-dir/p.profile", "--cache-profile"},
      {"bench traffic --train-tokens /nonexistent-engram-dir/t.tokens", "--train-tokens"},
  };
  for (const auto& [args, word] : cases) {
    const auto r = run_engram(args, CliStderr::kMerge);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(word), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(BenchTrafficCli, WaivedWithTheReasonWithoutAGpu) {
  if (auto m = testing::cli_missing(); !m.empty()) GTEST_SKIP() << m;
  if (::access("/dev/nvidiactl", F_OK) == 0 || ::access("/dev/nvidia0", F_OK) == 0)
    GTEST_SKIP() << "a GPU is present: the bench would run (scripts/gpu-parts/32-traffic.sh runs it)";
  const auto r = run_engram("bench traffic", CliStderr::kMerge);
  EXPECT_EQ(r.code, 77) << r.out;
  EXPECT_NE(r.out.find("WAIVED: needs a GPU"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace engram
