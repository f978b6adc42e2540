#!/usr/bin/env bash
# GPU part "replay-hash" (called by scripts/gpu-check with BUILD, LOG_DIR, PART_BUDGET_S): the serving replay with
# its ids hashed on the GPU. One live run records the token batches (chunked prefill and decode mixed, real text);
# the same batches are then replayed with `--hash gpu` and `--hash cpu`, alternated, REPS times each (default 2).
# The GPU arm hashes every step's chunks on the device (each id checked against the CPU hasher after its step,
# off the replay's clock); the CPU arm hashes on the host before each step, on the client clock.
# Prints per run: GPU hash us/step, host hash us/step, ids verified, step p50/p99, TTFT and ITL medians; exit 0
# when every run passed.
set -uo pipefail
# shellcheck source=common.bash
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-replay-hash-part 150
REPS=${REPS:-2}
bin=$engram
fail=0
PART=replay-hash
step() { part_step "$@"; }
[ -x "$bin" ] || { echo "replay-hash: $bin not built"; exit 1; }

# The workload makes the recording; a replay of the recorded batches takes the rest (the CLI refuses workload
# options with --batches: the file fixes the requests).
WORKLOAD=(--rate 40 --requests 96 --prompt lognormal:1024,0.6 --output 64)
COMMON=(--backend cuda --token-budget 2048 --prefill-chunk 512)
step record 60 replay "${COMMON[@]}" "${WORKLOAD[@]}" --hash cpu --record "$LOG_DIR/batches.json" --json || exit 1
for rep in $(seq 1 "$REPS"); do
  for h in gpu cpu; do
    step "replay-$h-$rep" 40 replay "${COMMON[@]}" --batches "$LOG_DIR/batches.json" --hash $h --json
  done
done

python3 - "$LOG_DIR" "$REPS" <<'PY' || fail=1
import json, os, sys
d, reps = sys.argv[1], int(sys.argv[2])
def f(v, s=1e3, spec="%.1f"):
    return "n/a" if v is None else spec % (v / s)
rows = []
for rep in range(1, reps + 1):
    for h in ("gpu", "cpu"):
        p = os.path.join(d, f"replay-{h}-{rep}.out")
        try:
            j = json.load(open(p))
        except Exception:
            print(f"replay-hash: replay {h} {rep}: no JSON")
            continue
        hs, e, c = j.get("hash") or {}, j["engine"], j["client"]
        g = hs.get("gpu_step_ns") or {}
        row = {"arm": h, "rep": rep, "place": hs.get("place"), "gpu_hash_ns": g.get("median"),
               "host_hash_ns": (hs.get("host_source_ns") or {}).get("median"), "verified_ids": hs.get("verified_ids"),
               "steps": e["steps"], "step_p50_ns": e["step_ns"]["median"], "step_p99_ns": e["step_ns"].get("p99"),
               "ttft_median_ms": c.get("median_ttft_ms"), "itl_median_ms": c.get("median_itl_ms"),
               "output_throughput": c.get("output_throughput")}
        rows.append(row)
        print(f"replay-hash: {h} rep {rep} (place {row['place']}): GPU hash {f(row['gpu_hash_ns'])} us/step, host hash "
              f"{f(row['host_hash_ns'])} us/step, {row['verified_ids']} ids verified, {row['steps']} steps, step p50 "
              f"{f(row['step_p50_ns'])} / p99 {f(row['step_p99_ns'])} us, TTFT median {f(row['ttft_median_ms'], 1, '%.2f')} ms, "
              f"ITL median {f(row['itl_median_ms'], 1, '%.2f')} ms, {f(row['output_throughput'], 1)} tokens/s")
json.dump({"schema": "engram.gpu-part-replay-hash/1", "runs": rows}, open(os.path.join(d, "replay-hash.json"), "w"), indent=2)
PY
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/replay-hash" && cp "$LOG_DIR"/replay-hash.json "$OUT/replay-hash/" 2>/dev/null; fi
exit $fail
