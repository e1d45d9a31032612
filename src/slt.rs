//! sqllogictest against a running compute process: the format SQLite,
//! DuckDB, CockroachDB and DataFusion check their SQL with, over Quarry's
//! Rust client (Flight SQL).
//!
//! A file is a list of records (`statement ok`, `statement error <regex>`,
//! `query <types> [nosort|rowsort|valuesort] [label]`, `hash-threshold N`,
//! `skipif`/`onlyif <engine>`), parsed and run by the `sqllogictest`
//! crate. What this module adds is Quarry's side of the contract:
//!
//! * **Values as SQLite's runner prints them**, directed by the record's
//!   type letters, not by the column's Arrow type: `I` is the value as an
//!   integer (a real or a decimal truncated toward zero, as
//!   `sqlite3_column_int` does), `R` is `%.3f`, `T` is the text with an
//!   empty string as `(empty)` and non-printing characters as `@`; NULL is
//!   `NULL` whatever the letter. So one corpus checks every engine, and
//!   the PostgreSQL oracle that fills in Quarry's own suite
//!   (`scripts/slt_answers.py`) prints the same way.
//! * **Results one value per line or one row per line**: SQLite's corpus
//!   writes a value per line; files written for this crate write a row
//!   per line. The validator accepts either layout of the same values.
//! * **A clean slate per file**: every file starts with no tables or
//!   views (they are dropped first), as each SQLite test file starts
//!   with an empty database.
//!
//! The engine name is `quarry`: records under `onlyif mysql` (and other
//! engines) are skipped, records under `skipif mysql` run.
//!
//! [`run_file`] keeps going past a failed record, as SQLite's runner does,
//! and reports every failure; the test suite (`tests/slt.rs`) requires
//! none, and `quarry slt` prints the pass rate of any corpus.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{self as dt, DataType};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parking_lot::Mutex;
use quarry_client::Client;
use sqllogictest::{DBOutput, DefaultColumnType, Record, Runner};

/// The name `skipif` and `onlyif` records test against.
pub const ENGINE: &str = "quarry";

/// How one file went.
#[derive(Debug, Default)]
pub struct FileReport {
    /// Statements and queries that ran (not skipped by a condition).
    pub run: usize,
    /// Of those, the ones that failed, with what went wrong.
    pub failures: Vec<String>,
    /// The file could not be parsed or connected to.
    pub fatal: Option<String>,
    pub elapsed: Duration,
}

impl FileReport {
    pub fn passed(&self) -> usize {
        self.run - self.failures.len()
    }
}

/// The error a statement gets, as the runner shows it.
#[derive(Debug)]
pub struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

/// The type letters of the query record about to run (None for a
/// statement): how its values print.
type Hint = Arc<Mutex<Option<Vec<char>>>>;

/// One connection to compute, as the `sqllogictest` runner drives it.
pub struct QuarryDb {
    client: Client,
    hint: Hint,
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for QuarryDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let hint = self.hint.lock().clone();
        let batches = self
            .client
            .sql(sql)
            .await
            .map_err(|e| SltError(e.to_string()))?;
        let Some(letters) = hint else {
            let count = count_of(&batches);
            return Ok(DBOutput::StatementComplete(count));
        };
        let mut rows = Vec::new();
        for batch in &batches {
            rows.extend(format_rows(batch, &letters)?);
        }
        let width = batches.first().map_or(letters.len(), |b| b.num_columns());
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        ENGINE
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await
    }
}

/// A write's row count (its `count` column), else 0.
fn count_of(batches: &[RecordBatch]) -> u64 {
    let Some(b) = batches.first() else { return 0 };
    match b
        .column_by_name("count")
        .map(|c| c.as_primitive_opt::<dt::Int64Type>())
    {
        Some(Some(c)) if !c.is_empty() && c.is_valid(0) => c.value(0).max(0) as u64,
        _ => 0,
    }
}

/// Each row of `batch` as strings, column `i` printed as `letters[i]`
/// says (a column past the letters prints as text).
fn format_rows(batch: &RecordBatch, letters: &[char]) -> Result<Vec<Vec<String>>, SltError> {
    let options = FormatOptions::default().with_null("NULL");
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SltError(format!("formatting the answer: {e}")))?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let mut values = Vec::with_capacity(batch.num_columns());
        for (i, column) in batch.columns().iter().enumerate() {
            let letter = letters.get(i).copied().unwrap_or('T');
            values.push(format_value(column.as_ref(), row, letter, &formatters[i]));
        }
        rows.push(values);
    }
    Ok(rows)
}

