// _engram: the pybind11 extension behind the engram_offload Python package.
//
// A thin layer over include/engram (one file per class: bind_*.cpp; shared helpers in common.hpp): tables,
// engines, lookups, prefetchers, the hasher, DLPack arrays and group channels. Every binding converts
// arguments, releases the GIL around work that can take time, and turns a non-OK Status into the Python
// exception EngramError (a RuntimeError, and a ValueError for invalid_argument) carrying the status code name
// (.code), the message (.message) and the raw errno / CUDA error number (.sys_error). Arrays cross as NumPy
// arrays through the buffer protocol (ids read in place when they are C-contiguous int64; outputs written in
// place), or as device pointers from the package's DLPack handling; arrays returned over table memory or
// staging keep their owner alive (zero copy).
#include <pybind11/pybind11.h>

#include "common.hpp"
#include "engram/version.hpp"

namespace py = pybind11;
using namespace engram;
using namespace engram::py_bind;

namespace {
PyObject* g_engram_error = nullptr;    // EngramError (a RuntimeError), owned by the module
PyObject* g_invalid_argument = nullptr;  // InvalidArgumentError: EngramError and ValueError
}  // namespace

PYBIND11_MODULE(_engram, m) {
  m.doc() = "engram-offload C++ bindings (use the engram_offload package, not this module directly).";
  m.attr("__version__") = ENGRAM_VERSION_STRING;

  // EngramError is a RuntimeError; an invalid argument is also a ValueError (the package raises its subclass).
  g_engram_error = PyErr_NewException("engram_offload.EngramError", PyExc_RuntimeError, nullptr);
  m.add_object("EngramError", py::handle(g_engram_error));
  PyObject* bases = PyTuple_Pack(2, g_engram_error, PyExc_ValueError);
  g_invalid_argument = PyErr_NewException("engram_offload.InvalidArgumentError", bases, nullptr);
  Py_DECREF(bases);
  m.add_object("InvalidArgumentError", py::handle(g_invalid_argument));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object cls = py::reinterpret_borrow<py::object>(
          e.status.code() == Code::kInvalidArgument ? g_invalid_argument : g_engram_error);
      py::object exc = cls(e.status.to_string());
      exc.attr("code") = code_name(e.status.code());
      exc.attr("message") = e.status.message();
      exc.attr("sys_error") = e.status.sys_error();
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  bind_layout(m);
  bind_table(m);
  bind_engine(m);
  bind_prefetcher(m);
  bind_hasher(m);
  bind_dlpack(m);
  bind_channel(m);
  bind_ids(m);
  bind_metrics(m);
}
