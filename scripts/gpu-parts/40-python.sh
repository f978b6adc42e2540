#!/usr/bin/env bash
# GPU part "python" (called by scripts/gpu-check on the H200 machine with BUILD, LOG_DIR, PART_BUDGET_S):
# builds the engram_offload module against the machine's PyTorch interpreter (the torch venv holds pybind11 there;
# Debian's /usr/bin/python3 has no torch) by re-configuring $BUILD with that interpreter and building only the
# engram_python target (the libraries are already built), then runs
#   1. the whole pytest suite (python/tests: CPU tests, test_torch, test_cuda -- UVA lookups bit-identical to the
#      NumPy reference, no device copy of the table, the CUDA Prefetcher, a step under torch.cuda.graph --,
#      test_torch_distributed -- two gloo ranks sharing one table through TorchGroupChannel),
#   2. examples/decode_loop.py --device cuda --graph (prefetch stream overlapped with matmuls, graph replay),
#   3. examples/shared_table_mp.py --ranks 2 (torch.multiprocessing + gloo, one table, CUDA lookups per rank);
#   4. the decode loop beside `engram run` on the same ids (text ids of build/data, batch 64, 4 warm-up + 32 steps,
#      the cache filled from one `engram profile` of that text, no online updates, so both caches hold the same
#      rows; a warm-up window would not do: its ids are nearly all seen once, and which of the tied ids fill the
#      cache is the counting's choice): every staging equal to the CPU lookup (--check), and per layer the paths
#      taken and the cache's hits / probes of both.
# Output: $LOG_DIR/{configure,build,pytest,decode_loop_cuda,shared_table_mp}.log, pytest.xml; one summary line per
# step on stdout. Exit 0 when every step passed.
set -uo pipefail
source "$(dirname "$0")/common.bash"  # before this part's own left(), which it keeps
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
LOG_DIR=${LOG_DIR:-/tmp/engram-python-part}
BUDGET=${PART_BUDGET_S:-150}
mkdir -p "$LOG_DIR"
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
fail=0
say() { echo "python: $*"; }

part_torch_python
if [ -z "$PY" ]; then
  say "SKIPPED: no python3 with torch, pybind11, numpy and pytest"
  exit 0
