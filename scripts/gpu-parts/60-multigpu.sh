#!/usr/bin/env bash
# GPU part "multigpu" (several GPUs of one host; run on the nvidia-h200-x2 kind or larger): one rank per GPU
# sharing ONE host table of V4.1-Flash rows (64 GiB), real-text ids. `engram topo` of the machine; aggregate and
# per-rank lookup rows/s as ranks go 1 -> all GPUs (same per-rank batch); with all ranks: early vs on-demand
# prefetch and the background grid cap 0.25 vs 1.0. With >= 2 NUMA nodes: the table bound to node 0 vs node 1.
# Env from scripts/gpu-check: BUILD, LOG_DIR, PART_BUDGET_S.
set -uo pipefail
E=$BUILD/bin/engram
tokens=build/data/common-licenses.tokens
START=$(date +%s)
left() { echo $((PART_BUDGET_S - ($(date +%s) - START))); }
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
NNODE=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
echo "GPUs $NGPU, NUMA nodes $NNODE"
nvidia-smi topo -m >"$LOG_DIR/nvidia-topo.txt" 2>&1
"$E" topo >"$LOG_DIR/topo.txt" 2>&1; "$E" topo --json >"$LOG_DIR/topo.json" 2>&1
sed -n 1,12p "$LOG_DIR/topo.txt"
status=0
one() {  # one NAME ARGS...: engram run with the shared args, summary line
  local name=$1; shift
  local l; l=$(left)
  if ((l < 45)); then echo "$name: skipped (budget)"; return; fi
  if timeout "$((l - 5))" "$E" run --backend cuda --table-size 64GiB --batch 128 --steps 24 --warmup 4 \
      --timeline none --json --tokens "$tokens" "$@" >"$LOG_DIR/$name.json" 2>"$LOG_DIR/$name.err"; then
    python3 - "$LOG_DIR/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); n = sys.argv[2]
f = lambda v, k=1.0, fmt="%.2f": "n/a" if v is None else fmt % (v / k)
if "per_rank" in j:
    a = j["aggregate"]; per = j["per_rank"]
    dev = [((r["report"].get("backend_details") or {}).get("device") or {}).get("ordinal") for r in per]
    print("%s: aggregate %s M rows/s, %s tokens/s; per rank M rows/s %s on devices %s; step med us %s; E med us %s; Pss sum %s GiB / table %s GiB" % (
        n, f(a["rows_per_s_sum"], 1e6), f(a["tokens_per_s_sum"], 1, "%.0f"),
        [f(r["report"]["lookup"]["rows_per_s"], 1e6) for r in per], dev,
        [f(r["report"]["steps"]["step_ns"]["median"], 1e3, "%.0f") for r in per],
        [[f(L["exposed_wait_ns"]["median"], 1e3, "%.1f") for L in r["report"]["layers"]] for r in per],
        f(j["memory"]["pss_sum_bytes"], 2**30), f(j["memory"]["table_bytes"], 2**30)))
else:
    print("%s: %s M rows/s; step med %s us; E med us %s" % (n, f(j["lookup"]["rows_per_s"], 1e6), f(j["steps"]["step_ns"]["median"], 1e3, "%.0f"),
          [f(L["exposed_wait_ns"]["median"], 1e3, "%.1f") for L in j["layers"]]))
PY
  else
    echo "$name: FAILED ($(tail -2 "$LOG_DIR/$name.err" | tr '\n' ' '))"; status=1
  fi
}
one ranks1
one ranks$NGPU-early --ranks "$NGPU"
one ranks$NGPU-on_demand --ranks "$NGPU" --prefetch on_demand
one ranks$NGPU-grid0.25 --ranks "$NGPU" --grid-fraction 0.25
one ranks$NGPU-grid1.0 --ranks "$NGPU" --grid-fraction 1.0
if ((NNODE >= 2)); then
  one ranks$NGPU-bind0 --ranks "$NGPU" --placement bind:0
  one ranks$NGPU-bind1 --ranks "$NGPU" --placement bind:1
  one ranks$NGPU-interleave --ranks "$NGPU" --placement interleave:all
fi
exit $status
