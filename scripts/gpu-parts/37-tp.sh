#!/usr/bin/env bash
# GPU part "tp": tensor-parallel slices (docs/placement.md, "Tensor-parallel slices").
#  1. cuda_test_tp_slice: for TP = 1, 2, 3, 4 every rank's slice (its heads' rows only, registered for UVA) looked up
#     by the UVA kernel (one offset and per-chunk translation) and through the engine (queue and direct lookup, fast
#     path planner and off) equals the whole table's lookup restricted to its heads, zeros for padded heads and for
#     ids of other ranks' rows; poisoned device staging; fused and split rows; 5 and 6 heads.
#  2. engram run --backend cuda on a 4 GiB v41-flash-mini table, whole and as each rank of --tp-size 4 (real-text
#     ids when build/data has a token file, else zipf): the TP, Path and Lookup lines of each, and the table bytes
#     of each rank from the JSON (they add up to the whole table's).
# Env: BUILD (build dir), LOG_DIR (logs), PART_BUDGET_S (default 150). Exit 0 when the tests and every run passed.
# Budget on an H200: tests ~10 s; each run ~5-10 s (fill, registration, 4 + 32 steps): ~1 min in all.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
LOG_DIR=${LOG_DIR:-out/tp}
BUDGET=${PART_BUDGET_S:-150}
mkdir -p "$LOG_DIR"
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }
STATUS=0
engram="$BUILD/bin/engram"

if [[ ! -x $engram || ! -x $BUILD/tests/cuda_test_tp_slice ]]; then
  ninja -C "$BUILD" -j "$(nproc)" engram_cli cuda_test_tp_slice >"$LOG_DIR/build.log" 2>&1 ||
    { echo "FAIL  tp build (see build.log)"; exit 1; }
fi

timeout 90 "$BUILD/tests/cuda_test_tp_slice" >"$LOG_DIR/tests.log" 2>&1
rc=$?
if ((rc == 0)); then echo "PASS  tp tests ($(grep -c '^\[       OK' "$LOG_DIR/tests.log") ok)"
else echo "FAIL  tp tests rc=$rc (see tests.log)"; grep -E "FAILED|Failure|seed" "$LOG_DIR/tests.log" | head -20; STATUS=1; fi

TOK=""
for f in build/data/common-licenses.tokens build/data/*.tokens; do [[ -f $f ]] && { TOK=$f; break; }; done
if [[ -n $TOK ]]; then IDS=(--ids text --tokens "$TOK"); else IDS=(--ids zipf); fi
COMMON=(--backend cuda --layout v41-flash-mini --table-size 4GiB --batch 64 --warmup 4 --steps 32 --timeline none "${IDS[@]}")
run_one() {
  local name=$1; shift
  if (($(left) < 20)); then echo "SKIP  run $name (budget: $(left) s left)"; return; fi
  timeout --signal=INT --kill-after=10 $(( $(left) - 5 )) "$engram" run "${COMMON[@]}" "$@" >"$LOG_DIR/run-$name.txt" 2>&1
  local rc=$?
  if ((rc != 0)); then echo "FAIL  run $name rc=$rc"; tail -5 "$LOG_DIR/run-$name.txt"; STATUS=1; return; fi
  "$engram" run "${COMMON[@]}" "$@" --steps 1 --warmup 0 --json 2>/dev/null >"$LOG_DIR/run-$name.json"
  local bytes
  bytes=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); t=j['table']; print(t['tp']['bytes'] if t.get('tp') else t['bytes'])" "$LOG_DIR/run-$name.json" 2>/dev/null || echo n/a)
  echo "PASS  run $name (table bytes in memory: $bytes)"
  grep -E "^(TP|Path|Lookup|Steps) " "$LOG_DIR/run-$name.txt" | sed 's/^/      /'
}
run_one whole
for r in 0 1 2 3; do run_one "tp4-rank$r" --tp-size 4 --tp-rank "$r"; done
exit $STATUS
