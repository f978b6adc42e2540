// procfs / sysfs text readers and kernel list parsers (see numa_sysfs.hpp).
#include "numa_sysfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace engram::sys {

Result<int64_t> read_int_file(const std::string& path) {
  ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str()) return Status(Code::kInvalidArgument, path + ": not an integer: '" + text + "'");
  return static_cast<int64_t>(v);
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    const int err = errno;
    return errno_status(err, "opendir(" + path + ")");
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

Result<std::string> real_path(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (r == nullptr) {
    const int err = errno;
    return errno_status(err, "realpath(" + path + ")");
  }
  std::string out(r);
  std::free(r);
  return out;
}

Result<std::vector<int>> parse_int_list(const std::string& text) {
  std::vector<int> out;
  std::string s;
  for (char c : text)
    if (c != '\n' && c != ' ' && c != '\t') s += c;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t dash = item.find('-');
    char* end = nullptr;
    const long lo = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || lo < 0) return Status(Code::kInvalidArgument, "bad list item '" + item + "'");
    long hi = lo;
    if (dash != std::string::npos) {
      const char* h = item.c_str() + dash + 1;
      hi = std::strtol(h, &end, 10);
      if (end == h || hi < lo) return Status(Code::kInvalidArgument, "bad list range '" + item + "'");
    } else if (*end != '\0') {
      return Status(Code::kInvalidArgument, "bad list item '" + item + "'");
    }
    if (hi - lo > (1 << 20)) return Status(Code::kInvalidArgument, "list range too large '" + item + "'");
    for (long v = lo; v <= hi; ++v) out.push_back(static_cast<int>(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_int_list(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(values[i]);
    if (j > i) out += "-" + std::to_string(values[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace engram::sys
