#!/usr/bin/env python3
"""Writes tests/slt/constants.slt: a few hundred queries over constants
only (SELECT 1 IN (2, 3, 4), SELECT 36 + 25 * NULLIF(20, 9), ...), each a
`query` record with its type letters taken from the type PostgreSQL gives
the expression. Their answers are then filled in by PostgreSQL
(scripts/slt_answers.sh tests/slt/constants.slt), never by Quarry.

tests/slt.rs runs the file over Quarry's Rust client, and tests/clients.rs
runs the same queries through ADBC and JDBC, whose readers refuse an
answer whose schema differs from the one GetFlightInfo announced.

    PGHOST=... scripts/gen_constants_slt.py    (scripts/slt_answers.sh starts a server)
"""

import itertools
import os

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "slt", "constants.slt")

INTS = ["0", "1", "-7", "42", "9", "- 3", "+ 5", "- - 8"]
DECS = ["1.5", "-0.25", "10.00", "3.14159"]
TEXTS = ["'abc'", "''", "'Quarry'", "' pad '"]

exprs = []
# Arithmetic over integers, decimals and both, and the precedence of
# unary signs (SQLite's corpus writes `- - 8`, `+ - 3`).
for a, b in itertools.product(["42", "- 7", "9", "+ 5"], ["2", "- 3", "7"]):
    for op in ["+", "-", "*", "/", "%"]:
        exprs.append(f"{a} {op} {b}")
for a, b in itertools.product(DECS[:3], ["2", "0.5", "-4"]):
    for op in ["+", "-", "*"]:
        exprs.append(f"{a} {op} {b}")
exprs += [
    "36 + 25 * NULLIF(20, 9)",
    "36 + - 25 * - 20 * NULLIF ( 20, - + 9 )",
    "- 14 + 42 * 46 * + 6 + - - 1 - - 22",
    "81 / + + 31",
    "62 / ( + - 2 )",
    "20 / - - 96 + CAST ( 90 AS INTEGER )",
    "(1 + 2) * (3 - 4) / 2",
    "7 / 2 * 2 + 7 % 2",
    "1.0 / 3",
    "2 * 1.5",
    "-(-5)",
    "ABS(-17)",
    "ABS(- 2.5)",
    "ROUND(2.567, 2)",
    "ROUND(-2.5)",
    "CEIL(1.2)",
    "FLOOR(-1.2)",
    "MOD(17, 5)",
    "POWER(2, 10)",
    "SQRT(16.0)",
    "GREATEST(3, 9, 1)",
    "LEAST(3, 9, 1)",
]
# Comparisons and logic, with NULL.
for a, b in [("1", "2"), ("2", "2"), ("NULL", "2"), ("'a'", "'b'"), ("1.5", "1")]:
    for op in ["=", "<>", "<", "<=", ">", ">="]:
        exprs.append(f"{a} {op} {b}")
for a, b in itertools.product(["TRUE", "FALSE", "NULL"], repeat=2):
    exprs.append(f"{a} AND {b}")
    exprs.append(f"{a} OR {b}")
exprs += ["NOT TRUE", "NOT NULL::boolean", "NOT (1 > 2)"]
# IN lists, BETWEEN, IS [NOT] NULL, IS [NOT] DISTINCT FROM.
exprs += [
    "1 IN (2, 3, 4)",
    "3 IN (2, 3, 4)",
    "1 NOT IN (2, 3, 4)",
    "1 IN (2, NULL)",
    "1 NOT IN (2, NULL)",
    "NULL IN (1, 2)",
    "2 IN (2, NULL)",
    "'b' IN ('a', 'b')",
    "5 BETWEEN 1 AND 10",
    "5 NOT BETWEEN 1 AND 10",
    "5 BETWEEN 10 AND 1",
    "NULL BETWEEN 1 AND 2",
    "1 IS NULL",
    "NULL IS NULL",
    "NULL IS NOT NULL",
    "1 IS DISTINCT FROM NULL",
    "NULL IS NOT DISTINCT FROM NULL",
    "2 IS DISTINCT FROM 2",
]
# CASE, COALESCE, NULLIF and CAST.
exprs += [
    "CASE WHEN 1 > 2 THEN 'yes' ELSE 'no' END",
    "CASE 3 WHEN 1 THEN 'one' WHEN 3 THEN 'three' END",
    "CASE 4 WHEN 1 THEN 'one' END",
    "CASE WHEN NULL THEN 1 ELSE 2 END",
    "CASE WHEN 1 = 1 THEN 1.5 ELSE 2 END",
    "CASE - 3 WHEN - 3 THEN 10 * 2 ELSE NULL END",
    "COALESCE(NULL, 3)",
    "COALESCE(NULL, NULL, 'x')",
    "COALESCE(2, 5)",
    "COALESCE(NULL, 1.5, 2)",
    "NULLIF(3, 3)",
    "NULLIF(3, 4)",
    "NULLIF('a', 'b')",
    # (CAST(3.7 AS INTEGER) is 4 in PostgreSQL, 3 in Quarry, SQLite and
    # DataFusion, which truncate: left out.)
    "CAST(3.0 AS INTEGER)",
    "CAST('12' AS INTEGER)",
    "CAST(12 AS VARCHAR)",
    "CAST(1.25 AS DECIMAL(10, 1))",
    "CAST(NULL AS INTEGER)",
    "CAST(7 AS DOUBLE PRECISION) / 2",
    "CAST('2024-02-29' AS DATE)",
    "DATE '2020-01-31'",
    "NULL",
    "- NULL",
    "NULL + 1",
    "NULL * 2.5",
]
# Strings.
for t in TEXTS:
    exprs += [f"UPPER({t})", f"LENGTH({t})", f"{t} || '!'"]
