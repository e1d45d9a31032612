#!/usr/bin/env bash
# One side of an A/B comparison that needs a process's environment (a
# switch read once at start, such as QUARRY_PREFETCH or QUARRY_SIMD): starts
# a fresh SF 1 playground (3 stores, 1 compute) with the given variables in
# its environment, runs one SQL file through ADBC in a loop with
# scripts/cpu_per_query.py (median time, CPU per query of every process and
# of the client), and stops the playground.
#
#   scripts/playground_ab.sh [VAR=value ...]
#
# Alternate the two sides a few times in one sitting and compare them side by
# side; this machine's speed drifts by 10-20% over minutes. For example:
#
#   for r in 1 2; do
#     scripts/playground_ab.sh QUARRY_PREFETCH=off
#     scripts/playground_ab.sh
#   done
#
# QUERY (default tests/tpch/queries/q6.sql) and RUNS (default 400) choose the
# loop; DIR (default a fresh temporary directory, removed after) holds the
# playground; QUARRY_BIN (default the release build) is the binary, to
# compare two builds the same way.
# Needs a release build (scripts/env.sh's target dir) and the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

quarry=${QUARRY_BIN:-$CARGO_TARGET_DIR/release/quarry}
query=${QUERY:-tests/tpch/queries/q6.sql}
runs=${RUNS:-400}
made_dir=
if [ -z "${DIR:-}" ]; then
  DIR=$(mktemp -d /tmp/quarry-ab.XXXXXX)
  made_dir=1
fi
dir=$DIR
log="$dir/playground.log"

if pgrep -f "quarry[.a-z0-9]* playground" > /dev/null; then
  echo "another playground is running; stop it first" >&2
  exit 1
fi

env "$@" "$quarry" playground --dir "$dir/data" --stores 3 --sf 1 > "$log" 2>&1 &
pg=$!
stop() {
  kill "$pg" 2> /dev/null || true
  wait "$pg" 2> /dev/null || true
  if [ -n "$made_dir" ]; then rm -rf "$dir"; fi
}
trap stop EXIT

for _ in $(seq 1 300); do
  grep -q '^ready' "$log" && break
  if ! kill -0 "$pg" 2> /dev/null; then
    echo "the playground exited; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 1
done
grep -q '^ready' "$log" || { echo "the playground was not ready in 300 s" >&2; exit 1; }
sleep 3

uri=$(grep -o 'compute: pid [0-9]* addr http://[0-9.:]*' "$log" | head -1 | sed 's/.*addr http/grpc/')
pids=$(pgrep -d, -P "$pg" -f 'quarry[.a-z0-9]* (storage|compute)')
echo "== ${*:-(no variables)}"
"$QUARRY_VENV/bin/python" scripts/cpu_per_query.py "$uri" "$runs" "$query" "$pids"
