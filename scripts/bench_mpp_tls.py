#!/usr/bin/env python3
"""What mutual TLS between compute processes costs an MPP query: one
Flight SQL connection (Python ADBC) to a playground with several compute
processes, TPC-H queries timed under `SET mpp = 'off'` and `'force'` in
turn, a median per query and setting. Run it against a plaintext
playground and a `--secure` one of the same data (docs/performance.md).

    scripts/bench_mpp_tls.py grpc://127.0.0.1:PORT [--ca CA.pem \
        --user root --password PW] [--queries q1,q3,q6] [--runs 5]

Bounded: --runs timed runs (after one warm-up) per query and setting.
Each answer's row count must be the same under both settings. Needs
adbc_driver_flightsql (pip).
"""
import argparse
import pathlib
import statistics
import time

import adbc_driver_flightsql.dbapi as flight_sql

QUERIES = pathlib.Path(__file__).resolve().parent.parent / "tests/tpch/queries"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("--ca")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--queries", default="q1,q3,q5,q6,q9,q18")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    kwargs = {}
    if a.ca:
        kwargs["adbc.flight.sql.client_option.tls_root_certs"] = open(a.ca).read()
    if a.user:
        kwargs["username"] = a.user
        kwargs["password"] = a.password or ""
    conn = flight_sql.connect(a.uri, db_kwargs=kwargs, autocommit=True)
    cur = conn.cursor()
    print(f"{'query':<6} {'off ms':>9} {'force ms':>9} {'force/off':>9}")
    for q in a.queries.split(","):
        text = (QUERIES / f"{q}.sql").read_text()
        medians = {}
        rows = {}
        for mode in ("off", "force"):
            cur.execute(f"SET mpp = '{mode}'")
            times = []
            for i in range(a.runs + 1):
                t = time.perf_counter()
                cur.execute(text)
                table = cur.fetch_arrow_table()
                if i > 0:
                    times.append((time.perf_counter() - t) * 1000)
            medians[mode] = statistics.median(times)
            rows[mode] = table.num_rows
        if rows["off"] != rows["force"]:
            raise SystemExit(f"{q}: {rows['off']} rows alone, {rows['force']} spread")
        off, force = medians["off"], medians["force"]
        print(f"{q:<6} {off:9.1f} {force:9.1f} {force / off:9.2f}", flush=True)
    conn.close()


if __name__ == "__main__":
    main()
