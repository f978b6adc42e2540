// CPU lookup backend: gather rows of a host table and decode them to BF16 staging in parallel. The entry point
// cpu::lookup is public (engram/cpu_lookup.hpp); this header adds the thread pool it runs on.
#pragma once

#include "cpu/thread_pool.hpp"
#include "engram/cpu_lookup.hpp"
