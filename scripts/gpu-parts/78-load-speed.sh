#!/usr/bin/env bash
# GPU part "load-speed" (called by scripts/gpu-check with BUILD, LOG_DIR, PART_BUDGET_S): place + load + register
# of a synthetic Hugging Face model directory of MODEL_SIZE (default 34GiB) from page-cache-warm shards, with the
# old settings and the new ones side by side.
#   1. model      `engram table create --format hf-model` (about 30 s for 34 GiB on the H200)
#   2. load-*     `engram table load DIR --json`, each a fresh table; the page cache is filled once (--cache warm on
#                 the first run) and kept (--keep-page-cache) for the others:
#                   old       prefault_fallocate=true, prefault_threads=8, shmem_huge_pages=false (the former default)
#                   new       the defaults: parallel MADV_POPULATE_WRITE on every CPU, MADV_HUGEPAGE on the memfd
#                   new-4k    as new with shmem_huge_pages=false (the populate alone, 4 KiB pages)
#                   anon-thp  --backing anon-thp (2 MiB pages whatever shmem_enabled says; single process only)
#                   nopf      --no-prefault (the readers' first writes allocate, under the new THP advice)
#                 old and new run twice, alternated.
#                   shmem-thp shmem_enabled set to advise for the run (restored after): the memfd's MADV_HUGEPAGE
#                             advice takes, so the shared table gets 2 MiB pages
#                   hugetlb   --backing hugetlb from a pool of HUGETLB_PAGES 2 MiB pages (default 18500 = 36.1 GiB,
#                             set in vm.nr_hugepages for the run, restored after): pre-zeroed pages, shareable
#   3. run-*      `engram run --model DIR --backend cuda --steps 4 --json`, memfd, anon-thp, shmem-thp and
#                 hugetlb: place + load +
#                 register through the engine, which registers while the rows load; its describe's "assembly"
#                 seconds give each step and the total (total < place + load + register by the overlap).
# LOAD_SPEED_RUNS_ONLY=1: the first load (it fills the page cache) and the run-* steps only.
# Expected run time on the H200 (16 cores): about 250 s (create 30 s, nine loads 120 s, four runs 80 s).
# Writes $LOG_DIR/load-speed.json and load-speed.txt (a table: place, load, register, total GB/s; n/a where a
# figure could not be read) and copies both to $OUT when set. Prints one line per step; exit 0 when all passed.
set -uo pipefail
# shellcheck source=common.bash
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-load-speed-part 330
MODEL_SIZE=${MODEL_SIZE:-34GiB}
MODEL_DIR=${MODEL_DIR:-/tmp/engram-hf-model-speed}
bin=$engram
fail=0
[ -x "$bin" ] || { echo "load-speed: $bin not built"; exit 1; }
PART=load-speed
step() { part_step "$@"; }

{
  echo "kernel $(uname -r), $(nproc) CPUs"
  for f in /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/shmem_enabled \
    /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled; do
    echo "$f: $(cat "$f" 2>/dev/null || echo n/a)"
  done
} | tee "$LOG_DIR/machine.txt" | sed 's/^/load-speed: /'

rm -rf "$MODEL_DIR"
step model-create 90 table create --format hf-model --layout v41-flash-mini --table-size "$MODEL_SIZE" \
  --out "$MODEL_DIR" || { rm -rf "$MODEL_DIR"; exit 1; }

OLD=(--table-option prefault_fallocate=true --table-option prefault_threads=8 --table-option shmem_huge_pages=false)
KEEP=(--cache as-is --keep-page-cache)
step load-old-1 45 table load "$MODEL_DIR" --json --cache warm "${OLD[@]}"
runs_only=${LOAD_SPEED_RUNS_ONLY:-0}
load() { [ "$runs_only" = 1 ] || step "$@"; }
load load-new-1 25 table load "$MODEL_DIR" --json "${KEEP[@]}" --verify
load load-old-2 30 table load "$MODEL_DIR" --json "${KEEP[@]}" "${OLD[@]}"
load load-new-2 20 table load "$MODEL_DIR" --json "${KEEP[@]}"
load load-new-4k 25 table load "$MODEL_DIR" --json "${KEEP[@]}" --table-option shmem_huge_pages=false
load load-anon-thp 20 table load "$MODEL_DIR" --json "${KEEP[@]}" --backing anon-thp
load load-nopf 25 table load "$MODEL_DIR" --json "${KEEP[@]}" --no-prefault
# Through the engine: place + load + register (registering while the rows load), then 4 lookup steps.
step run-memfd 40 run --model "$MODEL_DIR" --backend cuda --batch 64 --steps 4 --cache-size off --hash cpu --json \
  --keep-page-cache \
  --timeline none
step run-anon-thp 40 run --model "$MODEL_DIR" --backend cuda --batch 64 --steps 4 --cache-size off --hash cpu \
  --json --timeline none --backing anon-thp --keep-page-cache
# 2 MiB pages for the shared table: shmem THP by advice, then a hugetlb pool.
thp=/sys/kernel/mm/transparent_hugepage/shmem_enabled
thp_was=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp" 2>/dev/null)
if [ -n "$thp_was" ] && echo advise >"$thp" 2>/dev/null; then
  echo "load-speed: $thp: $(cat "$thp") (was $thp_was)"
  load load-shmem-thp 25 table load "$MODEL_DIR" --json "${KEEP[@]}"
  step run-shmem-thp 40 run --model "$MODEL_DIR" --backend cuda --batch 64 --steps 4 --cache-size off --hash cpu \
    --json --timeline none --keep-page-cache
  echo "$thp_was" >"$thp" 2>/dev/null
