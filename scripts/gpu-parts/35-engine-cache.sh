#!/usr/bin/env bash
# GPU part 35: the engine's GPU hot-row cache in `engram run` and `engram replay`.
#  1. cuda_test_engine_cache: cache on (warm-up window, profile; fp8 and bf16; online updates and a map rebuild)
#     is bit-identical to the fast path off and to the CPU reference, staging poisoned between steps.
#  2. engram run on real text (v41-flash-mini, 8 GiB, memfd, fused; batch 64 decode, 8 warm-up + 64 steps) four
#     ways: --cache-size off; 5% from the warm-up window (the 8 warm-up steps, not measured) with online updates;
#     the same without online updates; and, when `engram profile` is built, 5% from a profile of 70% of the
#     documents measured on the other 30% (held out) — the Path and Cache lines of each go to the summary.
#  3. engram replay once (decode-heavy mix, 5% cache, warm-up window of 8 live steps): its Path/Cache lines.
# Ids: real text from build/data (scripts/tokenize-setup) when present, else zipf (said in the log).
# Env: BUILD (build dir), LOG_DIR (logs), PART_BUDGET_S (default 180). Exit 0 when every step that ran passed.
# Budget on an H200: test ~15 s; each run ~15-25 s (8 GiB fill ~5 s, registration ~1 s, calibration-free); profile
# ~10 s; replay ~20 s: ~2.5 min in all.
set -uo pipefail
source "$(dirname "$0")/common.bash"
part_setup /tmp/engram-part35 180
part_build 35-engine-cache engram_cli cuda_test_engine_cache

timeout 90 "$BUILD/tests/cuda_test_engine_cache" >"$LOG_DIR/tests.log" 2>&1
rc=$?
if ((rc == 0)); then echo "PASS  engine-cache tests ($(grep -c '^\[       OK' "$LOG_DIR/tests.log") ok)"
else echo "FAIL  engine-cache tests rc=$rc (see tests.log)"; grep -E "FAILED|Failure|seed" "$LOG_DIR/tests.log" | head -20; STATUS=1; fi

part_text_ids >"$LOG_DIR/ids.txt"
cat "$LOG_DIR/ids.txt"

COMMON=(--backend cuda --layout v41-flash-mini --table-size 8GiB --batch 64 --warmup 8 --steps 64 --timeline none)
# run_one NAME ARGS...: engram run with the common arguments; prints the Path/Cache/Steps lines.
run_one() {
  local name=$1; shift
  if (($(left) < 30)); then echo "SKIP  run $name (budget: $(left) s left)"; return; fi
  local t=$(date +%s)
  timeout --signal=INT --kill-after=10 $(( $(left) - 10 )) "$engram" run "${COMMON[@]}" "$@" >"$LOG_DIR/run-$name.txt" 2>&1
  local rc=$?
  if ((rc == 0)); then
    echo "PASS  run $name ($(($(date +%s) - t)) s)"
    grep -E "^(Path|Cache|Steps|Lookup) |^          (hit rate|online updates|note)" "$LOG_DIR/run-$name.txt" | sed 's/^/      /'
  else
    echo "FAIL  run $name rc=$rc (see run-$name.txt)"; tail -5 "$LOG_DIR/run-$name.txt"; STATUS=1
  fi
}

run_one cache-off "${IDS[@]}" --cache-size off
run_one warmup-5pct "${IDS[@]}" --cache-size 5%
run_one warmup-5pct-no-update "${IDS[@]}" --cache-size 5% --cache-update off

# Held-out profile: 70% of the documents profiled, the other 30% measured.
if [[ -n $TOK ]] && "$engram" profile --help >/dev/null 2>&1 && (($(left) > 60)); then
  prof="$LOG_DIR/mini8g.profile"
  held="$LOG_DIR/heldout.tokens"
  if timeout 60 "$engram" profile --tokens "$TOK" --layout v41-flash-mini --table-size 8GiB --holdout 0.3 \
       --holdout-out "$held" --out "$prof" >"$LOG_DIR/profile.txt" 2>&1; then
    echo "PASS  profile ($(tail -1 "$LOG_DIR/profile.txt"))"
    run_one profile-heldout-5pct --ids text --tokens "$held" --cache-size 5% --cache-profile "$prof"
  else
    echo "FAIL  engram profile (see profile.txt)"; tail -5 "$LOG_DIR/profile.txt"; STATUS=1
  fi
else
  echo "SKIP  profile run (no token file, no engram profile, or budget)"
fi

if (($(left) > 40)); then
  t=$(date +%s)
  timeout --signal=INT --kill-after=10 $(( $(left) - 5 )) "$engram" replay --backend cuda --layout v41-flash-mini \
    --table-size 8GiB --requests 16 --rate 16 --prompt lognormal:256,0.5 --output lognormal:48,0.3 \
    --cache-size 5% "${IDS[@]}" >"$LOG_DIR/replay.txt" 2>&1
  rc=$?
  if ((rc == 0)); then
    echo "PASS  replay ($(($(date +%s) - t)) s)"
    grep -E "^(Path|Cache|Engine|Lookup) |^          (hit rate|online updates|note|why)" "$LOG_DIR/replay.txt" | sed 's/^/      /'
    grep -q "^Path " "$LOG_DIR/replay.txt" || { echo "FAIL  replay printed no Path line"; STATUS=1; }
  else
    echo "FAIL  replay rc=$rc (see replay.txt)"; tail -5 "$LOG_DIR/replay.txt"; STATUS=1
  fi
else
  echo "SKIP  replay (budget: $(left) s left)"
fi
exit $STATUS
