"""Differential check of Quarry's PostgreSQL front end against a real
PostgreSQL server: the same table (every stored type) and the same
queries (every type Quarry answers with, through casts and expressions)
on both, compared byte for byte on the wire.

For each query and each result format (text and binary, through the
extended protocol's Bind), the column type OIDs and every value's bytes
must be equal; through the simple protocol, the text values. COPY TO
STDOUT in text, CSV and binary must send the same bytes. Errors must
carry the same SQLSTATE.

Usage: pg_differential.py QUARRY_CONNINFO POSTGRES_CONNINFO
Prints one line per check and a last line "checked N values in M queries,
K mismatches"; exits 1 on any mismatch.
"""
import sys

import psycopg
from psycopg.pq import ExecStatus, Format

quarry_info, postgres_info = sys.argv[1:3]

SETUP = [
    "DROP TABLE IF EXISTS pg_diff",
    """CREATE TABLE pg_diff (
        id BIGINT PRIMARY KEY,
        i BIGINT,
        f DOUBLE PRECISION,
        n NUMERIC(12, 3),
        d DATE,
        v VARCHAR(20),
        t TEXT
    )""",
    """INSERT INTO pg_diff VALUES
        (1, 42, 2.5, 1234.5, DATE '1998-12-01', 'plain', 'it''s'),
        (2, -9223372036854775808, 0.1, -0.001, DATE '1970-01-01', '', 'tab	and "quotes"'),
        (3, 9223372036854775807, 1e20, 999999999.999, DATE '2000-02-29', 'é ünïcode', 'back\\slash'),
        (4, 0, -1.5e-7, 0, DATE '0001-01-01', 'comma, here', 'line
break'),
        (5, NULL, NULL, NULL, NULL, NULL, NULL),
        (6, 7, 123456789.125, -42, DATE '9999-12-31', 'x', '')""",
]

# Each query names its columns; ORDER BY makes the rows comparable.
QUERIES = [
    # Stored types, as stored.
    "SELECT id, i, f, n, d, v, t FROM pg_diff ORDER BY id",
    # Integers of every width.
    "SELECT id, CAST(id AS INT) AS i4, CAST(id AS SMALLINT) AS i2, i % 1000 * 2 AS doubled FROM pg_diff WHERE id < 3 OR id = 6 ORDER BY id",
    # Floats: float8, float4, and their text form.
    "SELECT id, f * 3 AS f3, CAST(f AS REAL) AS f4, f / 7 AS sevenths FROM pg_diff ORDER BY id",
    "SELECT CAST(0.1 AS DOUBLE PRECISION) + CAST(0.2 AS DOUBLE PRECISION) AS s, CAST('1e200' AS DOUBLE PRECISION) * 10 AS big, CAST(1 AS REAL) / CAST(3 AS REAL) AS third",
    # Numeric: stored, arithmetic that keeps scales, casts.
    "SELECT id, n + 1 AS plus, n * 2 AS times, -n AS neg, CAST(n AS NUMERIC(20, 5)) AS wider FROM pg_diff ORDER BY id",
    "SELECT CAST(12345678901234567890.123456789 AS NUMERIC(30, 9)) AS big, CAST(0.000001 AS NUMERIC(10, 6)) AS tiny, CAST(-1 AS NUMERIC(5, 0)) AS negone",
    # Dates, timestamps, intervals.
    "SELECT id, d, d + 30 AS later FROM pg_diff ORDER BY id",
    # (Timestamps hold 1677-09-21 to 2262-04-11: nanoseconds in an i64.)
    "SELECT id, CAST(d AS TIMESTAMP) AS ts FROM pg_diff WHERE id IN (1, 2, 3, 5) ORDER BY id",
    "SELECT TIMESTAMP '2024-02-29 23:59:59.123456' AS ts, TIMESTAMP '1999-12-31 00:00:00' AS midnight, TIMESTAMP '1960-06-15 12:30:00.5' AS before_epoch",
    "SELECT INTERVAL '1 day' AS day, INTERVAL '2 hours 30 minutes' AS hm, INTERVAL '1 year 2 months' AS ym, INTERVAL '3 days 4 hours 5.25 seconds' AS mixed",
    "SELECT CAST('2024-01-02 03:04:05.25+00' AS TIMESTAMPTZ) AS tz, CAST(TIMESTAMP '2024-01-02 03:04:05' AS DATE) AS day",
    # Expressions over every stored type.
    "SELECT id, coalesce(v, 'none') AS v2, CASE WHEN n > 0 THEN 'pos' WHEN n < 0 THEN 'neg' ELSE 'zero' END AS sign, CAST(n AS DOUBLE PRECISION) AS nf, abs(i % 100) AS a FROM pg_diff ORDER BY id",
    # Booleans, text, varchar, bytea.
    "SELECT id, i > 0 AS positive, v IS NULL AS missing, v, t, upper(v) AS up, length(t) AS len FROM pg_diff ORDER BY id",
    "SELECT CAST('hello' AS BYTEA) AS b, CAST('' AS BYTEA) AS empty",
    # Aggregates over stored types.
    "SELECT count(*) AS n, count(i) AS ni, min(d) AS first, max(d) AS last, min(v) AS lo, max(n) AS hi, sum(n) AS total FROM pg_diff",
    "SELECT v IS NULL AS missing, count(*) AS n FROM pg_diff GROUP BY v IS NULL ORDER BY missing",
    # NULLs of every type.
    "SELECT CAST(NULL AS BIGINT) AS i, CAST(NULL AS TEXT) AS t, CAST(NULL AS DATE) AS d, CAST(NULL AS NUMERIC(10, 2)) AS n, CAST(NULL AS BOOLEAN) AS b",
    # Strings.
    "SELECT 'a' || 'b' AS ab, substr('quarry', 2, 3) AS sub, lower('ÀB') AS low, trim('  x  ') AS trimmed, replace('aaa', 'a', 'b') AS rep",
    # Arrays.
    "SELECT ARRAY[CAST(1 AS BIGINT), 2, 3] AS ints, ARRAY['a', 'b c', 'd\"e'] AS texts",
]

