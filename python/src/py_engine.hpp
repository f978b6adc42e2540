// PyEngine: an Engine held by Python, with the SharedTable object over its table (engram_offload.Engine).
#pragma once

#include <memory>

#include "common.hpp"

namespace engram::py_bind {

struct PyEngine {
  std::unique_ptr<Engine> engine;
  py::object table;  // a SharedTable sharing the engine's HostTable (the one given to over_table, or a new one)
};

}  // namespace engram::py_bind
