#!/usr/bin/env python3
"""Fill in the expected answers of Quarry's sqllogictest files from
PostgreSQL 15, never from Quarry.

    scripts/slt_answers.sh [FILE.slt ...]     (default: tests/slt/*.slt)

Each file runs in a fresh PostgreSQL database, record by record:

* `statement ok` must succeed in PostgreSQL too, and `statement error
  <regex>` must fail there too (the regex is Quarry's own message, written
  by hand: it is what a Quarry user reads, and no other engine words it
  the same way);
* every `query <letters> [nosort|rowsort|valuesort]` record's results are
  replaced by PostgreSQL's, printed as SQLite's runner prints them
  (src/slt.rs does the same on Quarry's side): NULL as `NULL`; `I` an
  integer (truncated toward zero); `R` `%.3f`; `T` the text, `(empty)`
  for an empty string, `true`/`false` for booleans, non-printing
  characters as `@`; one row per line, values separated by a space;
* `query error <regex>` must fail in PostgreSQL;
* records under `onlyif quarry` are Quarry's alone (EXPLAIN output, SHOW
  TABLES): PostgreSQL skips them and their hand-written expectations are
  kept; records under `skipif postgresql` are skipped here and kept too
  (each says why in a comment).

A file that PostgreSQL answers differently from what it holds is
rewritten, and the script says which records changed (review them with
git diff). The connection is a scratch server started by
scripts/slt_answers.sh (PGHOST/PGPORT in the environment).
"""

import datetime
import decimal
import os
import re
import sys

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt(value, letter):
    if value is None:
        return "NULL"
    if letter == "I":
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, (int,)):
            return str(value)
        if isinstance(value, (float, decimal.Decimal)):
            return str(int(value))  # toward zero, as sqlite3_column_int
        m = re.match(r"\s*[-+]?\d+", str(value))
        return str(int(m.group(0))) if m else "0"
    if letter == "R":
        if isinstance(value, bool):
            value = int(value)
        try:
            return "%.3f" % float(value)
        except (TypeError, ValueError):
            return "0.000"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    else:
        text = str(value)
    if text == "":
        return "(empty)"
    return "".join(c if " " <= c <= "~" else "@" for c in text)


class Record:
    """One record: its lines as written, and what the oracle needs."""

    def __init__(self, lines):
        self.lines = lines
        self.conditions = []
        self.kind = None
        i = 0
        while i < len(lines):
            words = lines[i].split()
            if not words or words[0].startswith("#"):
                i += 1
                continue
            if words[0] in ("skipif", "onlyif"):
                self.conditions.append((words[0], words[1]))
                i += 1
                continue
            break
        self.head_at = i
        if i >= len(lines):
            return
        words = lines[i].split()
        self.kind = words[0]
        self.words = words
        body = lines[i + 1 :]
        if "----" in body:
            at = body.index("----")
            self.sql, self.results = body[:at], body[at + 1 :]
        else:
            self.sql, self.results = body, None
        self.sql = "\n".join(self.sql)

    def runs_on_postgres(self):
        for cond, engine in self.conditions:
            if cond == "onlyif" and engine != "postgresql":
                return False
            if cond == "skipif" and engine == "postgresql":
                return False
        return True


def records(text):
    out, cur = [], []
    for line in text.split("\n"):
        if line.strip() == "":
            if cur:
                out.append(Record(cur))
                cur = []
            out.append(None)  # a blank line, kept
        else:
            cur.append(line)
    if cur:
        out.append(Record(cur))
    return out


def run(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else None


def complete(path, dsn_base):
    text = open(path).read()
    db = "slt_" + re.sub(r"\W", "_", os.path.basename(path))[:40]
    with psycopg.connect(dsn_base + " dbname=postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
        admin.execute(f'CREATE DATABASE "{db}"')
    changed, problems = 0, []
    out = []
    with psycopg.connect(dsn_base + f" dbname={db}", autocommit=True) as conn:
        for rec in records(text):
            if rec is None:
                out.append("")
                continue
            if rec.kind is None or not rec.runs_on_postgres():
                out.extend(rec.lines)
                continue
            where = f"{path}:{rec.lines[rec.head_at]}: {rec.sql.splitlines()[0] if rec.sql else ''}"
            if rec.kind == "statement":
                try:
                    run(conn, rec.sql)
                    if rec.words[1] == "error":
                        problems.append(f"{where}: PostgreSQL accepts what Quarry should refuse")
                except psycopg.Error as e:
                    if rec.words[1] == "ok":
                        problems.append(f"{where}: PostgreSQL refuses it: {e}".strip())
                out.extend(rec.lines)
                continue
            if rec.kind != "query":
                out.extend(rec.lines)
                continue
            if rec.words[1] == "error":
                try:
                    run(conn, rec.sql)
                    problems.append(f"{where}: PostgreSQL answers what Quarry should refuse")
                except psycopg.Error:
                    pass
                out.extend(rec.lines)
                continue
            letters = rec.words[1]
            sort = rec.words[2] if len(rec.words) > 2 else "nosort"
            try:
                rows = run(conn, rec.sql) or []
            except psycopg.Error as e:
                problems.append(f"{where}: PostgreSQL fails: {e}".strip())
                out.extend(rec.lines)
                continue
            values = [[fmt(v, letters[i] if i < len(letters) else "T") for i, v in enumerate(r)] for r in rows]
            if rows and len(rows[0]) != len(letters):
                problems.append(f"{where}: {len(rows[0])} columns, {len(letters)} type letters")
            if sort == "rowsort":
                values.sort()
            elif sort == "valuesort":
                values = sorted([[v] for r in values for v in r])
            new = [" ".join(r) for r in values]
            head = rec.lines[: rec.head_at + 1] + rec.sql.split("\n") + ["----"]
            if rec.results != new:
                changed += 1
            out.extend(head + new)
    with psycopg.connect(dsn_base + " dbname=postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
    new_text = "\n".join(out)
    if new_text != text:
        open(path, "w").write(new_text)
    return changed, problems


def main():
    files = sys.argv[1:]
    if not files:
        d = os.path.join(ROOT, "tests", "slt")
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".slt"))
    dsn = f"host={os.environ['PGHOST']} port={os.environ.get('PGPORT', '5432')} user=postgres"
    bad = False
    for f in files:
        changed, problems = complete(f, dsn)
        print(f"{os.path.relpath(f, ROOT)}: {changed} answers changed")
        for p in problems:
            print("  !! " + p)
            bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
