//! The SQL cases of `tests/sql/cases.sql` (single-table BI queries and
//! joins over the 8 TPC-H tables) at SF 0.01 through real processes (3
//! stores and a compute process), checked against DuckDB's answers over the
//! same data: `tests/sql/answers/<name>.csv` and `<name>.types`, made by
//! `scripts/sql_answers.sh`.

mod common;

use common::*;
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
    let checked: Vec<Case> = cases
        .iter()
        .map(|(name, sql)| {
            let read = |ext: &str| {
                std::fs::read_to_string(format!("{ANSWERS}{name}.{ext}"))
                    .unwrap_or_else(|e| panic!("{name}.{ext}: {e} (run scripts/sql_answers.sh)"))
            };
            Case {
                name: name.to_string(),
                sql: sql.clone(),
                csv: read("csv"),
                types: read("types"),
            }
        })
        .collect();
    let failures = mismatches(&pg.compute, &checked);
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The expressions these cases use run in storage: EXPLAIN shows them
    // in the region scan's storage part.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let failures: Vec<String> = rt.block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        let mut failures = Vec::new();
        for (name, fragment) in PUSHED_DOWN {
            let text = &cases.iter().find(|(n, _)| n == name).unwrap().1;
            let plan = explain(&mut c, text).await;
            let storage: Vec<&str> = plan
                .split("storage=[")
                .skip(1)
                .map(|s| s.lines().next().unwrap_or(""))
                .collect();
            if !storage.iter().any(|s| s.contains(fragment)) {
                failures.push(format!("{name}: no `{fragment}` in storage: {storage:?}"));
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Every join's build keys as a Bloom filter (no IN lists): the same
    // answers, and the probe side's rows stay in their regions.
    let blooms = pg.extra_compute(&["--join-key-list-max", "0"]);
    let failures = mismatches(&blooms.url, &checked);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let plan = rt.block_on(async {
        let mut c = Client::connect(&blooms.url).await.unwrap();
        let text = &cases
            .iter()
            .find(|(n, _)| *n == "join_orders_quarter_lineitem")
            .unwrap()
            .1;
        explain(&mut c, &format!("ANALYZE {text}")).await
    });
    let (probe, rows_out) = scan_rows_out(&plan, "lineitem");
    assert!(probe.contains("bloom(o_orderkey"), "{probe}");
    // One quarter of seven years of orders: about 2,100 of 60,175 lines
    // (the Bloom filter lets about 1% of the others through).
    assert!(
        (1_000..4_000).contains(&rows_out),
        "{rows_out} rows out: {probe}"
    );
}

/// (case, text its region scan's storage part must contain).
const PUSHED_DOWN: &[(&str, &str)] = &[
    ("case_when_returnflag", "group by [l_returnflag, CASE WHEN"),
    ("group_by_case_price_band", "group by [CASE WHEN"),
    ("extract_year_orders", "group by [date_part(Utf8(\"YEAR\")"),
    ("extract_year_month_shipments", "date_part(Utf8(\"MONTH\")"),
    (
        "modulo_bucket_orderkey",
        "group by [orders.o_orderkey % Int64(7)]",
    ),
    ("is_not_null_case", "filter CASE WHEN"),
    ("is_null_nullif", "filter nullif(o_orderstatus"),
    ("coalesce_nullif_segment", "group by [coalesce(nullif("),
    (
        "substring_phone_country",
        "group by [substr(customer.c_phone",
    ),
    // Below the joins a correlated subquery is unnested into, each side's
    // filter stays in its regions, and the domain of correlated values is
    // grouped in the regions of the orders that pass the outer filter.
    (
        "correlated_count_lt_lineitem",
        "filter l_receiptdate > l_commitdate",
    ),
    (
        "correlated_count_lt_lineitem",
        "Date32(\"1995-04-01\"); partial aggregate [] group by",
    ),
];

/// The text of `EXPLAIN <sql>`'s plans.
async fn explain(c: &mut Client, sql: &str) -> String {
    let batches = c.sql(&format!("EXPLAIN {sql}")).await.unwrap();
    let mut out = String::new();
    for b in &batches {
        let plans = arrow::compute::cast(b.column(1), &arrow::datatypes::DataType::Utf8).unwrap();
        let plans = plans
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        for p in plans.iter().flatten() {
            out.push_str(p);
            out.push('\n');
        }
    }
    out
}
