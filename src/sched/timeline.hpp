// The definitions live in the public header engram/timeline.hpp; this name stays for the code inside src/.
#pragma once

#include "engram/timeline.hpp"
