#!/usr/bin/env python3
r"""Time one statement through ADBC with a pause before each run.

On a virtual machine a query that follows an idle pause runs slower than
one run back to back: a halted virtual CPU comes back slower
(`docs/performance.md`, "Why a query after a pause is slower on this
machine"). This runs the SQL file 10 times to warm up, then RUNS timed
runs, each after sleeping PAUSE seconds (0: back to back), and prints the
median time and, for each PID given, its CPU per run (utime + stime from
/proc/PID/stat, the idle cluster's background during the pauses
included) and its minor page faults per run.

    "$QUARRY_VENV/bin/python" scripts/paused_runs.py grpc://127.0.0.1:PORT \
        tests/tpch/queries/q6.sql 60 0.05 PID,PID,...

The PIDs of a playground's processes: `pgrep -d, -f "quarry (storage|compute)"`.
Linux only.
"""
import os
import statistics
import sys
import time

import adbc_driver_flightsql.dbapi as flight_sql


def counters(pid):
    """(minor faults, CPU seconds) of `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / tick


def main():
    uri, path, runs, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    pids = [int(p) for p in sys.argv[5].split(",")] if len(sys.argv) > 5 else []
    sql = open(path).read()
    conn = flight_sql.connect(uri, autocommit=True)
    cur = conn.cursor()

    def run():
        cur.execute(sql)
        return cur.fetch_arrow_table().num_rows

    for _ in range(10):
        run()
    before = [counters(p) for p in pids]
    times = []
    for _ in range(runs):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        run()
        times.append((time.perf_counter() - t) * 1e3)
    after = [counters(p) for p in pids]
    print(f"pause {pause} s: median {statistics.median(times):.2f} ms")
    for pid, (f0, c0), (f1, c1) in zip(pids, before, after):
        print(f"  {pid}: {(c1 - c0) * 1e3 / runs:.2f} ms CPU, {(f1 - f0) / runs:.1f} faults a run")
    cur.close()
    conn.close()


if __name__ == "__main__":
    main()
