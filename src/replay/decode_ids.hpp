// The ids of a decode replay as every consumer chooses them (engram run, run --ranks workers, the Python module):
// real text hashed with the reference N-gram hash (with a model directory, that directory's own hashing), Zipf or
// uniform synthetic ids. One factory, so that the same options give the same ids everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "replay/id_source.hpp"
#include "replay/text_id_source.hpp"

namespace engram {

struct DecodeIdsSpec {
  std::string ids = "auto";   // auto | text | zipf | uniform
  std::string tokens;         // token file of text ids ("" = the default token file)
  std::string model_dir;      // model directory: hash with its compression table and pad id ("" = the reference's)
  std::string tensor_names;   // with model: "WEIGHT,SCALE" with {L} ("" = the released names)
  double zipf_alpha = 1.0;
  uint64_t seed = 1;          // seed of zipf and uniform ids
  std::string switch_tokens;  // text ids only: from step switch_at on, this token file's text (SwitchingIdSource)
  int64_t switch_at = 0;
  TextIdSourceOptions text;
};

// auto: text when the token file can be read and matches the hasher, else zipf with `note` (if given) saying why;
// text, or auto with a named token file: the text source's error (kNotFound says how to make the token file).
// With a model directory (auto or text): its compression table's error (read_model_hashing) when it has none.
// kInvalidArgument for an unknown ids kind or a bad zipf_alpha, and for switch_tokens without text ids or with a
// bad switch_at.
Result<std::unique_ptr<IdSource>> make_decode_id_source(const EngramLayout& layout, const DecodeIdsSpec& spec,
                                                        std::string* note = nullptr);

}  // namespace engram
