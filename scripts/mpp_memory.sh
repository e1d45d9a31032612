#!/usr/bin/env bash
# Issue 43's memory spread, by hand: an SF 10 playground of 3 stores and
# 3 compute processes with compute.mpp = MODE (off: every query in the
# first process; force: spread over all three), TPC-H Q9, Q18 and Q21 in
# turn through `quarry sql` (each after its EXPLAIN, once the statistics
# and the measured shares are in), and every compute process's peak RSS
# (VmHWM) after each.
#
#   scripts/mpp_memory.sh off  DIR     # then
#   scripts/mpp_memory.sh force DIR    # the same data, processes fresh
#
# The ratio is the largest peak under force over the largest under off.
# Answers land in DIR/answers.MODE.qN for comparing the two runs. Kills
# any running playground first. QUARRY_BIN picks the binary.
set -euo pipefail
MODE=${1:?off or force}
DIR=${2:?a data dir (reused: loaded once)}
source "$(dirname "$0")/env.sh"
Q=${QUARRY_BIN:-$CARGO_TARGET_DIR/release/quarry}
QUERIES=$(cd "$(dirname "$0")/../tests/tpch/queries" && pwd)
stop() {
  pkill -f "quarry[.a-z0-9]* playground" || true; sleep 2
  pkill -9 -f "quarry[.a-z0-9]* (compute|storage|playground)" || true
}
stop; sleep 1
mkdir -p "$DIR"
LOG=$DIR/playground.$MODE.log
"$Q" playground --dir "$DIR/data" --stores 3 --sf 10 --computes 3 --mpp "$MODE" > "$LOG" 2>&1 &
trap stop EXIT
for _ in $(seq 1 180); do grep -q '^ready' "$LOG" && break; sleep 5; done
grep -q '^ready' "$LOG" || { echo "the playground did not start (see $LOG)"; exit 1; }
A=$(grep '^compute:' "$LOG" | awk '{print $5}')
# The first statement over a table starts its statistics.
for t in region nation supplier customer part partsupp orders lineitem; do
  "$Q" sql --addr "$A" "select count(*) from $t where 1=0" > /dev/null
done
sleep 30
for q in q9 q18 q21; do
  sql=$(sed 's/;[[:space:]]*$//' "$QUERIES/$q.sql")
  "$Q" sql --addr "$A" "EXPLAIN $sql" > /dev/null
  # Conditions the statistics cannot estimate are measured on a sample
  # once a plan meets them (compute/src/df/measured_share.rs).
  sleep 3
  s=$(date +%s.%N)
  "$Q" sql --addr "$A" "$sql" > "$DIR/answers.$MODE.$q"
  e=$(date +%s.%N)
  echo "$q: $(echo "$e - $s" | bc) s"
  for p in $(pgrep -f "quarry[.a-z0-9]* compute"); do
    echo "  compute pid $p: $(grep VmHWM /proc/$p/status | awk '{print $2, $3}')"
  done
done
