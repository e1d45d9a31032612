#!/usr/bin/env python3
r"""CPU time per query of each Quarry process and of the client, through ADBC.

On a 2-core machine a query's time through a real client is bounded by the
CPU that every process spends on it together (stores, compute, the client's
driver), so this is what a lever has to lower. The script runs one SQL file
through ADBC's Flight SQL driver in a loop (20 warm-up runs, then RUNS timed
ones) and prints the median and mean time per query, the client's own CPU
per query (getrusage) and, for each PID given, its CPU per query (utime +
stime from /proc/PID/stat over the timed runs).

    "$QUARRY_VENV/bin/python" scripts/cpu_per_query.py grpc://127.0.0.1:PORT 300 \
        tests/tpch/queries/q6.sql PID,PID,...

The PIDs of a playground's processes, comma-separated (with only one
playground running): `pgrep -d, -f "quarry (storage|compute)"`.
With `QUARRY_SETUP` set (e.g. `SET mpp = 'off'`), that statement runs once
on the connection before the warm-up, so one playground can be measured
under two session settings.
Needs the project's virtualenv (`$QUARRY_VENV/bin/python`, made by
`scripts/setup.sh`). Linux only.
"""

import os
import resource
import statistics
import sys
import time

import adbc_driver_flightsql.dbapi as flight_sql

WARM_UP = 20


def cpu_seconds(pid):
    """utime + stime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def role(pid):
    """The process's subcommand and its first flag, e.g. `storage --store-id 2`."""
    with open(f"/proc/{pid}/cmdline") as f:
        return " ".join(f.read().split("\0")[1:4])


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    uri, runs, sql_file, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(sql_file) as f:
        sql = f.read()
    pids = [int(p) for p in pids.split(",") if p]
    if runs < 1:
        sys.exit(__doc__)
    with flight_sql.connect(uri, autocommit=True) as conn, conn.cursor() as cur:
        if os.environ.get("QUARRY_SETUP"):
            cur.execute(os.environ["QUARRY_SETUP"])

        def run():
            cur.execute(sql)
            cur.fetch_arrow_table()

        for _ in range(WARM_UP):
            run()
        before = [cpu_seconds(p) for p in pids]
        own = resource.getrusage(resource.RUSAGE_SELF)
        times = []
        start = time.perf_counter()
        for _ in range(runs):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - start
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        after = [cpu_seconds(p) for p in pids]
    client = (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime)
    print(
        f"median {statistics.median(times) * 1e3:.2f} ms  mean {elapsed / runs * 1e3:.2f} ms  "
        f"client CPU {client / runs * 1e3:.2f} ms a query"
    )
    for pid, a, b in zip(pids, before, after):
        print(f"{pid} {role(pid)}: {(b - a) / runs * 1e3:.2f} ms a query")


if __name__ == "__main__":
    main()
