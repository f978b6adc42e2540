// Decode-step ids from Python: the ids `engram run` replays (make_decode_id_source), so that a Python decode loop
// looks up exactly the rows `engram run` looks up for the same options.
#include <pybind11/stl.h>

#include "common.hpp"
#include "replay/decode_ids.hpp"

namespace engram::py_bind {
namespace {

struct PyDecodeIds {
  std::unique_ptr<IdSource> source;
  std::string note;
  int n_layers = 0;
  int heads = 0;
};

}  // namespace

void bind_ids(py::module_& m) {
  py::class_<PyDecodeIds>(m, "_DecodeIds")
      .def(py::init([](const EngramLayout& layout, const std::string& ids, const std::string& tokens,
                       const std::string& model, const std::string& tensor_names, double zipf_alpha, uint64_t seed,
                       int64_t seq_len, const std::string& switch_tokens, int64_t switch_at) {
             DecodeIdsSpec spec;
             spec.ids = ids;
             spec.tokens = tokens;
             spec.model_dir = model;
             spec.tensor_names = tensor_names;
             spec.zipf_alpha = zipf_alpha;
             spec.seed = seed;
             spec.text.seq_len = seq_len;
             spec.switch_tokens = switch_tokens;
             spec.switch_at = switch_at;
             auto p = std::make_unique<PyDecodeIds>();
             Result<std::unique_ptr<IdSource>> s = Status(Code::kInternal, "DecodeIds: not built");
             {
               py::gil_scoped_release release;  // a text source hashes nothing yet, but reads the token file
               s = make_decode_id_source(layout, spec, &p->note);
             }
             p->source = take(std::move(s));
             p->n_layers = layout.n_layers();
             p->heads = layout.heads();
             return p;
           }),
           py::arg("layout"), py::arg("ids"), py::arg("tokens"), py::arg("model"), py::arg("tensor_names"),
           py::arg("zipf_alpha"), py::arg("seed"), py::arg("seq_len"),
           py::arg("switch_tokens"), py::arg("switch_at"))
      .def_property_readonly("note", [](const PyDecodeIds& d) { return d.note; })
      .def("describe", [](const PyDecodeIds& d) { return d.source->describe(); })
      .def(
          "step",
          [](PyDecodeIds& d, int64_t step, int batch) {
            if (batch < 1) invalid("DecodeIds.step: batch " + std::to_string(batch) + " must be >= 1");
            std::vector<std::vector<int64_t>> ids(static_cast<size_t>(d.n_layers));
            Status s;
            {
              py::gil_scoped_release release;
              s = d.source->next_step(step, batch, ids);
            }
            check(s);
            py::array_t<int64_t> out({static_cast<int64_t>(d.n_layers), static_cast<int64_t>(batch),
                                      static_cast<int64_t>(d.heads)});
            int64_t* dst = out.mutable_data();
            const size_t per_layer = static_cast<size_t>(batch) * static_cast<size_t>(d.heads);
            for (int li = 0; li < d.n_layers; ++li) {
              const auto& v = ids[static_cast<size_t>(li)];
              if (v.size() != per_layer) invalid("DecodeIds.step: the source gave a layer of the wrong size");
              std::copy(v.begin(), v.end(), dst + static_cast<size_t>(li) * per_layer);
            }
            return out;
          },
          py::arg("step"), py::arg("batch"));
}

}  // namespace engram::py_bind
