#!/usr/bin/env python3
"""The indexed lookup's latency through Python ADBC (Flight SQL), beside
`SELECT 1`'s, on a playground whose lineitem has an index on l_partkey:

    quarry playground --stores 3 --sf 1 --tables lineitem --layout row
    (CREATE INDEX lineitem_partkey ON lineitem (l_partkey), once)
    scripts/lookup_latency.py grpc://127.0.0.1:PORT [--runs 200] [--rounds 3]

First --runs lookups as they come (after a restart: the stores' block
caches cold), then one full scan of lineitem (which fills them), then
--rounds rounds of --runs `SELECT 1` and --runs lookups, each with a new
random l_partkey (so no plan is reused), p50 and p90 of each. To compare
two binaries, run it against each in turn, restarting the playground
with the other binary in between (docs/performance.md, "Again after the
kept catalog"). Needs adbc_driver_flightsql (pip).
"""
import argparse
import random
import statistics
import time

import adbc_driver_flightsql.dbapi as flight_sql

LOOKUP = "SELECT count(*) AS n, sum(l_quantity) AS q FROM lineitem WHERE l_partkey = %d"
SCAN = "SELECT sum(l_quantity), count(*) FROM lineitem WHERE l_discount > 0.05"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    conn = flight_sql.connect(a.uri, autocommit=True)
    cur = conn.cursor()

    def timed(make, n):
        ms = []
        for _ in range(n):
            sql = make()
            t = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            ms.append((time.perf_counter() - t) * 1e3)
        ms.sort()
        return statistics.median(ms), ms[int(len(ms) * 0.9)]

    def lookup():
        return LOOKUP % rng.randrange(1, 200001)

    print("cold lookups: p50 %.2f ms, p90 %.2f ms" % timed(lookup, a.runs))
    timed(lambda: SCAN, 1)
    for r in range(a.rounds):
        one = timed(lambda: "SELECT 1", a.runs)
        look = timed(lookup, a.runs)
        print(
            "round %d: SELECT 1 p50 %.2f ms p90 %.2f ms; lookup p50 %.2f ms p90 %.2f ms"
            % ((r + 1,) + one + look)
        )
    cur.close()
    conn.close()


if __name__ == "__main__":
    main()
