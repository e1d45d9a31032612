//! All 22 TPC-H queries at SF 0.01 through real processes (3 stores and a
//! compute process), checked against DuckDB's answers over the same data.

mod common;

use common::*;
use quarry::answers;
use quarry_client::Client;

#[test]
fn all_22_tpch_queries_match_duckdb_at_sf_0_01() {
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let failures: Vec<String> = rt.block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut failures = Vec::new();
        for (name, text) in answers::QUERIES {
            let (csv, types) = answers::answer(name, 0.01).unwrap();
            match c.sql(text).await {
                Ok(batches) => {
                    if let Err(e) = answers::check(&batches, csv, types) {
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
