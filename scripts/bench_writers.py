#!/usr/bin/env python3
"""One writing client for scripts/bench_backup.sh: a Flight SQL connection
(Python ADBC, autocommit) that inserts `(id, client)` rows into table w,
one statement at a time (an ADBC execute_update), as fast as the cluster
acknowledges them, and appends `id nanoseconds` to --acked after each
acknowledged insert (the time is taken after the answer, so it is never
earlier than the ack).

    scripts/bench_writers.py grpc://127.0.0.1:PORT --client 1 --acked F \
        --stop F [--count 20000] [--seconds 300]

Bounded: at most --count inserts and --seconds, and it stops as soon as
the --stop file exists. An insert that fails is not recorded (its
outcome is not needed: only acknowledged rows are checked). Needs
adbc_driver_flightsql (pip).
"""
import argparse
import os
import time

import adbc_driver_flightsql.dbapi as flight_sql


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("--client", type=int, required=True)
    p.add_argument("--acked", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--seconds", type=float, default=300)
    a = p.parse_args()
    conn = flight_sql.connect(a.uri, autocommit=True)
    cur = conn.cursor()
    stmt = cur.adbc_statement
    deadline = time.monotonic() + a.seconds
    failed = 0
    with open(a.acked, "a", buffering=1) as acked:
        for i in range(1, a.count + 1):
            if os.path.exists(a.stop) or time.monotonic() > deadline:
                break
            row_id = a.client * 1_000_000 + i
            try:
                # An update (Flight SQL's CommandStatementUpdate, one round
                # trip, no result stream), as a writing client sends it:
                # execute() + fetchall() cost this process three times the
                # CPU, all of it taken from the cluster on a shared box.
                stmt.set_sql_query("INSERT INTO w VALUES (%d, %d)" % (row_id, a.client))
                stmt.execute_update()
            except Exception as e:  # noqa: BLE001 - a refused insert is only counted
                failed += 1
                if failed == 1:
                    print("client %d: an insert failed: %s" % (a.client, e))
                continue
            acked.write("%d %d\n" % (row_id, time.time_ns()))
    cur.close()
    conn.close()
    if failed:
        print("client %d: %d inserts failed" % (a.client, failed))


if __name__ == "__main__":
    main()