# Parameters typed by OID (int8 20, text 25, date 1082, numeric 1700).
PARAMETERIZED = [
    ("SELECT v FROM pg_diff WHERE id = $1", [b"3"], [20]),
    ("SELECT id FROM pg_diff WHERE v = $1 ORDER BY id", ["comma, here".encode()], [25]),
    ("SELECT id FROM pg_diff WHERE d > $1 ORDER BY id", [b"1999-01-01"], [1082]),
    ("SELECT id FROM pg_diff WHERE n < $1 ORDER BY id", [b"0.5"], [1700]),
]

# TIMESTAMPTZ in the session's TimeZone: literals and casts read in it,
# values written in it with its offset at that instant (DST included).
ZONES = ["Asia/Kolkata", "America/New_York", "Europe/Berlin"]
ZONED = [
    "SELECT CAST('2024-01-15 12:00:00' AS TIMESTAMPTZ) AS local_noon, CAST('2024-07-15 12:00:00+00' AS TIMESTAMPTZ) AS utc_noon",
    "SELECT CAST(TIMESTAMP '2024-03-31 12:30:00' AS TIMESTAMPTZ) AS from_plain, CAST(CAST('2024-01-15 23:30:00+00' AS TIMESTAMPTZ) AS TIMESTAMP) AS to_plain",
    "SELECT CAST(CAST('2024-01-15 23:30:00+00' AS TIMESTAMPTZ) AS DATE) AS local_day, current_setting('TimeZone') AS zone",
]
# TIMESTAMPTZ parameters in those zones: an offset fixes the instant,
# a value without one is read in the session's zone.
ZONED_PARAMETERIZED = [
    ("SELECT CAST($1 AS TIMESTAMPTZ) + INTERVAL '1 hour' AS later_tz", [b"2024-01-15 12:00:00+00"], [1184]),
    ("SELECT CAST($1 AS TIMESTAMPTZ) AS local_tz", [b"2024-01-15 12:00:00"], [1184]),
]

COPIES = [
    "COPY (SELECT id, i, f, n, d, v, t FROM pg_diff ORDER BY id) TO STDOUT",
    "COPY (SELECT id, i, f, n, d, v, t FROM pg_diff ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)",
    "COPY (SELECT id, i, f, n, d, v, t FROM pg_diff ORDER BY id) TO STDOUT WITH (FORMAT binary)",
]

# Statements that must fail, with the same SQLSTATE on both.
ERRORS = [
    "SELEC 1",
    "SELECT * FROM no_such_table",
    "SELECT no_such_column FROM pg_diff",
    "SELECT 1 / 0",
    "SELECT CAST(100000 AS NUMERIC(3, 0))",
    "INSERT INTO pg_diff (id) VALUES (1)",
]

