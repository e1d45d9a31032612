//! TPC-H for Quarry: the lineitem table, its rows from the `tpchgen`
//! crate (the official dbgen data), the Q1/Q6 texts, and DuckDB's answers
//! to check against.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Float64Type, Int64Type};
use quarry_coprocessor::codec::key::append_record_key;
use quarry_coprocessor::codec::row::{Datum, RowEncoder};
use quarry_coprocessor::types::{format_date, format_decimal};
use tpchgen::generators::{LineItemGenerator, OrderGenerator};

/// `CREATE TABLE lineitem (...)`, exactly as Quarry creates it.
pub const LINEITEM_DDL: &str = include_str!("../tests/tpch/lineitem.sql");
pub const Q1: &str = include_str!("../tests/tpch/q1.sql");
pub const Q6: &str = include_str!("../tests/tpch/q6.sql");
/// A query that returns many rows (about 10% of lineitem): what the wire
/// format costs when the answer is big, not a partial aggregate.
pub const SCAN: &str = "SELECT l_orderkey, l_linenumber, l_quantity, l_extendedprice, \
    l_discount, l_tax, l_returnflag, l_shipdate FROM lineitem \
    WHERE l_shipdate >= date '1998-01-01'";

/// The same rows as [`SCAN`] travel from storage to compute, but only the
/// top ten reach the client: the storage-to-compute wire, isolated.
pub const TOPN: &str = include_str!("../tests/tpch/topn.sql");

/// The text of a query by name (`q1`, `q6`, `scan`, `topn`).
pub fn query(name: &str) -> Option<&'static str> {
    match name {
        "q1" => Some(Q1),
        "q6" => Some(Q6),
        "scan" => Some(SCAN),
        "topn" => Some(TOPN),
        _ => None,
    }
}

/// DuckDB's answer (CSV with a header) for a query at a scale factor, when
/// one is known.
pub fn expected(query: &str, sf: f64) -> Option<&'static str> {
    let key = (query, format!("{sf}"));
    Some(match (key.0, key.1.as_str()) {
        ("q1", "0.01") => include_str!("../tests/tpch/answers/q1_sf0.01.csv"),
        ("q1", "0.1") => include_str!("../tests/tpch/answers/q1_sf0.1.csv"),
        ("q1", "1") => include_str!("../tests/tpch/answers/q1_sf1.csv"),
        ("q1", "10") => include_str!("../tests/tpch/answers/q1_sf10.csv"),
        ("q6", "0.01") => include_str!("../tests/tpch/answers/q6_sf0.01.csv"),
        ("q6", "0.1") => include_str!("../tests/tpch/answers/q6_sf0.1.csv"),
        ("q6", "1") => include_str!("../tests/tpch/answers/q6_sf1.csv"),
        ("q6", "10") => include_str!("../tests/tpch/answers/q6_sf10.csv"),
        ("topn", "0.01") => include_str!("../tests/tpch/answers/topn_sf0.01.csv"),
        ("topn", "0.1") => include_str!("../tests/tpch/answers/topn_sf0.1.csv"),
        ("topn", "1") => include_str!("../tests/tpch/answers/topn_sf1.csv"),
        ("topn", "10") => include_str!("../tests/tpch/answers/topn_sf10.csv"),
        _ => return None,
    })
}

/// One value as text: decimals at their scale, dates as `YYYY-MM-DD`,
/// doubles in their shortest round-trip form (as DuckDB prints them).
pub fn format_value(a: &dyn Array, row: usize) -> String {
    if a.is_null(row) {
        return String::new();
    }
    match a.data_type() {
        DataType::Int64 => a.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Float64 => a.as_primitive::<Float64Type>().value(row).to_string(),
        DataType::Decimal128(_, s) => {
            format_decimal(a.as_primitive::<Decimal128Type>().value(row), *s)
        }
        DataType::Date32 => format_date(a.as_primitive::<Date32Type>().value(row)),
        DataType::Utf8 => a.as_string::<i32>().value(row).to_string(),
        DataType::Boolean => a.as_boolean().value(row).to_string(),
        other => format!("<{other}>"),
    }
}

/// Checks a result against an expected CSV: same header, same rows; sums,
/// counts and keys digit for digit, DOUBLE columns to a relative 1e-9.
/// Returns the first difference.
pub fn compare(batches: &[RecordBatch], expected_csv: &str) -> Result<(), String> {
    let mut lines = expected_csv.lines().filter(|l| !l.is_empty());
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let want: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let Some(first) = batches.first() else {
        return Err("no result batches".into());
    };
    let schema = first.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if names != header {
        return Err(format!("columns {names:?}, expected {header:?}"));
    }
    let mut got: Vec<Vec<(String, bool)>> = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            got.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        (
                            format_value(c.as_ref(), r),
                            c.data_type() == &DataType::Float64,
                        )
                    })
                    .collect(),
            );
        }
    }
    if got.len() != want.len() {
        return Err(format!("{} rows, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        for (j, ((gv, is_double), wv)) in g.iter().zip(w).enumerate() {
            let same = if *is_double {
                match (gv.parse::<f64>(), wv.parse::<f64>()) {
                    (Ok(a), Ok(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1e-300),
                    _ => false,
                }
            } else {
                gv == wv
            };
            if !same {
                return Err(format!(
                    "row {} column {}: got {gv}, expected {wv}",
                    i + 1,
                    header[j]
                ));
            }
        }
    }
    Ok(())
}

/// The handle of a lineitem row: its primary key (orderkey, linenumber)
/// packed into one integer, so rows sort by order as dbgen writes them.
pub fn handle(orderkey: i64, linenumber: i32) -> i64 {
    orderkey * 8 + linenumber as i64
}

/// One past the largest handle at a scale factor.
pub fn handle_end(sf: f64) -> i64 {
    let orders = (1_500_000.0 * sf).round() as i64;
    handle(OrderGenerator::make_order_key(orders) + 1, 0)
}

/// Split handles cutting lineitem into `regions` ranges of about equal
/// size.
pub fn split_handles(sf: f64, regions: usize) -> Vec<i64> {
    let end = handle_end(sf);
    (1..regions as i64)
        .map(|i| end / regions as i64 * i)
        .collect()
}

/// Approximate lineitem rows at a scale factor.
pub fn approx_rows(sf: f64) -> u64 {
    (6_001_215.0 * sf) as u64
}

/// The (column id, type) of every lineitem column, as [`LINEITEM_DDL`]
/// creates them (ids are positions + 1).
pub fn lineitem_columns() -> Vec<(i64, DataType)> {
    let dec = DataType::Decimal128(15, 2);
    [
        DataType::Int64,
        DataType::Int64,
        DataType::Int64,
        DataType::Int64,
        dec.clone(),
        dec.clone(),
        dec.clone(),
        dec,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Date32,
        DataType::Date32,
        DataType::Date32,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Utf8,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, t)| (i as i64 + 1, t))
    .collect()
}