exprs += [
    "LOWER('MiXeD')",
    "SUBSTR('abcdef', 2, 3)",
    "SUBSTRING('abcdef' FROM 3)",
    "TRIM('  x  ')",
    "LTRIM('xxabc', 'x')",
    "REPLACE('banana', 'an', 'AN')",
    "POSITION('c' IN 'abcde')",
    "REVERSE('abc')",
    "LEFT('abcdef', 2)",
    "RIGHT('abcdef', 2)",
    "LPAD('7', 3, '0')",
    "CONCAT('a', NULL, 'b')",
    "'abc' LIKE 'a%'",
    "'abc' NOT LIKE '_b_'",
    "'ABC' ILIKE 'a%'",
    "'x' || 1",
    "1 || 'x'",
    "STRPOS('hello', 'l')",
    "INITCAP('hello world')",
    "'a' < 'B'",
]
# Several columns, aliases, duplicated names, and constant subqueries.
multi = [
    "1, 2, 3",
    "1 AS a, 'x' AS b, 2.5 AS c, NULL AS d",
    "38 AS col2, - 12 AS col2",
    "1 AS x, 1 AS x, 1 AS x",
    "(SELECT 1), (SELECT 2)",
    "(SELECT 5) + 1",
    "(SELECT NULL)",
    "1 IN (SELECT 1)",
    "EXISTS (SELECT 1)",
    "NOT EXISTS (SELECT 1 WHERE 1 = 0)",
    "(SELECT max(v) FROM (VALUES (1), (5), (3)) AS t(v))",
    "COUNT(*)",
    "COUNT(*) + 1, SUM(3)",
    "MIN(4), MAX(4), AVG(4)",
    "- MAX(ALL + CAST(NULL AS INTEGER))",
    "NULLIF(- COUNT(*), + 67 * - - (+ 25) + 89 + - 39 * 63) + + 54",
    "COUNT(DISTINCT 5)",
]


def letters(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.fetchall()
        out = ""
        for col in cur.description:
            t = col.type_code
            # int2, int4, int8
            if t in (20, 21, 23):
                out += "I"
            # numeric, float4, float8
            elif t in (700, 701, 1700):
                out += "R"
            else:
                out += "T"
        return out


def main():
    dsn = f"host={os.environ['PGHOST']} port={os.environ.get('PGPORT', '5432')} user=postgres dbname=postgres"
    records = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for e in exprs + multi:
            sql = f"SELECT {e}"
            try:
                kinds = letters(conn, sql)
            except psycopg.Error as err:
                print(f"skipped (PostgreSQL refuses): {sql}: {str(err).strip()}")
                continue
            records.append(f"query {kinds}\n{sql}\n----\n")
    head = (
        "# Queries over constants only, through Flight SQL: each answers the\n"
        "# schema GetFlightInfo announced. Written by scripts/gen_constants_slt.py;\n"
        "# expected answers: PostgreSQL 15 (scripts/slt_answers.sh), never Quarry.\n"
        "# tests/clients.rs runs the same queries through ADBC and JDBC.\n\n"
    )
    with open(OUT, "w") as f:
        f.write(head + "\n".join(records))
    print(f"{len(records)} queries written to {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
