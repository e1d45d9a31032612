//! Quarry's SQL correctness suite: every `tests/slt/*.slt` file (the
//! sqllogictest format of SQLite, DuckDB and DataFusion) through real
//! processes (3 stores and a compute process), each file from an empty
//! database. The expected answers are PostgreSQL 15's
//! (`scripts/slt_answers.sh`), never Quarry's; `quarry slt` runs the same
//! files, or any corpus, against a running cluster.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn sql_logic_tests_match_postgresql() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slt");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "only {} files in {dir}", files.len());
    let pg = Playground::start(&["--stores", "3"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut report = Vec::new();
    let mut records = 0;
    for path in &files {
        let options = quarry::slt::RunOptions {
            timeout: Duration::from_secs(60),
            hash_threshold: 0,
        };
        let r = rt.block_on(quarry::slt::run_file(&pg.compute, path, options));
        records += r.run;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(f) = &r.fatal {
            report.push(format!("{name}: stopped: {f}"));
        }
        // A file whose records mostly did not run is a failure too.
        if r.run < 5 {
            report.push(format!("{name}: only {} records ran", r.run));
        }
        report.extend(r.failures.iter().map(|f| format!("{name}: {f}")));
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    assert!(records >= 300, "only {records} records ran");
}
