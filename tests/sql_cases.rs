//! The SQL cases of `tests/sql/cases.sql` (single-table BI queries and
//! joins over the 8 TPC-H tables) at SF 0.01 through real processes (3
//! stores and a compute process), checked against DuckDB's answers over the
//! same data: `tests/sql/answers/<name>.csv` and `<name>.types`, made by
//! `scripts/sql_answers.sh`.

mod common;

use common::*;
use quarry::answers;
use quarry_client::Client;

const CASES: &str = include_str!("sql/cases.sql");
const ANSWERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sql/answers/");

/// (name, statement) of each `-- name: <name>` block; text before the first
/// block is a header.
fn cases(text: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("-- name: ") {
            out.push((name.trim(), String::new()));
        } else if let Some((_, sql)) = out.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    for (_, sql) in &mut out {
        *sql = sql.trim().to_string();
    }
    out
}

#[test]
fn sql_cases_match_duckdb_at_sf_0_01() {
    let cases = cases(CASES);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let failures: Vec<String> = rt.block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut failures = Vec::new();
        for (name, text) in &cases {
            let read = |ext: &str| {
                std::fs::read_to_string(format!("{ANSWERS}{name}.{ext}"))
                    .unwrap_or_else(|e| panic!("{name}.{ext}: {e} (run scripts/sql_answers.sh)"))
            };
            let (csv, types) = (read("csv"), read("types"));
            match c.sql(text).await {
                Ok(batches) => {
                    if let Err(e) = answers::check(&batches, &csv, types.trim()) {
                        failures.push(format!("{name}: {e}"));
                    }
                }
                Err(e) => failures.push(format!("{name}: error: {e}")),
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
