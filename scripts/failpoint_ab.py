"""Side by side with a switch: runs TPC-H queries under `SET mpp = 'force'`
through ADBC against a running playground, alternating a failpoint (a
switch for timing, such as `spread_physical_kept_off` or
`early_probes_off`) on and off in ROUNDS rounds of RUNS runs per query, and
prints each round's median per side and the ratio of the medians.

    python scripts/failpoint_ab.py grpc://HOST:PORT http://STATUS FAILPOINT q2,q11 15 4

The playground: `quarry playground --dir D --stores 3 --sf 1 --computes 3
--mpp force` (its log names the compute's address and status URL).
"""
import statistics
import sys
import time
import urllib.request

import adbc_driver_flightsql.dbapi as fs


def main():
    uri, status, failpoint = sys.argv[1], sys.argv[2], sys.argv[3]
    queries, runs, rounds = sys.argv[4].split(","), int(sys.argv[5]), int(sys.argv[6])

    def switch(on):
        req = urllib.request.Request(
            f"{status}/fail/{failpoint}",
            data=b"return" if on else None,
            method="PUT" if on else "DELETE",
        )
        urllib.request.urlopen(req).read()

    conn = fs.connect(uri, autocommit=True)
    cur = conn.cursor()
    cur.execute("SET mpp = 'force'")
    cur.fetchall()
    res = {q: {"with": [], "without": []} for q in queries}
    try:
        for r in range(rounds):
            for side in (["with", "without"] if r % 2 == 0 else ["without", "with"]):
                # "without" the change: the failpoint on.
                switch(side == "without")
                for q in queries:
                    sql = open(f"tests/tpch/queries/{q}.sql").read()
                    cur.execute(sql)
                    cur.fetchall()
                    times = []
                    for _ in range(runs):
                        t = time.perf_counter()
                        cur.execute(sql)
                        cur.fetchall()
                        times.append(time.perf_counter() - t)
                    res[q][side].append(1000 * statistics.median(times))
    finally:
        switch(False)
        cur.close()
        conn.close()
    for q in queries:
        w, wo = res[q]["with"], res[q]["without"]
        print(
            f"{q}: with {' '.join(f'{x:.1f}' for x in w)} | "
            f"without {' '.join(f'{x:.1f}' for x in wo)} | "
            f"ratio of medians {statistics.median(w) / statistics.median(wo):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
