#!/usr/bin/env bash
# The steps of tests/hostile_input.rs's 5,000-region test, timed one by
# one, on a playground of 3 stores whose disk syncs SLOW_SYNC_US slower
# (scripts/slow_sync.c, preloaded; SLOW_SYNC_US=0 for the disk as it is):
# CREATE TABLE of 5,000 regions, the wait until store 1 holds their peers
# (a try that lost the meta leadership leaves peers the next leader
# reclaims), a write and a sum, DROP, CREATE again while the dropped
# table's peers go, two counts, DROP, and the wait until they are gone.
#
#   SLOW_SYNC_US=5000 scripts/many_regions.sh [DIR]
#
# Each line: seconds since the first CREATE, seconds the step took, the
# exit status of `quarry sql`, the statement and what it printed. Kills
# what it started when it ends.
set -euo pipefail
source "$(dirname "$0")/env.sh"
Q="$CARGO_TARGET_DIR/release/quarry"
DIR="${1:-$(mktemp -d)}"
mkdir -p "$DIR"
SHIM="$DIR/slow_sync.so"
gcc -shared -fPIC -O2 -o "$SHIM" "$(dirname "$0")/slow_sync.c" -ldl
export SLOW_SYNC_US="${SLOW_SYNC_US:-5000}"
rm -rf "$DIR/data"
LD_PRELOAD="$SHIM" "$Q" playground --dir "$DIR/data" --exit-with-parent >"$DIR/out" 2>"$DIR/err" &
PG=$!
trap 'kill $PG 2>/dev/null; wait $PG 2>/dev/null || true' EXIT
for _ in $(seq 120); do grep -q '^ready' "$DIR/out" && break; sleep 1; done
C=$(awk '/^compute/ {print $5; exit}' "$DIR/out")
S1=$(awk '/^storage 1/ {print $6; exit}' "$DIR/out")
H=$(seq -s, 10 10 49990)
CREATE="CREATE TABLE wide (id BIGINT PRIMARY KEY, v BIGINT) WITH (split_handles = '$H')"
T0=$(date +%s.%N)
since() { echo "$(date +%s.%N) - $1" | bc; }
step() {
    local s rc=0
    s=$(date +%s.%N)
    "$Q" sql --addr "$C" --format csv "$1" >"$DIR/last" 2>&1 || rc=$?
    printf '%6.1f %6.1f s rc=%d %s | %s\n' "$(echo "$s - $T0" | bc)" "$(since "$s")" "$rc" \
        "${1:0:40}" "$(tr '\n' ' ' <"$DIR/last" | cut -c1-200)"
}
regions() { "$Q" status --store "$S1" | head -1 | sed 's/.*: \([0-9]*\) regions.*/\1/'; }
wait_for() {
    local s
    s=$(date +%s.%N)
    for _ in $(seq 300); do [ "$(regions)" = "$1" ] && break; sleep 2; done
    printf '%6.1f %6.1f s until store 1 holds %s regions (it holds %s)\n' \
        "$(echo "$s - $T0" | bc)" "$(since "$s")" "$1" "$(regions)"
}
B=$(regions)
echo "sync delay ${SLOW_SYNC_US} us; store 1 holds $B regions"
step "$CREATE"
wait_for $((B + 5000))
step "INSERT INTO wide VALUES (5, 1), (49995, 2)"
step "SELECT sum(v) AS s FROM wide"
step "DROP TABLE wide"
step "$CREATE"
step "SELECT count(*) AS n FROM wide"
step "SELECT count(*) AS n FROM wide"
step "DROP TABLE wide"
wait_for "$B"