fi
"$PY" -c "import sys, torch, numpy, pybind11; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available(), 'numpy', numpy.__version__, 'pybind11', pybind11.__version__)" >"$LOG_DIR/env.txt" 2>&1
say "interpreter $PY: $(cat "$LOG_DIR/env.txt")"
part_python_module | sed "s/^/python: /"; [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
say "built $(ls "$BUILD"/python/engram_offload/_engram*.so) in $(( $(date +%s) - start )) s"
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"

# 1. pytest
t=$(( $(left) - 60 )); [ "$t" -lt 30 ] && t=30
timeout "$t" "$PY" -m pytest -q -p no:cacheprovider -rs --junitxml="$LOG_DIR/pytest.xml" python/tests >"$LOG_DIR/pytest.log" 2>&1
rc=$?
say "pytest rc=$rc: $(tail -1 "$LOG_DIR/pytest.log")"
[ $rc -ne 0 ] && { fail=1; grep -E "^(FAILED|ERROR)" "$LOG_DIR/pytest.log" | head -10; }

# 2. decode loop on CUDA with graph replay
t=$(( $(left) - 25 )); [ "$t" -lt 20 ] && t=20
timeout "$t" "$PY" python/examples/decode_loop.py --device cuda --graph --steps 12 --batch 64 --table-size 512MiB \
  --trace "$LOG_DIR/decode_loop_trace.json" >"$LOG_DIR/decode_loop_cuda.log" 2>&1
rc=$?
say "decode_loop --device cuda --graph rc=$rc"
grep -E "registered|mode |engram layer|same hidden state" "$LOG_DIR/decode_loop_cuda.log" | sed 's/^/  /'
[ $rc -ne 0 ] && { fail=1; tail -5 "$LOG_DIR/decode_loop_cuda.log"; }

# 3. torch.multiprocessing example: two gloo ranks, one table
t=$(left); [ "$t" -lt 20 ] && t=20
timeout "$t" "$PY" python/examples/shared_table_mp.py --ranks 2 --table-size 256MiB >"$LOG_DIR/shared_table_mp.log" 2>&1
rc=$?
say "shared_table_mp --ranks 2 rc=$rc"
sed 's/^/  /' "$LOG_DIR/shared_table_mp.log" | tail -6
[ $rc -ne 0 ] && fail=1

# 4. the decode loop and engram run on the same ids
TOKF=build/data/common-licenses.tokens
if [[ -f $TOKF && -x $BUILD/bin/engram ]]; then
  PROF=$LOG_DIR/same_ids.profile
  "$BUILD/bin/engram" profile --layout v41-flash-mini --table-size 512MiB --tokens "$TOKF" --out "$PROF" \
    >"$LOG_DIR/same_ids_profile.log" 2>&1 || say "same ids: engram profile failed (see same_ids_profile.log)"
  same=(--batch 64 --steps 32 --warmup 4 --tokens "$TOKF" --cache-update off --cache-profile "$PROF")
  timeout 90 "$BUILD/bin/engram" run --backend cuda --ids text "${same[@]}" --timeline none --json \
    >"$LOG_DIR/run_same_ids.json" 2>"$LOG_DIR/run_same_ids.err"
  rc1=$?
  timeout 120 "$PY" python/examples/decode_loop.py --device cuda --ids text "${same[@]}" --check \
    --json-out "$LOG_DIR/decode_loop_same_ids.json" >"$LOG_DIR/decode_loop_same_ids.log" 2>&1
  rc2=$?
  say "same ids: engram run rc=$rc1, decode_loop --check rc=$rc2"
  grep -E "checked|Path|Cache|hit rate" "$LOG_DIR/decode_loop_same_ids.log" | sed 's/^/  /'
  "$PY" - "$LOG_DIR/run_same_ids.json" "$LOG_DIR/decode_loop_same_ids.json" <<'EOF2' || fail=1
import json, sys
def fast_path(doc):
    if isinstance(doc, dict):
        if isinstance(doc.get("fast_path"), list):
            return doc["fast_path"]
        for v in doc.values():
            r = fast_path(v)
            if r is not None:
                return r
    return None
run, loop = (json.load(open(p)) for p in sys.argv[1:3])
a, b = fast_path(run), fast_path(loop)
if not a or not b:
    print("  FAIL: no fast_path report in", "engram run" if not a else "the decode loop")
    sys.exit(1)
ok = loop.get("mismatches") == 0
for la, lb in zip(a, b):
    ca, cb = la.get("cache", {}), lb.get("cache", {})
    same = (ca.get("hits"), ca.get("probes")) == (cb.get("hits"), cb.get("probes"))
    print(f"  layer {la['layer_index']}: engram run hits/probes {ca.get('hits')}/{ca.get('probes')} "
          f"(hit rate {ca.get('hit_rate')}), paths {la.get('paths')}; decode loop {cb.get('hits')}/{cb.get('probes')} "
          f"(hit rate {cb.get('hit_rate')}), paths {lb.get('paths')}; same: {same}")
print(f"  decode loop stagings checked against the CPU lookup: {loop.get('checked_lookups')}, "
      f"differing: {loop.get('mismatches')}")
sys.exit(0 if ok else 1)
EOF2
  [[ $rc1 -ne 0 || $rc2 -ne 0 ]] && { fail=1; tail -5 "$LOG_DIR/decode_loop_same_ids.log" "$LOG_DIR/run_same_ids.err"; }
else
  say "same ids: SKIPPED (no $TOKF or no engram binary)"
fi

say "$([ $fail -eq 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s"
exit $fail
