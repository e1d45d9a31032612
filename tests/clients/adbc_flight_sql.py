"""Python ADBC (adbc_driver_flightsql) against Quarry, unchanged client
code: TPC-H Q1 and Q6 as written, a query with bound parameters, INSERTs
with parameters (one row, and several through executemany), and the
catalog calls (get_objects, get_table_schema, get_table_types).

Usage: adbc_flight_sql.py grpc://HOST:PORT Q1_FILE Q6_FILE
(grpc+tls:// with QUARRY_CA, QUARRY_USER and QUARRY_PASSWORD set: TLS and a login)
Prints sections ("== name", then CSV lines); tests/clients.rs checks them.
"""
import datetime
import decimal
import os
import sys

import adbc_driver_flightsql.dbapi as flight_sql

uri, q1_file, q6_file = sys.argv[1:4]


def show(value):
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def section(name, cur):
    print("==", name)
    print(",".join(d[0] for d in cur.description))
    for row in cur.fetchall():
        print(",".join(show(v) for v in row))


# A secure compute (grpc+tls://): the CA and a login from the environment.
db_kwargs = {}
if os.environ.get("QUARRY_CA"):
    with open(os.environ["QUARRY_CA"]) as f:
        db_kwargs["adbc.flight.sql.client_option.tls_root_certs"] = f.read()
if os.environ.get("QUARRY_USER"):
    db_kwargs["username"] = os.environ["QUARRY_USER"]
    db_kwargs["password"] = os.environ["QUARRY_PASSWORD"]
conn = flight_sql.connect(uri, db_kwargs=db_kwargs, autocommit=True)
cur = conn.cursor()
for name, path in (("q1", q1_file), ("q6", q6_file)):
    with open(path) as f:
        cur.execute(f.read())
    section(name, cur)

cur.execute(
    "SELECT count(*) AS n FROM lineitem WHERE l_shipdate <= ? AND l_returnflag = ?",
    (datetime.date(1998, 9, 2), "R"),
)
section("bound", cur)

cur.execute("CREATE TABLE t_adbc (id BIGINT PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2))")
cur.execute("INSERT INTO t_adbc VALUES (?, ?, ?)", (1, "it's", decimal.Decimal("1.50")))
cur.executemany(
    "INSERT INTO t_adbc (id, name, amount) VALUES ($1, $2, $3)",
    [(2, "b", decimal.Decimal("2.25")), (3, None, decimal.Decimal("-3.00"))],
)
cur.execute("SELECT id, name, amount FROM t_adbc ORDER BY id")
section("inserted", cur)

print("== objects")
print("catalog,schema,table,column")
objects = conn.adbc_get_objects(depth="all", table_name_filter="t_adbc").read_all().to_pylist()
for cat in objects:
    for schema in cat["catalog_db_schemas"] or []:
        for table in schema["db_schema_tables"] or []:
            for col in table["table_columns"] or []:
                print(
                    ",".join(
                        [
                            cat["catalog_name"],
                            schema["db_schema_name"],
                            table["table_name"],
                            col["column_name"],
                        ]
                    )
                )

print("== table_schema")
print("field,type")
for field in conn.adbc_get_table_schema("t_adbc"):
    print(f"{field.name},{field.type}")

print("== table_types")
print("type")
for t in conn.adbc_get_table_types():
    print(t)

cur.close()
conn.close()
