#!/usr/bin/env python3
"""Prints DuckDB's answer to a query over TPC-H lineitem as CSV, in the form
of tests/tpch/answers/*.csv (decimals at their scale, dates YYYY-MM-DD).

    duckdb_answer.py LINEITEM.parquet QUERY.sql > tests/tpch/answers/NAME_sfX.csv

The parquet comes from `tpchgen-cli parquet -s X -T lineitem` (the generator
the `tpchgen` crate wraps), so DuckDB answers over the same rows Quarry loads.
Needs the `duckdb` package (the anchors' venv has it).
"""
import csv
import sys

import duckdb

parquet, query = sys.argv[1], open(sys.argv[2]).read()
con = duckdb.connect()
con.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{parquet}')")
cur = con.execute(query)
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow([d[0] for d in cur.description])
for row in cur.fetchall():
    out.writerow(["" if v is None else str(v) for v in row])
