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
//! The Python comes from `$QUARRY_PYTHON`, `$QUARRY_VENV` (where
//! `scripts/setup.sh` installs the driver) or `python3`: the first that
//! imports the driver. Without one the setting is skipped and the report
//! says why. Each query runs once to warm up, then `--runs` times, on one
//! autocommit connection; the answer's row count must be the in-process
//! run's.

use anyhow::{bail, Result};

use super::{median, python_json, python_with, queries_json, BenchOptions, QueryReport};

/// The setting's name in the report.
pub const THROUGH_ADBC: &str = "column, through ADBC";

const SCRIPT: &str = r#"
import json, sys, time
import adbc_driver_flightsql.dbapi as flight_sql
uri, runs, queries = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
conn = flight_sql.connect(uri, autocommit=True)
cur = conn.cursor()
out = {}
for name, sql in queries.items():
    cur.execute(sql)
    rows = cur.fetch_arrow_table().num_rows
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        cur.execute(sql)
        cur.fetch_arrow_table()
        times.append((time.perf_counter() - t) * 1e3)
    out[name] = {"times": times, "rows": rows}
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

/// Times `opts.queries` through ADBC (run by `python`) against the compute
/// process at `url` (`http://host:port`); `rows_of` gives each query's row
/// count from the in-process run, which the answer must have: a client
/// that fails, or an answer of another length, fails the bench.
pub async fn adbc_times(
    python: &str,
    url: &str,
    opts: &BenchOptions,
    rows_of: impl Fn(&str) -> Option<usize>,
) -> Result<Vec<QueryReport>> {
    let uri = match url.strip_prefix("http://") {
        Some(rest) => format!("grpc://{rest}"),
        None => bail!("timing through ADBC needs a plain-text compute address, not {url}"),
    };
    #[derive(serde::Deserialize)]
    struct Timed {
        times: Vec<f64>,
        rows: usize,
    }
    let args = [
        uri,
        opts.runs.max(1).to_string(),
        queries_json(opts).to_string(),
    ];
    let timed: std::collections::HashMap<String, Timed> =
        python_json(python, SCRIPT, &args, "the ADBC client").await?;
    let mut out = Vec::new();
    for q in &opts.queries {
        let Some(t) = timed.get(q) else { continue };
        let answer = match rows_of(q) {
            Some(n) if n == t.rows => "rows match",
            Some(n) => bail!("{q} through ADBC: {} rows, in-process {n}", t.rows),
            None => "unknown",
        };
        out.push(QueryReport {
            query: q.clone(),
            setting: THROUGH_ADBC.into(),
            sf: opts.sf,
            runs: t.times.len(),
            min_ms: t.times.iter().copied().fold(f64::INFINITY, f64::min),
            median_ms: median(t.times.clone()),
            rows: t.rows,
            answer: answer.into(),
            digest: 0,
        });
    }
    Ok(out)
}
