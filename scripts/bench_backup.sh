#!/usr/bin/env bash
# BACKUP and RESTORE at TPC-H scale, as docs/operations.md and
# docs/performance.md report them:
#
#   1. a playground (3 stores) with TPC-H at --sf (default 1);
#   2. four clients insert into a table of their own while BACKUP runs:
#      each a Flight SQL connection inserting one row at a time as fast
#      as it is acknowledged (scripts/bench_writers.py, Python ADBC), or
#      with --writers cli each a loop starting a `quarry sql` process per
#      INSERT (the earlier form; its process starts cost more CPU than
#      the inserts);
#   3. the 22 queries' answers on that cluster (its TPC-H tables are not
#      written, so these are the answers at the backup's snapshot);
#   4. a fresh playground, RESTORE, and the 22 answers again, compared
#      byte for byte; the writers' table is checked to hold every insert
#      acknowledged before the backup began.
#
# Prints the rates (rows/s) of both directions. Usage:
#   scripts/bench_backup.sh [--sf 1] [--dir /tmp/quarry-backup-bench]
#                           [--writers adbc|cli]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

SF=1
WORK=/tmp/quarry-backup-bench
WRITERS=adbc
while [ $# -gt 0 ]; do
    case "$1" in
    --sf) SF="$2"; shift 2 ;;
    --dir) WORK="$2"; shift 2 ;;
    --writers) WRITERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
# QUARRY_BIN: another build to time (say, a copy of the binary before a
# change, for a side-by-side run).
Q="${QUARRY_BIN:-$CARGO_TARGET_DIR/release/quarry}"
[ -x "$Q" ] || cargo build --release --features "$QUARRY_FEATURES" --bin quarry
rm -rf "$WORK"
mkdir -p "$WORK"

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# Starts a playground in $1 with the rest as its flags; sets ADDR.
start() {
    local dir="$1"
    shift
    "$Q" playground --dir "$dir/data" --stores 3 "$@" >"$dir.out" 2>"$dir.err" &
    PIDS+=($!)
    for _ in $(seq 600); do
        grep -q '^ready' "$dir.out" 2>/dev/null && break
        sleep 1
    done
    grep -q '^ready' "$dir.out" || { cat "$dir.err"; exit 1; }
    ADDR=$(grep -o 'compute: pid [0-9]* addr [^ ]*' "$dir.out" | awk '{print $5}')
}

sql() { "$Q" sql --addr "$ADDR" --format csv "SET statement_timeout = '1h'; $1"; }

answers() {
    mkdir -p "$1"
    for f in tests/tpch/queries/q*.sql; do
        sql "$(cat "$f")" >"$1/$(basename "$f" .sql).csv"
    done
}

echo "== source: TPC-H SF $SF"
start "$WORK/src" --sf "$SF"
sql "CREATE TABLE w (id BIGINT PRIMARY KEY, client BIGINT)" >/dev/null
for c in 1 2 3 4; do
    case "$WRITERS" in
    adbc)
        "$QUARRY_VENV/bin/python" scripts/bench_writers.py "${ADDR/http:/grpc:}" \
            --client "$c" --acked "$WORK/acked.$c" --stop "$WORK/stop" &
        ;;
    cli)
        (
            for i in $(seq 1 400); do
                id=$((c * 1000000 + i))
                if "$Q" sql --addr "$ADDR" "INSERT INTO w VALUES ($id, $c)" >/dev/null 2>&1; then
                    echo "$id $(date +%s%N)" >>"$WORK/acked.$c"
                fi
                [ -e "$WORK/stop" ] && break
            done
        ) &
        ;;
    *) echo "unknown --writers $WRITERS (adbc or cli)" >&2; exit 2 ;;
    esac
    PIDS+=($!)
done
# The backup starts once every writer has had an insert acknowledged
# (bounded: 60 s), so it runs under all four.
for _ in $(seq 120); do
    ready=0
    for c in 1 2 3 4; do [ -s "$WORK/acked.$c" ] && ready=$((ready + 1)); done
    [ "$ready" -eq 4 ] && break
    sleep 0.5
done
[ "$ready" -eq 4 ] || { echo "only $ready of 4 writers had an insert acknowledged" >&2; exit 1; }
began=$(date +%s%N)
t0=$(date +%s.%N)
sql "BACKUP TO '$WORK/backup'" | tee "$WORK/backup.csv"
t1=$(date +%s.%N)
ended=$(date +%s%N)
touch "$WORK/stop"
sleep 1
answers "$WORK/answers-src"
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true

echo "== fresh cluster: RESTORE"
start "$WORK/dst"
t2=$(date +%s.%N)
sql "RESTORE FROM '$WORK/backup'" | tee "$WORK/restore.csv"
t3=$(date +%s.%N)
answers "$WORK/answers-dst"
if diff -r "$WORK/answers-src" "$WORK/answers-dst"; then
    echo "22 answers: identical"
else
    echo "22 answers: DIFFERENT after restore" >&2
    exit 1
fi
sql "SELECT id FROM w" | tail -n +2 | sort >"$WORK/restored-ids"
cat "$WORK"/acked.* >"$WORK/acked" 2>/dev/null || true
awk -v b="$began" '$2 < b {print $1}' "$WORK/acked" | sort >"$WORK/acked-before"
missing=$(comm -23 "$WORK/acked-before" "$WORK/restored-ids" | wc -l)
during=$(awk -v b="$began" -v e="$ended" '$2 >= b && $2 <= e' "$WORK/acked" | wc -l)
echo "inserts acknowledged before the backup began, missing after restore: $missing"
awk -v n="$during" -v a="$t0" -v z="$t1" 'BEGIN {
    printf "writers (%s): %d inserts acknowledged during the backup, %.0f/s\n", "'"$WRITERS"'", n, n / (z - a)
}'
rows=$(tail -n +2 "$WORK/backup.csv" | awk -F, '{s += $2} END {print s}')
bytes=$(tail -n +2 "$WORK/backup.csv" | awk -F, '{s += $4} END {print s}')
awk -v r="$rows" -v b="$bytes" -v a="$t0" -v z="$t1" -v c="$t2" -v d="$t3" 'BEGIN {
    printf "backup:  %d rows, %.1f MB in %.1f s: %.0f rows/s\n", r, b / 1e6, z - a, r / (z - a)
    printf "restore: %d rows in %.1f s: %.0f rows/s\n", r, d - c, r / (d - c)
}'
[ -s "$WORK/acked-before" ] || { echo "no insert was acknowledged before the backup" >&2; exit 1; }
[ "$missing" -eq 0 ]
