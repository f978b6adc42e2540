// Reading small text files of procfs and sysfs (/proc/<pid>/numa_maps, /sys/devices/system/node/...).
//
// Every file-system access of the NUMA code sits in src/sys: the text itself comes from read_text_file
// (sys/file.hpp); these add integers, directory listings, links and the kernel's list formats. Parsers of
// whole files live in src/host. kNotFound when the file does
// not exist (a node without a hugepage pool, a pid that exited), kPermission on EACCES.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"
#include "sys/file.hpp"  // read_text_file

namespace engram::sys {

// First line of the file parsed as a signed integer.
Result<int64_t> read_int_file(const std::string& path);
// Names of the entries of a directory (no "." / ".."), unsorted. kNotFound if it does not exist.
Result<std::vector<std::string>> list_dir(const std::string& path);
// realpath(3): the canonical path with every symlink resolved. kNotFound if it does not exist.
Result<std::string> real_path(const std::string& path);
// Parses a kernel list "0-3,8,10-11" into {0,1,2,3,8,10,11}; kInvalidArgument on garbage.
Result<std::vector<int>> parse_int_list(const std::string& text);
// Inverse of parse_int_list: sorted unique values as "0-3,8,10-11" ("" for none).
std::string format_int_list(std::vector<int> values);

}  // namespace engram::sys
