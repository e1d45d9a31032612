"""asyncpg (from PyPI; every value in binary) and SQLAlchemy 2 (over
psycopg) against Quarry's PostgreSQL listener, unchanged client code:
TPC-H Q6, prepared statements with typed parameters, every type in
binary, a transaction, and SQLAlchemy's inspector (tables, columns,
primary key, indexes) and a query.

Usage: pg_asyncpg.py HOST PORT Q6_FILE
Prints sections ("== name", then CSV lines); tests/postgres.rs checks them.
"""
import asyncio
import datetime
import decimal
import sys

import asyncpg
import sqlalchemy

host, port, q6_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def show(value):
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def section(name, records):
    print("==", name)
    if records:
        print(",".join(records[0].keys()))
    for r in records:
        print(",".join(show(v) for v in r.values()))


async def main():
    conn = await asyncpg.connect(host=host, port=port, user="root", database="quarry")
    with open(q6_file) as f:
        section("q6", await conn.fetch(f.read()))
    stmt = await conn.prepare(
        "SELECT count(*) AS n FROM lineitem WHERE l_quantity < $1 AND l_shipdate >= $2"
    )
    print("== prepared parameter types")
    print("type")
    for t in stmt.get_parameters():
        print(t.name)
    section("prepared", await stmt.fetch(decimal.Decimal("24"), datetime.date(1994, 1, 1)))
    await conn.execute(
        "CREATE TABLE pg_async (id BIGINT PRIMARY KEY, d DECIMAL(10,3), f DOUBLE,"
        " t VARCHAR, dt DATE)"
    )
    status = await conn.execute(
        "INSERT INTO pg_async VALUES ($1, $2, $3, $4, $5)",
        1, decimal.Decimal("-1.250"), 0.5, "é", datetime.date(2000, 2, 29),
    )
    print("== insert status")
    print("status")
    print(status)
    async with conn.transaction():
        await conn.execute("INSERT INTO pg_async (id) VALUES (2)")
    # Indexes for SQLAlchemy's inspector (below) to find.
    await conn.execute("CREATE INDEX pg_async_dt_t ON pg_async (dt, t)")
    await conn.execute("CREATE UNIQUE INDEX pg_async_f ON pg_async (f)")
    section("types", await conn.fetch("SELECT * FROM pg_async ORDER BY id"))
    section("computed", await conn.fetch(
        "SELECT CAST(3 AS SMALLINT) AS s, CAST(-7 AS INT) AS i, CAST(0.25 AS REAL) AS r,"
        " TIMESTAMP '1999-12-31 23:59:59.999999' AS ts, INTERVAL '1 day' AS iv, 1 > 2 AS b"))
    # executemany is one implicit transaction (asyncpg sends one Sync):
    # a duplicate key in its last row leaves none of its rows.
    await conn.execute("CREATE TABLE pg_async_many (id BIGINT PRIMARY KEY)")
    await conn.execute("INSERT INTO pg_async_many VALUES (1)")
    try:
        await conn.executemany("INSERT INTO pg_async_many VALUES ($1)", [(2,), (3,), (1,)])
        failed = "none"
    except asyncpg.PostgresError as e:
        failed = e.sqlstate
    left = await conn.fetchval("SELECT count(*) FROM pg_async_many")
    await conn.executemany("INSERT INTO pg_async_many VALUES ($1)", [(4,), (5,)])
    print("== executemany")
    print("failed,left,after_good")
    print(f"{failed},{left},{await conn.fetchval('SELECT count(*) FROM pg_async_many')}")
    # A parameter the statement casts is typed by its cast, as
    # PostgreSQL infers it (asyncpg encodes by that type).
    stmt = await conn.prepare("SELECT $1::numeric * 2 AS x, CAST($2 AS DATE) AS d")
    print("== cast parameter types")
    print("types,x,d")
    row = await stmt.fetchrow(decimal.Decimal("1.25"), datetime.date(2024, 2, 29))
    print(f"{' '.join(t.name for t in stmt.get_parameters())},{row['x'].normalize()},{row['d']}")
    await conn.close()


asyncio.run(main())

engine = sqlalchemy.create_engine(f"postgresql+psycopg://root@{host}:{port}/quarry")
inspector = sqlalchemy.inspect(engine)
print("== sqlalchemy tables")
print("name")
for name in sorted(inspector.get_table_names()):
    print(name)
print("== sqlalchemy columns")
print("name,type,nullable")
for c in inspector.get_columns("pg_async"):
    print(f"{c['name']},{c['type']!r},{c['nullable']}")
print("== sqlalchemy keys")
print("what,value")
pk = inspector.get_pk_constraint("pg_async")
print(f"primary key,{pk['name']} {' '.join(pk['constrained_columns'])}")
for ix in inspector.get_indexes("pg_async"):
    print(f"index,{ix['name']} {' '.join(ix['column_names'])} unique={ix['unique']}")
print(f"unique constraints,{len(inspector.get_unique_constraints('pg_async'))}")
print(f"foreign keys,{len(inspector.get_foreign_keys('pg_async'))}")
print(f"check constraints,{len(inspector.get_check_constraints('pg_async'))}")
with engine.connect() as c:
    rows = c.execute(sqlalchemy.text("SELECT count(*) AS n FROM pg_async WHERE id > :id"), {"id": 0})
    print("== sqlalchemy query")
    print("n")
    print(rows.scalar())
