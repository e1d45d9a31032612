//! All 22 TPC-H queries at SF 0.01 through real processes (3 stores and a
//! compute process), checked against DuckDB's answers over the same data.

mod common;

use common::*;
use quarry::answers;

#[test]
fn all_22_tpch_queries_match_duckdb_at_sf_0_01() {
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let cases: Vec<Case> = answers::QUERIES
        .iter()
        .map(|(name, sql)| {
            let (csv, types) = answers::answer(name, 0.01).unwrap();
            Case {
                name: name.to_string(),
                sql: sql.to_string(),
                csv: csv.to_string(),
                types: types.to_string(),
            }
        })
        .collect();
    let failures = mismatches(&pg.compute, &cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
