//! All 22 TPC-H queries at SF 0.01 through real processes (3 stores and a
//! compute process), checked against DuckDB's answers over the same data;
//! then again through compute processes that send joins' build keys to
//! the regions only as Bloom filters, and not at all.

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
    // With every join's build keys sent as a Bloom filter (no IN lists)
    // and with none sent at all: the same answers.
    for args in [
        &["--join-key-list-max", "0"][..],
        &["--join-key-list-max", "0", "--join-bloom-filters", "false"][..],
    ] {
        let compute = pg.extra_compute(args);
        let failures = mismatches(&compute.url, &cases);
        assert!(failures.is_empty(), "{args:?}: {}", failures.join("\n"));
    }
}
