#!/usr/bin/env bash
# GPU part 32 "traffic": the fast path under real traffic (`engram bench traffic`): the whole engine (planner, 5%
# hot-row cache filled from `engram profile` of the documentation corpus' train part, its prefetch queue) against a
# reference-style split-row kernel and the project's plain kernel, on held-out documentation (same domain) and C
# headers (other domain): 8K-token prefill windows and decode batches of 64 and 256 sequences, one 32 GiB Engram
# layer (fused, plus its split copy for the reference: ~63 GiB of RAM), every call on token positions no other call
# reads, outputs checked bit for bit. Summary: the traffic_summary table (the issue's table: reference, engine,
# ratio, goal, hit rate, engine / plain), then every arm, the planner's predictions, the checks.
# Token files come from scripts/tokenize-corpus on a machine with Node.js; carry build/data/corpus-doc and
# build/data/corpus-h (about 25 MB):
#   scripts/tokenize-corpus build/data/corpus-doc
#   scripts/tokenize-corpus build/data/corpus-h --ext .h --max-file-bytes 65536 --test-percent 50 \
#     /usr/include/linux /usr/include/x86_64-linux-gnu /usr/include/openssl
# Without them: SKIP (exit 0).
# Env: BUILD (build dir), LOG_DIR (default $OUT/traffic or /tmp/engram-part32), PART_BUDGET_S (default 240),
#   TRAFFIC_REPS (default 15), TRAFFIC_TABLE (default 32GiB).
# Budget on an H200 (16 cores): profile ~10-20 s; bench: hashing the held-out text ~2 s, filling both tables ~20-40 s,
# registration ~5 s, engine (calibration, 1.6 GiB cache fill) ~10 s, 6 workloads x (17 x 4 + 1) calls ~10-20 s.
set -uo pipefail
source "$(dirname "$0")/common.bash"
default_log=/tmp/engram-part32
[[ -n ${OUT:-} ]] && default_log=$OUT/traffic
part_setup "$default_log" 240
part_build 32-traffic engram_cli

DOC=${CORPUS_DOC_DIR:-build/data/corpus-doc}
HDR=${CORPUS_H_DIR:-build/data/corpus-h}
TABLE=${TRAFFIC_TABLE:-32GiB}
REPS=${TRAFFIC_REPS:-15}
for f in "$DOC/corpus-train.tokens" "$DOC/corpus-test.tokens" "$HDR/corpus-test.tokens"; do
  [[ -s $f ]] || { echo "SKIP  traffic: $f missing (scripts/tokenize-corpus on a machine with Node.js, carry it)"; exit 0; }
done

prof="${TMPDIR:-/tmp}/engram-part32-doc-train.profile"  # ~130 MB: kept out of LOG_DIR, which comes back
t0=$(date +%s)
if ! timeout 90 "$engram" profile --layout bench --table-size "$TABLE" --tokens "$DOC/corpus-train.tokens" \
     --top 8000000 --out "$prof" >"$LOG_DIR/profile.txt" 2>&1; then
  echo "FAIL  engram profile (see profile.txt)"; tail -5 "$LOG_DIR/profile.txt"; exit 1
fi
echo "PASS  profile of $DOC/corpus-train.tokens ($(($(date +%s) - t0)) s)"

l=$(left)
if ((l < 90)); then echo "SKIP  traffic bench (needs ~90 s, $l s left)"; exit 1; fi
t0=$(date +%s)
timeout --signal=INT --kill-after=10 $((l - 10)) "$engram" bench traffic --table-size "$TABLE" \
  --same-tokens "$DOC/corpus-test.tokens" --other-tokens "$HDR/corpus-test.tokens" --cache-profile "$prof" \
  --reps "$REPS" --warmup 2 --verbose --json-out "$LOG_DIR/traffic.json" --csv "$LOG_DIR/traffic.csv" \
  >"$LOG_DIR/traffic.txt" 2>"$LOG_DIR/traffic.err"
rc=$?
if ((rc == 0)); then
  echo "PASS  bench traffic ($(($(date +%s) - t0)) s)"
else
  echo "FAIL  bench traffic rc=$rc ($(($(date +%s) - t0)) s): $(tail -3 "$LOG_DIR/traffic.err" | tr '\n' ' ')"
  STATUS=1
fi
head -120 "$LOG_DIR/traffic.txt"
exit "$STATUS"