# Type OIDs that differ on purpose (docs/postgres.md): a VARCHAR(n)
# column is described as text, since Arrow's Utf8 keeps no length.
KNOWN_TYPES = {(25, 1043)}

mismatches = 0
values = 0


def mismatch(what, quarry, postgres):
    global mismatches
    mismatches += 1
    print(f"MISMATCH {what}: quarry={quarry!r} postgres={postgres!r}")


def connect(info):
    conn = psycopg.connect(info, autocommit=True)
    return conn


quarry = connect(quarry_info)
postgres = connect(postgres_info)
postgres.execute("SET TimeZone = 'UTC'")
for sql in SETUP:
    quarry.execute(sql)
    postgres.execute(sql)


def result(conn, sql, fmt, params=None, types=None):
    if fmt is None:
        res = conn.pgconn.exec_(sql.encode())
    else:
        res = conn.pgconn.exec_params(
            sql.encode(), params or [], types, result_format=fmt
        )
    if res.status != ExecStatus.TUPLES_OK:
        message = res.error_message.decode(errors="replace").strip()
        raise RuntimeError(f"{sql}: {message}")
    return res


def compare(sql, fmt, params=None, types=None):
    global values
    label = {None: "simple", Format.TEXT: "text", Format.BINARY: "binary"}[fmt]
    try:
        q = result(quarry, sql, fmt, params, types)
    except RuntimeError as e:
        mismatch(f"{label} {sql}", str(e), "answered")
        return
    p = result(postgres, sql, fmt, params, types)
    before = mismatches
    if (q.nfields, q.ntuples) != (p.nfields, p.ntuples):
        mismatch(f"{label} shape {sql}", (q.nfields, q.ntuples), (p.nfields, p.ntuples))
        return
    for c in range(q.nfields):
        name = p.fname(c).decode()
        if q.ftype(c) != p.ftype(c) and (q.ftype(c), p.ftype(c)) not in KNOWN_TYPES:
            mismatch(f"{label} type of {name} in {sql}", q.ftype(c), p.ftype(c))
            continue
        for r in range(q.ntuples):
            values += 1
            qv, pv = q.get_value(r, c), p.get_value(r, c)
            if qv != pv:
                mismatch(f"{label} {name} row {r} of {sql}", qv, pv)
    if mismatches == before:
        print(f"ok {label}: {sql}")


for sql in QUERIES:
    for fmt in (None, Format.TEXT, Format.BINARY):
        compare(sql, fmt)
for sql, params, types in PARAMETERIZED:
    for fmt in (Format.TEXT, Format.BINARY):
        compare(sql, fmt, params, types)
for zone in ZONES:
    for conn in (quarry, postgres):
        conn.execute(f"SET TimeZone = '{zone}'")
    for sql in ZONED:
        for fmt in (None, Format.TEXT, Format.BINARY):
            compare(sql, fmt)
    for sql, params, types in ZONED_PARAMETERIZED:
        for fmt in (Format.TEXT, Format.BINARY):
            compare(sql, fmt, params, types)
for conn in (quarry, postgres):
    conn.execute("SET TimeZone = 'UTC'")


def copied(conn, sql):
    out = bytearray()
    with conn.cursor() as cur:
        with cur.copy(sql) as copy:
            for chunk in copy:
                out += chunk
        return bytes(out), cur.rowcount


for sql in COPIES:
    q, p = copied(quarry, sql), copied(postgres, sql)
    values += 1
    if q != p:
        mismatch(sql, q, p)
    else:
        print(f"ok copy: {sql}")


def sqlstate(conn, sql):
    try:
        conn.execute(sql)
    except psycopg.Error as e:
        return e.sqlstate
    return "no error"


for sql in ERRORS:
    q, p = sqlstate(quarry, sql), sqlstate(postgres, sql)
    values += 1
    if q != p:
        mismatch(f"SQLSTATE of {sql}", q, p)
    else:
        print(f"ok error {p}: {sql}")

print(
    f"checked {values} values in {len(QUERIES) * 3 + len(ZONES) * (len(ZONED) * 3 + len(ZONED_PARAMETERIZED) * 2) + len(PARAMETERIZED) * 2 + len(COPIES) + len(ERRORS)} "
    f"results, {mismatches} mismatches"
)
sys.exit(1 if mismatches else 0)
