#!/usr/bin/env bash
# GPU part: the CUDA queue's timeline. `engram run --backend cuda` with warm-up steps writes a trace whose step
# spans come from the queue's events (origin event .. end-of-step event); `engram trace analyze` must leave the
# warm-up out and then report the run's own per-layer exposed wait E. Also checks that --timeline-absolute
# shifts every timestamp by the origin's wall-clock time (the trace merges with a torch profiler trace).
# Prints: step slices, compute slices, warm-up lookups excluded, and per layer run E med vs analyze E med.
# Env from scripts/gpu-check: BUILD, LOG_DIR, PART_BUDGET_S.
set -uo pipefail
E=$BUILD/bin/engram
status=0
for abs in "" "--timeline-absolute"; do
  tag=${abs:+abs}; tag=${tag:-rel}
  if ! timeout 120 "$E" run --backend cuda --table-size 1GiB --batch 64 --steps 8 --warmup 3 --ids zipf $abs \
      --timeline "$LOG_DIR/timeline-$tag.json" --json >"$LOG_DIR/timeline-run-$tag.json" 2>"$LOG_DIR/timeline-run-$tag.err"; then
    echo "timeline $tag: engram run failed: $(tail -1 "$LOG_DIR/timeline-run-$tag.err")"; status=1; continue
  fi
  "$E" trace analyze "$LOG_DIR/timeline-$tag.json" --json >"$LOG_DIR/timeline-analyze-$tag.json" 2>&1 || status=1
  python3 - "$LOG_DIR/timeline-run-$tag.json" "$LOG_DIR/timeline-$tag.json" "$LOG_DIR/timeline-analyze-$tag.json" "$tag" <<'PY' || status=1
import json, sys
run, trace, an, tag = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), sys.argv[4]
ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
steps = [e for e in ev if e["cat"] == "step"]
compute = [e for e in ev if e["cat"] == "compute"]
print(f"timeline {tag}: {len(steps)} step slices (expect 11), {len(compute)} compute slices, "
      f"{an['warmup_lookups_excluded']} warm-up lookups excluded, origin_unix_ns {trace['engram_timeline']['origin_unix_ns']}, "
      f"first step ts {min(e['ts'] for e in steps) if steps else None} us")
ok = len(steps) == 11
for r, a in zip(run["layers"], an["layers"]):
    rm, am = r["exposed_wait_ns"]["median"], a["exposed_wait_ns"]["median"]
    print(f"  layer {r['layer_id']}: run E med {rm} ns, analyze E med {am} ns, n {r['exposed_wait_ns']['n']}/{a['exposed_wait_ns']['n']}")
    ok = ok and rm == am
if tag == "abs" and steps and min(e["ts"] for e in steps) < 1e15:
    print("  absolute timestamps expected (us since the epoch)"); ok = False
sys.exit(0 if ok else 1)
PY
done
exit $status
