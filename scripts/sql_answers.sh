#!/usr/bin/env bash
# Regenerate DuckDB's golden answers for the SQL cases in tests/sql/cases.sql.
#
#   scripts/sql_answers.sh [NAME ...]        (default: every case)
#
# Splits tests/sql/cases.sql at its `-- name: <name>` lines into one query
# per temporary file, runs each in DuckDB over the SF 0.01 parquet with
# scripts/duckdb_answer.py and writes tests/sql/answers/<name>.csv plus
# tests/sql/answers/<name>.types (DuckDB's output column types).
# tests/sql_cases.rs checks Quarry against them.
#
# The venv and the parquet are those of scripts/tpch_answers.sh (run
# `scripts/tpch_answers.sh 0.01` first if they are missing).
#
# An answer file that already exists and differs from the new one (other than
# CRLF vs LF line ends) is left alone and reported, and the script exits 1;
# FORCE=1 overwrites it. Golden answers come from DuckDB only, never Quarry.
#
# env: ANCHORS=$HOME/.cache/quarry-anchors (venv and data live there)
#      FORCE=0
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS=${ANCHORS:-$HOME/.cache/quarry-anchors}
PY=$ANCHORS/venv/bin/python
DATA=$ANCHORS/data/sf0.01
FORCE=${FORCE:-0}
CASES=$ROOT/tests/sql/cases.sql
ADIR=$ROOT/tests/sql/answers

if ! "$PY" -c 'import duckdb' 2>/dev/null || [[ ! -s $DATA/lineitem.parquet ]]; then
  echo "!! no DuckDB venv or no parquet under $ANCHORS; run scripts/tpch_answers.sh 0.01" >&2
  exit 1
fi
echo "== duckdb $("$PY" -c 'import duckdb; print(duckdb.__version__)'), data $DATA"

TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
mkdir -p "$ADIR"
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

# -- split: $TMP/<name>.sql per case, names in file order in $TMP/names
awk -v dir="$TMP" '
  /^-- name: / { name = $3; file = dir "/" name ".sql"; print name > (dir "/names"); next }
  name != "" { print > file }
' "$CASES"
NAMES=("$@"); [[ ${#NAMES[@]} -gt 0 ]] || mapfile -t NAMES < "$TMP/names"
if dup=$(sort "$TMP/names" | uniq -d) && [[ -n $dup ]]; then
  echo "!! duplicate case names: $dup"; exit 1
fi

echo "== answers (${#NAMES[@]} cases)"
for name in "${NAMES[@]}"; do
  [[ -e $TMP/$name.sql ]] || { echo "!! no case named $name in $CASES"; bad=1; continue; }
  start=$(date +%s.%N)
  "$PY" "$ROOT/scripts/duckdb_answer.py" --data "$DATA" --types-out "$TMP/$name.types" \
    "$TMP/$name.sql" > "$TMP/$name.csv"
  printf "   %-40s %6.2fs %5d rows\n" "$name" "$(awk "BEGIN{print $(date +%s.%N) - $start}")" \
    $(($(wc -l < "$TMP/$name.csv") - 1))
  place "$TMP/$name.csv" "$ADIR/$name.csv"
  place "$TMP/$name.types" "$ADIR/$name.types"
done
exit $bad
