#!/usr/bin/env bash
# GPU part "model-hash" (called by scripts/gpu-check with BUILD, LOG_DIR, PART_BUDGET_S): the released-model
# interfaces at real sizes.
#   1. run-hash   `engram run --backend cuda` on the default text with the ids hashed on the GPU (every id checked
#                 against the CPU hasher) and on the CPU, batch 64 and 512, without the hot-row cache and with it
#                 (the cache then counts the device ids): GPU hash µs/step vs the host source's
#   2. bench-hash `engram bench hash`: GPU kernel vs CPU hasher, decode 64/512, prefill 8K
#   3. model      a synthetic Hugging Face model directory of MODEL_SIZE (default 34GiB) in the released format,
#                 loaded by `engram table load DIR` from warm and cold page cache with the sequential read of the
#                 same files beside it (warm also with the pages first touched by the readers, --no-prefault), then `engram run --model DIR --backend cuda` (place + load + register + run)
# Prints one line per figure; exit 0 when every step that ran passed.
set -uo pipefail
# shellcheck source=common.bash
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-model-hash-part 240
MODEL_SIZE=${MODEL_SIZE:-34GiB}
MODEL_DIR=${MODEL_DIR:-/tmp/engram-hf-model}
bin=$engram
fail=0
PART=model-hash
step() { part_step "$@"; }
[ -x "$bin" ] || { echo "model-hash: $bin not built"; exit 1; }

for b in 64 512; do
  for c in nocache cache; do
    size=off
    [[ $c == cache ]] && size=5%
    for h in gpu cpu; do
      step "run-b$b-$h-$c" 25 run --backend cuda --batch $b --steps 48 --hash $h --cache-size $size --json --timeline none
    done
  done
done
python3 - "$LOG_DIR" <<'PY' || true
import json, os, sys
d = sys.argv[1]
def f(v, s=1e3):
    return "n/a" if v is None else "%.1f" % (v / s)
def hit_rate(j):
    fp = ((j.get("workload") or {}).get("backend_details") or {}).get("fast_path") or []
    r = [(x.get("cache") or {}).get("hit_rate") for x in fp]
    return "n/a" if not r or None in r else "/".join("%.3f" % v for v in r)
for b in (64, 512):
    for c in ("nocache", "cache"):
        for h in ("gpu", "cpu"):
            p = os.path.join(d, f"run-b{b}-{h}-{c}.out")
            if not os.path.exists(p) or os.path.getsize(p) == 0:
                continue
            j = json.load(open(p))
            hs, st = j.get("hash", {}), j["steps"]
            g = hs.get("gpu_step_ns") or {}
            print(f"model-hash: run b={b} {c} (hit rate per layer {hit_rate(j)}) hash={hs.get('place')}: step median {f(st['step_ns']['median'])} us, "
                  f"p99 {f(st['step_ns'].get('p99'))} us, GPU hash {f(g.get('median'))} us/step, host source "
                  f"{f(hs['host_source_ns']['median'])} us/step, verified ids {hs.get('verified_ids')}, "
                  f"{f(st['tokens_per_s'], 1)} tokens/s")
PY

step bench-hash 40 bench hash --reps 7 --warmup 2 --json-out "$LOG_DIR/bench-hash.json"
cat "$LOG_DIR/bench-hash.out" 2>/dev/null | tail -12 | sed 's/^/model-hash: /'

rm -rf "$MODEL_DIR"
if step model-create 120 table create --format hf-model --layout v41-flash-mini --table-size "$MODEL_SIZE" \
  --out "$MODEL_DIR"; then
  du -sh "$MODEL_DIR" | sed 's/^/model-hash: model dir /'
  step model-load-warm 60 table load "$MODEL_DIR" --cache warm --compare-sequential --verify
  step model-load-warm-nopf 45 table load "$MODEL_DIR" --cache warm --no-prefault
  step model-load-cold 60 table load "$MODEL_DIR" --cache cold --compare-sequential
  for n in model-load-warm model-load-warm-nopf model-load-cold; do
    grep -E "GB/s|sequential|rows past|load" "$LOG_DIR/$n.out" 2>/dev/null | tail -6 | sed "s/^/model-hash: $n: /"
  done
  step model-run 60 run --model "$MODEL_DIR" --backend cuda --batch 64 --steps 16 --json --timeline none
  python3 - "$LOG_DIR/model-run.out" <<'PY' || true
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(0)
reg = (j["workload"].get("backend_details") or {}).get("registration", {})
print(f"model-hash: run --model: table {j['table']['content']}, {j['table'].get('bytes')} B, register "
      f"{reg.get('register_s')} s, hash {j['hash']['place']} verified {j['hash']['verified_ids']} ids, "
      f"step median {j['steps']['step_ns']['median'] / 1e3:.1f} us")
PY
fi
rm -rf "$MODEL_DIR"
exit $fail
