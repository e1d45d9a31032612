//! Real clients against real processes: Python ADBC (the Flight SQL
//! driver from PyPI, installed into `$QUARRY_VENV` by `scripts/setup.sh`)
//! and Java's Arrow Flight SQL JDBC driver (from Maven Central, at
//! `$QUARRY_JDBC_JAR`) run their programs in `tests/clients/` unchanged
//! against a playground, and the constant queries of
//! `tests/slt/constants.slt` with PostgreSQL's answers.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The venv's Python with ADBC's Flight SQL driver.
fn python() -> PathBuf {
    venv_python(
        "adbc_driver_flightsql.dbapi, pyarrow",
        "the ADBC Flight SQL driver",
    )
}

/// The output of a client program that must succeed.
fn output_of(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `tests/clients/{script}` against the playground, with `args`
/// after its URI; its output.
fn run_script(pg: &Playground, script: &str, args: &[PathBuf]) -> String {
    let uri = pg.compute.replace("http://", "grpc://");
    output_of(
        script,
        Command::new(python())
            .arg(repo_path("tests/clients").join(script))
            .arg(&uri)
            .args(args),
    )
}

/// The JDBC driver's jar, or a failure that says how to get it.
fn jdbc_jar() -> PathBuf {
    let jar = std::env::var_os("QUARRY_JDBC_JAR")
        .map(PathBuf::from)
        .expect("QUARRY_JDBC_JAR is not set: source scripts/env.sh after scripts/setup.sh");
    assert!(
        jar.is_file(),
        "{} is missing: run scripts/setup.sh (it fetches the driver with Maven)",
        jar.display()
    );
    jar
}

/// TPC-H Q1 and Q6 at SF 0.01 as DuckDB answers them, and the bound
/// query's count: lines shipped by 1998-09-02 with return flag R, which is
/// Q1's count_order summed over R's rows in DuckDB's answer.
fn check_tpch_and_bound(s: &BTreeMap<String, String>) {
    for q in ["q1", "q6"] {
        let (want, _) = quarry::answers::answer(q, 0.01).unwrap();
        assert_csv_matches(section(s, q), want);
    }
    let (q1, _) = quarry::answers::answer("q1", 0.01).unwrap();
    let returned: i64 = q1
        .lines()
        .filter(|l| l.starts_with("R,"))
        .map(|l| l.rsplit(',').next().unwrap().parse::<i64>().unwrap())
        .sum();
    assert!(returned > 0);
    assert_eq!(section(s, "bound"), format!("n\n{returned}\n"));
}

fn query_files() -> [PathBuf; 2] {
    ["q1", "q6"].map(|q| repo_path(&format!("tests/tpch/queries/{q}.sql")))
}

#[test]
fn adbc_runs_tpch_bound_parameters_inserts_and_catalog_calls() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let out = run_script(&pg, "adbc_flight_sql.py", &query_files());
    let s = sections(&out);
    check_tpch_and_bound(&s);
    assert_eq!(
        section(&s, "inserted"),
        "id,name,amount\n1,it's,1.50\n2,b,2.25\n3,,-3.00\n"
    );
    assert_eq!(
        section(&s, "objects"),
        "catalog,schema,table,column\n\
         quarry,public,t_adbc,id\n\
         quarry,public,t_adbc,name\n\
         quarry,public,t_adbc,amount\n"
    );
    assert_eq!(
        section(&s, "table_schema"),
        "field,type\nid,int64\nname,string\namount,decimal128(12, 2)\n"
    );
    assert_eq!(section(&s, "table_types"), "type\nTABLE\nVIEW\n");
    check_constants(&run_script(&pg, "adbc_slt.py", &[constants_slt()]));
}

/// `tests/slt/constants.slt`: a few hundred queries over constants only,
/// with PostgreSQL's answers.
fn constants_slt() -> PathBuf {
    repo_path("tests/slt/constants.slt")
}

/// A client's run of `constants.slt` (`adbc_slt.py`, `JdbcSlt.java`):
/// every query ran, with the schema GetFlightInfo announced (both
/// drivers read the stream with it), and answered as PostgreSQL does.
fn check_constants(out: &str) {
    let s = sections(out);
    let summary = section(&s, "summary");
    let (run, failed) = summary
        .lines()
        .nth(1)
        .and_then(|l| l.split_once(','))
        .unwrap_or_else(|| panic!("no summary: {out}"));
    let run: usize = run.parse().unwrap();
    assert!(run >= 250, "only {run} queries in constants.slt");
    assert_eq!(failed, "0", "{}", section(&s, "failures"));
}

/// Runs `tests/clients/JdbcFlightSql.java` with the driver's `jar`
/// against the JDBC `url`; its output's sections.
fn run_jdbc(jar: &std::path::Path, url: &str) -> BTreeMap<String, String> {
    let [q1, q6] = query_files();
    let out = output_of(
        &format!("JdbcFlightSql.java at {url}"),
        Command::new("java")
            // Arrow's memory needs the JDK's direct buffers.
            .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
            .arg("-cp")
            .arg(jar)
            .arg(repo_path("tests/clients/JdbcFlightSql.java"))
            .arg(url)
            .arg(&q1)
            .arg(&q6),
    );
    sections(&out)
}

