// The rank group's job (see rank_job.hpp): its JSON form, read back field by field with the field named on error.
#include "engine/rank_job.hpp"

#include <type_traits>

namespace engram {

using nlohmann::json;

json RankJob::to_json() const {
  return {{"layout", layout},       {"table_bytes", table_bytes},
          {"row_layout", row_layout}, {"checkpoint", checkpoint},
          {"model", model_dir},         {"tensor_names", tensor_names},
          {"seed", seed},           {"batch", batch},
          {"steps", steps},         {"warmup", warmup},
          {"model_layers", decoder_layers}, {"prefetch", prefetch},
          {"layer_us", layer_us},   {"ids", ids},
          {"tokens", tokens},       {"zipf_alpha", zipf_alpha},
          {"compute_only_baseline", compute_only_baseline},
          {"verify_rows", verify_rows}, {"timeline", timeline},
          {"timeline_absolute", timeline_absolute},
          {"ranks", ranks},         {"engine", engine},
          {"gpus", gpus}};
}

Result<RankJob> RankJob::from_json(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(Code::kInvalidArgument, "rank job: not a JSON object");
  RankJob r;
  std::string bad;
  auto str = [&](const char* k, std::string* v) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string()) bad = k;
    else *v = it->get<std::string>();
  };
  auto integer = [&](const char* k, auto* v) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer()) bad = k;
    else *v = it->get<std::remove_pointer_t<decltype(v)>>();
  };
  auto number = [&](const char* k, double* v) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number()) bad = k;
    else *v = it->get<double>();
  };
  auto boolean = [&](const char* k, bool* v) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_boolean()) bad = k;
    else *v = it->get<bool>();
  };
  str("layout", &r.layout);
  integer("table_bytes", &r.table_bytes);
  str("row_layout", &r.row_layout);
  str("checkpoint", &r.checkpoint);
  str("model", &r.model_dir);
  str("tensor_names", &r.tensor_names);
  integer("seed", &r.seed);
  integer("batch", &r.batch);
  integer("steps", &r.steps);
  integer("warmup", &r.warmup);
  integer("model_layers", &r.decoder_layers);
  str("prefetch", &r.prefetch);
  number("layer_us", &r.layer_us);
  str("ids", &r.ids);
  str("tokens", &r.tokens);
  number("zipf_alpha", &r.zipf_alpha);
  boolean("compute_only_baseline", &r.compute_only_baseline);
  integer("verify_rows", &r.verify_rows);
  str("timeline", &r.timeline);
  boolean("timeline_absolute", &r.timeline_absolute);
  integer("ranks", &r.ranks);
  integer("gpus", &r.gpus);
  {
    auto it = j.find("engine");
    if (it == j.end() || !it->is_array()) {
      bad = "engine";
    } else {
      for (const auto& kv : *it) {
        if (!kv.is_array() || kv.size() != 2 || !kv[0].is_string() || !kv[1].is_string()) {
          bad = "engine";
          break;
        }
        r.engine.emplace_back(kv[0].get<std::string>(), kv[1].get<std::string>());
      }
    }
  }
  if (!bad.empty()) return Status(Code::kInvalidArgument, "rank job: field '" + bad + "' missing or of the wrong type");
  if (r.batch < 1 || r.steps < 1 || r.warmup < 0 || r.verify_rows < 0 || r.ranks < 1)
    return Status(Code::kInvalidArgument, "rank job: batch, steps, ranks must be >= 1; warmup, verify_rows >= 0");
  if (r.gpus < 0) return Status(Code::kInvalidArgument, "rank job: gpus must be >= 0");
  EngineOptions probe;
  for (const auto& [k, v] : r.engine) ENGRAM_RETURN_IF_ERROR(set_engine_option(probe, k, v).with_context("rank job"));
  if (r.prefetch != "early" && r.prefetch != "on_demand")
    return Status(Code::kInvalidArgument, "rank job: prefetch '" + r.prefetch + "' (early | on_demand)");
  if (r.ids != "auto" && r.ids != "text" && r.ids != "zipf" && r.ids != "uniform")
    return Status(Code::kInvalidArgument, "rank job: ids '" + r.ids + "' (auto | text | zipf | uniform)");
  return r;
}

TableContent RankJob::content() const {
  if (!model_dir.empty()) return TableContent::model(model_dir, tensor_names);
  return TableContent::synthetic_or_checkpoint(seed, checkpoint);
}

Result<EngramLayout> job_layout(const RankJob& job) {
  ENGRAM_ASSIGN_OR_RETURN(RowFormat fmt_, parse_row_format(job.row_layout));
  const TableContent c = job.content();
  if (c.kind == TableContent::Kind::kSynthetic) return make_preset_layout(job.layout, job.table_bytes, fmt_);
  return content_layout(c, fmt_);
}

}  // namespace engram
