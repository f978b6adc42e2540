#!/usr/bin/env bash
# GPU part 72: does the hot-row cache follow the traffic? `engram run --backend cuda` on a decode replay whose text
# switches corpus mid-run (--switch-tokens, --switch-at): the docs corpus (build/data/corpus/corpus-test.tokens)
# for steps 0..399, then text of another kind (build/data/other/corpus-test.tokens: C headers, Python sources,
# non-English prose) for steps 400..799; v41-flash-mini 8 GiB, batch 64, 5% cache per layer, 8 warm-up steps (the
# cache's warm-up window, docs text). Runs, each with the cache's hit rate of every step (cache_series):
#   follow   online updates that burst (every=4,rows=256,slice=64,burst=16: up to 16x while plans come back full);
#   base     the default online updates, without bursts (burst=1);
#   oracle   a cache filled from a profile of the other kind's train documents (build/data/other/corpus-train,
#            `engram profile`, made here), no updates: what a cache that knew the new text's kind would hold;
#   static   the warm-up window's cache without updates (budget permitting).
# Summary (summary.txt): per run the hit rate before the switch, over +0..50, +150..200 and after the switch, the
# step after the switch at which the 16-step mean first reaches 90% of the oracle's mean over the same steps
# (goal: <= 200), and the decode link bytes per token cut after the switch = rows / (rows - hits) over the steps
# after the switch (a step whose batches the planner did not probe counts with no hits; goal: >= 3x at 5%).
# Files: run-NAME.json, curve.dat (step, 16-step means per run), curve.png (gnuplot when installed), summary.txt.
# Token files come from scripts/tokenize-follow on a machine with Node.js (carry build/data); without them: SKIP.
# Env: BUILD (build dir), LOG_DIR (default $OUT/cache-follow or /tmp/engram-part72), PART_BUDGET_S (default 150).
# Budget on an H200: profile ~10-15 s; each run ~15-20 s (8 GiB fill, registration, calibration, 800 steps with a
# counter read per step): ~90 s for profile + 4 runs.
set -uo pipefail
source "$(dirname "$0")/common.bash"
default_log=/tmp/engram-part72
[[ -n ${OUT:-} ]] && default_log=$OUT/cache-follow
part_setup "$default_log" 150
part_build 72-cache-follow engram_cli

A=build/data/corpus/corpus-test.tokens
B=build/data/other/corpus-test.tokens
BT=build/data/other/corpus-train.tokens
for f in "$A" "$B" "$BT"; do
  [[ -s $f ]] || { echo "SKIP  cache-follow: $f missing (scripts/tokenize-follow on a machine with Node.js, carry build/data)"; exit 0; }
done
SWITCH=400
COMMON=(--backend cuda --layout v41-flash-mini --table-size 8GiB --batch 64 --warmup 8 --steps 792 --cache-size 5%
        --no-baseline --timeline none --json --ids text --tokens "$A" --switch-tokens "$B" --switch-at "$SWITCH")
prof="$LOG_DIR/other-train.profile"
if ! timeout 60 "$engram" profile --tokens "$BT" --layout v41-flash-mini --table-size 8GiB --out "$prof" \
     >"$LOG_DIR/profile.txt" 2>&1; then
  echo "FAIL  engram profile (see profile.txt)"; tail -5 "$LOG_DIR/profile.txt"; exit 1
fi
echo "PASS  profile of $BT"

# run_one NAME ARGS...: engram run --json into run-NAME.json.
run_one() {
  local name=$1 to=45; shift
  if (($(left) < 25)); then echo "SKIP  run $name (budget: $(left) s left)"; return 1; fi
  ((to > $(left) - 5)) && to=$(( $(left) - 5 ))
  local t=$(date +%s)
  timeout --signal=INT --kill-after=10 "$to" "$engram" run "${COMMON[@]}" "$@" >"$LOG_DIR/run-$name.json" \
    2>"$LOG_DIR/run-$name.err"
  local rc=$?
  if ((rc != 0)); then echo "FAIL  run $name rc=$rc (see run-$name.err)"; tail -3 "$LOG_DIR/run-$name.err"; STATUS=1; return 1; fi
  echo "PASS  run $name ($(($(date +%s) - t)) s)"
}
run_one follow --cache-update every=4,rows=256,slice=64,burst=16
run_one oracle --cache-profile "$prof" --cache-update off
run_one base --cache-update every=4,rows=256,slice=64,burst=1
run_one static --cache-update off || true

