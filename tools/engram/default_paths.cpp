// The default output directory of the CLI (default_paths.hpp): this binary's build directory, else the user's
// cache directory, else the current directory. Computed once per process.
#include "default_paths.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "sys/file.hpp"
#include "sys/process.hpp"

namespace engram::cli {
namespace fs = std::filesystem;

namespace {

// <build> when this executable is <build>/bin/engram of a CMake build tree, else "".
std::string build_dir_of_this_binary() {
  auto exe = sys::self_exe_path();
  if (!exe.is_ok()) return "";
  const fs::path build = fs::path(*exe).parent_path().parent_path();
  std::error_code ec;
  return fs::is_regular_file(build / "CMakeCache.txt", ec) ? build.string() : "";
}

// $XDG_CACHE_HOME/engram or $HOME/.cache/engram when it exists or could be made (the directory above it, or the
// one above that, is a directory we may write into); "" when neither is usable. Nothing is created here.
std::string user_cache_dir() {
  fs::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && fs::path(x).is_absolute()) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h != nullptr && fs::path(h).is_absolute()) {
    base = fs::path(h) / ".cache";
  } else {
    return "";
  }
  const fs::path dir = base / "engram";
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return sys::check_output_path(dir.string(), sys::OutputKind::kDirectory).is_ok() ? dir.string() : "";
  if (fs::exists(dir, ec)) return "";  // a file of that name
  if (fs::is_directory(base, ec))
    return sys::check_output_path(dir.string(), sys::OutputKind::kDirectory).is_ok() ? dir.string() : "";
  if (fs::exists(base, ec)) return "";
  return sys::check_output_path(base.string(), sys::OutputKind::kDirectory).is_ok() ? dir.string() : "";
}

}  // namespace

DefaultOutputDir default_output_dir() {
  static const DefaultOutputDir chosen = [] {
    if (std::string b = build_dir_of_this_binary(); !b.empty())
      return DefaultOutputDir{b, "the build directory of this engram binary"};
    if (std::string c = user_cache_dir(); !c.empty())
      return DefaultOutputDir{c, "the user's cache directory ($XDG_CACHE_HOME/engram, else ~/.cache/engram)"};
    // Said once on stderr: a default output landing in the current directory is a surprise when a cache
    // directory was named but is unusable (not a directory, not writable).
    const char* x = std::getenv("XDG_CACHE_HOME");
    const char* h = std::getenv("HOME");
    std::fprintf(stderr, "engram: no usable cache directory (XDG_CACHE_HOME=%s, HOME=%s): default outputs go to "
                 "the current directory\n", x != nullptr ? x : "unset", h != nullptr ? h : "unset");
    return DefaultOutputDir{".", "the current directory (no build directory, no usable cache directory)"};
  }();
  return chosen;
}

Status ensure_default_output_dir() {
  const DefaultOutputDir d = default_output_dir();
  if (d.dir == ".") return Status::ok();
  std::error_code ec;
  if (fs::is_directory(d.dir, ec)) return Status::ok();
  fs::create_directories(d.dir, ec);
  if (ec) return Status(Code::kIo, "cannot create the default output directory " + d.dir + ": " + ec.message());
  fs::permissions(d.dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  return Status::ok();
}

std::string default_output_path(const std::string& file_name) {
  const DefaultOutputDir d = default_output_dir();
  return d.dir == "." ? file_name : (fs::path(d.dir) / file_name).string();
}

std::string default_output_help(const std::string& file_name) {
  return default_output_path(file_name) + " in " + default_output_dir().why;
}

}  // namespace engram::cli
