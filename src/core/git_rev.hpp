// The git revision this build was made from, for the conditions block of every report and `engram version`.
// Defined in a source generated at each build (cmake/git_rev.cmake), so that a commit recompiles one file and
// the revision printed is the one built.
#pragma once

namespace engram {

// "<12 hex digits>", "<12 hex digits>-dirty" when tracked files differed from HEAD, or "n/a" outside a git checkout.
const char* git_revision();

}  // namespace engram
