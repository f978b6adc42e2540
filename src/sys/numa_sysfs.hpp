// Reading small text files of procfs and sysfs (/proc/<pid>/numa_maps, /sys/devices/system/node/...).
//
// These are plain read(2) loops, here so that every file-system access of the NUMA code sits in
// src/sys. Parsers live in src/host; these functions only fetch text. kNotFound when the file does
// not exist (a node without a hugepage pool, a pid that exited), kPermission on EACCES.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

// Whole file as text (files of procfs report size 0, so this reads until EOF).
Result<std::string> read_text_file(const std::string& path);
// First line of the file parsed as a signed integer.
Result<int64_t> read_int_file(const std::string& path);
// Names of the entries of a directory (no "." / ".."), unsorted. kNotFound if it does not exist.
Result<std::vector<std::string>> list_dir(const std::string& path);
// readlink(2). kNotFound if the link does not exist.
Result<std::string> read_link(const std::string& path);
// realpath(3): the canonical path with every symlink resolved. kNotFound if it does not exist.
Result<std::string> real_path(const std::string& path);
// Parses a kernel list "0-3,8,10-11" into {0,1,2,3,8,10,11}; kInvalidArgument on garbage.
Result<std::vector<int>> parse_int_list(const std::string& text);
// Inverse of parse_int_list: sorted unique values as "0-3,8,10-11" ("" for none).
std::string format_int_list(std::vector<int> values);
// Parses a hex mask as in /proc/<pid>/status Cpus_allowed ("ff,ffffffff") into bit indices.
Result<std::vector<int>> parse_hex_mask(const std::string& text);

}  // namespace engram::sys
