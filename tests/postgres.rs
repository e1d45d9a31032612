//! PostgreSQL's wire protocol, through real PostgreSQL clients against a
//! playground's compute process: psql (the Debian package), psycopg 3,
//! asyncpg and SQLAlchemy (from PyPI, in `$QUARRY_VENV`; `scripts/setup.sh`
//! installs them). Answers are checked against DuckDB's TPC-H answers and
//! against what PostgreSQL itself answers (type OIDs, command tags,
//! SQLSTATEs) — in one test, against a PostgreSQL server the test starts
//! (the postgresql package's `initdb`), value for value on the wire.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The venv's Python with psycopg, asyncpg and SQLAlchemy.
fn python() -> PathBuf {
    venv_python(
        "psycopg, asyncpg, sqlalchemy",
        "psycopg, asyncpg and SQLAlchemy",
    )
}

/// psql's output and status for `args` (and `stdin`, its script with
/// `-f -`), against `addr` as root.
fn psql(addr: &str, stdin: &str, args: &[&str]) -> (bool, String, String) {
    use std::io::Write;
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let mut child = Command::new("psql")
        .args(["-X", "-h", host, "-p", port, "-U", "root", "-d", "quarry"])
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql (the postgresql-client package) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// psql's output of a script that must succeed (`-v ON_ERROR_STOP=1`).
fn psql_ok(addr: &str, args: &[&str]) -> String {
    let mut all = vec!["-v", "ON_ERROR_STOP=1"];
    all.extend_from_slice(args);
    let (ok, out, err) = psql(addr, "", &all);
    assert!(ok, "psql {args:?} failed:\n{out}\n{err}");
    out
}

fn q(name: &str) -> String {
    repo_path(&format!("tests/tpch/queries/{name}.sql"))
        .display()
        .to_string()
}

#[test]
fn psql_lists_describes_answers_tpch_and_runs_transactions() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let addr = pg.postgres.clone();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");

    // \l, \dt and \d: the catalog queries psql 15 sends.
    let list = psql_ok(&addr, &["-c", "\\l"]);
    assert!(list.contains("quarry"), "{list}");
    let tables = psql_ok(&addr, &["-c", "\\dt"]);
    for t in ["lineitem", "orders", "customer", "nation"] {
        assert!(tables.contains(t), "\\dt lacks {t}:\n{tables}");
    }
    let described = psql_ok(&addr, &["-c", "\\d lineitem"]);
    for col in ["l_orderkey", "l_extendedprice", "l_shipdate", "l_comment"] {
        assert!(
            described.contains(col),
            "\\d lineitem lacks {col}:\n{described}"
        );
    }

    // TPC-H Q1 and Q6 as DuckDB answers them (unaligned, comma-separated).
    for name in ["q1", "q6"] {
        let out = psql_ok(
            &addr,
            &["-A", "-F", ",", "-P", "footer=off", "-f", &q(name)],
        );
        let (want, _) = quarry::answers::answer(name, 0.01).unwrap();
        assert_csv_matches(&out, want);
    }

    // A transaction: its rows are its own until COMMIT; ROLLBACK drops them.
    let script = "CREATE TABLE psql_t (id BIGINT PRIMARY KEY, v VARCHAR);\n\
                  BEGIN;\n\
                  INSERT INTO psql_t VALUES (1, 'one'), (2, 'two');\n\
                  SELECT count(*) AS inside FROM psql_t;\n\
                  ROLLBACK;\n\
                  SELECT count(*) AS after_rollback FROM psql_t;\n\
                  BEGIN;\n\
                  INSERT INTO psql_t VALUES (3, 'three');\n\
                  UPDATE psql_t SET v = 'THREE' WHERE id = 3;\n\
                  COMMIT;\n\
                  SELECT id, v FROM psql_t;\n";
    let (ok, out, err) = psql(
        &addr,
        script,
        &["-v", "ON_ERROR_STOP=1", "-A", "-F", ",", "-f", "-"],
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("INSERT 0 2"), "{out}");
    assert!(out.contains("inside\n2\n"), "{out}");
    assert!(out.contains("after_rollback\n0\n"), "{out}");
    assert!(out.contains("UPDATE 1"), "{out}");
    assert!(out.ends_with("id,v\n3,THREE\n(1 row)\n"), "{out}");

    // Several statements in one Query are one transaction: the second
    // fails, and the first's row is not written.
    let (ok, _, err) = psql(
        &addr,
        "",
        &[
            "-c",
            "INSERT INTO psql_t VALUES (20, 'twenty'); INSERT INTO no_such_table VALUES (1)",
        ],
    );
    assert!(!ok && err.contains("no_such_table"), "{err}");
    let after = psql_ok(
        &addr,
        &["-At", "-c", "SELECT count(*) FROM psql_t WHERE id = 20"],
    );
    assert_eq!(after, "0\n");

    // The session's TimeZone: TIMESTAMPTZ literals are read in it and
    // written in it, with that instant's offset, as in PostgreSQL.
    let zoned = psql_ok(
        &addr,
        &[
            "-At",
            "-c",
            "SET TimeZone = 'Asia/Kolkata'",
            "-c",
            "SELECT CAST('2024-01-15 12:00:00' AS TIMESTAMPTZ), \
             CAST('2024-01-15 12:00:00+00' AS TIMESTAMPTZ), current_setting('timezone')",
        ],
    );
    assert_eq!(
        zoned,
        "SET\n2024-01-15 12:00:00+05:30|2024-01-15 17:30:00+05:30|Asia/Kolkata\n"
    );
    let (ok, _, err) = psql(&addr, "", &["-c", "SET TimeZone = '+5'"]);
    assert!(!ok && err.contains("name the zone"), "{err}");
    // A SET in a transaction that rolls back is taken back; SET LOCAL
    // lasts until the transaction ends (as in PostgreSQL).
    let scoped = psql_ok(
        &addr,
        &[
            "-At",
            "-c",
            "BEGIN",
            "-c",
            "SET TimeZone = 'Europe/Berlin'",
            "-c",
            "ROLLBACK",
            "-c",
            "SHOW TimeZone",
            "-c",
            "BEGIN",
            "-c",
            "SET LOCAL application_name = 'inside'",
            "-c",
            "SELECT current_setting('application_name')",
            "-c",
            "COMMIT",
            "-c",
            "SELECT current_setting('application_name') = 'psql'",
            // A session SET or RESET after a SET LOCAL wins over it (what
            // PostgreSQL 15 answered: `after` twice, then not `x`).
            "-c",
            "BEGIN",
            "-c",
            "SET LOCAL application_name = 'inside'",
            "-c",
            "SET application_name = 'after'",
            "-c",
            "SHOW application_name",
            "-c",
            "COMMIT",
            "-c",
            "SHOW application_name",
            "-c",
            "BEGIN",
            "-c",
            "SET LOCAL application_name = 'x'",
            "-c",
            "RESET application_name",
            "-c",
            "SELECT current_setting('application_name') <> 'x'",
            "-c",
            "COMMIT",
        ],
    );
    assert_eq!(
        scoped,
        "BEGIN\nSET\nROLLBACK\nUTC\nBEGIN\nSET\ninside\nCOMMIT\nt\n\
         BEGIN\nSET\nSET\nafter\nCOMMIT\nafter\nBEGIN\nSET\nRESET\nt\nCOMMIT\n"
    );

    // \d lists the primary key and the indexes, as psql lists
    // PostgreSQL's.
    psql_ok(&addr, &["-c", "CREATE INDEX psql_t_v ON psql_t (v, id)"]);
    let described = psql_ok(&addr, &["-c", "\\d psql_t"]);
    assert!(
        described.ends_with(
            "Indexes:\n    \"psql_t_pkey\" PRIMARY KEY, btree (id)\n    \"psql_t_v\" btree (v, id)\n\n"
        ),
        "{described}"
    );

    // COPY FROM STDIN, CSV with a header and PostgreSQL's text format
    // (escapes, \N), through psql's \copy; a bad value names its line
    // and column.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("c.csv");
    let mut text = String::from("id,name,amount,day\n");
    for i in 1..=5000 {
        text.push_str(&format!(
            "{i},\"n, {i}\",{i}.25,2020-01-{:02}\n",
            i % 28 + 1
        ));
    }
    std::fs::write(&csv, text).unwrap();
    let tsv = dir.path().join("c.txt");
    std::fs::write(
        &tsv,
        "9001\ttab\\there\t1.50\t2021-02-03\n9002\t\\N\t\\N\t\\N\n",
    )
    .unwrap();
    let script = format!(
        "CREATE TABLE copied (id BIGINT PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2), day DATE);\n\
         \\copy copied FROM '{}' WITH (FORMAT csv, HEADER)\n\
         \\copy copied FROM '{}'\n\
         SELECT count(*) AS n, sum(amount) AS s, max(day) AS d FROM copied;\n\
         SELECT id, name, amount FROM copied WHERE id > 9000 ORDER BY id;\n",
        csv.display(),
        tsv.display()
    );
    let (ok, out, err) = psql(
        &addr,
        &script,
        &["-v", "ON_ERROR_STOP=1", "-A", "-F", ",", "-f", "-"],
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("COPY 5000\nCOPY 2\n"), "{out}");
    assert!(
        out.contains("n,s,d\n5002,12503751.50,2021-02-03\n"),
        "{out}"
    );
    assert!(
        out.contains("id,name,amount\n9001,tab\there,1.50\n9002,,\n"),
        "{out}"
    );
    let (ok, _, err) = psql(
        &addr,
        "9003\tx\tnotanumber\t2021-02-03\n",
        &["-c", "\\copy copied FROM STDIN"],
    );
    assert!(!ok);
    assert!(err.contains("COPY line 1, column amount"), "{err}");

    // An error in a transaction block: 25P02 until ROLLBACK; the SQLSTATEs
    // of the user's errors, as psql shows them (VERBOSITY verbose).
    let script = "\\set VERBOSITY verbose\n\
                  BEGIN;\n\
                  SELECT * FROM no_such_table;\n\
                  SELECT 1;\n\
                  ROLLBACK;\n\
                  SELECT 1 / 0;\n\
                  SELEC 1;\n\
                  SELECT sum(x) FROM (VALUES (9223372036854775807), (1)) t(x);\n";
    let (_, out, err) = psql(&addr, script, &["-f", "-"]);
    for code in ["42P01", "25P02", "22012", "42601", "22003"] {
        assert!(
            err.contains(&format!("ERROR:  {code}")),
            "no {code} in:\n{out}\n{err}"
        );
    }
}