python3 - "$LOG_DIR" "$SWITCH" <<'PY' | tee "$LOG_DIR/summary.txt" || STATUS=1
import json, math, os, sys
d, sw = sys.argv[1], int(sys.argv[2])
W, GOAL_STEPS, GOAL_FRAC, GOAL_CUT = 16, 200, 0.9, 3.0
runs = {}
for name in ("follow", "oracle", "base", "static"):
    p = os.path.join(d, "run-%s.json" % name)
    if not os.path.exists(p): continue
    try: j = json.load(open(p))
    except Exception as e:
        print("FAIL  %s: %s" % (p, e)); continue
    s = j.get("cache_series")
    if not s: print("FAIL  %s: no cache_series" % p); continue
    rows_per_step = j["workload"]["batch"] * j["table"]["heads"] * len(j["table"]["engram_layers"])
    caches = [l.get("cache") or {} for l in (j["workload"].get("backend_details") or {}).get("fast_path", [])]
    runs[name] = dict(rate=s["hit_rate"], hits=s["hits"], rows=rows_per_step,
                      swapped=sum(c.get("rows_swapped") or 0 for c in caches),
                      bursts=sum(c.get("burst_updates") or 0 for c in caches),
                      scale=max([c.get("update_scale_max") or 1 for c in caches] or [1]),
                      rebuilds=sum(c.get("map_rebuilds") or 0 for c in caches),
                      host_us=max([c.get("update_host_us_max") or 0 for c in caches] or [0]),
                      p99=(j["steps"]["step_ns"] or {}).get("p99"), p50=(j["steps"]["step_ns"] or {}).get("median"))
def mean(v, a, b):
    x = [y for y in v[max(0, a):b] if y is not None]
    return sum(x) / len(x) if x else None
def f(x, fmt="%.1f"): return "n/a" if x is None else fmt % x
def pct(x): return None if x is None else 100 * x
orc = runs.get("oracle")
n = max((len(r["rate"]) for r in runs.values()), default=0)
oracle_after = mean(orc["rate"], sw, n) if orc else None
print("switch at step %d; hit rates in %% of probed rows (16-step means for the recovery)" % sw)
print("%-8s %8s %8s %10s %8s %9s %11s %9s %9s %7s %9s" % ("run", "before", "+0..50", "+150..200", "after",
      "vs oracle", "recovered", "link cut", "swapped", "bursts", "max scale"))
verdict = {}
for name, r in runs.items():
    v = r["rate"]
    rec = None
    if orc:
        for s in range(sw + W, n + 1):
            m, om = mean(v, s - W, s), mean(orc["rate"], s - W, s)
            if m is not None and om and m >= GOAL_FRAC * om:
                rec = s - sw; break
    after = mean(v, sw, n)
    hits_after = sum(r["hits"][sw:n]); rows_after = r["rows"] * (n - sw)
    cut = rows_after / (rows_after - hits_after) if rows_after > hits_after else None
    verdict[name] = (rec, cut)
    print("%-8s %8s %8s %10s %8s %9s %11s %9s %9d %7d %9d" % (name, f(pct(mean(v, 8, sw))),
          f(pct(mean(v, sw, sw + 50))), f(pct(mean(v, sw + 150, sw + 200))),
          f(pct(after)), f(after / oracle_after if after is not None and oracle_after else None, "%.3f"),
          "n/a" if rec is None else "+%d" % rec, f(cut, "%.2fx"), r["swapped"], r["bursts"], r["scale"]))
for name, r in runs.items():
    print("%-8s step p50 %s us, p99 %s us; map rebuilds %d; longest slice host time %s us" % (name,
          f(None if r["p50"] is None else r["p50"] / 1e3), f(None if r["p99"] is None else r["p99"] / 1e3), r["rebuilds"], f(r["host_us"])))
if "follow" in verdict:
    rec, cut = verdict["follow"]
    print("goal recovery <= +%d steps to %.0f%% of the oracle: %s (%s)" % (GOAL_STEPS, 100 * GOAL_FRAC,
          "met" if rec is not None and rec <= GOAL_STEPS else "MISSED", "n/a" if rec is None else "+%d" % rec))
    print("goal link bytes cut after the switch >= %.1fx: %s (%s)" % (GOAL_CUT, "met" if cut and cut >= GOAL_CUT else "MISSED", f(cut, "%.2fx")))
# The curve: 16-step means per run.
names = list(runs)
with open(os.path.join(d, "curve.dat"), "w") as out:
    out.write("# step " + " ".join(names) + " (hit rate %%, %d-step mean; nan = not probed)\n" % W)
    for s in range(W, n + 1):
        vals = [mean(runs[k]["rate"], s - W, s) for k in names]
        out.write("%d %s\n" % (s, " ".join("nan" if x is None else "%.2f" % (100 * x) for x in vals)))
with open(os.path.join(d, "curve.gp"), "w") as g:
    g.write('set terminal pngcairo size 1100,500\nset output "%s"\n' % os.path.join(d, "curve.png"))
    g.write('set title "5%% hot-row cache, text switches at step %d (docs -> code and non-English text)"\n' % sw)
    g.write('set xlabel "decode step"\nset ylabel "hit rate [%%] (%d-step mean)"\nset yrange [0:100]\nset key bottom right\n' % W)
    g.write('set arrow from %d, graph 0 to %d, graph 1 nohead dt 2\n' % (sw, sw))
    g.write("plot " + ", ".join('"%s" using 1:%d with lines lw 2 title "%s"' % (os.path.join(d, "curve.dat"), i + 2, k)
                                for i, k in enumerate(names)) + "\n")
PY
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot "$LOG_DIR/curve.gp" 2>"$LOG_DIR/gnuplot.err" && echo "PASS  curve.png" || echo "WARN  gnuplot failed (see gnuplot.err; curve.dat has the data)"
else
  echo "NOTE  gnuplot not installed: curve.dat and curve.gp written (gnuplot curve.gp draws curve.png)"
fi
exit $STATUS
