#!/usr/bin/env bash
# Regenerate DuckDB's golden answers for the 22 TPC-H queries.
#
#   scripts/tpch_answers.sh [SF ...]        (default: 0.01 1)
#
# For each SF: makes sure $ANCHORS/data/sf$SF/<table>.parquet exists for all 8
# tables (tpchgen-cli parquet, the generator the `tpchgen` crate wraps; files
# already there are kept), then runs tests/tpch/queries/qN.sql in DuckDB with
# scripts/duckdb_answer.py and writes tests/tpch/answers/qN_sf$SF.csv plus
# tests/tpch/answers/qN.types (DuckDB's output column types; the same at every
# SF, which is checked).
#
# An answer file that already exists and differs from the new one (other than
# CRLF vs LF line ends) is left alone and reported, and the script exits 1;
# FORCE=1 overwrites it. Golden answers come from DuckDB only, never Quarry.
#
# env: ANCHORS=$HOME/.cache/quarry-anchors (venv and data live there)
#      PIN=1 (install the versions in shared/bench/anchors/RESULTS.md; 0 = latest)
#      QUERIES="1 2 ... 22"  FORCE=0
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS=${ANCHORS:-$HOME/.cache/quarry-anchors}
VENV=$ANCHORS/venv
PY=$VENV/bin/python
PIN=${PIN:-1}
FORCE=${FORCE:-0}
QUERIES=${QUERIES:-$(seq 1 22)}
QDIR=$ROOT/tests/tpch/queries
ADIR=$ROOT/tests/tpch/answers
TABLES="region nation supplier customer part partsupp orders lineitem"
SFS=("$@"); [[ ${#SFS[@]} -gt 0 ]] || SFS=(0.01 1)

# -- venv: the anchors' one (shared/bench/anchors/run.sh makes the same)
if ! { [[ -x $VENV/bin/tpchgen-cli ]] && "$PY" -c 'import duckdb' 2>/dev/null; }; then
  echo "== creating venv $VENV"
  [[ -x $PY ]] || python3 -m venv "$VENV"
  if [[ $PIN == 1 ]]; then
    "$VENV/bin/pip" install -q duckdb==2.0.0 tpchgen-cli==4.0.0 pyarrow==26.0.1
  else
    "$VENV/bin/pip" install -q duckdb tpchgen-cli pyarrow
  fi
fi
echo "== duckdb $("$PY" -c 'import duckdb; print(duckdb.__version__)'), $("$VENV/bin/tpchgen-cli" --version)"

TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
bad=0

# place NEW at DEST unless DEST exists with other content (CR ignored)
place() {
  local new=$1 dest=$2
  if [[ -e $dest ]]; then
    if cmp -s "$new" "$dest"; then return; fi
    if tr -d '\r' < "$dest" | cmp -s - "$new"; then
      echo "   same as $dest (that file has CRLF line ends; kept)"; return
    fi
    if [[ $FORCE != 1 ]]; then
      echo "!! $dest differs from DuckDB's new answer; kept (FORCE=1 overwrites):"
      diff "$dest" "$new" | head -20 || true
      bad=1; return
    fi
    echo "   overwriting $dest (FORCE=1)"
  fi
  cp "$new" "$dest"
}

for sf in "${SFS[@]}"; do
  data=$ANCHORS/data/sf$sf
  mkdir -p "$data"
  for t in $TABLES; do
    [[ -s $data/$t.parquet ]] && continue
    echo "== generating $data/$t.parquet"
    gen=$data/.tmp_$t; rm -rf "$gen"; mkdir -p "$gen"
    start=$(date +%s.%N)
    "$VENV/bin/tpchgen-cli" parquet -s "$sf" -T "$t" -o "$gen" --no-progress -q
    mv "$gen/$t.parquet" "$data/$t.parquet"; rm -rf "$gen"
    printf "   %.1fs, %s bytes\n" "$(awk "BEGIN{print $(date +%s.%N) - $start}")" "$(stat -c %s "$data/$t.parquet")"
  done

  echo "== answers sf$sf"
  for q in $QUERIES; do
    start=$(date +%s.%N)
    "$PY" "$ROOT/scripts/duckdb_answer.py" --data "$data" --types-out "$TMP/q$q.types.$sf" \
      "$QDIR/q$q.sql" > "$TMP/q${q}_sf$sf.csv"
    printf "   q%-2s %6.2fs %5d rows\n" "$q" "$(awk "BEGIN{print $(date +%s.%N) - $start}")" \
      $(($(wc -l < "$TMP/q${q}_sf$sf.csv") - 1))
    place "$TMP/q${q}_sf$sf.csv" "$ADIR/q${q}_sf$sf.csv"
    if [[ -e $TMP/q$q.types ]]; then
      if ! cmp -s "$TMP/q$q.types" "$TMP/q$q.types.$sf"; then
        echo "!! q$q: types at sf$sf differ from those at sf${SFS[0]}:"
        cat "$TMP/q$q.types" "$TMP/q$q.types.$sf"; bad=1
      fi
    else
      cp "$TMP/q$q.types.$sf" "$TMP/q$q.types"
      place "$TMP/q$q.types" "$ADIR/q$q.types"
    fi
  done
done
exit $bad
