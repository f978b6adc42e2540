// Layout and the row format: EngramLayout as engram_offload.Layout, the scalar reference decoder and synthetic rows.
#include <pybind11/stl.h>

#include "common.hpp"
#include "engram/engine.hpp"
#include "engram/format.hpp"

namespace engram::py_bind {

void bind_layout(py::module_& m) {
  m.def("code_names", [] {
    std::vector<std::string> names;
    for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c) names.push_back(code_name(static_cast<Code>(c)));
    return names;
  }, "Names of every status code, in code order ('ok', 'invalid_argument', ...).");

  m.def("cuda_backend_built", &cuda_backend_built, "True when the library was built with the CUDA backend.");

  // ---- format ----
  m.def(
      "decode_rows",
      [](py::array_t<uint8_t, py::array::c_style> payload, py::array_t<uint8_t, py::array::c_style> scales) {
        if (payload.ndim() != 2 || scales.ndim() != 2 || payload.shape(0) != scales.shape(0) ||
            payload.shape(1) != scales.shape(1) * kScaleBlock) {
          invalid("decode_rows: payload must be [rows, d] and scales [rows, d/32] uint8");
        }
        const int64_t rows = payload.shape(0);
        const int d = static_cast<int>(payload.shape(1));
        py::array_t<uint16_t> out({rows, static_cast<int64_t>(d)});
        const uint8_t* p = payload.data();
        const uint8_t* s = scales.data();
        uint16_t* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          for (int64_t r = 0; r < rows; ++r) decode_row_reference(p + r * d, s + r * (d / 32), d, o + r * d);
        }
        return out;
      },
      py::arg("payload"), py::arg("scales"),
      "Scalar reference decoder (format.hpp): payload uint8 [rows, d] FP8 E4M3 codes, scales uint8 [rows, d/32]\n"
      "ue8m0 codes -> uint16 [rows, d] bf16 bits, bf16(fp8 * 2^(scale-127)) rounded to nearest even, every NaN\n"
      "0x7FC0. Raises EngramError(invalid_argument) for mismatched shapes.");

  m.def(
      "synth_rows",
      [](uint64_t seed, int layer_index, py::object rows_obj, int d) {
        if (d <= 0 || d % kScaleBlock != 0) invalid("synth_rows: d must be a positive multiple of 32");
        std::vector<int64_t> rows = int_vector(rows_obj, "synth_rows rows");
        const int64_t n = static_cast<int64_t>(rows.size());
        py::array_t<uint8_t> payload({n, static_cast<int64_t>(d)});
        py::array_t<uint8_t> scales({n, static_cast<int64_t>(d / kScaleBlock)});
        for (int64_t i = 0; i < n; ++i) {
          synth_row(seed, layer_index, rows[i], d, payload.mutable_data() + i * d,
                    scales.mutable_data() + i * (d / kScaleBlock));
        }
        return py::make_tuple(payload, scales);
      },
      py::arg("seed"), py::arg("layer_index"), py::arg("rows"), py::arg("d"),
      "Synthetic row content (table.hpp synth_row) of the given rows: (payload uint8 [n, d], scales uint8 [n, d/32]).");

  // ---- layout ----
  py::class_<EngramLayout>(m, "Layout",
                           "EngramLayout: the shape of a model's Engram tables (layer ids, N-gram orders, heads,\n"
                           "prime row counts per head, row width d, in-memory row format).")
      .def_static(
          "preset",
          [](const std::string& name, py::object table_size, const std::string& format) {
            return take(make_preset_layout(name, size_arg(table_size, "table_size"), take(parse_row_format(format))));
          },
          py::arg("name"), py::arg("table_size") = py::int_(int64_t{512} << 20), py::arg("format") = "fused",
          "Preset layout: 'v41-flash', 'v41-flash-mini' (rows sized so the whole model totals about table_size\n"
          "bytes; int or '512MiB'), 'tiny' (d=64, for tests). format: 'fused' (one padded record per row) or\n"
          "'split'. Raises EngramError(invalid_argument) for an unknown name or a table size too small.")
      .def_static(
          "from_checkpoint",
          [](const std::string& path, const std::string& format) {
            TableContent c;
            c.kind = TableContent::Kind::kCheckpoint;
            c.path = path;
            return take(content_layout(c, take(parse_row_format(format))));
          },
          py::arg("path"), py::arg("format") = "fused",
          "Layout stored in a safetensors checkpoint's __metadata__ (validated: the prime walk must give the\n"
          "stored head_rows), with the in-memory row format `format`. Raises EngramError: not_found / permission /\n"
          "io from the file, invalid_argument for a malformed file.")
      .def_static(
          "from_model",
          [](const std::string& dir, const std::string& format, const std::string& tensor_names) {
            return take(content_layout(TableContent::model(dir, tensor_names), take(parse_row_format(format))));
          },
          py::arg("dir"), py::arg("format") = "fused", py::arg("tensor_names") = "",
          "Layout of a Hugging Face model directory as released (config.json: the prime walk of\n"
          "engram_num_embeddings' vocab sizes, checked against the Engram tensors' shapes in the shards; no row is\n"
          "read). tensor_names: 'WEIGHT,SCALE' with {L} for the layer id ('' = layers.{L}.engram.embed.weight,\n"
          "layers.{L}.engram.embed.scale). Raises EngramError: not_found (directory, config, a shard),\n"
          "invalid_argument (malformed config or index, a tensor missing or of another dtype or shape: named).")
      .def_static("preset_names", &preset_names, "Names of the presets.")
      .def_property_readonly("name", [](const EngramLayout& l) { return l.name; })
      .def_property_readonly("d", [](const EngramLayout& l) { return l.d; }, "Values per row (multiple of 32).")
      .def_property_readonly("heads", &EngramLayout::heads, "Hash heads per Engram layer: (max_ngram-1)*heads_per_order.")
      .def_property_readonly("max_ngram", [](const EngramLayout& l) { return l.max_ngram; })
      .def_property_readonly("heads_per_order", [](const EngramLayout& l) { return l.heads_per_order; })
      .def_property_readonly("layer_ids", [](const EngramLayout& l) { return l.layer_ids; },
                             "Model layer id of each Engram layer; a 'layer index' is a position in this list.")
      .def_property_readonly("n_layers", &EngramLayout::n_layers)
      .def_property_readonly("format", [](const EngramLayout& l) { return std::string(row_format_name(l.format)); })
      .def_property_readonly("rows", [](const EngramLayout& l) {
        std::vector<int64_t> r;
        for (int i = 0; i < l.n_layers(); ++i) r.push_back(l.rows(i));
        return r;
      }, "Rows of each Engram layer's table (sum of its head_rows).")
      .def_property_readonly("head_rows", [](const EngramLayout& l) { return l.head_rows; },
                             "[layer][head] prime row counts.")
      .def_property_readonly("head_offsets", [](const EngramLayout& l) { return l.head_offsets; },
                             "[layer][heads+1] cumulative rows: global id = head_offsets[h] + local id.")
      .def_property_readonly("row_stride_bytes", &EngramLayout::row_stride_bytes,
                             "Bytes a row occupies in memory (fused: padded record; split: d + d/32).")
      .def_property_readonly("source_bytes_per_row", &EngramLayout::source_bytes_per_row, "d + d/32 bytes.")
      .def_property_readonly("total_bytes", &EngramLayout::total_bytes, "Bytes of every layer's table in memory.")
      .def_property_readonly("total_rows", &EngramLayout::total_rows)
      .def("layer_index", &EngramLayout::layer_index, py::arg("layer_id"), "Index of a model layer id, or -1.")
      .def("__repr__", [](const EngramLayout& l) {
        return "Layout(name='" + l.name + "', d=" + std::to_string(l.d) + ", heads=" + std::to_string(l.heads()) +
               ", layers=" + std::to_string(l.n_layers()) + ", format=" + row_format_name(l.format) +
               ", total_bytes=" + std::to_string(l.total_bytes()) + ")";
      });

}

}  // namespace engram::py_bind
