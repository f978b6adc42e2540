// One decode run on a built engine (see decode_run.hpp).
#include "replay/decode_run.hpp"

#include <fstream>

#include "sys/process.hpp"

namespace engram {

DecodeRunSpec decode_run_spec(const RankJob& job) {
  DecodeRunSpec s;
  s.ids.ids = job.ids;
  s.ids.tokens = job.tokens;
  s.ids.model_dir = job.model_dir;
  s.ids.tensor_names = job.tensor_names;
  s.ids.zipf_alpha = job.zipf_alpha;
  s.ids.seed = job.seed;
  s.batch = job.batch;
  s.steps = job.steps;
  s.warmup = job.warmup;
  s.decoder_layers = job.decoder_layers;
  s.compute_only_baseline = job.compute_only_baseline;
  s.timeline = job.timeline;
  s.timeline_absolute = job.timeline_absolute;
  return s;
}

Result<DecodeRun> run_decode(Engine& engine, IdSource& source, const DecodeRunSpec& spec) {
  DecodeReplayOptions base;
  base.batch = spec.batch;
  base.steps = spec.steps;
  base.warmup_steps = spec.warmup;
  base.decoder_layers = spec.decoder_layers;
  base.mode = engine.options().prefetch;
  base.compute_only_baseline = spec.compute_only_baseline;
  DecodeRun run;
  run.hashing = std::make_shared<DeviceHashingReport>();
  DecodeReplayOptions wired;
  ENGRAM_RETURN_IF_ERROR(wire_device_hashing(spec.hash, engine, source, base, wired, run.hashing));
  if (spec.on_start) spec.on_start(*run.hashing);
  ENGRAM_ASSIGN_OR_RETURN(run.replay,
                          run_decode_replay(engine.layout(), source, engine.queue(), engine.compute(), wired));
  if (!spec.timeline.empty() && spec.timeline != "none") {
    std::ofstream f(spec.timeline);
    if (!f) return Status(Code::kIo, "cannot write timeline file '" + spec.timeline + "'");
    Timeline tl = engine.queue().timeline();
    tl.mark_warmup(run.replay.first_measured_row, run.replay.first_measured_step);  // trace analyze leaves them out
    f << tl.to_chrome_trace({sys::process_id(), spec.timeline_absolute}).dump() << "\n";
    run.timeline_path = spec.timeline;
  }
  return run;
}

}  // namespace engram
