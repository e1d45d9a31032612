"""Single-row INSERTs through Quarry's PostgreSQL front end (psycopg 3,
autocommit): the extended protocol with a bound parameter, the simple
protocol with literals, and executemany; the milliseconds each costs.

Usage: bench_pg_writes.py PORT N TAG
(PORT: a playground's postgres port; TAG names the table it writes.)
docs/performance.md, "Implicit transactions over PostgreSQL", reports it.
"""
import sys, time, psycopg
port, n, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = psycopg.connect(f"host=127.0.0.1 port={port} user=root dbname=quarry", autocommit=True)
c.execute(f"CREATE TABLE IF NOT EXISTS ins_{tag} (id BIGINT PRIMARY KEY, v VARCHAR)")
for i in range(20):  # warm-up
    c.execute(f"INSERT INTO ins_{tag} VALUES (%s, %s)", (10_000_000 + i, "w"))
t = time.perf_counter()
for i in range(n):
    c.execute(f"INSERT INTO ins_{tag} VALUES (%s, %s)", (i, "x"))
ext = (time.perf_counter() - t) / n * 1000
t = time.perf_counter()
for i in range(n):
    c.pgconn.exec_(f"INSERT INTO ins_{tag} VALUES ({n + i}, 'y')".encode())
simple = (time.perf_counter() - t) / n * 1000
t = time.perf_counter()
c.cursor().executemany(f"INSERT INTO ins_{tag} VALUES (%s, %s)", [(2 * n + i, "z") for i in range(n)])
many = (time.perf_counter() - t) / n * 1000
cnt = c.execute(f"SELECT count(*) FROM ins_{tag}").fetchone()[0]
print(f"{tag}: extended {ext:.2f} ms/insert, simple {simple:.2f} ms/insert, executemany {many:.2f} ms/row, rows {cnt}")
