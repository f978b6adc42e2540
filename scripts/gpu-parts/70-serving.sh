#!/usr/bin/env bash
# GPU part 70: serving quality of `engram run --backend cuda` with every feature on (planner, 5% cache from the
# warm-up window, online updates), against the same with `--cache-update off`, in one run.
#  1. cuda_test_engine_cache, its online-update tests (sliced online updates in flight stay bit-identical; a probe
#     between a slice's stage and its commit sees the old cache exactly; the cache-maintenance spans).
#  2. At batch 64, 256 and 512 (v41-flash-mini, 8 GiB, real text when build/data has tokens, 8 warm-up + 96
#     measured steps), arms `updates` (default every=4,rows=256,slice=64) and `off` alternated, REPS times each:
#     step p50 / p99 (us), p99/p50, tokens/s, online updates, slices and rows swapped. Then per batch the medians
#     over the repetitions and the ratios on/off (tokens/s; p99/p50 of each arm). Goal: p99/p50 <= 1.10 with
#     updates on, tokens/s on/off >= 1.00.
#  3. One batch-512 run with updates on writes a Chrome trace (trace-512.json): the count and the longest span of
#     the "cache maintenance" lane, and how many of them overlap a lookup of the prefetch queue.
#  4. Duplicate-row cost: `engram bench lookup --sections sweep` (fused, d 256, 8 GiB table, grid 1.0) for uniform,
#     Zipf(1.1) and text ids at 1, 64, 256, 1024 and 8192 tokens: the fused lookup's median time over the plain
#     16-B gather's of the same ids in the same loop (goal <= 1.10), one line per distribution.
# Env: BUILD (build dir), LOG_DIR (logs), PART_BUDGET_S (default 240), REPS (default 2), RUN_HASH (default cpu). Exit 0 when all passed.
# Budget on an H200: test ~20 s; each run ~10-15 s (8 GiB fill, registration, calibration, 104 steps): 12 runs +
# the trace run ~3 min.
set -uo pipefail
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-part70 240
REPS=${REPS:-2}
part_build 70-serving engram_cli cuda_test_engine_cache

# The tests of online updates, sliced and in flight, only (part 35 runs the whole binary).
timeout 90 "$BUILD/tests/cuda_test_engine_cache" --gtest_filter='*WarmupWindowThenOnlineUpdates*:HotRowCacheStage.*' >"$LOG_DIR/tests.log" 2>&1
rc=$?
if ((rc == 0)); then echo "PASS  sliced-update tests ($(grep -c '^\[       OK' "$LOG_DIR/tests.log") ok)"
else echo "FAIL  sliced-update tests rc=$rc (see tests.log)"; grep -E "FAILED|Failure|seed" "$LOG_DIR/tests.log" | head -20; STATUS=1; fi

part_text_ids
# Ids hashed on the CPU (RUN_HASH, default cpu): with --hash auto the GPU hashes and the run checks every device id
# against the CPU hasher, several ms of host work per step, longer than the step, which makes the run host-bound
# and lets the GPU idle (and its clocks drop) between steps: that measures the check, not the cache updates.
# (--hash applies to text ids only: the CLI refuses it with --ids zipf.)
HASH=()
[[ ${IDS[1]:-} == text ]] && HASH=(--hash "${RUN_HASH:-cpu}")
COMMON=(--backend cuda --layout v41-flash-mini --table-size 8GiB --warmup 8 --steps 96 --cache-size 5% --no-baseline
        ${HASH[@]+"${HASH[@]}"} --json "${IDS[@]}")
# run_one NAME TIMEOUT ARGS...: engram run --json into run-NAME.json.
run_one() {
  local name=$1 to=$2; shift 2
  if (($(left) < to / 2)); then echo "SKIP  run $name (budget: $(left) s left)"; return 1; fi
  ((to > $(left) - 5)) && to=$(( $(left) - 5 ))
  timeout --signal=INT --kill-after=10 "$to" "$engram" run "${COMMON[@]}" "$@" >"$LOG_DIR/run-$name.json" \
    2>"$LOG_DIR/run-$name.err"
  local rc=$?
  if ((rc != 0)); then echo "FAIL  run $name rc=$rc (see run-$name.err)"; tail -3 "$LOG_DIR/run-$name.err"; STATUS=1; return 1; fi
  return 0
}

for rep in $(seq 1 "$REPS"); do
  for batch in 64 256 512; do
    run_one "b$batch-updates-r$rep" 40 --batch "$batch" --timeline none
    run_one "b$batch-off-r$rep" 40 --batch "$batch" --timeline none --cache-update off
  done
done
run_one "b512-updates-trace" 40 --batch 512 --timeline "$LOG_DIR/trace-512.json" || true

if (($(left) > 45)); then
  timeout --signal=INT --kill-after=5 $(( $(left) - 5 )) "$engram" bench lookup --sections sweep --backends cuda \
    --layouts fused --d 256 --ids uniform,zipf,text --zipf-alpha 1.1 --batches 1,64,256,1024,8192 \
    --grid-fractions 1.0 --table-size 8GiB ${TOK:+--tokens "$TOK"} --json-out "$LOG_DIR/dup-rows.json" \
    >"$LOG_DIR/dup-rows.txt" 2>"$LOG_DIR/dup-rows.err" || { echo "FAIL  bench lookup (see dup-rows.err)"; STATUS=1; }
