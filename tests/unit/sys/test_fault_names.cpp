// The fault points are one registry (sys/fault.hpp, kFaultPoints): the wrappers ask fault_errno with its names, and
// ENGRAM_FAULT / set_faults_from_spec accept only those (and "*"). A misspelt name would run a fault test that
// injects nothing: it is refused, naming it, and nothing of the spec is installed.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

#include "sys/fault.hpp"

namespace engram::sys {
namespace {

struct ClearFaults {
  ~ClearFaults() { clear_faults(); }
};

TEST(FaultNames, RegistryHasEveryHookOnceAndNoWildcard) {
  std::set<std::string> seen;
  for (const char* n : kFaultPoints) {
    EXPECT_TRUE(seen.insert(n).second) << n << " is listed twice";
    EXPECT_TRUE(is_fault_point(n)) << n;
  }
  for (const char* n : {kFaultMmap, kFaultMbind, kFaultPread, kFaultHostRegister, kFaultMemfdCreate, kFaultOpenShm})
    EXPECT_TRUE(seen.count(n)) << n;
  EXPECT_FALSE(is_fault_point("*"));
  EXPECT_FALSE(is_fault_point(""));
  EXPECT_FALSE(is_fault_point("mmap2"));
}

TEST(FaultNames, EveryRegisteredNameIsAcceptedAndInjects) {
  ClearFaults guard;
  for (const char* n : kFaultPoints) {
    ASSERT_TRUE(set_faults_from_spec(std::string(n) + "=EPERM").is_ok()) << n;
    EXPECT_EQ(fault_errno(n), EPERM) << n;
    clear_faults();
  }
  ASSERT_TRUE(set_faults_from_spec("*=ENOMEM").is_ok());
  EXPECT_EQ(fault_errno(kFaultMbind), ENOMEM);
}

TEST(FaultNames, UnknownNameIsRefusedByNameAndInstallsNothing) {
  ClearFaults guard;
  clear_faults();
  const Status s = set_faults_from_spec("mbind=EPERM,nosuchcall=EPERM");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'nosuchcall' is no fault point"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("mbind"), std::string::npos) << s.message();  // the known names are listed
  EXPECT_EQ(fault_errno(kFaultMbind), 0) << "a refused spec installed part of itself";
}

TEST(FaultNames, MalformedItemsAreRefused) {
  ClearFaults guard;
  for (const char* spec : {"mbind=EPERM,", ",mbind=EPERM", "mbind=EPERM,,mmap=EPERM", "mbind=0", "mbind=99999999999",
                           "mbind=-1", "mbind", "=EPERM", "mbind=EBOGUS"})
    EXPECT_FALSE(set_faults_from_spec(spec).is_ok()) << spec;
  EXPECT_TRUE(set_faults_from_spec("").is_ok());  // nothing to install
  EXPECT_TRUE(set_faults_from_spec("mbind=1,mmap=ENOSPC").is_ok());
}

TEST(FaultNames, EnvironmentCheckNamesTheVariableAndTheCall) {
  const char* old = std::getenv("ENGRAM_FAULT");
  const std::string saved = old ? old : "";
  ::setenv("ENGRAM_FAULT", "mbind=EPERM,fsync=EIO", 1);
  const Status s = check_fault_env();
  if (old) ::setenv("ENGRAM_FAULT", saved.c_str(), 1);
  else ::unsetenv("ENGRAM_FAULT");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ENGRAM_FAULT"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'fsync'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace engram::sys
