// SwitchingIdSource (see switching_id_source.hpp): step s < N is the first source's step s, step s >= N the
// second source's step s - N, so each source sees its steps in order from 0 as it requires.
#include "replay/switching_id_source.hpp"

namespace engram {

Result<std::unique_ptr<SwitchingIdSource>> SwitchingIdSource::create(std::unique_ptr<IdSource> first,
                                                                     std::unique_ptr<IdSource> second,
                                                                     int64_t switch_step) {
  if (!first || !second) return Status(Code::kInvalidArgument, "switching id source: both sources are needed");
  if (switch_step < 1)
    return Status(Code::kInvalidArgument,
                  "switching id source: switch step " + std::to_string(switch_step) + " must be >= 1");
  return std::unique_ptr<SwitchingIdSource>(new SwitchingIdSource(std::move(first), std::move(second), switch_step));
}

Status SwitchingIdSource::next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) {
  if (step < 0) return Status(Code::kInvalidArgument, "switching id source: step " + std::to_string(step) + " < 0");
  if (step < switch_step_) return first_->next_step(step, batch, ids);
  return second_->next_step(step - switch_step_, batch, ids);
}

std::string SwitchingIdSource::describe() const {
  return first_->describe() + " for steps 0.." + std::to_string(switch_step_ - 1) + ", then " + second_->describe();
}

}  // namespace engram