/// One value as SQLite's runner prints it for the type letter `letter`.
pub fn format_value(
    column: &dyn Array,
    row: usize,
    letter: char,
    formatter: &ArrayFormatter<'_>,
) -> String {
    if column.is_null(row) {
        return "NULL".into();
    }
    match letter {
        'I' => match number(column, row) {
            Some(Number::Int(i)) => i.to_string(),
            Some(Number::Real(r)) => (r.trunc() as i64).to_string(),
            // Text that starts like an integer reads as one (SQLite).
            None => leading_int(&formatter.value(row).to_string()).to_string(),
        },
        'R' => match number(column, row) {
            Some(Number::Int(i)) => format!("{:.3}", i as f64),
            Some(Number::Real(r)) => format!("{r:.3}"),
            None => format!(
                "{:.3}",
                formatter
                    .value(row)
                    .to_string()
                    .trim()
                    .parse::<f64>()
                    .unwrap_or(0.0)
            ),
        },
        _ => {
            let text = match column.data_type() {
                DataType::Boolean => match column.as_boolean().value(row) {
                    true => "true".to_string(),
                    false => "false".to_string(),
                },
                _ => formatter.value(row).to_string(),
            };
            if text.is_empty() {
                return "(empty)".into();
            }
            text.chars()
                .map(|c| if (' '..='~').contains(&c) { c } else { '@' })
                .collect()
        }
    }
}

/// A numeric value: exact integers apart from everything else.
enum Number {
    Int(i64),
    Real(f64),
}

fn number(column: &dyn Array, row: usize) -> Option<Number> {
    use Number::*;
    Some(match column.data_type() {
        DataType::Int8 => Int(column.as_primitive::<dt::Int8Type>().value(row).into()),
        DataType::Int16 => Int(column.as_primitive::<dt::Int16Type>().value(row).into()),
        DataType::Int32 => Int(column.as_primitive::<dt::Int32Type>().value(row).into()),
        DataType::Int64 => Int(column.as_primitive::<dt::Int64Type>().value(row)),
        DataType::UInt8 => Int(column.as_primitive::<dt::UInt8Type>().value(row).into()),
        DataType::UInt16 => Int(column.as_primitive::<dt::UInt16Type>().value(row).into()),
        DataType::UInt32 => Int(column.as_primitive::<dt::UInt32Type>().value(row).into()),
        DataType::UInt64 => Int(column.as_primitive::<dt::UInt64Type>().value(row) as i64),
        DataType::Float32 => Real(column.as_primitive::<dt::Float32Type>().value(row).into()),
        DataType::Float64 => Real(column.as_primitive::<dt::Float64Type>().value(row)),
        DataType::Boolean => Int(column.as_boolean().value(row).into()),
        DataType::Decimal128(_, scale) => {
            let v = column.as_primitive::<dt::Decimal128Type>().value(row);
            decimal(v, *scale)
        }
        DataType::Decimal64(_, scale) => {
            let v = column.as_primitive::<dt::Decimal64Type>().value(row);
            decimal(v.into(), *scale)
        }
        _ => return None,
    })
}

/// A decimal's value: an integer when it has no fraction, else a real.
fn decimal(v: i128, scale: i8) -> Number {
    if scale <= 0 {
        let v = v.saturating_mul(10i128.saturating_pow((-scale) as u32));
        return Number::Int(v as i64);
    }
    let unit = 10i128.pow(scale as u32);
    if v % unit == 0 {
        return Number::Int((v / unit) as i64);
    }
    // Exact to 3 places is what `R` prints; f64 keeps 15 digits.
    Number::Real(v as f64 / unit as f64)
}

/// The integer a text starts with (0 if none), as SQLite reads it.
fn leading_int(text: &str) -> i64 {
    let t = text.trim_start();
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(t.len(), |(i, _)| i);
    t[..end].parse().unwrap_or(0)
}

/// Compares an answer with the expected lines: one row per line (values
/// separated by spaces) or, as SQLite's corpus writes them, one value
/// per line.
fn validate(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    let values: Vec<String> = actual.iter().flatten().map(normalizer).collect();
    if values == expected {
        return true;
    }
    let rows: Vec<String> = actual
        .iter()
        .map(|r| r.iter().map(normalizer).collect::<Vec<_>>().join(" "))
        .collect();
    rows == expected
}

