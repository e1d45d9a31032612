//! The bench's through-a-client setting: each query timed from Python
//! ADBC's Flight SQL driver (`adbc_driver_flightsql`, the client a user's
//! notebook or dashboard runs), as a user times it.
//!
//! The in-process settings time Quarry's own Rust client, which also speaks
//! Flight SQL; ADBC adds what a real client does besides: its own
//! GetFlightInfo → DoGet pair per statement, the Arrow C data interface
//! into Python, and `fetch_arrow_table` gathering the whole answer. That
//! difference is issue 47's "per-query fixed cost through a real client",
//! and DuckDB in memory (`compare.rs`) is timed the same way from Python,
//! so the ratio compares like with like.
//!
//! **Beside DuckDB.** Where both fit in memory with the cluster (`compare.rs`
//! decides), the same Python process also holds DuckDB, loaded with the
//! same rows, and the two are timed query by query: DuckDB's warm-up and
//! runs of a query, then Quarry's of the same query, each engine's runs
//! back to back as when each is timed alone, and the two seconds apart
//! instead of minutes. A shared 2-core machine whose speed drifts by a
//! quarter within an hour moved the ratio between separate phases more
//! than a session's changes did. The runs are not interleaved one by one:
//! a query that follows an idle gap (another engine's run) pays for waking
//! the machine's halted virtual CPUs at each hop (`docs/performance.md`,
//! "DuckDB beside the client"), which back-to-back runs, DuckDB's alone
//! and a loaded server's, do not. DuckDB's idle threads cost the cluster
//! nothing while Quarry runs, and the idle cluster (raft ticks) costs
//! DuckDB little; the report keeps DuckDB's first, alone, times beside
//! these so the two can be compared.
//!
//! The Python comes from `$QUARRY_PYTHON`, `$QUARRY_VENV` (where
//! `scripts/setup.sh` installs the driver) or `python3`: the first that
//! imports the driver (and DuckDB, to time beside it). Without one the
//! setting is skipped and the report says why. Each query runs once to
//! warm up, then `--runs` times, on one autocommit connection; the
//! answer's row count must be the in-process run's.

use anyhow::{bail, Result};

use super::compare::DUCKDB_PRELUDE;
use super::{python_json, python_with, queries_json, BenchOptions, QueryReport};

/// The setting's name in the report.
pub const THROUGH_ADBC: &str = "column, through ADBC";

/// Follows [`DUCKDB_PRELUDE`]; `beside` is `null` or DuckDB's
/// `{threads, tables}`.
const SCRIPT: &str = r#"
import json, sys, time
import adbc_driver_flightsql.dbapi as flight_sql
uri, runs, queries, beside = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
duck = duckdb_loaded(beside["threads"], beside["tables"]) if beside else None
conn = flight_sql.connect(uri, autocommit=True)
cur = conn.cursor()
def quarry(sql):
    cur.execute(sql)
    return cur.fetch_arrow_table().num_rows
def duckdb(sql):
    duckdb_arrow(duck, sql)
def timed(f, sql):
    # A warm-up, whose answer is returned, then the timed runs.
    first = f(sql)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f(sql)
        times.append((time.perf_counter() - t) * 1e3)
    return first, times
out = {}
for name, sql in queries.items():
    d = timed(duckdb, sql)[1] if duck is not None else None
    rows, times = timed(quarry, sql)
    out[name] = {"times": times, "duckdb": d, "rows": rows}
cur.close()
conn.close()
print(json.dumps(out))
"#;

/// The Python that has the ADBC Flight SQL driver ([`python_with`]), or
/// why the setting is skipped.
pub fn adbc_python() -> std::result::Result<String, String> {
    python_with("import adbc_driver_flightsql.dbapi, pyarrow").ok_or_else(|| {
        "no Python with adbc_driver_flightsql (set QUARRY_PYTHON, or run scripts/setup.sh once)"
            .to_string()
    })
}

/// The Python that has both the ADBC driver and DuckDB, to time them
/// beside each other; none if no candidate imports both.
pub fn adbc_and_duckdb_python() -> Option<String> {
    python_with("import adbc_driver_flightsql.dbapi, pyarrow, duckdb")
}

/// Times `opts.queries` through ADBC (run by `python`) against the compute
/// process at `url` (`http://host:port`); `rows_of` gives each query's row
/// count from the in-process run, which the answer must have: a client
/// that fails, or an answer of another length, fails the bench. With
/// `beside` (DuckDB's `{threads, tables}`), DuckDB is loaded in the same
/// process and timed before each query's ADBC runs, and its reports (setting
/// `duckdb`) come back too.
pub async fn adbc_times(
    python: &str,
    url: &str,
    opts: &BenchOptions,
    beside: Option<&serde_json::Value>,
    rows_of: impl Fn(&str) -> Option<usize>,
) -> Result<Vec<QueryReport>> {
    let uri = match url.strip_prefix("http://") {
        Some(rest) => format!("grpc://{rest}"),
        None => bail!("timing through ADBC needs a plain-text compute address, not {url}"),
    };
    #[derive(serde::Deserialize)]
    struct Timed {
        times: Vec<f64>,
        duckdb: Option<Vec<f64>>,
        rows: usize,
    }
    let args = [
        uri,
        opts.runs.max(1).to_string(),
        queries_json(opts).to_string(),
        beside.unwrap_or(&serde_json::Value::Null).to_string(),
    ];
    let script = format!("{DUCKDB_PRELUDE}{SCRIPT}");
    let who = if beside.is_some() {
        "the ADBC client beside DuckDB"
    } else {
        "the ADBC client"
    };
    let timed: std::collections::HashMap<String, Timed> =
        python_json(python, &script, &args, who).await?;
    let mut out = Vec::new();
    for q in &opts.queries {
        let Some(t) = timed.get(q) else { continue };
        let answer = match rows_of(q) {
            Some(n) if n == t.rows => "rows match",
            Some(n) => bail!("{q} through ADBC: {} rows, in-process {n}", t.rows),
            None => "unknown",
        };
        out.push(QueryReport::timed(
            q,
            THROUGH_ADBC,
            opts.sf,
            t.times.clone(),
            t.rows,
            answer,
        ));
        if let Some(d) = &t.duckdb {
            out.push(QueryReport::timed(
                q,
                "duckdb",
                opts.sf,
                d.clone(),
                0,
                "reference",
            ));
        }
    }
    Ok(out)
}