else
  echo "SKIP  duplicate-row bench (budget: $(left) s left)"
fi

python3 - "$LOG_DIR" <<'PY' || STATUS=1
import glob, json, os, re, statistics, sys
d = sys.argv[1]
def get(j, *path):
    for p in path:
        if not isinstance(j, dict) or p not in j: return None
        j = j[p]
    return j
def fmt(x, f="%.1f"): return "n/a" if x is None else f % x
rows = {}
for path in sorted(glob.glob(os.path.join(d, "run-b*-r*.json"))):
    m = re.search(r"run-b(\d+)-(updates|off)-r(\d+)\.json$", path)
    if not m: continue
    try: j = json.load(open(path))
    except Exception as e:
        print("FAIL  %s: %s" % (os.path.basename(path), e)); continue
    st = get(j, "steps", "step_ns") or {}
    med, p99 = st.get("median"), st.get("p99")
    tps = get(j, "steps", "tokens_per_s")
    upd = sl = sw = 0
    for layer in (get(j, "workload", "backend_details", "fast_path") or []):
        c = layer.get("cache") or {}
        upd += c.get("updates") or 0; sl += c.get("slices") or 0; sw += c.get("rows_swapped") or 0
    rows.setdefault((int(m.group(1)), m.group(2)), []).append(
        (med, p99, None if not med or p99 is None else p99 / med, tps, upd, sl, sw, int(m.group(3))))
print("%-6s %-8s %4s %12s %12s %8s %12s %8s %8s %8s" % ("batch", "arm", "rep", "p50 (us)", "p99 (us)", "p99/p50",
      "tokens/s", "updates", "slices", "swapped"))
for (b, arm), rs in sorted(rows.items()):
    for med, p99, r, tps, upd, sl, sw, rep in rs:
        print("%-6d %-8s %4d %12s %12s %8s %12s %8d %8d %8d" % (b, arm, rep, fmt(med and med / 1e3), fmt(p99 and p99 / 1e3),
              fmt(r, "%.3f"), fmt(tps, "%.0f"), upd, sl, sw))
def mid(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None
print("\nmedians over repetitions (goal: p99/p50 <= 1.10 with updates; tokens/s on/off >= 1.00)")
print("%-6s %14s %14s %16s" % ("batch", "p99/p50 on", "p99/p50 off", "tokens/s on/off"))
for b in (64, 256, 512):
    on, off = rows.get((b, "updates"), []), rows.get((b, "off"), [])
    ron, roff = mid([x[2] for x in on]), mid([x[2] for x in off])
    ton, toff = mid([x[3] for x in on]), mid([x[3] for x in off])
    print("%-6d %14s %14s %16s" % (b, fmt(ron, "%.3f"), fmt(roff, "%.3f"), fmt(ton / toff if ton and toff else None, "%.3f")))
tp = os.path.join(d, "trace-512.json")
if os.path.exists(tp):
    t = json.load(open(tp))
    ev = t.get("traceEvents", [])
    mt = [e for e in ev if e.get("cat") == "maintenance" and e.get("ph") == "X"]
    lk = [e for e in ev if e.get("cat") == "lookup" and e.get("ph") == "X"]
    over = sum(1 for m in mt if any(l["pid"] == m["pid"] and l["ts"] < m["ts"] + m["dur"] and m["ts"] < l["ts"] + l["dur"] for l in lk))
    host = [m.get("args", {}).get("host_us") for m in mt if m.get("args", {}).get("host_us") is not None]
    print("\ntrace batch 512: %d cache-maintenance spans (%d stage, %d commit), longest %s us on the GPU, "
          "serving-thread host time max %s us; %d overlap a lookup" % (len(mt),
          sum(1 for m in mt if m["name"].startswith("cache stage")), sum(1 for m in mt if m["name"].startswith("cache commit")),
          fmt(max((m["dur"] for m in mt), default=None)), fmt(max(host, default=None)), over))
else:
    print("\ntrace batch 512: not written")
bp = os.path.join(d, "dup-rows.json")
if os.path.exists(bp):
    t = {}
    try:
        for bench in json.load(open(bp)).get("benches", []):
            for tab in bench.get("tables", []):
                if tab.get("key") != "lookup":
                    continue
                ix = {c: i for i, c in enumerate(tab["columns"])}
                for r in tab["rows"]:
                    t.setdefault((r[ix["ids"]], int(r[ix["tokens"]]), r[ix["variant"]]), r[ix["med [us]"]])
    except Exception as e:
        print("dup-rows.json: %s" % e)
    toks = sorted({k[1] for k in t})
    print("\nfused lookup / plain 16-B gather, median time (goal <= 1.10)")
    print("%-8s" % "ids" + "".join("%10s" % ("%d tok" % k) for k in toks))
    for ids in ("uniform", "zipf", "text"):
        cells = []
        for k in toks:
            a, b = t.get((ids, k, "cuda lookup")), t.get((ids, k, "cuda gather"))
            cells.append("%10s" % (fmt(a / b, "%.2f") if a and b else "n/a"))
        print("%-8s" % ids + "".join(cells))
else:
    print("\nduplicate-row bench: not run")
PY
exit $STATUS
