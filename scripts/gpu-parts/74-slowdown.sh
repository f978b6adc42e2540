#!/usr/bin/env bash
# GPU part "slowdown": where the main compute's slowdown under Engram lookups goes. `engram run --backend cuda` on
# the default text, 48 steps, each arm SLOWDOWN_REPS times, arms alternated so that drifts of the machine (clocks,
# the compute-only baseline's own spread) fall on every arm alike:
#   all          planner, 5% cache, online updates (the default)
#   no-updates   --cache-update off
#   no-cache     --cache-size off (planner: dedup / plain)
#   plain        --fast-path off (the plain UVA kernel)
#   grid-0.1     default with --grid-fraction 0.1
#   on-demand    --prefetch on_demand (lookups no longer overlap the compute: their time shows as exposed wait)
# and two arms that move the same rows per step as the default updates in fewer, larger slices (not run unless
# named in SLOWDOWN_ARMS): whether the updates' cost follows the steps that carry a slice or the rows moved:
#   upd-4x256    --cache-update every=4,rows=256,slice=256 (one slice per update: a stage and a commit per 4 steps)
#   upd-16x1024  --cache-update every=16,rows=1024,slice=1024 (a stage and a commit per 16 steps)
# Slowdown = step median / compute-only median of the same run (engram run measures both). Per arm: the medians
# over repetitions of slowdown, step, compute-only and lookup time per layer; the spread of compute-only across
# every run says how much of a difference between arms is noise.
# Env: BUILD, LOG_DIR, PART_BUDGET_S (default 200), SLOWDOWN_REPS (default 3), SLOWDOWN_BATCHES (default "64 512"),
# RUN_HASH (default cpu), SLOWDOWN_ARMS (arms in order, default "all no-updates no-cache plain grid-0.1 on-demand").
source "$(dirname "$0")/common.bash"
part_setup out/slowdown 200
part_build slowdown engram_cli
part_text_ids
REPS=${SLOWDOWN_REPS:-3}
declare -A ARM=([all]="" [no-updates]="--cache-update off" [no-cache]="--cache-size off" [plain]="--fast-path off"
                [grid-0.1]="--grid-fraction 0.1" [on-demand]="--prefetch on_demand"
                [upd-4x256]="--cache-update every=4,rows=256,slice=256"
                [upd-16x1024]="--cache-update every=16,rows=1024,slice=1024")
read -r -a ORDER <<<"${SLOWDOWN_ARMS:-all no-updates no-cache plain grid-0.1 on-demand}"
for arm in "${ORDER[@]}"; do [[ -v ARM[$arm] ]] || { echo "FAIL  slowdown: unknown arm $arm"; exit 1; }; done
HASH=()
[[ ${IDS[1]:-} == text ]] && HASH=(--hash "${RUN_HASH:-cpu}")
for batch in ${SLOWDOWN_BATCHES:-64 512}; do
  for ((r = 1; r <= REPS; r++)); do
    for arm in "${ORDER[@]}"; do
      if (($(left) < 15)); then echo "SKIP  slowdown b$batch $arm rep $r (budget)"; continue; fi
      # shellcheck disable=SC2086
      # --hash cpu (RUN_HASH): a GPU-hashed run checks every id on the host, which outlasts the step (see part 70).
      # (--hash applies to text ids only: the CLI refuses it with --ids zipf.)
      timeout 60 "$engram" run --backend cuda --batch "$batch" --steps 48 "${IDS[@]}" ${ARM[$arm]} --timeline none \
        ${HASH[@]+"${HASH[@]}"} \
        --json >"$LOG_DIR/b$batch-$arm-$r.json" 2>"$LOG_DIR/b$batch-$arm-$r.err" ||
        { echo "FAIL  slowdown b$batch $arm rep $r"; STATUS=1; }
    done
  done
done
PYTHONPATH="$root/scripts/gpu-parts" python3 - "$LOG_DIR" "${ORDER[@]}" <<'EOF' | tee "$LOG_DIR/slowdown.txt"
import glob, statistics, sys
from part_json import fmt, load, med
d, arms = sys.argv[1], sys.argv[2:]
batches = sorted({int(p.split("/b")[-1].split("-")[0]) for p in glob.glob(f"{d}/b*-*.json")})
for b in batches:
    print(f"batch {b}: medians over repetitions (slowdown = step / compute-only of the same run)")
    print(f"  {'arm':<11} {'runs':>4} {'slowdown':>9} {'step [us]':>10} {'p99/p50':>8} {'compute-only [us]':>18} {'L/layer [us]':>13} {'E/layer [us]':>13}")
    co_all = []
    for a in arms:
        docs = [x for x in (load(p) for p in sorted(glob.glob(f"{d}/b{b}-{a}-*.json"))) if x]
        st = [x["steps"] for x in docs]
        co = [s.get("compute_only_step_ns", {}).get("median") for s in st]
        co_all += [c for c in co if isinstance(c, (int, float))]
        lay = [[l.get("lookup_ns", {}).get("median") for l in x.get("layers", [])] for x in docs]
        ex = [[l.get("exposed_wait_ns", {}).get("median") for l in x.get("layers", [])] for x in docs]
        L = med([statistics.mean(v) for v in lay if v and None not in v])
        E = med([statistics.mean(v) for v in ex if v and None not in v])
        tail = med([s["step_ns"]["p99"] / s["step_ns"]["median"] for s in st
                    if isinstance(s["step_ns"].get("p99"), (int, float)) and s["step_ns"].get("median")])
        print(f"  {a:<11} {len(docs):>4} {fmt(med([s.get('slowdown') for s in st]), 3):>9} "
              f"{fmt(None if med([s['step_ns']['median'] for s in st]) is None else med([s['step_ns']['median'] for s in st]) / 1e3, 1):>10} "
              f"{fmt(tail, 3):>8} "
              f"{fmt(None if med(co) is None else med(co) / 1e3, 1):>18} {fmt(None if L is None else L / 1e3, 1):>13} "
              f"{fmt(None if E is None else E / 1e3, 1):>13}")
    if co_all:
        print(f"  compute-only medians over all {len(co_all)} runs: min {min(co_all) / 1e3:.1f}, median "
              f"{statistics.median(co_all) / 1e3:.1f}, max {max(co_all) / 1e3:.1f} us")
EOF
exit $STATUS
