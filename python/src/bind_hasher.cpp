// The reference Engram N-gram hash from Python: Sequence (look-back state) and the hasher functions behind
// engram_offload.Hasher.
#include <pybind11/stl.h>

#include <span>

#include "common.hpp"
#include "engram/ngram_hash.hpp"
#include "host/token_io.hpp"

namespace engram::py_bind {
namespace {

struct PySequence {
  std::shared_ptr<const NgramHasher> hasher;
  SequenceState state;
};

}  // namespace

void bind_hasher(py::module_& m) {
  // ---- hasher ----
  py::class_<PySequence>(m, "Sequence",
                         "Look-back state of one sequence (SequenceState): the last N-1 compressed tokens and a\n"
                         "rollback reserve. Made by Hasher.begin_sequence / resume / restore.")
      .def_property_readonly("position", [](const PySequence& s) { return s.state.position(); })
      .def_property_readonly("rollback_limit", [](const PySequence& s) { return s.state.rollback_limit(); })
      .def("rollback", [](PySequence& s, int64_t k) { check(s.state.rollback(k)); }, py::arg("k"),
           "Drops the last k tokens. EngramError(invalid_argument) if k < 0, k > position or k > rollback_limit.")
      .def("snapshot", [](const PySequence& s) {
        SequenceSnapshot snap = s.state.snapshot();
        return py::make_tuple(snap.position, snap.tail);
      }, "(position, tail): what a prefix cache stores to resume this sequence.")
      .def("copy", [](const PySequence& s) { return PySequence{s.hasher, s.state}; });

  py::class_<NgramHasher, std::shared_ptr<NgramHasher>>(m, "_HasherHandle");
  m.def(
      "_make_hasher",
      [](const EngramLayout& layout, std::optional<std::string> table_path, int64_t compressed_vocab, int64_t seed,
         int64_t pad_id, int64_t expected_compressed_vocab, int64_t max_rollback) {
        NgramHashOptions o;
        o.seed = seed;
        o.pad_id = pad_id;
        o.expected_compressed_vocab = expected_compressed_vocab;
        o.max_rollback = max_rollback;
        if (table_path) {
          CompressionTable ct = take(read_compression_table(*table_path));
          return std::make_shared<NgramHasher>(take(NgramHasher::create(layout, std::move(ct), o)));
        }
        return std::make_shared<NgramHasher>(take(NgramHasher::create_precompressed(layout, compressed_vocab, o)));
      },
      py::arg("layout"), py::arg("table_path"), py::arg("compressed_vocab"), py::arg("seed"), py::arg("pad_id"),
      py::arg("expected_compressed_vocab"), py::arg("max_rollback"));
  m.def("default_compression_table_path", &default_compression_table_path,
        "Path of the committed DeepSeek-V3 compression table in the source tree.");
  m.def("_hasher_info", [](const std::shared_ptr<NgramHasher>& h) {
    py::dict d;
    d["compressed_vocab"] = h->compressed_vocab();
    d["vocab_size"] = h->vocab_size();
    d["compressed_pad_id"] = h->compressed_pad_id();
    py::list ms;
    for (int i = 0; i < h->layout().n_layers(); ++i) ms.append(h->multipliers(i));
    d["multipliers"] = ms;
    return d;
  });
  m.def(
      "_hash",
      [](const std::shared_ptr<NgramHasher>& h, py::object tokens_obj, int layer_index, bool global) {
        std::vector<int64_t> tokens = int_vector(tokens_obj, "hash tokens");
        const int heads = h->layout().heads();
        py::array_t<int64_t> out({static_cast<int64_t>(tokens.size()), static_cast<int64_t>(heads)});
        Status s;
        {
          py::gil_scoped_release release;
          s = h->hash(tokens, layer_index, std::span<int64_t>(out.mutable_data(), tokens.size() * heads),
                      global ? HashIdKind::kGlobalRow : HashIdKind::kHeadLocal);
        }
        check(s);
        return out;
      });
  m.def("_begin_sequence",
        [](const std::shared_ptr<NgramHasher>& h) { return PySequence{h, h->begin_sequence()}; });
  m.def("_resume_sequence", [](const std::shared_ptr<NgramHasher>& h, py::object prefix) {
    std::vector<int64_t> p = int_vector(prefix, "resume prefix");
    return PySequence{h, take(h->resume_sequence(p))};
  });
  m.def("_restore_sequence", [](const std::shared_ptr<NgramHasher>& h, int64_t position, py::object tail) {
    SequenceSnapshot snap;
    snap.position = position;
    snap.tail = int_vector(tail, "snapshot tail");
    return PySequence{h, take(h->restore(snap))};
  });
  m.def("_hash_chunk", [](PySequence& seq, py::object tokens_obj, bool global) {
    std::vector<int64_t> tokens = int_vector(tokens_obj, "hash_chunk tokens");
    const EngramLayout& l = seq.hasher->layout();
    py::array_t<int64_t> out({static_cast<int64_t>(l.n_layers()), static_cast<int64_t>(tokens.size()),
                              static_cast<int64_t>(l.heads())});
    Status s;
    {
      py::gil_scoped_release release;
      s = seq.hasher->hash_chunk(seq.state, tokens,
                                 std::span<int64_t>(out.mutable_data(), static_cast<size_t>(out.size())),
                                 global ? HashIdKind::kGlobalRow : HashIdKind::kHeadLocal);
    }
    check(s);
    return out;
  });

}

}  // namespace engram::py_bind
