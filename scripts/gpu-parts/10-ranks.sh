#!/usr/bin/env bash
# GPU part: DP ranks sharing ONE host table on the GPU machine (the CUDA ranks on one GPU; the multi-GPU
# part is 60). `engram topo` of the machine, then `engram run --ranks N --backend cuda` for N = 1, 2, 4
# ranks on the one GPU (rank r on device r % visible GPUs), same per-rank batch, on an 8 GiB shared table
# with real-text ids: per-rank lookup rows/s and step time vs the aggregate as ranks are added.
# Env from scripts/gpu-check: BUILD, LOG_DIR, PART_BUDGET_S.
set -uo pipefail
E=$BUILD/bin/engram
tokens=build/data/common-licenses.tokens
[ -f "$tokens" ] || { echo "no $tokens (carry build/data): ids fall back to zipf"; tokens=""; }
START=$(date +%s)
left() { echo $((PART_BUDGET_S - ($(date +%s) - START))); }
"$E" topo >"$LOG_DIR/topo.txt" 2>&1
"$E" topo --json >"$LOG_DIR/topo.json" 2>&1
echo "topo: $(grep -ciE 'node' "$LOG_DIR/topo.txt") lines mentioning nodes (topo.txt)"
# Weighted interleave needs Linux >= 6.9 (this machine's kernel is newer; the 2-node guest's 6.1 answers
# kUnsupported): the policy set on the table's backing, read back, and censused.
"$E" census --table-size 64MiB --placement weighted-interleave:0=3 >"$LOG_DIR/weighted.txt" 2>&1
echo "weighted-interleave:0=3 census rc=$? ($(uname -r)): $(grep -m1 'placement of' "$LOG_DIR/weighted.txt" | cut -c1-200)"
status=0
for n in 1 2 4; do
  l=$(left)
  if ((l < 40)); then echo "ranks $n: skipped (budget)"; continue; fi
  args=(run --ranks "$n" --backend cuda --table-size 8GiB --batch 128 --steps 24 --warmup 4 --timeline none --json)
  [ -n "$tokens" ] && args+=(--tokens "$tokens")
  [ "$n" = 1 ] && args=(run --backend cuda --table-size 8GiB --batch 128 --steps 24 --warmup 4 --timeline none --json ${tokens:+--tokens "$tokens"})
  if timeout "$((l - 5))" "$E" "${args[@]}" >"$LOG_DIR/ranks$n.json" 2>"$LOG_DIR/ranks$n.err"; then
    python3 - "$LOG_DIR/ranks$n.json" "$n" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); n = sys.argv[2]
f = lambda v, k=1.0, fmt="%.2f": "n/a" if v is None else fmt % (v / k)
if "per_rank" in j:
    a = j["aggregate"]
    per = [(r["report"]["lookup"]["rows_per_s"], r["report"]["steps"]["step_ns"]["median"], r["report"].get("backend")) for r in j["per_rank"]]
    print("ranks %s: aggregate %s M rows/s; per rank M rows/s %s; step med us %s; backends %s; Pss sum %s GiB for %s GiB table" % (
        n, f(a["rows_per_s_sum"], 1e6), [f(p[0], 1e6) for p in per], [f(p[1], 1e3, "%.0f") for p in per], [p[2] for p in per],
        f(j["memory"]["pss_sum_bytes"], 2**30), f(j["memory"]["table_bytes"], 2**30)))
else:
    l, s = j["lookup"], j["steps"]
    print("ranks 1 (single process): %s M rows/s; step med %s us; backend %s" % (f(l["rows_per_s"], 1e6), f(s["step_ns"]["median"], 1e3, "%.0f"), j["workload"]["backend"]))
PY
  else
    echo "ranks $n: FAILED ($(tail -2 "$LOG_DIR/ranks$n.err" | tr '\n' ' '))"
    status=1
  fi
done
exit $status
