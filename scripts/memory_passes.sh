#!/usr/bin/env bash
# Where a compute process's memory settles over repeated queries (issue
# 43): a fresh playground of 3 stores and 3 compute processes on DIR (SF
# 10 data, e.g. the one `scripts/mpp_memory.sh` loads into DIR/data) with
# compute.mpp = MODE, the tables' statistics started, then TPC-H Q9, Q18
# and Q21 back to back PASSES times through `quarry sql`, with no pause,
# reset or EXPLAIN between them (unlike mpp_memory.sh's passes). After
# each query: every compute process's VmHWM and RssAnon (kB), and the
# query's seconds; at the end, the largest VmHWM.
#
#   scripts/memory_passes.sh force 5 /tmp/mm/data
#   FAILPOINTS=memory_release_off=return scripts/memory_passes.sh force 5 /tmp/mm/data
#
# The environment passes to the playground's processes (failpoints,
# MIMALLOC_* options). Kills any running playground first. QUARRY_BIN
# picks the binary.
set -euo pipefail
MODE=${1:?off or force}
PASSES=${2:?passes}
DATA=${3:?a data dir holding SF 10}
cd "$(dirname "$0")/.."
source scripts/env.sh
Q=${QUARRY_BIN:-$CARGO_TARGET_DIR/release/quarry}
LOG=$(mktemp /tmp/memory_passes.XXXXXX.log)
stop() {
  pkill -f "quarry[.a-z0-9-]* playground" || true; sleep 2
  pkill -9 -f "quarry[.a-z0-9-]* (compute|storage|playground|bench)" || true
}
stop
trap stop EXIT
"$Q" playground --dir "$DATA" --stores 3 --sf 10 --computes 3 --mpp "$MODE" > "$LOG" 2>&1 &
for _ in $(seq 1 120); do grep -q '^ready' "$LOG" && break; sleep 3; done
grep -q '^ready' "$LOG" || { echo "the playground did not start (see $LOG)"; exit 1; }
A=$(grep '^compute:' "$LOG" | awk '{print $5}')
for t in region nation supplier customer part partsupp orders lineitem; do
  "$Q" sql --addr "$A" "select count(*) from $t where 1=0" > /dev/null
done
sleep 20
computes() { pgrep -f "quarry[.a-z0-9-]* compute"; }
echo "pass query seconds: per compute process VmHWM RssAnon (kB)"
for pass in $(seq "$PASSES"); do
  for q in q9 q18 q21; do
    sql=$(sed 's/;[[:space:]]*$//' "tests/tpch/queries/$q.sql")
    s=$(date +%s.%N)
    "$Q" sql --addr "$A" "$sql" > /dev/null
    e=$(date +%s.%N)
    printf '%s %s %.2f:' "$pass" "$q" "$(echo "$e - $s" | bc)"
    for p in $(computes); do
      printf ' %s %s |' "$(awk '$1 == "VmHWM:" {print $2}' /proc/"$p"/status)" \
        "$(awk '$1 == "RssAnon:" {print $2}' /proc/"$p"/status)"
    done
    echo
  done
done
printf 'largest VmHWM: %s kB\n' "$(for p in $(computes); do awk '$1 == "VmHWM:" {print $2}' /proc/"$p"/status; done | sort -n | tail -1)"
