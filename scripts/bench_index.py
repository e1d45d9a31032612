"""An index lookup through a real client, and an online CREATE INDEX under
writers: Quarry over Python ADBC (Flight SQL), on TPC-H lineitem.

    quarry playground --stores 3 --sf 1 --tables lineitem --layout row
    scripts/bench_index.py grpc://127.0.0.1:PORT [--runs 21] [--writers 4]

1. Times `WHERE l_partkey = X` (a full scan: no index yet), median of 5.
2. Starts --writers clients that insert lineitem rows (and every 25th
   round move one of their rows to another l_partkey with an UPDATE) and,
   meanwhile, runs CREATE INDEX lineitem_partkey ON lineitem (l_partkey),
   timing it.
3. Stops the writers once the index is built, then times the same lookup
   (p50 and p90 over --runs values), and checks the index against a full
   scan for --check values: `l_partkey = X` (by the index) must count what
   `l_partkey + 0 = X` (which no index answers) counts.

Indexes are used for row-layout tables (docs/design-notes.md says why),
hence --layout row. Needs adbc_driver_flightsql (pip).
"""
import argparse
import random
import statistics
import threading
import time

import adbc_driver_flightsql.dbapi as flight_sql

LOOKUP = "SELECT count(*) AS n, sum(l_quantity) AS q FROM lineitem WHERE l_partkey = %d"
CHECK = "SELECT count(*) AS n FROM lineitem WHERE l_partkey + 0 = %d"


def one(cur, sql):
    cur.execute(sql)
    return cur.fetchall()


def timed(cur, sql):
    t = time.perf_counter()
    rows = one(cur, sql)
    return time.perf_counter() - t, rows


def writer(uri, w, stop, stats):
    conn = flight_sql.connect(uri, autocommit=True)
    cur = conn.cursor()
    rng = random.Random(w)
    done, errors = 0, []
    i = 0
    while not stop.is_set() and i < 100_000:
        okey = 100_000_000 + w * 1_000_000 + i
        sql = (
            "INSERT INTO lineitem VALUES (%d, %d, 1, 1, 5.00, 100.00, 0.05, 0.01, 'N', 'O', "
            "DATE '1998-01-01', DATE '1998-01-02', DATE '1998-01-03', 'NONE', 'AIR', 'bench')"
            % (okey, rng.randrange(1, 200_001))
        )
        try:
            one(cur, sql)
            done += 1
        except Exception as e:  # noqa: BLE001 (counted, reported)
            errors.append("%s: %s" % (sql[:60], e))
        if i % 25 == 24:
            sql = "UPDATE lineitem SET l_partkey = %d WHERE l_orderkey = %d" % (
                rng.randrange(1, 200_001),
                okey - 5,
            )
            try:
                one(cur, sql)
                done += 1
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %s" % (sql[:60], e))
        i += 1
    stats[w] = (done, errors)
    conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--check", type=int, default=8)
    args = ap.parse_args()
    rng = random.Random(46)
    conn = flight_sql.connect(args.uri, autocommit=True)
    cur = conn.cursor()
    one(cur, "DROP INDEX IF EXISTS lineitem_partkey")
    rows = one(cur, "SELECT count(*) FROM lineitem")[0][0]
    print("lineitem rows: %d" % rows)

    keys = [rng.randrange(1, 200_001) for _ in range(max(args.runs, args.check))]
    scan = statistics.median(timed(cur, LOOKUP % k)[0] for k in keys[:5])
    print("lookup before the index (full scan), median of 5: %.1f ms" % (scan * 1e3))

    stop = threading.Event()
    stats = {}
    threads = [
        threading.Thread(target=writer, args=(args.uri, w, stop, stats))
        for w in range(args.writers)
    ]
    for t in threads:
        t.start()
    time.sleep(2)
    t0 = time.perf_counter()
    one(cur, "CREATE INDEX lineitem_partkey ON lineitem (l_partkey)")
    built = time.perf_counter() - t0
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join()
    writes = sum(d for d, _ in stats.values())
    errors = [e for _, es in stats.values() for e in es]
    print(
        "CREATE INDEX under %d writers: %.1f s; writer statements: %d, failed: %d"
        % (args.writers, built, writes, len(errors))
    )
    for e in errors[:5]:
        print("  writer error: %s" % e)

    one(cur, LOOKUP % keys[0])  # warm-up
    times = sorted(timed(cur, LOOKUP % k)[0] for k in keys[: args.runs])
    p50 = times[len(times) // 2]
    p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
    print(
        "lookup with the index: p50 %.2f ms, p90 %.2f ms over %d values; "
        "full scan / index p50: %.0fx" % (p50 * 1e3, p90 * 1e3, len(times), scan / p50)
    )

    bad = 0
    for k in keys[: args.check]:
        by_index = one(cur, LOOKUP % k)[0][0]
        by_scan = one(cur, CHECK % k)[0][0]
        if by_index != by_scan:
            bad += 1
            print("  MISMATCH l_partkey = %d: index %d rows, scan %d" % (k, by_index, by_scan))
    print("index vs full scan: %d of %d values agree" % (args.check - bad, args.check))
    one(cur, "DROP INDEX lineitem_partkey")


if __name__ == "__main__":
    main()
