"""Correlated subqueries through a real client: Quarry (over Python ADBC,
Flight SQL) against DuckDB in memory, on the same rows, in one run.

    scripts/bench_subqueries.py grpc://127.0.0.1:PORT [--rows 100000] [--runs 5]

Loads a table sq(id, g, v) of --rows rows (g: 1000 groups, v: 0..999 from
a seeded generator) into Quarry (INSERTs of 5000 rows) and into DuckDB
(threads = 2), checks that both answer each query alike, and prints per
query the median of --runs timed runs after one warm-up, and Quarry's
time over DuckDB's. The queries are the shapes DataFusion does not unnest
by itself and compute/src/df/decorrelate/ does. Needs duckdb and
adbc_driver_flightsql (pip) in the Python that runs it.
"""
import argparse
import random
import statistics
import time

import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import pyarrow as pa

QUERIES = {
    # A count(*) correlated by an equality and an inequality, in WHERE:
    # the rows that hold their group's largest v.
    "count_lt": "SELECT count(*) AS n FROM sq "
    "WHERE (SELECT count(*) FROM sq AS x WHERE x.g = sq.g AND x.v > sq.v) = 0",
    # EXISTS with an inequality, in the SELECT list.
    "exists_select": "SELECT sum(CASE WHEN EXISTS (SELECT 1 FROM sq AS x "
    "WHERE x.g = sq.g AND x.v > sq.v + 990) THEN 1 ELSE 0 END) AS n FROM sq",
    # A scalar aggregate correlated by an inequality only (no equality to
    # hash on), over 1000 outer rows.
    "scalar_range": "SELECT sum(c) AS s FROM (SELECT (SELECT count(*) FROM sq AS x "
    "WHERE x.v < d.g) AS c FROM (SELECT DISTINCT g FROM sq) AS d) AS t",
}


def rows(n):
    rng = random.Random(46)
    ids = list(range(n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "g": pa.array([i % 1000 for i in ids], pa.int64()),
            "v": pa.array([rng.randrange(1000) for _ in ids], pa.int64()),
        }
    )


def timed(run, runs):
    run()  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    table = rows(args.rows)

    q = flight_sql.connect(args.uri, autocommit=True)
    cur = q.cursor()
    cur.execute("DROP TABLE IF EXISTS sq")
    cur.execute("CREATE TABLE sq (id BIGINT PRIMARY KEY, g BIGINT NOT NULL, v BIGINT NOT NULL)")
    cols = [table.column(c).to_pylist() for c in ("id", "g", "v")]
    for start in range(0, args.rows, 5000):
        values = ", ".join(
            "(%d, %d, %d)" % (cols[0][i], cols[1][i], cols[2][i])
            for i in range(start, min(start + 5000, args.rows))
        )
        cur.execute("INSERT INTO sq VALUES " + values)

    d = duckdb.connect()
    d.execute("SET threads = 2")
    d.register("sq_arrow", table)
    d.execute("CREATE TABLE sq AS SELECT * FROM sq_arrow")

    def quarry(sql):
        cur.execute(sql)
        return cur.fetchall()

    print("query,rows,quarry_ms,duckdb_ms,ratio")
    for name, sql in QUERIES.items():
        got, want = quarry(sql), d.execute(sql).fetchall()
        if [tuple(r) for r in got] != [tuple(r) for r in want]:
            raise SystemExit("%s: Quarry answered %s, DuckDB %s" % (name, got, want))
        tq = timed(lambda: quarry(sql), args.runs)
        td = timed(lambda: d.execute(sql).fetchall(), args.runs)
        print("%s,%d,%.1f,%.1f,%.2f" % (name, args.rows, tq * 1e3, td * 1e3, tq / td))
    cur.execute("DROP TABLE sq")
    cur.close()
    q.close()


if __name__ == "__main__":
    main()
