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
# Both modes start alike: a playground started on data already loaded
# (the first call loads DIR/data in a playground of its own and stops
# it), so each mode's first queries read from stores whose caches are
# cold. (The script used to measure `off` in the playground that had just
# loaded the data, warm, and `force` after a restart, cold: the first Q9
# after a restart takes about 13 s at SF 10 against 3 s warm, in either
# mode, and the slower run holds more.)
#
# The three queries run twice. The first pass's peaks are the cold
# figure. Then every compute process's peak is reset to what it holds
# (`/proc/PID/clear_refs`, 5), and the second pass's peaks are the warm
# figure. The ratio is the largest
# peak under force over the largest under off, cold and warm apiece.
# Answers land in DIR/answers.MODE.qN.PASS for comparing the runs. Kills
# any running playground first. QUARRY_BIN picks the binary.
#
# Beside each peak, the largest anonymous resident memory (RssAnon)
# sampled every 100 ms while the pass ran: the peak without the pages of
# the binary the process has touched (RssFile: about 69 MB in a worker,
# 86 MB in a process that has planned a query), which every `quarry`
# process on the machine shares through the page cache. The issue's
# target is on the peaks; the anonymous figures say how much of each is
# the process's own.
#
# Two passes do not show where repeated queries settle: a `force`
# process's peak keeps rising over the first few passes (allocator
# pages kept between queries; `docs/performance.md`, "The memory spread
# after repeated queries"). PASSES=N runs the warm pass N times back to
# back (the peaks are reset once, before the first), its peaks printed
# after each query.
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
start() { # LOG: a playground on DIR/data, until it is ready
  "$Q" playground --dir "$DIR/data" --stores 3 --sf 10 --computes 3 --mpp "$MODE" > "$1" 2>&1 &
  for _ in $(seq 1 180); do grep -q '^ready' "$1" && return 0; sleep 5; done
  echo "the playground did not start (see $1)"; exit 1
}
computes() { pgrep -f "quarry[.a-z0-9]* compute"; }
status_kb() { awk -v f="$2:" '$1 == f {print $2}' /proc/"$1"/status; } # PID FIELD
declare -A ANON # pid -> the largest RssAnon sampled this pass (kB)
sample_anon() { # while PID runs
  while kill -0 "$1" 2>/dev/null; do
    for p in $(computes); do
      local a; a=$(status_kb "$p" RssAnon 2>/dev/null) || continue
      [ "${a:-0}" -gt "${ANON[$p]:-0}" ] && ANON[$p]=$a
    done
    sleep 0.1
  done
}
peaks() {
  for p in $(computes); do
    echo "  compute pid $p: $(status_kb "$p" VmHWM) kB" \
      "(anonymous, sampled: ${ANON[$p]:-?} kB)"
  done
}
stop; sleep 1
mkdir -p "$DIR"
trap stop EXIT
if [ ! -d "$DIR/data" ]; then
  echo "loading SF 10 into $DIR/data"
  start "$DIR/playground.load.log"
  stop; sleep 1
fi
LOG=$DIR/playground.$MODE.log
start "$LOG"
A=$(grep '^compute:' "$LOG" | awk '{print $5}')
# The first statement over a table starts its statistics.
for t in region nation supplier customer part partsupp orders lineitem; do
  "$Q" sql --addr "$A" "select count(*) from $t where 1=0" > /dev/null
done
sleep 30
run() { # QUERY LABEL
  local sql s e
  sql=$(sed 's/;[[:space:]]*$//' "$QUERIES/$1.sql")
  s=$(date +%s.%N)
  "$Q" sql --addr "$A" "$sql" > "$DIR/answers.$MODE.$1.$2" &
  local query=$!
  sample_anon "$query"
  wait "$query"
  e=$(date +%s.%N)
  echo "$1 $2: $(echo "$e - $s" | bc) s"
}
for q in q9 q18 q21; do
  sql=$(sed 's/;[[:space:]]*$//' "$QUERIES/$q.sql")
  "$Q" sql --addr "$A" "EXPLAIN $sql" > /dev/null
  # Conditions the statistics cannot estimate are measured on a sample
  # once a plan meets them (compute/src/df/measured_share.rs).
  sleep 3
  run "$q" cold
  peaks
done
# mimalloc hands memory freed more than its purge delay ago (10 s) back
# at a process's next allocations, not while it idles: wait it out, let a
# small statement allocate, then reset the peaks to what is resident.
sleep 12
"$Q" sql --addr "$A" "select count(*) from nation" > /dev/null
for p in $(computes); do echo 5 > /proc/"$p"/clear_refs; ANON[$p]=$(status_kb "$p" RssAnon); done
echo "peaks reset to: $(for p in $(computes); do printf '%s ' "$(status_kb "$p" VmHWM)"; done)kB"
PASSES=${PASSES:-1}
for pass in $(seq 1 "$PASSES"); do
  label=warm; [ "$PASSES" -gt 1 ] && label=warm$pass
  for q in q9 q18 q21; do
    run "$q" "$label"
    peaks
  done
done
