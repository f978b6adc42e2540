// Where the CLI writes an output file the user did not name (the default `--timeline` of `engram run`, ...).
//
// Not the current directory: the README's `scripts/run` runs from the repository root, and a file written
// there is an untracked file in the checkout. The choice, in order:
//   1. the build directory of this executable, when it runs from one (<build>/bin/engram next to
//      <build>/CMakeCache.txt): a checkout's outputs stay under build/, which git ignores and `make clean`
//      removes, whatever the current directory is;
//   2. otherwise the user's cache directory, $XDG_CACHE_HOME/engram (an absolute XDG_CACHE_HOME only, as the
//      XDG base directory specification says), else $HOME/.cache/engram, when it exists or could be created;
//   3. otherwise (no usable HOME, or the cache directory cannot be created) the current directory.
// The choice is made when the CLI declares its options, so --help shows the real path; the cache directory itself
// is created (mode 0700) only by a command about to write there (ensure_default_output_dir), so `engram version`
// or a refused command line leaves nothing in HOME.
#pragma once

#include <string>

#include "engram/status.hpp"

namespace engram::cli {

struct DefaultOutputDir {
  std::string dir;  // absolute, or "." for the current directory
  std::string why;  // which one, e.g. "the build directory of this engram binary"
};

DefaultOutputDir default_output_dir();

// default_output_dir().dir / file_name.
std::string default_output_path(const std::string& file_name);

// Creates the default output directory when it is the user's cache directory and is missing (mode 0700); a
// command calls it just before writing a default output. kIo naming the directory when it cannot.
Status ensure_default_output_dir();

// For --help: "<path> in <why>".
std::string default_output_help(const std::string& file_name);

}  // namespace engram::cli
