"""psycopg 3 (from PyPI) against Quarry's PostgreSQL listener, unchanged
client code: TPC-H Q1 and Q6 in text and binary cursors, server-side
prepared statements with parameters, pipeline mode, autocommit on and
off, transactions and their errors, a cancelled query, and the SQLSTATE
of each kind of error.

Usage: pg_psycopg.py CONNINFO Q1_FILE Q6_FILE
Prints sections ("== name", then CSV lines); tests/postgres.rs checks them.
"""
import datetime
import decimal
import sys
import threading
import time

import psycopg

conninfo, q1_file, q6_file = sys.argv[1:4]


def show(value):
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def section(name, cur):
    print("==", name)
    print(",".join(d.name for d in cur.description))
    for row in cur.fetchall():
        print(",".join(show(v) for v in row))


def error_of(conn, sql, params=None):
    """The SQLSTATE and message of a statement that must fail."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as e:
        return e.sqlstate, str(e).splitlines()[0]
    raise AssertionError(f"{sql} did not fail")


conn = psycopg.connect(conninfo, autocommit=True)
print("== server")
print("version,server_version")
print(f"{conn.info.server_version},{conn.execute('SHOW server_version').fetchone()[0]}")

# TPC-H through text (the default) and binary cursors.
for name, path in (("q1", q1_file), ("q6", q6_file)):
    with open(path) as f:
        sql = f.read()
    section(name, conn.execute(sql))
    with conn.cursor(binary=True) as cur:
        cur.execute(sql)
        section(name + " binary", cur)

# Parameters: psycopg sends them with the extended protocol; prepare=True
# makes a named server-side statement, run three times.
for flag in ("R", "A", "N"):
    cur = conn.execute(
        "SELECT count(*) AS n FROM lineitem WHERE l_shipdate <= %s AND l_returnflag = %s",
        (datetime.date(1998, 9, 2), flag),
        prepare=True,
    )
    section(f"bound {flag}", cur)

# Every type, both ways: the types a table keeps, and the others as
# expressions.
conn.execute(
    "CREATE TABLE pg_types (id BIGINT PRIMARY KEY, f DOUBLE, d DECIMAL(12,2), t VARCHAR, dt DATE)"
)
cur = conn.execute(
    "INSERT INTO pg_types VALUES (%s, %s, %s, %s, %s)",
    (1, 2.5, decimal.Decimal("-12.34"), "it's", datetime.date(1998, 12, 1)),
)
print("== insert tag")
print("rowcount,statusmessage")
print(f"{cur.rowcount},{cur.statusmessage}")
conn.execute("INSERT INTO pg_types (id) VALUES (2)")
computed = (
    "SELECT CAST(-7 AS INT) AS i, CAST(3 AS SMALLINT) AS s, CAST(0.25 AS REAL) AS r,"
    " TIMESTAMP '2020-01-02 03:04:05.6' AS ts, CAST(NULL AS INT) AS n,"
    " CAST(1e20 AS DOUBLE) AS big, 1 < 2 AS b"
)
for binary in (False, True):
    suffix = " binary" if binary else ""
    for name, sql in (("types", "SELECT * FROM pg_types ORDER BY id"), ("computed", computed)):
        with conn.cursor(binary=binary) as cur:
            cur.execute(sql)
            section(name + suffix, cur)
            print("== " + name + " oids" + suffix)
            print("name,oid")
            for d in cur.description:
                print(f"{d.name},{d.type_code}")

cur = conn.execute("UPDATE pg_types SET f = f + 1 WHERE id = %s", (1,))
print("== update tag")
print("rowcount,statusmessage")
print(f"{cur.rowcount},{cur.statusmessage}")

# Pipeline mode: several statements before one Sync.
with conn.pipeline():
    c1 = conn.execute("SELECT 1 AS a")
    c2 = conn.execute("SELECT %s::BIGINT + 1 AS b", (41,))
    c3 = conn.execute("SELECT 'x' AS c")
print("== pipeline")
print("a,b,c")
print(f"{c1.fetchone()[0]},{c2.fetchone()[0]},{c3.fetchone()[0]}")

# Transactions: autocommit off, another connection does not see the
# uncommitted row, rollback leaves nothing, commit publishes.
other = psycopg.connect(conninfo, autocommit=True)
tx = psycopg.connect(conninfo)
tx.execute("INSERT INTO pg_types (id, t) VALUES (10, 'in txn')")
seen_inside = tx.execute("SELECT count(*) FROM pg_types WHERE id = 10").fetchone()[0]
seen_outside = other.execute("SELECT count(*) FROM pg_types WHERE id = 10").fetchone()[0]
status_in = tx.info.transaction_status.name
tx.rollback()
after_rollback = other.execute("SELECT count(*) FROM pg_types WHERE id = 10").fetchone()[0]
tx.execute("INSERT INTO pg_types (id, t) VALUES (11, 'committed')")
tx.commit()
after_commit = other.execute("SELECT count(*) FROM pg_types WHERE id = 11").fetchone()[0]
print("== transaction")
print("inside,outside,status,after_rollback,after_commit,status_after")
print(f"{seen_inside},{seen_outside},{status_in},{after_rollback},{after_commit},"
      f"{tx.info.transaction_status.name}")

# An error inside a transaction: the rest fail with 25P02 until ROLLBACK.
tx.execute("SELECT 1")
first = error_of(tx, "SELECT * FROM no_such_table")
status_failed = tx.info.transaction_status.name
second = error_of(tx, "SELECT 1")
tx.rollback()
print("== failed transaction")
print("first,status,second,after_rollback")
print(f"{first[0]},{status_failed},{second[0]},{tx.execute('SELECT 7').fetchone()[0]}")
tx.rollback()

# Write conflict: b's UPDATE waits for a's lock on the row; once a
# commits, b learns its snapshot is stale (40001, retry), as under
# PostgreSQL's REPEATABLE READ.
a = psycopg.connect(conninfo)
b = psycopg.connect(conninfo)
b.execute("SELECT 1")  # b's snapshot is taken
a.execute("UPDATE pg_types SET f = 100 WHERE id = 2")
conflict = []
waiter = threading.Thread(
    target=lambda: conflict.append(error_of(b, "UPDATE pg_types SET f = 200 WHERE id = 2")))
waiter.start()
time.sleep(1)
a.commit()
waiter.join()
b.rollback()
print("== conflict")
print("sqlstate,value")
print(f"{conflict[0][0]},{other.execute('SELECT f FROM pg_types WHERE id = 2').fetchone()[0]}")

# SQLSTATEs of the user's errors.
print("== errors")
print("case,sqlstate")
for case, sql in (
    ("syntax", "SELEC 1"),
    ("unknown table", "SELECT * FROM nope"),
    ("unknown column", "SELECT nope FROM pg_types"),
    ("division by zero", "SELECT 1 / 0"),
    ("overflow", "INSERT INTO pg_types (id, d) VALUES (5, 99999999999.99)"),
    ("unknown setting", "SHOW no_such_setting"),
):
    print(f"{case},{error_of(conn, sql)[0]}")

# Cancel: a long query, cancelled from another thread, fails with 57014
# and the connection goes on.
slow = psycopg.connect(conninfo, autocommit=True)
timer = threading.Timer(0.5, slow.cancel)
timer.start()
started = time.monotonic()
try:
    slow.execute(
        "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_orderkey + b.l_orderkey < 0"
    ).fetchall()
    cancel_state = "finished"
except psycopg.Error as e:
    cancel_state = e.sqlstate
took = time.monotonic() - started
print("== cancel")
print("sqlstate,within_30s,after")
print(f"{cancel_state},{took < 30},{slow.execute('SELECT 1').fetchone()[0]}")

# Settings are the connection's own, and current_setting() answers them.
conn.execute("SET application_name = 'one'")
print("== settings")
print("this,other")
print(f"{conn.execute('SHOW application_name').fetchone()[0]},"
      f"{other.execute('SHOW application_name').fetchone()[0]}")
conn.execute("SET search_path = public")
print("== current_setting")
print("this,other,this_path")
setting = "SELECT current_setting('application_name'), current_setting('search_path')"
this, this_path = conn.execute(setting).fetchone()
that = other.execute(setting).fetchone()[0]
print(f"{this},{that},{this_path}")
zones = psycopg.connect(conninfo, autocommit=True)
before = zones.info.parameter_status("TimeZone")
zones.execute("SET TimeZone = 'Asia/Kolkata'")
print("== parameter status")
print("before,after")
after = zones.info.parameter_status("TimeZone")
print(f"{before},{after}")
zones.close()

# An extended-protocol batch (everything up to Sync) is one implicit
# transaction, as in PostgreSQL: a pipeline whose third statement fails
# leaves none of its rows; a good one commits all; executemany too; a
# lone autocommit INSERT commits on its own.
batch = psycopg.connect(conninfo, autocommit=True)
batch.execute("CREATE TABLE pg_batch (id BIGINT PRIMARY KEY, v BIGINT)")
batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (1, 10))
try:
    with batch.pipeline():
        batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (2, 20))
        batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (3, 30))
        batch.execute("UPDATE pg_batch SET v = v / %s WHERE id = 1", (0,))
        batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (4, 40))
    failed_batch = "none"
except psycopg.Error as e:
    failed_batch = e.sqlstate
after_failed = batch.execute("SELECT count(*) FROM pg_batch").fetchone()[0]
with batch.pipeline():
    batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (5, 50))
    batch.execute("INSERT INTO pg_batch VALUES (%s, %s)", (6, 60))
after_good = batch.execute("SELECT count(*) FROM pg_batch").fetchone()[0]
try:
    batch.cursor().executemany("INSERT INTO pg_batch VALUES (%s, %s)", [(7, 70), (1, 0)])
    failed_many = "none"
except psycopg.Error as e:
    failed_many = e.sqlstate
after_many = batch.execute("SELECT count(*) FROM pg_batch").fetchone()[0]
print("== extended batch")
print("failed,after_failed,after_good,failed_many,after_many,status")
print(f"{failed_batch},{after_failed},{after_good},{failed_many},{after_many},"
      f"{batch.info.transaction_status.name}")

# Declared parameter types type the statement where they change its
# result (PostgreSQL's rule): a NUMERIC bound to BIGINT * $1 makes a
# NUMERIC column, described and sent as one, in text and binary.
print("== declared types")
print("format,oid,value")
for binary in (False, True):
    cur = batch.cursor(binary=binary)
    cur.execute("SELECT v * %s AS x FROM pg_batch WHERE id = 1", (decimal.Decimal("2.5"),))
    print(f"{'binary' if binary else 'text'},{cur.description[0].type_code},"
          f"{show(cur.fetchone()[0])}")
# A declared type in WHERE (psycopg sends 1 as int2) types nothing; the
# scale of a NUMERIC is its value's (trailing zeros lose nothing).
row = batch.execute("SELECT v * %s AS x FROM pg_batch WHERE id = %s",
                    (decimal.Decimal("2.500000000000"), 1)).fetchone()
print(f"where,int2,{show(row[0])}")
try:
    batch.execute("SELECT v * %s FROM pg_batch WHERE id = 1",
                  (decimal.Decimal("1.000000000001"),)).fetchall()
    print("too fine,none")
except psycopg.Error as e:
    print(f"too fine,{e.sqlstate}")
batch.close()

# COPY FROM STDIN in binary format: rows psycopg encodes (int8, float8,
# numeric, date, text, NULLs), then Quarry's own binary COPY TO fed back
# into a second table: the same rows.
bc = psycopg.connect(conninfo, autocommit=True)
bc.execute("CREATE TABLE pg_bcopy (id BIGINT PRIMARY KEY, f DOUBLE, d DECIMAL(12,2), dt DATE, t VARCHAR)")
bc.execute("CREATE TABLE pg_bcopy2 (id BIGINT PRIMARY KEY, f DOUBLE, d DECIMAL(12,2), dt DATE, t VARCHAR)")
with bc.cursor().copy("COPY pg_bcopy FROM STDIN (FORMAT BINARY)") as cp:
    cp.set_types(["int8", "float8", "numeric", "date", "text"])
    cp.write_row((1, 1.5, decimal.Decimal("-12.25"), datetime.date(1998, 12, 1), "tab\there"))
    cp.write_row((2, None, None, None, None))
    for i in range(3, 5003):
        cp.write_row((i, i / 4, decimal.Decimal(i) / 100, datetime.date(2000, 1, 1), f"r{i}"))
with bc.cursor().copy("COPY pg_bcopy TO STDOUT (FORMAT BINARY)") as cp:
    blob = b"".join(bytes(data) for data in cp)
with bc.cursor().copy("COPY pg_bcopy2 FROM STDIN (FORMAT BINARY)") as cp:
    cp.write(blob)
query = "SELECT id, f, d, dt, t FROM {} ORDER BY id"
same = bc.execute(query.format("pg_bcopy")).fetchall() == bc.execute(query.format("pg_bcopy2")).fetchall()
print("== binary copy")
print("rows,first,second,round_trip")
first = bc.execute("SELECT id, f, d, dt, t FROM pg_bcopy WHERE id = 1").fetchone()
second = bc.execute("SELECT id, f, d, dt, t FROM pg_bcopy WHERE id = 2").fetchone()
print(f"{bc.execute('SELECT count(*) FROM pg_bcopy2').fetchone()[0]},"
      f"{' '.join(show(v) for v in first)!r},{' '.join(show(v) for v in second)!r},{same}")
try:
    with bc.cursor().copy("COPY pg_bcopy FROM STDIN (FORMAT BINARY)") as cp:
        # A header, then a row of 5 fields cut off inside its first.
        cp.write(b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8 + b"\x00\x05\x00\x00\x00\x08\x00")
    cut = "none"
except psycopg.Error as e:
    cut = f"{e.sqlstate} {str(e).splitlines()[0][:44]}"
print("== binary copy cut off")
print(cut)
bc.close()

# A batch whose later message fails in the protocol layer (a Bind of a
# statement that does not exist) after a write: the write is rolled back
# with the batch, as in PostgreSQL. Raw protocol messages, as no driver
# sends this on purpose.
import socket
import struct

params = psycopg.conninfo.conninfo_to_dict(conninfo)
raw_setup = psycopg.connect(conninfo, autocommit=True)
raw_setup.execute("CREATE TABLE pg_raw (id BIGINT PRIMARY KEY)")


def message(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body


def cstr(s):
    return s.encode() + b"\0"


sock = socket.create_connection((params.get("host", "127.0.0.1"), int(params["port"])))
startup = struct.pack("!I", 196608) + cstr("user") + cstr(params.get("user", "root")) \
    + cstr("database") + cstr(params.get("dbname", "quarry")) + b"\0"
sock.sendall(struct.pack("!I", len(startup) + 4) + startup)


def read_until_ready():
    kinds, buf = [], b""
    while True:
        while len(buf) < 5:
            buf += sock.recv(65536)
        kind, length = buf[:1], struct.unpack("!I", buf[1:5])[0]
        while len(buf) < 1 + length:
            buf += sock.recv(65536)
        kinds.append(kind.decode())
        buf = buf[1 + length:]
        if kind == b"Z":
            return kinds


read_until_ready()
sock.sendall(
    message(b"P", cstr("") + cstr("INSERT INTO pg_raw VALUES (1)") + struct.pack("!H", 0))
    + message(b"B", cstr("") + cstr("") + struct.pack("!HHH", 0, 0, 0))
    + message(b"E", cstr("") + struct.pack("!I", 0))
    + message(b"B", cstr("") + cstr("no_such_statement") + struct.pack("!HHH", 0, 0, 0))
    + message(b"S", b"")
)
replies = read_until_ready()
sock.sendall(message(b"X", b""))
sock.close()
left = raw_setup.execute("SELECT count(*) FROM pg_raw").fetchone()[0]
print("== batch failed in the protocol")
print("replies,left")
print(f"{''.join(replies)},{left}")
raw_setup.close()
