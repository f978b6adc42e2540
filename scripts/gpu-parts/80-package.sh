#!/usr/bin/env bash
# GPU part 70: the installed package with the CUDA backend. Builds libengram_offload (with src/cuda) in $BUILD,
# installs it into a temporary prefix, builds examples/cpp against it (the engine examples get engram_offload::cuda)
# and runs the CPU examples and `engine_lookup cuda`, `engine_queue cuda`, `hash_step cuda` (scripts/test-examples
# --cuda). Prints PASS/FAIL and the examples' output (each prints what it checked: "engine lookup of N rows on
# cuda: matches the reference").
# Env: BUILD (build dir, default build-gpu), LOG_DIR (logs). Budget on an H200: ~1 min after the build.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build-gpu}
LOG_DIR=${LOG_DIR:-/tmp/engram-part70}
mkdir -p "$LOG_DIR"
ninja -C "$BUILD" -j "$(nproc)" engram_offload engram_offload_static engram_cli >"$LOG_DIR/build.log" 2>&1 ||
  { echo "FAIL  70-package build (see build.log)"; exit 1; }
if BUILD_DIR="$BUILD" scripts/test-examples --cuda >"$LOG_DIR/examples.log" 2>&1; then
  echo "PASS  installed package + examples (cpu and cuda)"; grep -E "match|census|backend|ranks|queue on" "$LOG_DIR/examples.log"
else
  echo "FAIL  installed package + examples (see examples.log)"; tail -20 "$LOG_DIR/examples.log"; exit 1
fi
