# Shared set-up of the GPU parts (sourced, not a part: gpu-check runs only *.sh here).
# part_setup DEFAULT_LOG_DIR DEFAULT_BUDGET_S: BUILD, LOG_DIR, BUDGET, START, STATUS, engram; left() = seconds left.
# part_build NAME TARGET...: builds the targets when the engram binary or one of them is missing (exit 1 on failure).
# part_text_ids: IDS=(--ids text --tokens F) from build/data when a token file is there, else (--ids zipf); TOK=F.
# part_step NAME ESTIMATE_S ARGS...: `$engram ARGS` with stdout in LOG_DIR/NAME.out, stderr in NAME.err and its wall
#   seconds in NAME.wall, skipped when fewer than ESTIMATE_S seconds are left; prints "$PART: PASS|FAIL|SKIP NAME",
#   sets fail=1 on a failure and returns the command's status.
part_setup() {
  root=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
  cd "$root" || exit 1
  BUILD=${BUILD:-build-gpu}
  LOG_DIR=${LOG_DIR:-$1}
  BUDGET=${PART_BUDGET_S:-$2}
  mkdir -p "$LOG_DIR"
  START=$(date +%s)
  STATUS=0
  engram="$BUILD/bin/engram"
}
left() { echo $((BUDGET - ($(date +%s) - START))); }
part_build() {
  local name=$1 missing=0 t
  shift
  [[ -x $engram ]] || missing=1
  for t in "$@"; do [[ $t == engram_cli || -x $BUILD/tests/$t ]] || missing=1; done
  if ((missing)); then
    ninja -C "$BUILD" -j "$(nproc)" "$@" >"$LOG_DIR/build.log" 2>&1 || { echo "FAIL  $name build (see build.log)"; exit 1; }
  fi
}
part_text_ids() {
  TOK=""
  local f
  for f in build/data/common-licenses.tokens build/data/*.tokens; do [[ -f $f ]] && { TOK=$f; break; }; done
  if [[ -n $TOK ]]; then IDS=(--ids text --tokens "$TOK"); echo "ids: real text $TOK"
  else IDS=(--ids zipf); echo "ids: zipf (no token file under build/data: run scripts/tokenize-setup)"; fi
}
part_step() {
  local name=$1 est=$2
  shift 2
  local l t0 rc wall
  l=$(left)
  if ((l < est)); then echo "$PART: SKIP $name (needs ~${est}s, ${l}s left)"; return 1; fi
  t0=$(date +%s.%N)
  timeout --signal=INT --kill-after=5 $((l - 5)) "$engram" "$@" >"$LOG_DIR/$name.out" 2>"$LOG_DIR/$name.err"
  rc=$?
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$wall" >"$LOG_DIR/$name.wall"
  if ((rc == 0)); then echo "$PART: PASS $name (${wall}s)"; else
    echo "$PART: FAIL $name rc=$rc (${wall}s): $(tail -2 "$LOG_DIR/$name.err" | tr '\n' ' ')"; fail=1; fi
  return $rc
}
# part_torch_python: PY = the first interpreter with torch, pybind11, numpy and pytest (the torch venv, then python3),
#   "" when there is none.
part_torch_python() {
  PY=""
  local c
  for c in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import torch, pybind11, numpy, pytest" 2>/dev/null; then
      PY=$(command -v "$c"); return 0
    fi
  done
}
# part_python_module: re-configures $BUILD with $PY and builds only engram_python (logs configure.log, build.log in
#   LOG_DIR); non-zero status, with the first errors printed, on failure.
part_python_module() {
  local pb
  pb=$("$PY" -c "import pybind11; print(pybind11.get_cmake_dir())")
  if ! timeout 60 cmake -S . -B "$BUILD" -DENGRAM_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -DPYTHON_EXECUTABLE="$PY" \
      -Dpybind11_DIR="$pb" >"$LOG_DIR/configure.log" 2>&1; then
    echo "FAIL configure (see configure.log)"; tail -5 "$LOG_DIR/configure.log"; return 1
  fi
  if ! timeout 150 ninja -C "$BUILD" -j "$(nproc)" engram_python >"$LOG_DIR/build.log" 2>&1; then
    echo "FAIL build of engram_python (see build.log)"; grep -m5 "error" "$LOG_DIR/build.log"; return 1
  fi
}
