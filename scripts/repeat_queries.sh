#!/usr/bin/env bash
# Times TPC-H queries a few times each on a fresh playground, one compute
# process: the form docs/performance.md uses to compare a process setting
# (an environment variable, a build) on warm runs at a large scale.
#
#   scripts/repeat_queries.sh DIR [--sf 10] [--runs 3] [q9 q18 …]
#
# DIR holds the playground's data (loaded on the first call, reused after;
# stop any other playground on it first).
# Each query runs --runs times in turn after the tables' statistics are
# in; prints one line per query with every run's seconds, then compute's
# peak RSS. The environment passes to the playground's processes, so
#   MIMALLOC_ALLOW_THP=1 scripts/repeat_queries.sh /tmp/sf10 q18
# times the same binary with transparent huge pages on.
set -euo pipefail
DIR=$(realpath -m "${1:?a data dir}")
shift
cd "$(dirname "$0")/.."
source scripts/env.sh
SF=10
RUNS=3
QS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --sf) SF="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) QS+=("$1"); shift ;;
    esac
done
[ ${#QS[@]} -gt 0 ] || QS=(q9 q18 q21 q13 q3)
Q=${QUARRY_BIN:-$CARGO_TARGET_DIR/release/quarry}
for q in "${QS[@]}"; do
    [ -f "tests/tpch/queries/$q.sql" ] || { echo "no query $q (tests/tpch/queries)" >&2; exit 2; }
done
LOG="${DIR%/}.log"
"$Q" playground --dir "$DIR" --stores 3 --sf "$SF" --computes 1 >"$LOG" 2>&1 &
PG=$!
# Only this script's playground (it stops its own processes).
trap 'kill "$PG" 2>/dev/null || true; wait "$PG" 2>/dev/null || true' EXIT
for _ in $(seq 1 360); do
    grep -q '^ready' "$LOG" && break
    kill -0 "$PG" 2>/dev/null || break
    sleep 5
done
grep -q '^ready' "$LOG" || { tail "$LOG"; exit 1; }
ADDR=$(grep '^compute:' "$LOG" | awk '{print $5}')
PID=$(grep '^compute:' "$LOG" | awk '{print $3}')
# The first statement over a table starts its analysis, and a plan's
# first sight of a condition between columns starts its measurement;
# later plans use both.
for t in lineitem orders customer part partsupp supplier nation region; do
    "$Q" sql --addr "$ADDR" "SELECT count(*) FROM $t WHERE 1 = 0" >/dev/null
done
sleep 20
for q in "${QS[@]}"; do
    "$Q" sql --addr "$ADDR" "EXPLAIN $(cat "tests/tpch/queries/$q.sql")" >/dev/null
done
sleep 3
# Seconds per run, from the client's start to its exit (`quarry sql`'s
# own start and connection included); the first run of each is marked.
for q in "${QS[@]}"; do
    sql=$(cat "tests/tpch/queries/$q.sql")
    line="$q:"
    for i in $(seq "$RUNS"); do
        s=$(date +%s.%N)
        "$Q" sql --addr "$ADDR" "SET statement_timeout = '10min'; $sql" >/dev/null
        e=$(date +%s.%N)
        t=$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.3f", b - a}')
        [ "$i" -eq 1 ] && t="$t (first)"
        line="$line $t"
    done
    echo "$line"
done
grep VmHWM "/proc/$PID/status"
