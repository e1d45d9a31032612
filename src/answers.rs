//! The 22 TPC-H queries and DuckDB's answers to them, and the check of a
//! Quarry result against an answer.
//!
//! The texts are `tests/tpch/queries/qN.sql` (the spec's, with the
//! validation parameters); the answers are DuckDB's over the same
//! `tpchgen` data (`scripts/tpch_answers.sh` makes them):
//! `tests/tpch/answers/qN_sfX.csv`, and `qN.types`, the types DuckDB gave
//! each column.
//!
//! The check is exact — decimals digit for digit, counts, keys, strings,
//! dates — except for the columns DuckDB computes as DOUBLE (AVG, and
//! decimal division): a DOUBLE Quarry result must agree to a relative 1e-9,
//! and a DECIMAL one must be DuckDB's value rounded to the decimal's scale.

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;

use crate::tpch::format_value;

macro_rules! queries {
    ($($n:literal),*) => {
        /// (name, text) of the 22 queries.
        pub const QUERIES: &[(&str, &str)] = &[
            $((concat!("q", $n), include_str!(concat!("../tests/tpch/queries/q", $n, ".sql")))),*
        ];
        /// (name, DuckDB's column types, answer at SF 0.01, answer at SF 1).
        const ANSWERS: &[(&str, &str, &str, &str)] = &[
            $((
                concat!("q", $n),
                include_str!(concat!("../tests/tpch/answers/q", $n, ".types")),
                include_str!(concat!("../tests/tpch/answers/q", $n, "_sf0.01.csv")),
                include_str!(concat!("../tests/tpch/answers/q", $n, "_sf1.csv")),
            )),*
        ];
    };
}

queries!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22);

/// The text of TPC-H query `name` (`q1` … `q22`).
pub fn query(name: &str) -> Option<&'static str> {
    QUERIES.iter().find(|(n, _)| *n == name).map(|(_, q)| *q)
}

/// DuckDB's answer to `name` at `sf` (CSV with a header) and its column
/// types, when known.
pub fn answer(name: &str, sf: f64) -> Option<(&'static str, &'static str)> {
    let (_, types, sf001, sf1) = ANSWERS.iter().find(|(n, ..)| *n == name)?;
    let csv = match format!("{sf}").as_str() {
        "0.01" => sf001,
        "1" => sf1,
        _ => return None,
    };
    Some((csv, types.trim()))
}

fn parse_csv(text: &str) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let header = r
        .headers()
        .map_err(|e| format!("bad expected CSV: {e}"))?
        .iter()
        .map(|h| h.trim_end_matches('\r').to_string())
        .collect();
    let rows = r
        .records()
        .map(|rec| {
            rec.map(|rec| {
                rec.iter()
                    .map(|v| v.trim_end_matches('\r').to_string())
                    .collect()
            })
            .map_err(|e| format!("bad expected CSV: {e}"))
        })
        .collect::<Result<Vec<Vec<String>>, String>>()?;
    Ok((header, rows))
}

/// DuckDB's type line split into column types: at the commas outside
/// parentheses (`DECIMAL(38,2)` is one type).
fn split_types(types: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in types.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(types[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !types.trim().is_empty() {
        out.push(types[start..].trim());
    }
    out
}

/// Does `got` (a value of type `t`) equal DuckDB's `want`? `approx`: DuckDB
/// computed the column as a DOUBLE.
fn same(got: &str, t: &DataType, want: &str, approx: bool) -> bool {
    if got == want {
        return true;
    }
    let tolerance = match t {
        DataType::Float64 => None,
        DataType::Decimal128(_, s) if approx => Some(10f64.powi(-(*s as i32))),
        _ => return false,
    };
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(a), Ok(b)) => match tolerance {
            // Rounded to the scale: within one unit of the last digit.
            Some(unit) => (a - b).abs() <= unit + 1e-12 * b.abs(),
            None => (a - b).abs() <= 1e-9 * b.abs().max(1e-300),
        },
        _ => false,
    }
}