else
  echo "load-speed: shmem-thp: cannot set $thp to advise (n/a)"
fi
HUGETLB_PAGES=${HUGETLB_PAGES:-18500}
pool_was=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
echo "$HUGETLB_PAGES" >/proc/sys/vm/nr_hugepages 2>/dev/null
pool=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
echo "load-speed: hugetlb pool $pool of $HUGETLB_PAGES 2 MiB pages asked (was $pool_was)"
if [ "$pool" -ge "$HUGETLB_PAGES" ]; then
  load load-hugetlb 25 table load "$MODEL_DIR" --json "${KEEP[@]}" --backing hugetlb
  step run-hugetlb 40 run --model "$MODEL_DIR" --backend cuda --batch 64 --steps 4 --cache-size off --hash cpu \
    --json --timeline none --backing hugetlb --keep-page-cache
else
  echo "load-speed: hugetlb: the pool has $pool pages, $HUGETLB_PAGES needed (n/a)"
fi
echo "$pool_was" >/proc/sys/vm/nr_hugepages 2>/dev/null
rm -rf "$MODEL_DIR"

python3 - "$LOG_DIR" <<'PY' || fail=1
import json, os, sys
d = sys.argv[1]
def load(name):
    p = os.path.join(d, name + ".out")
    try:
        return json.load(open(p))
    except Exception:
        return None
def gbps(b, s):
    return None if b is None or s is None or s <= 0 else b / s / 1e9
def fmt(v, spec="%.2f"):
    return "n/a" if v is None else spec % v
rows = []
for name in ["load-old-1", "load-new-1", "load-old-2", "load-new-2", "load-new-4k", "load-anon-thp", "load-nopf",
             "load-shmem-thp", "load-hugetlb"]:
    j = load(name)
    if j is None:
        rows.append({"run": name, "error": "no JSON"})
        continue
    b = j.get("bytes")
    p, l = j.get("place_seconds"), j.get("load_seconds")
    rows.append({"run": name, "bytes": b, "place_s": p, "load_s": l, "register_s": None,
                 "total_s": None if p is None or l is None else p + l,
                 "prefault": j.get("prefault_method"), "huge_advice": j.get("huge_advice"),
                 "huge_page_bytes": j.get("huge_page_bytes_after_load"), "mismatched_rows": j.get("mismatched_rows"),
                 "table_options": j.get("table_options"), "backing": j.get("backing")})
for name in ["run-memfd", "run-anon-thp", "run-shmem-thp", "run-hugetlb"]:
    j = load(name)
    if j is None:
        rows.append({"run": name, "error": "no JSON"})
        continue
    det = (j.get("workload") or {}).get("backend_details") or {}
    a = det.get("assembly") or {}
    reg = det.get("registration") or {}
    rows.append({"run": name, "bytes": (j.get("table") or {}).get("bytes"), "place_s": a.get("place_s"),
                 "load_s": a.get("load_s"), "register_s": a.get("register_s"), "total_s": a.get("total_s"),
                 "register_during_load": a.get("register_during_load"), "load_census_s": a.get("load_census_s"),
                 "cuda_register_s": reg.get("register_s"), "registration_prefault_s": reg.get("prefault_s")})
for r in rows:
    b = r.get("bytes")
    for k in ("place", "load", "register", "total"):
        r[k + "_gbps"] = gbps(b, r.get(k + "_s"))
out = {"schema": "engram.gpu-part-load-speed/1", "machine": open(os.path.join(d, "machine.txt")).read(), "runs": rows}
json.dump(out, open(os.path.join(d, "load-speed.json"), "w"), indent=2)
lines = ["| run | GB | place [s] | load [s] | register [s] | total [s] | place GB/s | load GB/s | register GB/s | "
         "total GB/s | huge pages after load | prefault |", "|" + "---|" * 12]
for r in rows:
    if "error" in r:
        lines.append(f"| {r['run']} | n/a ({r['error']}) |" + " n/a |" * 10)
        continue
    hp = r.get("huge_page_bytes")
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["run"], fmt(None if r["bytes"] is None else r["bytes"] / 1e9, "%.1f"), fmt(r["place_s"]), fmt(r["load_s"]),
        fmt(r["register_s"]), fmt(r["total_s"]), fmt(r["place_gbps"]), fmt(r["load_gbps"]), fmt(r["register_gbps"]),
        fmt(r["total_gbps"]), "n/a" if hp is None else "%.1f GiB" % (hp / 2**30),
        r.get("prefault") or ("registered during load" if r.get("register_during_load") else "n/a")))
for r in rows:
    if r["run"].startswith("run-") and "error" not in r:
        lines.append(f"census after load ({r['run']}): {fmt(r.get('load_census_s'))} s")
text = "\n".join(lines)
open(os.path.join(d, "load-speed.txt"), "w").write(out["machine"] + "\n" + text + "\n")
print("\n".join("load-speed: " + x for x in text.splitlines()))
PY
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/load-speed" && cp "$LOG_DIR"/load-speed.* "$LOG_DIR"/machine.txt "$OUT/load-speed/" 2>/dev/null; fi
exit $fail
