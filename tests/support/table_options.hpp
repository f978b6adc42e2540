// TableOptions from text in tests (the CLI's words): a value the parser refuses fails the test at once.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "engram/table.hpp"

namespace engram::test {

inline void set_opt(TableOptions& o, const char* key, const std::string& value, int heads = 24) {
  const Status s = set_table_option(o, key, value, heads);
  if (!s.is_ok()) ADD_FAILURE() << "set_table_option(" << key << ", " << value << "): " << s.to_string();
}

}  // namespace engram::test