#[test]
fn psycopg_asyncpg_and_sqlalchemy_run_unchanged() {
    let python = python();
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let (host, port) = pg.postgres.rsplit_once(':').unwrap();
    let conninfo = format!("host={host} port={port} user=root dbname=quarry");
    let out = Command::new(&python)
        .arg(repo_path("tests/clients/pg_psycopg.py"))
        .args([&conninfo, &q("q1"), &q("q6")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pg_psycopg.py failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = sections(&text);
    assert_eq!(
        section(&s, "server"),
        "version,server_version\n160006,16.6\n"
    );
    for name in ["q1", "q6"] {
        let (want, _) = quarry::answers::answer(name, 0.01).unwrap();
        assert_csv_matches(section(&s, name), want);
        assert_csv_matches(section(&s, &format!("{name} binary")), want);
    }
    // Q1's count_order of R rows is the bound count for R.
    let (q1, _) = quarry::answers::answer("q1", 0.01).unwrap();
    let returned: i64 = q1
        .lines()
        .filter(|l| l.starts_with("R,"))
        .map(|l| l.rsplit(',').next().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(section(&s, "bound R"), format!("n\n{returned}\n"));
    assert_eq!(
        section(&s, "insert tag"),
        "rowcount,statusmessage\n1,INSERT 0 1\n"
    );
    assert_eq!(
        section(&s, "update tag"),
        "rowcount,statusmessage\n1,UPDATE 1\n"
    );
    // Text and binary give the same values, typed by PostgreSQL's OIDs:
    // int8 20, float8 701, numeric 1700, text 25, date 1082, int4 23,
    // int2 21, float4 700, timestamp 1114, bool 16.
    for suffix in ["", " binary"] {
        assert_eq!(
            section(&s, &format!("types{suffix}")),
            "id,f,d,t,dt\n1,2.5,-12.34,it's,1998-12-01\n2,,,,\n"
        );
        assert_eq!(
            section(&s, &format!("types oids{suffix}")),
            "name,oid\nid,20\nf,701\nd,1700\nt,25\ndt,1082\n"
        );
        assert_eq!(
            section(&s, &format!("computed{suffix}")),
            "i,s,r,ts,n,big,b\n-7,3,0.25,2020-01-02 03:04:05.600000,,1e+20,True\n"
        );
        assert_eq!(
            section(&s, &format!("computed oids{suffix}")),
            "name,oid\ni,23\ns,21\nr,700\nts,1114\nn,23\nbig,701\nb,16\n"
        );
    }
    assert_eq!(section(&s, "pipeline"), "a,b,c\n1,42,x\n");
    // An extended batch is one implicit transaction: none of a failed
    // pipeline's or executemany's rows stay; a good pipeline's all do.
    assert_eq!(
        section(&s, "extended batch"),
        "failed,after_failed,after_good,failed_many,after_many,status\n\
         22012,1,3,23505,3,IDLE\n"
    );
    // COPY FROM STDIN in binary: psycopg's rows, and Quarry's own binary
    // COPY TO fed back, the same rows; data cut off is 22P04.
    assert_eq!(
        section(&s, "binary copy"),
        "rows,first,second,round_trip\n\
         5002,'1 1.5 -12.25 1998-12-01 tab\\there','2    ',True\n"
    );
    assert_eq!(
        section(&s, "binary copy cut off"),
        "22P04 COPY binary data: the data ends inside row 1\n"
    );
    // A held write, then a Bind that pgwire refuses: the write's
    // CommandComplete, the error, ReadyForQuery, and the write undone.
    assert_eq!(
        section(&s, "batch failed in the protocol"),
        "replies,left\n12CEZ,0\n"
    );
    // A declared NUMERIC types `v * $1` as NUMERIC (OID 1700), in both
    // formats; one finer than the cast keeps is refused, not rounded.
    assert_eq!(
        section(&s, "declared types"),
        "format,oid,value\ntext,1700,25.0000000000\nbinary,1700,25.0000000000\n\
         where,int2,25.0000000000\ntoo fine,22003\n"
    );
    assert_eq!(
        section(&s, "transaction"),
        "inside,outside,status,after_rollback,after_commit,status_after\n1,0,INTRANS,0,1,IDLE\n"
    );
    assert_eq!(
        section(&s, "failed transaction"),
        "first,status,second,after_rollback\n42P01,INERROR,25P02,7\n"
    );
    assert_eq!(section(&s, "conflict"), "sqlstate,value\n40001,100.0\n");
    assert_eq!(
        section(&s, "errors"),
        "case,sqlstate\nsyntax,42601\nunknown table,42P01\nunknown column,42703\n\
         division by zero,22012\noverflow,22003\nunknown setting,42704\n"
    );
    assert_eq!(
        section(&s, "cancel"),
        "sqlstate,within_30s,after\n57014,True,1\n"
    );
    assert_eq!(section(&s, "settings"), "this,other\none,\n");
    assert_eq!(
        section(&s, "current_setting"),
        "this,other,this_path\none,,public\n"
    );
    // A SET of a reported setting is reported (ParameterStatus), as
    // PostgreSQL reports it: psycopg's idea of the zone follows.
    assert_eq!(
        section(&s, "parameter status"),
        "before,after\nUTC,Asia/Kolkata\n"
    );

    let out = Command::new(&python)
        .arg(repo_path("tests/clients/pg_asyncpg.py"))
        .args([host, port, &q("q6")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pg_asyncpg.py failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = sections(&text);
    let (want, _) = quarry::answers::answer("q6", 0.01).unwrap();
    assert_csv_matches(section(&s, "q6"), want);
    assert_eq!(
        section(&s, "prepared parameter types"),
        "type\nnumeric\ndate\n"
    );
    assert_eq!(section(&s, "insert status"), "status\nINSERT 0 1\n");
    assert_eq!(
        section(&s, "executemany"),
        "failed,left,after_good\n23505,1,3\n"
    );
    assert_eq!(
        section(&s, "cast parameter types"),
        "types,x,d\nnumeric date,2.5,2024-02-29\n"
    );
    assert_eq!(
        section(&s, "types"),
        "id,d,f,t,dt\n1,-1.250,0.5,é,2000-02-29\n2,,,,\n"
    );
    assert_eq!(
        section(&s, "computed"),
        "s,i,r,ts,iv,b\n3,-7,0.25,1999-12-31 23:59:59.999999,1 day, 0:00:00,False\n"
    );
    let tables = section(&s, "sqlalchemy tables");
    for t in ["lineitem", "pg_async"] {
        assert!(tables.contains(&format!("{t}\n")), "{tables}");
    }
    assert_eq!(
        section(&s, "sqlalchemy columns"),
        "name,type,nullable\nid,BIGINT(),False\nd,NUMERIC(),True\n\
         f,DOUBLE_PRECISION(precision=53),True\nt,TEXT(),True\ndt,DATE(),True\n"
    );
    // As PostgreSQL's inspector answers for the same table and indexes.
    assert_eq!(
        section(&s, "sqlalchemy keys"),
        "what,value\nprimary key,pg_async_pkey id\nindex,pg_async_dt_t dt t unique=False\n\
         index,pg_async_f f unique=True\nunique constraints,0\nforeign keys,0\n\
         check constraints,0\n"
    );
    assert_eq!(section(&s, "sqlalchemy query"), "n\n2\n");
}

/// pgjdbc's jar, or a failure that says how to get it.
fn pgjdbc_jar() -> PathBuf {
    let jar = std::env::var_os("QUARRY_PGJDBC_JAR")
        .map(PathBuf::from)
        .expect("QUARRY_PGJDBC_JAR is not set: source scripts/env.sh after scripts/setup.sh");
    assert!(
        jar.is_file(),
        "{} is missing: run scripts/setup.sh (it fetches pgjdbc with Maven)",
        jar.display()
    );
    jar
}

#[test]
fn pgjdbc_runs_prepared_binary_statements_metadata_and_cancel() {
    let jar = pgjdbc_jar();
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[]);
    let url = format!(
        "jdbc:postgresql://{}/quarry?user=root&prepareThreshold=1",
        pg.postgres
    );
    let out = Command::new("java")
        .arg("-cp")
        .arg(&jar)
        .arg(repo_path("tests/clients/PgJdbc.java"))
        .arg(&url)
        .arg(q("q6"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "PgJdbc.java failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = sections(&text);
    let (want, _) = quarry::answers::answer("q6", 0.01).unwrap();
    assert_csv_matches(section(&s, "q6"), want);
    // The same answer each run, the later ones in binary.
    let prepared = section(&s, "prepared");
    let runs: Vec<&str> = prepared.lines().skip(1).collect();
    assert_eq!(runs.len(), 3, "{prepared}");
    assert!(runs.iter().all(|r| r[2..] == runs[0][2..]), "{prepared}");
    assert_eq!(section(&s, "update count"), "count\n1\n");
    assert_eq!(section(&s, "batch"), "failed,left\n23505,0\n");
    assert_eq!(
        section(&s, "after commit"),
        "id,amount,name\n7,-7.50,seven\n"
    );
    assert_eq!(section(&s, "product"), "name,major\nPostgreSQL,16\n");
    assert_eq!(
        section(&s, "tables"),
        "TABLE_SCHEM,TABLE_NAME\npublic,pg_jdbc\n"
    );
    // java.sql.Types: BIGINT -5, NUMERIC 2, VARCHAR 12.
    assert_eq!(
        section(&s, "columns"),
        "COLUMN_NAME,TYPE_NAME,DATA_TYPE\nid,int8,-5\namount,numeric,2\nname,text,12\n"
    );
    // java.sql.Types: BIT -7, DATE 91, DOUBLE 8, INTEGER 4, BIGINT -5,
    // NUMERIC 2, VARCHAR 12, TIMESTAMP 93.
    assert_eq!(
        section(&s, "type info"),
        "TYPE_NAME,DATA_TYPE\nbool,-7\ndate,91\nfloat8,8\nint4,4\nint8,-5\nnumeric,2\n\
         text,12\ntimestamp,93\nvarchar,12\n"
    );
    assert_eq!(section(&s, "type info count"), "many\ntrue\n");
    assert_eq!(section(&s, "cancel"), "sqlstate\n57014\n");
    assert_eq!(section(&s, "after cancel"), "one\n1\n");
}

#[test]
fn tls_and_scram_logins_for_psql() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_secure("pw-root");
    let ca = pg.ca.clone().expect("a secure playground prints its CA");
    let (_, port) = pg.postgres.rsplit_once(':').unwrap();
    // verify-full: the server's certificate checked against the CA and
    // the host name.
    let conn = |sslmode: &str, password: &str| {
        let dsn = format!(
            "host=localhost port={port} user=root dbname=quarry sslmode={sslmode} sslrootcert={ca}"
        );
        let out = Command::new("psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", &dsn, "-c"])
            .arg("SELECT count(*) FROM lineitem")
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = conn("verify-full", "pw-root");
    assert!(ok, "{out}\n{err}");
    assert_eq!(out, "60175");
    let (ok, _, err) = conn("verify-full", "wrong");
    assert!(!ok);
    assert!(
        err.contains("28P01") || err.contains("password authentication failed for user \"root\""),
        "{err}"
    );
    // An unknown user gets the same answer as a wrong password.
    let dsn = format!(
        "host=localhost port={port} user=nobody dbname=quarry sslmode=verify-full sslrootcert={ca}"
    );
    let out = Command::new("psql")
        .args(["-X", "-d", &dsn, "-c", "SELECT 1"])
        .env("PGPASSWORD", "pw-root")
        .output()
        .unwrap();
    let unknown = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        unknown.contains("password authentication failed for user \"nobody\""),
        "{unknown}"
    );
    let (ok, _, err) = conn("disable", "pw-root");
    assert!(!ok);
    assert!(err.contains("requires TLS"), "{err}");
    // A user made with CREATE USER logs in with SCRAM too.
    pg.ok("CREATE USER alice PASSWORD 'pw-alice'");
    let dsn = format!(
        "host=localhost port={port} user=alice dbname=quarry sslmode=verify-full sslrootcert={ca}"
    );
    let out = Command::new("psql")
        .args(["-X", "-A", "-t", "-d", &dsn, "-c", "SELECT current_user"])
        .env("PGPASSWORD", "pw-alice")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "alice");
}

/// A PostgreSQL server (the Debian package's binaries) on a free
/// loopback port, in a temporary directory, trusted logins as
/// `postgres`; stopped and deleted on drop. As root it runs as the
/// `postgres` user, which the package creates (PostgreSQL refuses root).
struct PostgresServer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PostgresServer {
    fn start() -> PostgresServer {
        let bin = postgres_bindir();
        let dir = tempfile::tempdir().unwrap();
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let as_postgres = |program: PathBuf| {
            let mut c = match root {
                true => {
                    let mut c = Command::new("setpriv");
                    c.args([
                        "--reuid=postgres",
                        "--regid=postgres",
                        "--init-groups",
                        "--",
                    ]);
                    c.arg(program);
                    c
                }
                false => Command::new(program),
            };
            c.current_dir(dir.path());
            c
        };
        if root {
            let ok = Command::new("chown")
                .args(["postgres:", &dir.path().display().to_string()])
                .status()
                .unwrap();
            assert!(ok.success(), "chown of the server's directory to postgres");
        }
        let data = dir.path().join("data");
        let out = as_postgres(bin.join("initdb"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "-D",
            ])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = as_postgres(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut server = PostgresServer {
            child,
            port,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ready {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("PostgreSQL exited at start ({status}); port {port} may have been taken");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "PostgreSQL did not start within 60 s on port {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        signal(self.child.id(), "INT");
        let _ = self.child.wait();
    }
}

/// The newest PostgreSQL server's binaries (`postgresql-NN`).
fn postgres_bindir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).expect(
        "no PostgreSQL server under /usr/lib/postgresql: run scripts/setup.sh \
         (it installs the postgresql package)",
    )
}

#[test]
fn answers_match_postgresql_byte_for_byte() {
    let python = python();
    let _serial = SERIAL.lock();
    let server = PostgresServer::start();
    let pg = Playground::start(&["--stores", "3"]);
    let (host, port) = pg.postgres.rsplit_once(':').unwrap();
    let out = Command::new(&python)
        .arg(repo_path("tests/clients/pg_differential.py"))
        .arg(format!("host={host} port={port} user=root dbname=quarry"))
        .arg(format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            server.port
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "Quarry and PostgreSQL answered differently:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every query, format and COPY was compared, not skipped.
    let last = text.lines().last().unwrap_or_default();
    let values: u64 = last
        .strip_prefix("checked ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line:\n{text}"));
    assert!(values > 700, "{last}");
    assert!(last.ends_with(", 0 mismatches"), "{last}");
    // TIMESTAMPTZ in three session time zones, each in three formats,
    // and TIMESTAMPTZ parameters in them, in two.
    let zoned = |marker: &str| {
        text.lines()
            .filter(|l| l.starts_with("ok") && l.contains(marker))
            .count()
    };
    assert_eq!(zoned("AS local_noon"), 9, "{text}");
    assert_eq!(zoned("AS later_tz"), 6, "{text}");
    for copy in ["TO STDOUT\n", "(FORMAT csv, HEADER)\n", "(FORMAT binary)\n"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("ok copy") && format!("{l}\n").ends_with(copy)),
            "COPY {copy} not compared:\n{text}"
        );
    }
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok error")).count(),
        6
    );
}

#[test]
fn bi_tools_startup_sql_replays() {
    let python = python();
    let _serial = SERIAL.lock();
    let pg = Playground::start(&[
        "--stores",
        "3",
        "--sf",
        "0.01",
        "--tables",
        "lineitem,nation",
    ]);
    let (host, port) = pg.postgres.rsplit_once(':').unwrap();
    let dir = repo_path("tests/clients/pg_startup");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    let out = Command::new(&python)
        .arg(repo_path("tests/clients/pg_startup.py"))
        .arg(format!("host={host} port={port} user=root dbname=quarry"))
        .args(&files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a tool's start-up SQL failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.ends_with("replayed 43 statements, 0 failed\n"),
        "{text}"
    );
    // Not only without errors: the columns the tools list are there.
    for line in [
        // Grafana's query builder: lineitem's 16 columns.
        "ok grafana.sql:72 16 rows",
        // Metabase's field sync: lineitem's 16 and nation's 4.
        "ok metabase.sql:71 20 rows",
        // SQLAlchemy's get_columns: lineitem's 16.
        "ok sqlalchemy_columns.sql:17 16 rows",
        // DBeaver's schema list: information_schema, pg_catalog, public.
        "ok dbeaver.sql:25 3 rows",
        "ok ping '-- ping'",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
}