/// The JDBC program's transactions (BEGIN/COMMIT/ROLLBACK as statements,
/// carried by the connection's cookie): the transaction reads its own
/// insert and update, another connection sees neither, ROLLBACK leaves
/// nothing, COMMIT publishes, and the connection is in autocommit again.
fn check_jdbc_transactions(s: &BTreeMap<String, String>) {
    let before = "n,s\n4,-2.25\n";
    assert_eq!(section(s, "txn inside"), "n,s\n5,8.75\n");
    assert_eq!(section(s, "txn other connection"), before);
    assert_eq!(section(s, "after rollback"), before);
    assert_eq!(section(s, "before commit other connection"), before);
    assert_eq!(section(s, "after commit other connection"), "n,s\n5,8.75\n");
    assert_eq!(section(s, "autocommit other connection"), "n,s\n6,8.75\n");
}

#[test]
fn jdbc_runs_tpch_prepared_statements_inserts_and_metadata() {
    let jar = jdbc_jar();
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let url = format!(
        "{}/?useEncryption=false",
        pg.compute.replace("http://", "jdbc:arrow-flight-sql://")
    );
    let s = run_jdbc(&jar, &url);
    check_tpch_and_bound(&s);
    assert_eq!(section(&s, "plain insert"), "count\n1\n");
    assert_eq!(section(&s, "prepared insert"), "count\n1\n");
    assert_eq!(
        section(&s, "inserted"),
        "id,name,amount\n1,it's,1.50\n2,b,2.25\n3,,-3.00\n4,,-3.00\n"
    );
    check_jdbc_transactions(&s);
    assert_eq!(
        section(&s, "tables"),
        "TABLE_CAT,TABLE_SCHEM,TABLE_NAME,TABLE_TYPE\nquarry,public,t_jdbc,TABLE\n"
    );
    // java.sql.Types: BIGINT -5, VARCHAR 12, DECIMAL 3.
    assert_eq!(
        section(&s, "columns"),
        "TABLE_NAME,COLUMN_NAME,DATA_TYPE,ORDINAL_POSITION\n\
         t_jdbc,id,-5,1\nt_jdbc,name,12,2\nt_jdbc,amount,3,3\n"
    );
    assert_eq!(
        section(&s, "primary keys"),
        "TABLE_NAME,COLUMN_NAME,KEY_SEQ\nt_jdbc,id,1\n"
    );
    assert_eq!(section(&s, "table types"), "TABLE_TYPE\nTABLE\nVIEW\n");
    let out = output_of(
        "JdbcSlt.java",
        Command::new("java")
            .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
            .arg("-cp")
            .arg(&jar)
            .arg(repo_path("tests/clients/JdbcSlt.java"))
            .arg(&url)
            .arg(constants_slt()),
    );
    check_constants(&out);
}

#[test]
fn adbc_without_autocommit_commits_and_rolls_back_transactions() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    let out = run_script(&pg, "adbc_transactions.py", &[]);
    assert_eq!(
        out,
        "inside [(70,), (130,)]\n\
         others before commit [(100,), (100,)]\n\
         others after commit [(70,), (130,)]\n\
         locked [(70,)]\n\
         inside before rollback [(70,)]\n\
         after rollback [(70,), (130,)]\n"
    );
}

/// What ADBC answers a wrong password with (argv: URI, CA path).
const ADBC_WRONG_PASSWORD: &str = r#"
import sys
import adbc_driver_flightsql.dbapi as flight_sql
uri, ca = sys.argv[1:3]
kw = {
    "adbc.flight.sql.client_option.tls_root_certs": open(ca).read(),
    "username": "root",
    "password": "not-the-password",
}
try:
    conn = flight_sql.connect(uri, db_kwargs=kw, autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT 1")
    print("no error")
except Exception as e:
    print(type(e).__name__, e)
"#;

/// The ADBC and JDBC programs above, unchanged, against a secure
/// playground: TLS checked against its CA, and a login as root (the Flight
/// SQL handshake each driver makes from a user name and password).
#[test]
fn adbc_and_jdbc_log_in_over_tls() {
    let jar = jdbc_jar();
    let _serial = SERIAL.lock();
    let pg = Playground::start_secure("pw-root");
    let ca = pg.ca.clone().expect("a secure playground prints its CA");
    assert!(pg.compute.starts_with("https://"), "{}", pg.compute);

    let uri = pg.compute.replace("https://", "grpc+tls://");
    let out = output_of(
        "adbc_flight_sql.py over TLS",
        Command::new(python())
            .arg(repo_path("tests/clients/adbc_flight_sql.py"))
            .arg(&uri)
            .args(query_files())
            .env("QUARRY_CA", &ca)
            .env("QUARRY_USER", "root")
            .env("QUARRY_PASSWORD", "pw-root"),
    );
    let s = sections(&out);
    check_tpch_and_bound(&s);
    assert_eq!(
        section(&s, "inserted"),
        "id,name,amount\n1,it's,1.50\n2,b,2.25\n3,,-3.00\n"
    );

    let out = output_of(
        "ADBC with a wrong password",
        Command::new(python())
            .args(["-c", ADBC_WRONG_PASSWORD])
            .arg(&uri)
            .arg(&ca),
    );
    assert!(
        out.contains("login failed: unknown user or wrong password"),
        "{out}"
    );

    let url = format!(
        "{}/?useEncryption=true&user=root&password=pw-root&tlsRootCerts={ca}",
        pg.compute.replace("https://", "jdbc:arrow-flight-sql://")
    );
    let s = run_jdbc(&jar, &url);
    check_tpch_and_bound(&s);
    assert_eq!(section(&s, "prepared insert"), "count\n1\n");
    check_jdbc_transactions(&s);
}
