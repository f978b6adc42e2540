// A replay whose traffic changes mid-run: steps [0, switch_step) come from one id source, the later steps from
// another one, which starts at its own step 0 (fresh sequences: the batch's requests all change kind at once). What
// a serving engine sees when the text it serves switches from one corpus to another, for measuring how a hot-row
// cache follows the traffic (scripts/gpu-parts/72-cache-follow.sh, `engram bench cache-follow`).
#pragma once

#include <cstdint>
#include <memory>

#include "replay/id_source.hpp"

namespace engram {

class SwitchingIdSource final : public IdSource {
 public:
  // kInvalidArgument for a null source or switch_step < 1.
  static Result<std::unique_ptr<SwitchingIdSource>> create(std::unique_ptr<IdSource> first,
                                                           std::unique_ptr<IdSource> second, int64_t switch_step);
  // Steps in order from 0 as the sources need them (a restart at step 0 rewinds both).
  Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) override;
  // "FIRST for steps 0..N-1, then SECOND".
  std::string describe() const override;
  int64_t switch_step() const { return switch_step_; }
  IdSource& first() { return *first_; }
  IdSource& second() { return *second_; }

 private:
  SwitchingIdSource(std::unique_ptr<IdSource> first, std::unique_ptr<IdSource> second, int64_t switch_step)
      : first_(std::move(first)), second_(std::move(second)), switch_step_(switch_step) {}
  std::unique_ptr<IdSource> first_, second_;
  int64_t switch_step_;
};

}  // namespace engram
