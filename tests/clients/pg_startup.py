"""Replays the SQL that BI tools and drivers send as they connect and
browse the schema (tests/clients/pg_startup/*.sql, recorded from their
public sources: DBeaver, Metabase, Grafana, pgjdbc's getTypeInfo,
SQLAlchemy's get_columns) against a PostgreSQL server, each statement
through the extended protocol as the tools' drivers send it, and
Grafana's health-check pings through the simple one.

Usage: pg_startup.py CONNINFO FILE...
Prints "ok FILE:N rows" or "FAILED FILE:N SQLSTATE message" per
statement, then "replayed N statements, K failed"; exits 1 if any failed.
"""
import os
import sys

import psycopg
from psycopg.pq import ExecStatus

conninfo, files = sys.argv[1], sys.argv[2:]


def statements(path):
    """(line, text) of each statement: comment lines dropped, each ends
    with a semicolon at the end of its last line."""
    out, lines, start = [], [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not lines and (line.strip() == "" or line.lstrip().startswith("--")):
                continue
            if start is None:
                start = n
            lines.append(line.rstrip("\n"))
            if line.rstrip().endswith(";"):
                out.append((start, "\n".join(lines).rstrip().rstrip(";")))
                lines, start = [], None
    assert not lines, f"{path}: a statement without its closing semicolon"
    return out


conn = psycopg.connect(conninfo, autocommit=True)
failed = total = 0
for path in files:
    name = os.path.basename(path)
    for line, sql in statements(path):
        total += 1
        try:
            cur = conn.execute(sql)
            rows = len(cur.fetchall()) if cur.description else cur.rowcount
            print(f"ok {name}:{line} {rows} rows")
        except psycopg.Error as e:
            failed += 1
            first = str(e).splitlines()[0] if str(e) else ""
            print(f"FAILED {name}:{line} {e.sqlstate} {first}")

# Grafana's health checks: pgx pings with a query that is only a comment,
# lib/pq with ";": both answered by EmptyQueryResponse.
for ping in (b"-- ping", b";"):
    total += 1
    res = conn.pgconn.exec_(ping)
    if res.status == ExecStatus.EMPTY_QUERY:
        print(f"ok ping {ping.decode()!r}")
    else:
        failed += 1
        print(f"FAILED ping {ping.decode()!r}: {res.status.name} {res.error_message.decode()}")

print(f"replayed {total} statements, {failed} failed")
sys.exit(1 if failed else 0)
