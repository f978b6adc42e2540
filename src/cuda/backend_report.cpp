// The CUDA backend's reports as JSON (see backend.cuh): one function per typed report (nlohmann's to_json, found by
// argument-dependent lookup), so CudaBackend::describe() and TableRegistration::describe() write them the same way.
// A figure that could not be taken (NaN) and an empty text are null. No CUDA API call here.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_num.hpp"
#include "cuda/backend.cuh"
#include "plan/learned_json.hpp"

namespace engram::cuda {

namespace {

nlohmann::json text_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

}  // namespace

static void to_json(nlohmann::json& j, const DeviceInfo& d) {
  j = {{"ordinal", d.ordinal},         {"name", d.name},
       {"pci_bus_id", d.pci_bus_id},   {"sm_count", d.sm_count},
       {"driver_version", d.driver_version}, {"runtime_version", d.runtime_version}};
}

static void to_json(nlohmann::json& j, const CudaRegistrationReport& r) {
  j = {{"bytes", r.bytes}, {"chunks", r.chunks}, {"prefault_s", r.prefault_ns * 1e-9},
       {"register_s", r.register_ns * 1e-9}, {"device_pointer_equals_host", r.device_equals_host}};
}

static void to_json(nlohmann::json& j, const EngineCacheReport& c) {
  auto series = [](const std::vector<int64_t>& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  j = {{"state", c.state},
       {"note", text_or_null(c.note)},
       {"source", text_or_null(c.source)},
       {"format", cache_format_name(c.format)},
       {"budget_bytes", c.budget_bytes},
       {"slots", c.slots},
       {"rows_cached", c.filled},
       {"hbm_bytes", c.hbm_bytes},
       {"staging_rows", c.staging_rows},
       {"created_after_step", c.created_after_step},
       {"create_ms", json_num(c.create_ms)},
       {"fill", text_or_null(c.fill)},
       {"profile_coverage", json_num(c.profile_coverage)},
       {"hit_ns_per_row", json_num(c.hit_ns_per_row)},
       {"probes", c.probes},
       {"hits", c.hits},
       {"hit_rate", json_num(c.hit_rate)},
       {"rows_since_create", c.rows_since_create},
       {"link_bytes_avoided", c.link_bytes_avoided},
       {"link_bytes_avoided_per_token", json_num(c.link_bytes_avoided_per_token)},
       {"update_attempts", c.update_attempts},
       {"updates", c.updates},
       {"updates_deferred", c.updates_deferred},
       {"update_deferred_steps", c.update_deferred_steps},
       {"update_slice_rows", c.update_slice_rows},
       {"slices", c.slices},
       {"burst_updates", c.burst_updates},
       {"update_scale_max", c.update_scale_max},
       {"plan_us_mean", json_num(c.plan_us_mean)},
       {"plan_us_max", json_num(c.plan_us_max)},
       {"rows_swapped", c.rows_swapped},
       {"map_rebuilds", c.map_rebuilds},
       {"update_host_us_max", json_num(c.update_host_us_max)},
       {"update_host_us_mean", json_num(c.update_host_us_mean)},
       {"counted_batches", c.counted_batches},
       {"dropped_batches", c.dropped_batches},
       {"sampled_batches", c.sampled_batches},
       {"sampled_out_ids", c.sampled_out_ids},
       {"step_probes", series(c.step_probes)},
       {"step_hits", series(c.step_hits)}};
}

nlohmann::json TableRegistration::describe() const {
  nlohmann::json j = report_;
  j["device"] = device_;
  return j;
}

nlohmann::json CudaBackend::describe() const {
  const DeviceInfo& d = device_;
  nlohmann::json j = {{"backend", "cuda"},
                      {"device", d},
                      {"registration", registration()},
                      {"grid_fraction", grid_cap_.in_blocks() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(grid_cap_.fraction())},
                      {"grid_blocks", grid_cap_.in_blocks() ? nlohmann::json(grid_cap_.blocks())
                                                            : nlohmann::json(nullptr)},
                      {"grid_cap_blocks", grid_cap_.blocks_for(d.sm_count)},
                      {"fast_path_mode", fast_path_mode_name(fast_path_mode_)}};
  nlohmann::json fp = nlohmann::json::array();
  for (int li = 0; fast_lookup(li) != nullptr; ++li) {
    FastLookup* f = fast_lookup(li);
    auto st = f->stats(queue_->prefetch_stream());
    nlohmann::json paths = nlohmann::json::object();
    nlohmann::json u = nullptr, h = nullptr, predicted = nullptr, plain = nullptr;
    if (st.is_ok()) {
      for (const auto& [name, count] : st->paths) paths[name] = count;
      u = json_num(st->unique_fraction());
      h = json_num(st->cache_hit_rate());
      if (st->batches > 0) {  // a plan exists: its predictions are the planner's, not defaults
        predicted = json_num(f->last_plan().predicted_us);
        plain = json_num(f->last_plan().plain_us);
      }
    }
    auto cache = cache_report(li);
    const nlohmann::json cache_json =
        cache.is_ok() ? nlohmann::json(*cache) : nlohmann::json{{"state", "unknown"}, {"note", cache.status().message()}};
    // The learner: predicted vs measured and the correction per path and size range.
    const nlohmann::json learned = st.is_ok() ? plan::learned_json(st->learned) : nlohmann::json::array();
    fp.push_back({{"layer_index", li}, {"paths", paths}, {"learning", f->learns()}, {"learned", learned},
                  {"unique_fraction", u}, {"cache_hit_rate", h},
                  {"last_plan", f->last_plan().path_name()},
                  {"last_predicted_us", predicted}, {"last_plain_us", plain},
                  {"last_why", plan::explain(f->last_plan(), f->costs().source)},
                  {"costs_source", f->costs().source}, {"cache", cache_json}});
  }
  j["fast_path"] = fp;
  j["fast_path_note"] = text_or_null(fast_note_);
  j["construction"] = {{"calibration_ms", json_num(calibration_ms_)}, {"cache_fill_ms", json_num(cache_fill_ms_)}};
  if (compute_)
    j["compute"] = {{"kind", "cublas bf16 gemm"}, {"n", compute_->gemm_n()}, {"gemms_per_layer", compute_->gemms_per_layer()},
                    {"layer_ns_calibrated", compute_->layer_ns()}};
  return j;
}

}  // namespace engram::cuda
