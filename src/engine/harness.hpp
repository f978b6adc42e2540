// EngineHarness: the engine knobs only this project's harnesses use (the replay and serving loops, the benches, the
// tests), kept out of the public EngineOptions. A serving engine has its own layer compute and tracing; these exist
// to measure and to inject faults.
//
// EngineOptions carries them as an opaque shared_ptr<const EngineHarness> (null: no harness), so that copying the
// options copies the knobs and the installed headers never define them. engine_harness(options) reads them (the
// defaults when null); mutable_engine_harness(options) gives a writable copy that the options then hold.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engram/engine.hpp"

namespace engram {

struct EngineHarness {
  double layer_us = 0;               // synthetic compute per model layer (LayerCompute); 0 = none
  // Called as this rank enters each shared-group protocol step (tracing; tests inject crashes here).
  std::function<void(const std::string& step, int rank)> on_protocol_step;
};

inline const EngineHarness& engine_harness(const EngineOptions& options) {
  static const EngineHarness kNone;
  return options.harness ? *options.harness : kNone;
}

// The options' knobs as a fresh copy the options now hold: writes through it change these options only.
inline EngineHarness& mutable_engine_harness(EngineOptions& options) {
  auto copy = std::make_shared<EngineHarness>(engine_harness(options));
  EngineHarness& knobs = *copy;
  options.harness = std::move(copy);
  return knobs;
}

}  // namespace engram