/// Generates part `part` of `parts` of lineitem at `sf` (dbgen's rows, in
/// handle order), calling `row(handle, columns)` with one datum per column
/// of [`lineitem_columns`].
pub fn generate_part(
    sf: f64,
    part: i32,
    parts: i32,
    mut row: impl FnMut(i64, &[(i64, Datum<'_>)]) -> quarry_coprocessor::Result<()>,
) -> quarry_coprocessor::Result<()> {
    for li in LineItemGenerator::new(sf, part, parts).iter() {
        let h = handle(li.l_orderkey, li.l_linenumber);
        let cols = [
            (1, Datum::Int(li.l_orderkey)),
            (2, Datum::Int(li.l_partkey)),
            (3, Datum::Int(li.l_suppkey)),
            (4, Datum::Int(li.l_linenumber as i64)),
            (5, Datum::Decimal(li.l_quantity as i128 * 100)),
            (6, Datum::Decimal(li.l_extendedprice.0 as i128)),
            (7, Datum::Decimal(li.l_discount.0 as i128)),
            (8, Datum::Decimal(li.l_tax.0 as i128)),
            (9, Datum::Bytes(li.l_returnflag.as_bytes())),
            (10, Datum::Bytes(li.l_linestatus.as_bytes())),
            (11, Datum::Date(li.l_shipdate.to_unix_epoch())),
            (12, Datum::Date(li.l_commitdate.to_unix_epoch())),
            (13, Datum::Date(li.l_receiptdate.to_unix_epoch())),
            (14, Datum::Bytes(li.l_shipinstruct.as_bytes())),
            (15, Datum::Bytes(li.l_shipmode.as_bytes())),
            (16, Datum::Bytes(li.l_comment.as_bytes())),
        ];
        row(h, &cols)?;
    }
    Ok(())
}

/// Encodes part `part` of `parts` of lineitem at `sf` as row-layout KV
/// pairs of table `table_id`, calling `emit(handle, key, value)` per row.
pub fn encode_part(
    sf: f64,
    part: i32,
    parts: i32,
    table_id: i64,
    mut emit: impl FnMut(i64, &[u8], &[u8]),
) -> quarry_coprocessor::Result<()> {
    let mut enc = RowEncoder::new();
    let mut key = Vec::with_capacity(32);
    let mut value = Vec::with_capacity(256);
    generate_part(sf, part, parts, |h, cols| {
        key.clear();
        append_record_key(&mut key, table_id, h);
        value.clear();
        enc.encode(cols, &mut value)?;
        emit(h, &key, &value);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_rows_match_the_known_row_count_and_first_row() {
        let mut n = 0;
        let mut first = None;
        let mut handles_sorted = true;
        let mut last = i64::MIN;
        encode_part(0.01, 1, 1, 7, |h, k, v| {
            n += 1;
            if first.is_none() {
                first = Some((h, k.to_vec(), v.len()));
            }
            handles_sorted &= h > last;
            last = h;
        })
        .unwrap();
        assert_eq!(n, 60_175, "lineitem rows at SF 0.01");
        assert!(handles_sorted, "dbgen order is handle order");
        assert_eq!(first.unwrap().0, handle(1, 1));
        assert!(last < handle_end(0.01));
        assert_eq!(split_handles(0.01, 4).len(), 3);
    }

    #[test]
    fn compare_reports_the_first_difference() {
        use std::sync::Arc;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("revenue", DataType::Decimal128(38, 4), true),
            arrow::datatypes::Field::new("avg", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(
                    arrow::array::Decimal128Array::from(vec![11930532253i128])
                        .with_precision_and_scale(38, 4)
                        .unwrap(),
                ),
                Arc::new(arrow::array::Float64Array::from(vec![25.522005853257337])),
            ],
        )
        .unwrap();
        assert_eq!(
            compare(
                std::slice::from_ref(&batch),
                "revenue,avg\n1193053.2253,25.522005853257340\n"
            ),
            Ok(())
        );
        assert_eq!(
            compare(&[batch], "revenue,avg\n1193053.2254,25.5\n"),
            Err("row 1 column revenue: got 1193053.2253, expected 1193053.2254".into())
        );
    }
}
