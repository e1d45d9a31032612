//! Printing results: an aligned table, CSV (a header line, then rows), or
//! JSON lines (one object per row).

use std::io::Write;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;

use crate::tpch::format_value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn print(out: &mut dyn Write, batches: &[RecordBatch], format: Format) -> std::io::Result<()> {
    if format == Format::Table {
        let text =
            arrow::util::pretty::pretty_format_batches(batches).map_err(std::io::Error::other)?;
        return writeln!(out, "{text}");
    }
    for (i, b) in batches.iter().enumerate() {
        print_batch(out, b, format, i == 0)?;
    }
    Ok(())
}

/// Prints one batch of a result as CSV (the header line before the
/// `first`) or JSON lines, so a result can be printed as it arrives.
/// (A table's columns are aligned over the whole result: [`print()`].)
pub fn print_batch(
    out: &mut dyn Write,
    b: &RecordBatch,
    format: Format,
    first: bool,
) -> std::io::Result<()> {
    match format {
        Format::Table => print(out, std::slice::from_ref(b), format),
        Format::Csv => {
            if first {
                let names: Vec<String> = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| csv_field(f.name()))
                    .collect();
                writeln!(out, "{}", names.join(","))?;
            }
            for r in 0..b.num_rows() {
                let row: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|c| csv_field(&format_value(c.as_ref(), r)))
                    .collect();
                writeln!(out, "{}", row.join(","))?;
            }
            Ok(())
        }
        Format::Json => {
            let schema = b.schema();
            for r in 0..b.num_rows() {
                let fields: Vec<String> = b
                    .columns()
                    .iter()
                    .zip(schema.fields())
                    .map(|(c, f)| {
                        let key = serde_json::to_string(f.name()).unwrap_or_default();
                        let v = if c.is_null(r) {
                            "null".to_string()
                        } else {
                            let text = format_value(c.as_ref(), r);
                            match c.data_type() {
                                DataType::Int64 | DataType::Decimal128(..) | DataType::Boolean => {
                                    text
                                }
                                DataType::Float64
                                    if text.parse::<f64>().is_ok_and(f64::is_finite) =>
                                {
                                    text
                                }
                                _ => serde_json::to_string(&text).unwrap_or_default(),
                            }
                        };
                        format!("{key}:{v}")
                    })
                    .collect();
                writeln!(out, "{{{}}}", fields.join(","))?;
            }
            Ok(())
        }
    }
}
