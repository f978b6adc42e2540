// DLPack in and out: DeviceArray (CUDA staging handed to torch / CuPy zero copy, with __dlpack__ and
// __cuda_array_interface__) and the reader of a producer's "dltensor" capsule. The DLPack ABI (dmlc/dlpack dlpack.h,
// v0.8 "unversioned" capsules named "dltensor") is declared here because Debian ships no dlpack header.
#include <pybind11/stl.h>

#include "common.hpp"

namespace engram::py_bind {
namespace {

// Only what a capsule producer/consumer touches of the ABI (stable since 2017).
namespace dl {
struct Device {
  int32_t device_type;  // 1 = kDLCPU, 2 = kDLCUDA, 3 = kDLCUDAHost
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr = compact row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
constexpr int32_t kCPU = 1, kCUDA = 2;
}  // namespace dl

struct DlContext {
  dl::ManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  PyObject* owner = nullptr;
};

void dl_deleter(dl::ManagedTensor* m) {
  auto* ctx = static_cast<DlContext*>(m->manager_ctx);
  if (ctx->owner) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(ctx->owner);
    PyGILState_Release(g);
  }
  delete ctx;
}

py::capsule make_dlpack_capsule(const DeviceArray& a, py::handle owner) {
  auto* ctx = new DlContext;
  ctx->shape = a.shape;
  ctx->strides.assign(a.shape.size(), 1);
  for (int i = static_cast<int>(a.shape.size()) - 2; i >= 0; --i) ctx->strides[i] = ctx->strides[i + 1] * a.shape[i + 1];
  ctx->owner = owner.ptr();
  Py_INCREF(ctx->owner);
  dl::Tensor& t = ctx->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(a.ptr);
  t.device = {dl::kCUDA, a.device};
  t.ndim = static_cast<int32_t>(a.shape.size());
  t.dtype = {a.dtype_code, a.dtype_bits, 1};
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &dl_deleter;
  // The capsule's destructor frees the tensor only if no consumer took it (renamed "used_dltensor").
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", [](PyObject* c) {
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
  return py::reinterpret_steal<py::capsule>(cap);
}

// Consumes a "dltensor" capsule: (data_ptr, device_type, device_id, shape, strides or None, (code, bits, lanes),
// holder). The holder calls the producer's deleter when it is collected: keep it until the device is done.
py::tuple read_dlpack_capsule(py::object capsule) {
  PyObject* c = capsule.ptr();
  if (!PyCapsule_IsValid(c, "dltensor"))
    invalid("DLPack: expected an unconsumed 'dltensor' capsule (versioned DLPack 1.x capsules are not read here)");
  auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  PyCapsule_SetName(c, "used_dltensor");
  py::capsule holder(m, [](void* p) {
    auto* mt = static_cast<dl::ManagedTensor*>(p);
    if (mt->deleter) mt->deleter(mt);
  });
  const dl::Tensor& t = m->dl_tensor;
  py::list shape, strides;
  for (int i = 0; i < t.ndim; ++i) {
    shape.append(t.shape[i]);
    if (t.strides) strides.append(t.strides[i]);
  }
  return py::make_tuple(reinterpret_cast<uintptr_t>(t.data) + t.byte_offset, t.device.device_type, t.device.device_id,
                        shape, t.strides ? py::object(strides) : py::object(py::none()),
                        py::make_tuple(t.dtype.code, t.dtype.bits, t.dtype.lanes), holder);
}

}  // namespace

void bind_dlpack(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray",
                          "A device array the module hands out (CUDA prefetch staging, bf16 [tokens, heads, d]): zero\n"
                          "copy through __dlpack__ (torch.from_dlpack, cupy.from_dlpack) or __cuda_array_interface__.\n"
                          "It keeps its owner (the Prefetcher) alive; the memory is valid until the layer's next prepare.")
      .def_property_readonly("ptr", [](const DeviceArray& a) { return a.ptr; })
      .def_property_readonly("shape", [](const DeviceArray& a) { return py::tuple(py::cast(a.shape)); })
      .def_property_readonly("device", [](const DeviceArray& a) { return a.device; })
      .def_property_readonly("stream", [](const DeviceArray& a) { return a.ready_stream; },
                             "The stream (raw cudaStream_t) in whose order the data is valid.")
      .def("__dlpack_device__", [](const DeviceArray& a) { return py::make_tuple(dl::kCUDA, a.device); })
      .def(
          "__dlpack__",
          [](py::object self, py::object stream) {
            const DeviceArray& a = self.cast<const DeviceArray&>();
            // DLPack: the consumer's stream must see the data; -1 means "no synchronisation wanted".
            if (!stream.is_none()) {
              const auto s = stream.cast<int64_t>();
              if (s != -1)
                check(cuda_stream_wait(reinterpret_cast<void*>(static_cast<uintptr_t>(s)),
                                       reinterpret_cast<void*>(a.ready_stream), a.device));
            }
            return make_dlpack_capsule(a, self);
          },
          py::arg("stream") = py::none())
      .def_property_readonly("__cuda_array_interface__", [](const DeviceArray& a) {
        py::dict d;
        py::list shape;
        for (int64_t x : a.shape) shape.append(x);
        d["shape"] = py::tuple(shape);
        d["typestr"] = "<u2";  // bf16 bits (the interface has no bfloat16)
        d["data"] = py::make_tuple(a.ptr, false);
        d["version"] = 3;
        d["strides"] = py::none();
        d["stream"] = a.ready_stream == 0 ? py::object(py::int_(1)) : py::object(py::int_(a.ready_stream));
        return d;
      });

  m.def("_read_dlpack_capsule", &read_dlpack_capsule, py::arg("capsule"),
        "Consumes a 'dltensor' capsule: (ptr, device_type, device_id, shape, strides|None, (code, bits, lanes), holder).");

}

}  // namespace engram::py_bind
