#!/usr/bin/env bash
# GPU part 50: B1 and B2 experiments for a V4.1-Flash-shaped serving replay on the cuda backend, in two
# mixes (decode-heavy, prefill-heavy), plus `engram trace analyze` (with the lanes PNG) of one replay.
#
# Table: v41-flash-mini at 1 GiB (memfd, fused rows): each arm re-creates, fills and registers it, 25 times per
# mix, so it is kept small to leave the budget to the replays (the placement effect is A1-A3's question, not B's).
# Model: --model v41-flash (ASSUMED shape: 43 layers, hidden 4096, ~0.3 G active params/layer), layer time =
# max(weights / 4000 GB/s, 2*T*params / 400 TFLOPS) run as calibrated cuBLAS GEMM units of 50 us.
# Ids: real text from build/data (scripts/tokenize-setup) when present, else zipf (said in the log).
# Env: BUILD, LOG_DIR, PART_BUDGET_S (default 240). Exit 0 when every step that ran passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build-gpu}
LOG_DIR=${LOG_DIR:-/tmp/engram-part50}
PART_BUDGET_S=${PART_BUDGET_S:-240}
mkdir -p "$LOG_DIR"
cd "$root"
engram="$BUILD/bin/engram"
[ -x "$engram" ] || { echo "50-experiments: FAIL: $engram not built"; exit 1; }
t0=$(date +%s)
left() { echo $(( PART_BUDGET_S - ($(date +%s) - t0) )); }
fails=0
summary=()

ids_note="real text ($root/build/data)"
if [ -z "${ENGRAM_DATA_DIR:-}" ] && [ -f "$root/build/data/common-licenses.tokens" ]; then export ENGRAM_DATA_DIR="$root/build/data"; fi
if [ ! -f "${ENGRAM_DATA_DIR:-$root/build/data}/common-licenses.tokens" ]; then
  ids_note="zipf (no token file at ${ENGRAM_DATA_DIR:-$root/build/data}: run scripts/tokenize-setup to get real text)"
fi
echo "50-experiments: ids: $ids_note" | tee "$LOG_DIR/ids.txt"

common="--backend cuda --layout v41-flash-mini --table-size 1GiB --model v41-flash --unit-us 50 --reps 5"
decode_mix="--requests 16 --rate 16 --prompt lognormal:256,0.5 --output lognormal:48,0.3 --token-budget 2048 --prefill-chunk 512"
prefill_mix="--requests 12 --rate 12 --prompt lognormal:1024,0.4 --output 8 --token-budget 2048 --prefill-chunk 1024"

run_exp() {  # name id mix-args extra-args; skipped when less than `need` seconds are left
  local name=$1 id=$2 mix=$3 extra=$4 need=$5
  if [ "$(left)" -lt "$need" ]; then summary+=("$name: SKIPPED (budget: $(left) s left, needs ~$need s)"); return; fi
  local out="$LOG_DIR/$name"
  local t=$(date +%s)
  timeout $(( $(left) - 5 )) $engram experiment "$id" $common $mix $extra --out "$out" >"$LOG_DIR/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    local chain
    chain=$(grep -m3 "Chain holds" "$out/report.md" | tr '\n' ' ')
    summary+=("$name: ok in $(( $(date +%s) - t )) s; $chain; report $out/report.md")
  else
    summary+=("$name: FAIL rc=$rc ($(tail -1 "$LOG_DIR/$name.log"))"); fails=$((fails + 1))
  fi
}

# One replay with its timeline, analysed (lanes PNG of the step with the largest exposed wait).
if [ "$(left)" -gt 60 ]; then
  timeout 60 $engram replay --backend cuda --layout v41-flash-mini --table-size 1GiB --model v41-flash $decode_mix \
    --timeline "$LOG_DIR/replay-decode.trace.json" --record "$LOG_DIR/replay-decode.batches.json" --json \
    >"$LOG_DIR/replay-decode.json" 2>"$LOG_DIR/replay-decode.err"
  rc=$?
  if [ $rc -eq 0 ]; then
    $engram trace analyze "$LOG_DIR/replay-decode.trace.json" --plot "$LOG_DIR/replay-decode-lanes.png" >"$LOG_DIR/trace-analyze.txt" 2>&1 &&
      $engram trace analyze "$LOG_DIR/replay-decode.trace.json" --move-layer 14 >"$LOG_DIR/trace-whatif-move14.txt" 2>&1 &&
      $engram trace analyze "$LOG_DIR/replay-decode.trace.json" --advance-ready-us 200 >"$LOG_DIR/trace-whatif-advance.txt" 2>&1
    rc2=$?
    ttft=$(python3 -c "import json;j=json.load(open('$LOG_DIR/replay-decode.json'));c=j['client'];print('TTFT p50 %s ms, TPOT p50 %s ms, ITL p50 %s ms, goodput %s req/s, step p50 %s ns' % (c['median_ttft_ms'], c['median_tpot_ms'], c['median_itl_ms'], c['request_goodput'], j['engine']['step_ns']['median']))" 2>/dev/null)
    summary+=("replay decode-heavy: ok ($ttft); trace analyze rc=$rc2")
    [ $rc2 -eq 0 ] || fails=$((fails + 1))
  else
    summary+=("replay decode-heavy: FAIL rc=$rc ($(tail -1 "$LOG_DIR/replay-decode.err"))"); fails=$((fails + 1))
  fi
fi

run_exp b1-decode B1 "$decode_mix" "" 40
run_exp b1-prefill B1 "$prefill_mix" "" 40
run_exp b2-decode B2 "$decode_mix" "--caps 0.25 0.5 1.0" 50
run_exp b2-prefill B2 "$prefill_mix" "--caps 0.25 0.5 1.0" 50

echo "50-experiments: ($(( $(date +%s) - t0 )) s of $PART_BUDGET_S s; table v41-flash-mini 1 GiB; ids: $ids_note)"
for s in "${summary[@]}"; do echo "  $s"; done
[ $fails -eq 0 ] && exit 0 || exit 1