/// `text` with the comments after `skipif`/`onlyif` conditions taken off
/// (SQLite's corpus writes `onlyif mysql # DIV for integer division`,
/// which the parser does not take).
fn uncomment_conditions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let condition = line.starts_with("skipif ") || line.starts_with("onlyif ");
        match line.find('#') {
            Some(at) if condition => out.push_str(line[..at].trim_end()),
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Drops every table and view, so a file starts from an empty database.
async fn clean_slate(client: &mut Client) -> Result<()> {
    let batches = client.sql("SHOW TABLES").await?;
    for b in &batches {
        let names = b.column(0).as_string::<i32>();
        for name in names.iter().flatten() {
            // SHOW TABLES lists views too: DROP TABLE refuses them.
            if client
                .sql(&format!("DROP TABLE IF EXISTS \"{name}\""))
                .await
                .is_err()
            {
                client
                    .sql(&format!("DROP VIEW IF EXISTS \"{name}\""))
                    .await
                    .with_context(|| format!("dropping {name}"))?;
            }
        }
    }
    Ok(())
}

/// How a file runs.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// The most one statement may take; past it the file stops.
    pub timeout: Duration,
    /// Answers of more values than this compare as an MD5 hash until a
    /// `hash-threshold` record says otherwise (SQLite's runner starts at
    /// 8, which its corpus's files assume; 0: never).
    pub hash_threshold: usize,
}

/// Runs every record of the file at `path` against compute at `addr`.
pub async fn run_file(addr: &str, path: &Path, options: RunOptions) -> FileReport {
    let started = Instant::now();
    let mut report = FileReport::default();
    if let Err(e) = run_records(addr, path, options, &mut report).await {
        report.fatal = Some(format!("{e:#}"));
    }
    report.elapsed = started.elapsed();
    report
}

async fn run_records(
    addr: &str,
    path: &Path,
    options: RunOptions,
    report: &mut FileReport,
) -> Result<()> {
    let timeout = options.timeout;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let records = sqllogictest::parse_with_name::<DefaultColumnType>(
        &uncomment_conditions(&text),
        path.display().to_string(),
    )
    .map_err(|e| anyhow::anyhow!("parsing {}: {e}", path.display()))?;
    let mut admin = Client::connect(addr).await?;
    clean_slate(&mut admin).await?;
    let hint: Hint = Arc::default();
    let (url, conn_hint) = (addr.to_string(), hint.clone());
    let mut runner = Runner::new(move || {
        let (url, hint) = (url.clone(), conn_hint.clone());
        async move {
            let client = Client::connect(&url)
                .await
                .map_err(|e| SltError(e.to_string()))?;
            Ok(QuarryDb { client, hint })
        }
    });
    runner.with_validator(validate);
    runner.with_hash_threshold(options.hash_threshold);
    for record in records {
        let (letters, loc, sql) = match &record {
            Record::Query {
                expected, loc, sql, ..
            } => {
                let letters = match expected {
                    sqllogictest::QueryExpect::Results { types, .. } => types
                        .iter()
                        .map(sqllogictest::ColumnType::to_char)
                        .collect(),
                    sqllogictest::QueryExpect::Error(_) => Vec::new(),
                };
                (Some(letters), loc.clone(), sql.clone())
            }
            Record::Statement { loc, sql, .. } => (None, loc.clone(), sql.clone()),
            _ => {
                let _ = runner.run_async(record).await;
                continue;
            }
        };
        *hint.lock() = letters;
        let outcome = tokio::time::timeout(timeout, runner.run_async(record)).await;
        match outcome {
            Ok(Ok(sqllogictest::RecordOutput::Nothing)) => {}
            Ok(Ok(_)) => report.run += 1,
            Ok(Err(e)) => {
                report.run += 1;
                report.failures.push(format!("{e}"));
            }
            Err(_) => {
                report.run += 1;
                report
                    .failures
                    .push(format!("{loc}: no answer within {timeout:?}: {sql}"));
                // The runner's connection may be mid-call: start afresh.
                anyhow::bail!("a statement timed out at {loc}; the file stops there");
            }
        }
    }
    Ok(())
}
