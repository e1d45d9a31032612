"""Transactions through Python ADBC (adbc_driver_flightsql), unchanged
client code: PEP 249's default autocommit off, commit() and rollback().

Usage: adbc_transactions.py grpc://HOST:PORT
Prints one line per check; tests/clients.rs compares them.
"""
import sys

import adbc_driver_flightsql.dbapi as flight_sql

uri = sys.argv[1]


def rows(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    out = cur.fetchall()
    cur.close()
    return out


other = flight_sql.connect(uri, autocommit=True)
cur = other.cursor()
cur.execute("CREATE TABLE acct (id BIGINT PRIMARY KEY, v BIGINT)")
cur.execute("INSERT INTO acct VALUES (1, 100), (2, 100)")
cur.close()
read = "SELECT v FROM acct ORDER BY id"

conn = flight_sql.connect(uri)  # autocommit off, as PEP 249 says
cur = conn.cursor()
cur.execute("UPDATE acct SET v = v - 30 WHERE id = 1")
cur.execute("UPDATE acct SET v = v + 30 WHERE id = 2")
print("inside", rows(conn, read))
print("others before commit", rows(other, read))
conn.commit()
print("others after commit", rows(other, read))
cur.execute("SELECT v FROM acct WHERE id = 1 FOR UPDATE")
print("locked", cur.fetchall())
cur.execute("DELETE FROM acct WHERE id = 2")
print("inside before rollback", rows(conn, read))
conn.rollback()
print("after rollback", rows(other, read))
cur.close()
conn.close()
other.close()
