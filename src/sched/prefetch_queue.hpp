// The definitions live in the public header engram/prefetch_queue.hpp; this name stays for the code inside src/.
#pragma once

#include "engram/prefetch_queue.hpp"
