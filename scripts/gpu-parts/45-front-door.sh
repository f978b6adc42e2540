#!/usr/bin/env bash
# GPU part "front door" (called by scripts/gpu-check with BUILD, LOG_DIR, PART_BUDGET_S): what an engine meets first.
#   1. the Python module built against the machine's PyTorch interpreter (as part 40 does);
#   2. pytest on the stream contract (every CUDA entry point ordered with the caller's stream, eagerly and under
#      capture), the torch custom ops (opcheck, torch.compile with and without fullgraph, graph breaks, CUDA graph
#      replay, bit-identical Engram rows) and the released model directory from Python;
#   3. the released model directory from the CLI (ctest ReleasedModelDir: read-only, no node on PATH, no compression
#      table file), which needs the bundled tokenizer.json under tools/tokenize/node_modules (carry it).
# Output: $LOG_DIR/{configure,build,pytest,released}.log and pytest.xml; one line per step. Exit 0 when all passed.
set -uo pipefail
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-front-door-part 240
fail=0
say() { echo "front-door: $*"; }

part_torch_python
if [[ -z $PY ]]; then
  say "SKIPPED: no python3 with torch, pybind11, numpy and pytest"
else
  say "interpreter $PY: $("$PY" -c "import torch; print('torch', torch.__version__, 'gpu', torch.cuda.is_available())" 2>&1)"
  part_python_module || exit 1
  t=$(( $(left) - 40 )); ((t < 30)) && t=30
  PYTHONPATH="$PWD/$BUILD/python" timeout "$t" "$PY" -m pytest -v -p no:cacheprovider -rs \
    --junitxml="$LOG_DIR/pytest.xml" python/tests/test_stream_contract.py python/tests/test_torch_ops.py \
    python/tests/test_model.py >"$LOG_DIR/pytest.log" 2>&1
  rc=$?
  say "pytest stream contract + torch ops + model directory rc=$rc: $(tail -1 "$LOG_DIR/pytest.log")"
  grep -E "(PASSED|FAILED|SKIPPED|ERROR)" "$LOG_DIR/pytest.log" | grep "::" | sed 's/^/  /' | head -40
  ((rc != 0)) && fail=1
fi

t=$(left); ((t < 20)) && t=20
timeout "$t" ctest --test-dir "$BUILD" -R 'ReleasedModelDir|ModelDir' -V --timeout 120 >"$LOG_DIR/released.log" 2>&1
rc=$?
say "ctest ReleasedModelDir rc=$rc: $(grep -E 'tests passed|tests failed' "$LOG_DIR/released.log" | tail -1)"
grep -E "^\s*[0-9]+/[0-9]+ Test|\[  (SKIPPED|FAILED|     OK) \]" "$LOG_DIR/released.log" | sed 's/^/  /' | head -20
((rc != 0)) && fail=1
say "$( ((fail == 0)) && echo PASSED || echo FAILED) in $(( $(date +%s) - START )) s"
exit $fail