/// Checks a result against DuckDB's answer: same column names, same rows
/// in the same order. `types` is DuckDB's type line (empty: treat only
/// DOUBLE results as approximate). Returns the first difference.
pub fn check(batches: &[RecordBatch], expected_csv: &str, types: &str) -> Result<(), String> {
    let (header, want) = parse_csv(expected_csv)?;
    let approx: Vec<bool> = split_types(types)
        .into_iter()
        .map(|t| matches!(t, "DOUBLE" | "FLOAT"))
        .collect();
    let Some(first) = batches.first() else {
        return if want.is_empty() {
            Ok(())
        } else {
            Err(format!("no rows, expected {}", want.len()))
        };
    };
    let schema = first.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if names != header {
        return Err(format!("columns {names:?}, expected {header:?}"));
    }
    let got_rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if got_rows != want.len() {
        return Err(format!("{got_rows} rows, expected {}", want.len()));
    }
    let mut i = 0;
    for b in batches {
        for r in 0..b.num_rows() {
            for (j, c) in b.columns().iter().enumerate() {
                let got = format_value(c.as_ref(), r);
                let w = &want[i][j];
                let ap = approx.get(j).copied().unwrap_or(false);
                if !same(&got, c.data_type(), w, ap) {
                    return Err(format!(
                        "row {} column {}: got {got}, expected {w}",
                        i + 1,
                        header[j]
                    ));
                }
            }
            i += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Decimal128Array, Float64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn all_22_queries_have_texts_and_answers() {
        for n in 1..=22 {
            let name = format!("q{n}");
            assert!(query(&name).is_some_and(|q| q.contains("select")), "{name}");
            for sf in [0.01, 1.0] {
                let (csv, types) = answer(&name, sf).unwrap();
                let (header, _) = parse_csv(csv).unwrap();
                assert_eq!(header.len(), split_types(types).len(), "{name}");
            }
        }
    }

    fn batch(price: i128, scale: i8, avg: f64, name: &str) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("p", DataType::Decimal128(38, scale), true),
            Field::new("a", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(
                    Decimal128Array::from(vec![price])
                        .with_precision_and_scale(38, scale)
                        .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![avg])),
                Arc::new(StringArray::from(vec![name])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn type_lines_split_outside_parentheses() {
        assert_eq!(
            split_types("VARCHAR,DECIMAL(38,2), DOUBLE"),
            vec!["VARCHAR", "DECIMAL(38,2)", "DOUBLE"]
        );
        assert!(split_types("").is_empty());
    }

    #[test]
    fn decimals_are_exact_doubles_close_and_quoted_strings_parse() {
        let csv = "p,a,s\n0.03994345,25.522005853257340,\"x, y\"\n";
        // DuckDB's DOUBLE, rounded to our scale 8.
        let b = batch(3994345, 8, 25.522005853257337, "x, y");
        assert_eq!(check(&[b], csv, "DOUBLE,DOUBLE,VARCHAR"), Ok(()));
        // The same decimal against an exact DECIMAL answer must match digit
        // for digit.
        let b = batch(3994346, 8, 25.522005853257337, "x, y");
        assert_eq!(
            check(&[b], csv, "DECIMAL(38,8),DOUBLE,VARCHAR"),
            Err("row 1 column p: got 0.03994346, expected 0.03994345".into())
        );
        // Off by more than the last digit fails even for a DOUBLE answer.
        let b = batch(3994347, 8, 25.522005853257337, "x, y");
        assert!(check(&[b], csv, "DOUBLE,DOUBLE,VARCHAR").is_err());
        let b = batch(3994345, 8, 25.6, "x, y");
        assert_eq!(
            check(&[b], csv, "DOUBLE,DOUBLE,VARCHAR"),
            Err("row 1 column a: got 25.6, expected 25.522005853257340".into())
        );
    }
}
