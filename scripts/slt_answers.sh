#!/usr/bin/env bash
# Fill in the expected answers of tests/slt/*.slt from PostgreSQL 15 (the
# Debian package), never from Quarry: starts a scratch PostgreSQL server
# on a Unix socket in a temporary directory (as the postgres user when
# run as root), runs scripts/slt_answers.py over the files, and stops it.
#
#   scripts/slt_answers.sh [tests/slt/FILE.slt ...]
#   scripts/slt_answers.sh --constants    (rewrite tests/slt/constants.slt
#                                          with scripts/gen_constants_slt.py,
#                                          then fill it in)
#
# psycopg comes from PyPI into the client-test venv ($QUARRY_VENV).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/env.sh"
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || true)}
if [[ -z $PGBIN || ! -x $PGBIN/postgres ]]; then
  echo "!! no PostgreSQL 15 server (apt-get install postgresql-15)" >&2
  exit 1
fi
if ! "$QUARRY_VENV/bin/python" -c 'import psycopg' 2>/dev/null; then
  [[ -x $QUARRY_VENV/bin/python ]] || python3 -m venv "$QUARRY_VENV"
  "$QUARRY_VENV/bin/pip" install -q "psycopg[binary]==3.2.13"
fi

TMP=$(mktemp -d)
chmod 755 "$TMP"
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
  chown postgres "$TMP"
  as_pg=(runuser -u postgres --)
fi
stop() {
  "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$TMP/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap stop EXIT
"${as_pg[@]}" "$PGBIN/initdb" -D "$TMP/data" -U postgres --auth=trust >/dev/null
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w \
  -o "-k $TMP -c listen_addresses='' -c fsync=off" start >/dev/null
echo "== $("$PGBIN/postgres" --version)"
export PGHOST=$TMP PGPORT=5432
if [[ ${1:-} == --constants ]]; then
  "$QUARRY_VENV/bin/python" "$ROOT/scripts/gen_constants_slt.py"
  set -- "$ROOT/tests/slt/constants.slt"
fi
"$QUARRY_VENV/bin/python" "$ROOT/scripts/slt_answers.py" "$@"
