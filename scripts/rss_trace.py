#!/usr/bin/env python3
r"""Every compute process's resident memory while one query runs.

Runs one SQL file through `quarry sql` against ADDR and samples VmRSS of
each running `quarry compute` process every 50 ms until the query ends;
prints about 40 of the samples (seconds, then MB per process) and each
process's largest. What issue 43's memory spread is made of: how much a
query grows each process, against what each process holds before it
(`scripts/mpp_memory.sh` gives the peaks alone).

    "$QUARRY_VENV/bin/python" scripts/rss_trace.py http://127.0.0.1:PORT \
        tests/tpch/queries/q9.sql ["SET mpp = 'off'"]

The optional third argument runs first on the same connection. QUARRY_BIN
picks the binary (default: the release build in CARGO_TARGET_DIR).
Linux only.
"""
import os
import subprocess
import sys
import time


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    addr, path = sys.argv[1], sys.argv[2]
    setup = sys.argv[3] if len(sys.argv) > 3 else ""
    binary = os.environ.get("QUARRY_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/quarry-target")),
        "release", "quarry")
    pids = subprocess.run(["pgrep", "-f", "quarry[.a-z0-9]* compute"],
                          capture_output=True, text=True).stdout.split()
    sql = open(path).read().strip().rstrip(";")
    if setup:
        sql = f"{setup}; {sql}"
    t0 = time.time()
    query = subprocess.Popen([binary, "sql", "--addr", addr, sql], stdout=subprocess.DEVNULL)
    samples = []
    while query.poll() is None:
        samples.append((time.time() - t0, [rss_mb(p) for p in pids]))
        time.sleep(0.05)
    samples.append((time.time() - t0, [rss_mb(p) for p in pids]))
    step = max(1, len(samples) // 40)
    for t, row in samples[::step]:
        print(f"{t:6.2f} " + " ".join(f"{m:5d}" for m in row))
    print("largest (MB):", dict(zip(pids, (max(s[1][i] for s in samples) for i in range(len(pids))))))
    sys.exit(query.returncode)


if __name__ == "__main__":
    main()
