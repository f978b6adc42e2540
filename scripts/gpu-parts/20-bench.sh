#!/usr/bin/env bash
# GPU part "bench" (called by scripts/gpu-check on the H200 machine with BUILD, LOG_DIR, PART_BUDGET_S): the
# `engram bench` suite at real sizes, each step with --json-out and --plot into $LOG_DIR:
#   1. copy      1 GiB H2D/D2H: pinned, pageable, registered shm; CE vs SM; overlap; single vs double staging
#   2. lookup    headline: 32 GiB table, fused and split, uniform/zipf/text ids, decode 1..512 and prefill
#                2048..16384 tokens, cuda lookup (grid 1.0 and 0.5) vs plain gather, host-dma
#   3. lookup    factors: d 128/256/1024, span 1/8 GiB, sorted vs unsorted, fused, uniform, 8 GiB tables
#   4. register  4 GiB per configuration: memfd / anon-thp / hugetlb x chunk 256 MiB / 1 GiB / 4 GiB
#   5. numa      1-node matrix (1 GiB buffer)
# A step is skipped (SKIP line) when the time left is below its estimate. Prints the headline figures at the
# end (pinned H2D/D2H GB/s, lookup M rows/s at 8192 tokens, register s/GiB, NUMA read GB/s and latency).
# Exit 0 when every step that ran passed (a waived bench exits 77 and counts as a failure here: the H200
# has a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
LOG_DIR=${LOG_DIR:-/tmp/engram-bench-part}
BUDGET=${PART_BUDGET_S:-240}
mkdir -p "$LOG_DIR"
bin="$BUILD/bin/engram"
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
fail=0
# step NAME ESTIMATE_S ARGS...: runs `engram bench ARGS --json-out LOG_DIR/NAME.json --plot LOG_DIR/NAME.png`.
step() {
  local name=$1 est=$2
  shift 2
  local l
  l=$(left)
  if ((l < est)); then echo "bench: SKIP $name (needs ~${est}s, ${l}s left)"; return; fi
  local t0=$(date +%s)
  timeout --signal=INT --kill-after=5 $((l - 5)) "$bin" bench "$@" --json-out "$LOG_DIR/$name.json" \
    --plot "$LOG_DIR/$name.png" --csv "$LOG_DIR/$name.csv" >"$LOG_DIR/$name.txt" 2>"$LOG_DIR/$name.err"
  local rc=$?
  if ((rc == 0)); then echo "bench: PASS $name ($(( $(date +%s) - t0 ))s)"; else
    echo "bench: FAIL $name rc=$rc ($(( $(date +%s) - t0 ))s): $(tail -2 "$LOG_DIR/$name.err" | tr '\n' ' ')"; fail=1; fi
}
[ -x "$bin" ] || { echo "bench: $bin not built"; exit 1; }
command -v gnuplot >/dev/null || echo "bench: gnuplot not installed here: no PNGs (apt-get install gnuplot-nox)"

step copy 25 copy --reps 7 --warmup 2
step lookup 90 lookup --table-size 32GiB --layouts fused,split --ids uniform,zipf,text \
  --batches 1,8,64,256,512,2048,8192,16384 --grid-fractions 1,0.5 --backends cuda,host-dma --reps 7 --warmup 2
step lookup-factors 45 lookup --table-size 8GiB --spans 1GiB,8GiB --layouts fused --d 128,256,1024 --ids uniform \
  --sorted no,yes --batches 64,2048 --grid-fractions 1 --backends cuda,cpu --reps 5 --warmup 1
step register 45 register --reps 3 --warmup 1
step numa 20 numa --reps 5 --warmup 1

# Headline figures from the JSON files.
python3 - "$LOG_DIR" <<'PY' || true
import json, os, sys
d = sys.argv[1]
def load(n):
    p = os.path.join(d, n + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
def table(j, key):
    for b in (j or {}).get("benches", []):
        for t in b.get("tables", []):
            if t["key"] == key:
                return t
    return None
def fmt(v, f="%.1f"):
    return "n/a" if v is None else f % v
t = table(load("copy"), "copy_gbps")
if t:
    for r in t["rows"]:
        if r[0] == "pinned" and r[2] == "CE":
            print(f"bench: copy pinned {r[1]} CE {fmt(r[3])} GB/s (design.md: 55.4)")
t = table(load("copy"), "overlap")
if t:
    for r in t["rows"]:
        print(f"bench: overlap of an H2D copy from {r[0]} memory with a kernel: {fmt(r[4])}%")
t = table(load("lookup"), "lookup")
if t:
    c = [x["name"] for x in []]
    for r in t["rows"]:
        layout, d_, span, ids, srt, tokens, rows, var = r[:8]
        if tokens == 8192 and var in ("cuda lookup", "cuda gather", "host-dma"):
            print(f"bench: lookup {layout} {ids} 8192 tokens {var}: {fmt(r[13], '%.2f')} M rows/s, "
                  f"src {fmt(r[14], '%.2f')} GB/s, {fmt(r[16])}% link, {fmt(r[17])}% gather")
t = table(load("register"), "register")
if t:
    for r in t["rows"]:
        print(f"bench: register {r[0]} chunk {r[2]}: prefault {fmt(r[3], '%.4f')} s/GiB, register {fmt(r[4], '%.4f')} s/GiB, neighbour p99 {fmt(r[8])} us")
j = load("numa")
for key, unit in (("seq_read_all_gbps", "GB/s read, all threads"), ("seq_read_1t_gbps", "GB/s read, 1 thread"),
                  ("latency_ns", "ns latency"), ("gather_256b_mrows", "M rows/s 256-B gather")):
    t = table(j, key)
    if t:
        print(f"bench: numa {unit}: " + "; ".join(f"{r[0]}: " + ", ".join(fmt(v, '%.2f') for v in r[1:]) for r in t["rows"]))
PY
echo "bench: $( ((fail == 0)) && echo passed || echo FAILED ) in $(( $(date +%s) - start ))s; JSON/PNG/CSV in $LOG_DIR"
exit $fail
