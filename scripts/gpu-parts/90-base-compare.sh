#!/usr/bin/env bash
# GPU part "base-compare": this tree against a base revision on the same machine in one call, so that a change
# that should not move the figures is shown not to (ratios from one run, not across machines or days).
# BASE_TGZ: a `git archive` tarball of the base revision (e.g. `git archive -o .carry/base.tgz REV`, carried);
# without it the part skips. Both trees are built with the same flags (engram_cli only); then, alternating base and
# this tree:
#   engram run --backend cuda (batch 64 and 512, text ids of build/data, 48 steps), BASE_RUN_REPS times each, for
#   three arms: base, this, and this with --planner-learn false ("fixed": the planner on its start-up costs alone,
#   which separates what the learner does from the rest of the change);
#   engram bench lookup --sections fast (32 GiB V4.1-row table, text and Zipf ids), once each.
# Writes base-compare.txt (a table of medians and this/base ratios) and every JSON under LOG_DIR.
# Env: BUILD (this tree's build dir), LOG_DIR, PART_BUDGET_S (default 480), BASE_RUN_REPS (default 3),
#   BASE_BENCH_REPS (default 9).
source "$(dirname "$0")/common.bash"
part_setup out/base-compare 480
if [[ -z ${BASE_TGZ:-} || ! -f ${BASE_TGZ:-} ]]; then
  echo "SKIP  base-compare: BASE_TGZ names no base tarball (git archive -o .carry/base.tgz REV, carried)"
  exit 0
fi
BASE_SRC=${TMPDIR:-/tmp}/engram-base-src
BASE_BUILD=${TMPDIR:-/tmp}/engram-base-build
rm -rf "$BASE_SRC" && mkdir -p "$BASE_SRC" && tar -C "$BASE_SRC" -xzf "$BASE_TGZ" || { echo "FAIL  base tarball"; exit 1; }
configure() {  # SRC BUILD
  [[ -f $2/build.ninja ]] && return 0
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DENGRAM_CUDA=ON \
    >>"$LOG_DIR/build.log" 2>&1
}
for pair in ".:$BUILD" "$BASE_SRC:$BASE_BUILD"; do
  src=${pair%%:*} bld=${pair#*:}
  configure "$src" "$bld" && ninja -C "$bld" -j "$(nproc)" engram_cli >>"$LOG_DIR/build.log" 2>&1 ||
    { echo "FAIL  base-compare build of $src (see build.log)"; tail -20 "$LOG_DIR/build.log"; exit 1; }
done
echo "built both trees ($(($(date +%s) - START))s)"
part_text_ids
declare -A BIN=([this]="$BUILD/bin/engram" [fixed]="$BUILD/bin/engram" [base]="$BASE_BUILD/bin/engram")
declare -A ARM_OPTS=([this]="" [fixed]="--planner-learn false" [base]="")
# The bench's JSON file option: --json-out FILE here; a base from before that option took --json FILE.
declare -A JSON_FILE_OPT=([this]="--json-out" [base]="--json-out")
"${BIN[base]}" bench lookup --help 2>/dev/null | grep -q -- "--json-out" || JSON_FILE_OPT[base]="--json"
REPS=${BASE_RUN_REPS:-3}
for batch in 64 512; do
  for ((r = 1; r <= REPS; r++)); do
    for arm in base this fixed; do
      f="$LOG_DIR/run-b$batch-$arm-$r.json"
      # shellcheck disable=SC2086  # ARM_OPTS holds whole flags
      timeout 90 "${BIN[$arm]}" run --backend cuda --batch "$batch" --steps 48 "${IDS[@]}" --timeline none --json ${ARM_OPTS[$arm]} \
        >"$f" 2>"$LOG_DIR/run-b$batch-$arm-$r.err" || { echo "FAIL  run batch $batch $arm rep $r"; STATUS=1; }
    done
  done
done
echo "runs done ($(($(date +%s) - START))s)"
for arm in base this; do
  L=$(left)
  if ((L < 100)); then echo "SKIP  bench lookup fast $arm (budget left ${L}s)"; continue; fi
  timeout --signal=INT --kill-after=10 $((L - 20)) "${BIN[$arm]}" bench lookup --sections fast --table-size 32GiB \
    --fast-ids text,zipf --cache-size 5% --reps "${BASE_BENCH_REPS:-9}" --warmup 2 --tokens "$TOK" \
    "${JSON_FILE_OPT[$arm]}" "$LOG_DIR/fast-$arm.json" >"$LOG_DIR/fast-$arm.txt" 2>&1 || { echo "FAIL  bench lookup fast $arm"; STATUS=1; }
done
PYTHONPATH="$root/scripts/gpu-parts" python3 - "$LOG_DIR" <<'EOF' | tee "$LOG_DIR/base-compare.txt"
import glob, os, sys
from part_json import fmt, load, med, pick
d = sys.argv[1]


def layer_stat(doc, stat):
    vals = [pick(layer, f"lookup_ns.{stat}") for layer in doc.get("layers") or []]
    vals = [x for x in vals if x is not None]
    if not vals:
        return None
    return sum(vals) / len(vals) if stat == "median" else max(vals)


print("engram run --backend cuda, 48 steps, medians over repetitions (this/base; fixed = this with --planner-learn false)")
print(f"{'batch':>5} {'metric':<26} {'base':>12} {'this':>12} {'fixed':>12} {'this/base':>9} {'fixed/base':>10}")
for batch in (64, 512):
    docs = {a: [load(p) for p in sorted(glob.glob(f"{d}/run-b{batch}-{a}-*.json"))] for a in ("base", "this", "fixed")}
    print(f"{batch:>5} {'runs':<26} " + " ".join(f"{len([x for x in docs[a] if x]):>12}" for a in ("base", "this", "fixed")))
    # Rows/s is all rows over the summed lookup time, which one slow batch moves; a layer's median lookup is not
    # moved by it (the mean over layers of their median; the largest layer p99).
    for name, get in (("step median [us]", lambda x: pick(x, "steps.step_ns.median")),
                      ("step p99 [us]", lambda x: pick(x, "steps.step_ns.p99")),
                      ("tokens/s", lambda x: pick(x, "steps.tokens_per_s")),
                      ("slowdown", lambda x: pick(x, "steps.slowdown")),
                      ("lookup rows/s [M]", lambda x: pick(x, "lookup.rows_per_s")),
                      ("layer lookup median [us]", lambda x: layer_stat(x, "median")),
                      ("layer lookup p99 [us]", lambda x: layer_stat(x, "p99"))):
        scale = 1e-3 if "[us]" in name else 1e-6 if "[M]" in name else 1.0
        v = {a: med([get(x) for x in docs[a] if x]) for a in docs}
        v = {a: (None if x is None else x * scale) for a, x in v.items()}
        r = {a: (v[a] / v["base"] if v[a] is not None and v["base"] else None) for a in ("this", "fixed")}
        print(f"{batch:>5} {name:<26} {fmt(v['base'], 3):>12} {fmt(v['this'], 3):>12} {fmt(v['fixed'], 3):>12} "
              f"{fmt(r['this'], 3):>9} {fmt(r['fixed'], 3):>10}")
for a in ("base", "this"):
    p = f"{d}/fast-{a}.txt"
    if os.path.exists(p):
        print(f"\n== bench lookup --sections fast ({a}): the ratio lines")
        with open(p) as f:
            for line in f:
                if any(w in line for w in ("x plain", "ratio", "prefill", "decode", "planner")):
                    print("  " + line.rstrip()[:160])
EOF
exit $STATUS
