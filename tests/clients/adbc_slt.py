"""The queries of a sqllogictest file through Python ADBC
(adbc_driver_flightsql), unchanged client code: each must run (the
driver refuses a stream whose schema differs from the one GetFlightInfo
announced) and print what the file expects, with SQLite's runner's
formatting (I, R and T as in src/slt.rs).

Usage: adbc_slt.py grpc://HOST:PORT FILE.slt
Prints "== summary" (queries run, failures) and "== failures" (one line
each); tests/clients.rs checks them.
"""
import decimal
import math
import re
import sys

import adbc_driver_flightsql.dbapi as flight_sql


def records(path):
    """(type letters, sql, expected lines) of each `query` record."""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        words = lines[i].split()
        if not words or words[0] != "query":
            i += 1
            continue
        letters = words[1]
        i += 1
        sql = []
        while lines[i] != "----":
            sql.append(lines[i])
            i += 1
        i += 1
        want = []
        while i < len(lines) and lines[i].strip():
            want.append(lines[i])
            i += 1
        yield letters, "\n".join(sql), want


def leading_int(text):
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else 0


def real(v):
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return 0.0
    return float(v)


def fmt(v, letter):
    if v is None:
        return "NULL"
    if letter == "I":
        if isinstance(v, bool):
            return str(int(v))
        if isinstance(v, (int, float, decimal.Decimal)):
            return str(int(v))  # toward zero, as SQLite
        return str(leading_int(str(v)))
    if letter == "R":
        return "%.3f" % real(v)
    if isinstance(v, bool):
        text = "true" if v else "false"
    else:
        text = str(v)
    if text == "":
        return "(empty)"
    return "".join(c if " " <= c <= "~" else "@" for c in text)


def same(got, want, letters):
    """Rows equal value by value; a float shown as text may differ in its
    last digits between languages' printers."""
    if len(got) != len(want):
        return False
    for g_row, w_line in zip(got, want):
        w_row = w_line.split(" ")
        if len(w_row) != len(g_row) and len(g_row) == 1:
            w_row = [w_line]
        if len(w_row) != len(g_row):
            return False
        for i, ((g, raw), w) in enumerate(zip(g_row, w_row)):
            letter = letters[i] if i < len(letters) else "T"
            if g == w:
                continue
            if letter == "T" and isinstance(raw, float):
                try:
                    if math.isclose(raw, float(w), rel_tol=1e-12):
                        continue
                except ValueError:
                    pass
            return False
    return True


uri, path = sys.argv[1], sys.argv[2]
conn = flight_sql.connect(uri, autocommit=True)
run, failures = 0, []
for letters, sql, want in records(path):
    run += 1
    cur = conn.cursor()
    try:
        cur.execute(sql)
        raw = cur.fetchall()
    except Exception as e:  # the driver's error is the failure
        failures.append("%s: %s" % (sql.replace("\n", " "), str(e).splitlines()[0]))
        continue
    finally:
        cur.close()
    got = [[(fmt(v, letters[i] if i < len(letters) else "T"), v) for i, v in enumerate(row)]
           for row in raw]
    if not same(got, want, letters):
        shown = [" ".join(g for g, _ in row) for row in got]
        failures.append("%s: got %s, want %s" % (sql.replace("\n", " "), shown, want))
conn.close()
print("== summary")
print("queries,failed")
print("%d,%d" % (run, len(failures)))
print("== failures")
for f in failures:
    print(f)
