#!/usr/bin/env python3
"""Prints DuckDB's answer to a TPC-H query as CSV, in the form of
tests/tpch/answers/*.csv (decimals at their scale, dates YYYY-MM-DD).

    duckdb_answer.py LINEITEM.parquet QUERY.sql > tests/tpch/answers/NAME_sfX.csv
    duckdb_answer.py --data DIR QUERY.sql       > tests/tpch/answers/qN_sfX.csv
    duckdb_answer.py --data DIR --types QUERY.sql > tests/tpch/answers/qN.types
    duckdb_answer.py --data DIR --types-out qN.types QUERY.sql > qN_sfX.csv   (both, one run)

The first form registers only `lineitem` (one parquet file). With --data, every
<table>.parquet in DIR (lineitem, orders, customer, part, partsupp, supplier,
nation, region) is registered as a view of that name. --types prints, instead
of the rows, one line with the DuckDB type names of the output columns, comma
separated (e.g. `VARCHAR,DECIMAL(38,2),DOUBLE,BIGINT`), so a checker knows
which columns are DOUBLE (approximate) rather than exact.

CSV form: a header of column names, then one line per row; NULL is empty,
DECIMAL is printed at its scale (str of Python's Decimal, never in exponent
form), DATE as YYYY-MM-DD, DOUBLE as Python's str(float) (shortest repr).

The parquet comes from `tpchgen-cli parquet -s X` (the generator the `tpchgen`
crate wraps), so DuckDB answers over the same rows Quarry loads. Needs the
`duckdb` package (the anchors' venv has it; see scripts/tpch_answers.sh).
"""
import argparse
import csv
import decimal
import os
import sys

import duckdb

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")


def sql_str(s):
    return "'" + s.replace("'", "''") + "'"


def cell(v):
    if v is None:
        return ""
    if isinstance(v, decimal.Decimal):
        # format 'f' == str() for every value at scale <= 6; it only differs
        # where str() would switch to exponent form (e.g. 0 at scale 7: 0E-7).
        return format(v, "f")
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", metavar="DIR", help="directory of <table>.parquet files")
    ap.add_argument("--types", action="store_true",
                    help="print the output column types (one line) instead of the rows")
    ap.add_argument("--types-out", metavar="FILE",
                    help="also write that types line to FILE (rows still go to stdout)")
    ap.add_argument("args", nargs="+", metavar="[LINEITEM.parquet] QUERY.sql")
    a = ap.parse_args()

    con = duckdb.connect()
    if a.data is not None:
        if len(a.args) != 1:
            ap.error("with --data give only QUERY.sql")
        query_path = a.args[0]
        found = 0
        for t in TABLES:
            p = os.path.join(a.data, t + ".parquet")
            if os.path.exists(p):
                con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({sql_str(p)})")
                found += 1
        if not found:
            ap.error(f"no <table>.parquet in {a.data}")
    else:
        if len(a.args) != 2:
            ap.error("give LINEITEM.parquet QUERY.sql, or --data DIR QUERY.sql")
        parquet, query_path = a.args
        con.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet({sql_str(parquet)})")

    query = open(query_path).read()
    cur = con.execute(query)
    # description's type_code is DuckDB's type name, e.g. DECIMAL(38,2)
    types = ",".join(str(d[1]) for d in cur.description)
    if a.types:
        print(types)
        return
    if a.types_out:
        with open(a.types_out, "w") as f:
            f.write(types + "\n")
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow([d[0] for d in cur.description])
    for row in cur.fetchall():
        out.writerow([cell(v) for v in row])


if __name__ == "__main__":
    main()
