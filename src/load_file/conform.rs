//! Matching a file's columns to a table's: the types a new table gets
//! ([`sql_type`]), the conversions an existing one accepts
//! ([`convertible`]), and [`Conform`], which turns each batch into the
//! table's columns.

use anyhow::{anyhow, bail, Result};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Schema};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::meta::TableDef;

/// The SQL type a new table gets for a file column of type `dt`.
pub fn sql_type(dt: &DataType) -> Option<String> {
    Some(match dt {
        t if t.is_integer() => "BIGINT".into(),
        t if t.is_floating() => "DOUBLE".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s)
            if *p <= 38 && *s >= 0 =>
        {
            format!("DECIMAL({p},{s})")
        }
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Dictionary(_, v) if sql_type(v).as_deref() == Some("VARCHAR") => "VARCHAR".into(),
        // Tables have no BOOLEAN columns (yet): 0 and 1.
        DataType::Boolean => "BIGINT".into(),
        // A column with no values at all (CSV inference's Null).
        DataType::Null => "VARCHAR".into(),
        _ => return None,
    })
}

/// Whether a file column of type `from` may be loaded into a column of
/// type `to` (Arrow's cast kernel, which fails rather than lose a value:
/// out-of-range integers and decimals are errors, not wrapped).
pub fn convertible(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (Null, _) => true,
        (Dictionary(_, v), to) => convertible(v, to),
        (f, Int64) => f.is_integer() || *f == Boolean,
        (f, Float64) => f.is_integer() || f.is_floating(),
        (
            Decimal32(_, fs) | Decimal64(_, fs) | Decimal128(_, fs) | Decimal256(_, fs),
            Decimal128(_, ts),
        ) => fs <= ts,
        (f, Decimal128(..)) => f.is_integer(),
        (Date32 | Date64, Date32) => true,
        (Utf8 | LargeUtf8 | Utf8View, Utf8) => true,
        (Boolean, Boolean) => true,
        _ => false,
    }
}

/// The position of `table`'s column called `name`: the exact name, else
/// the one that differs only in case.
pub(super) fn column_named(table: &TableDef, name: &str) -> Option<usize> {
    let cols = &table.columns;
    cols.iter()
        .position(|c| c.name == name)
        .or_else(|| cols.iter().position(|c| c.name.eq_ignore_ascii_case(name)))
}

/// How a file's columns fill a table's: per table column, the file
/// column feeding it (or none: NULLs).
pub(super) struct Conform {
    pub(super) table: TableDef,
    /// The table's column types.
    pub(super) types: Vec<DataType>,
    sources: Vec<Option<usize>>,
}

impl Conform {
    /// Matches `file` against `table` by name (exact, then ignoring case).
    pub(super) fn new(table: TableDef, file: &Schema) -> Result<Self> {
        let types = table
            .columns
            .iter()
            .map(|c| Ok(arrow_type(&c.field_type.unwrap_or_default())?))
            .collect::<Result<Vec<_>>>()?;
        let mut sources = vec![None; table.columns.len()];
        for (fi, f) in file.fields().iter().enumerate() {
            let Some(pos) = column_named(&table, f.name()) else {
                let names: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
                bail!(
                    "the file's column '{}' is not in table {}; its columns are: {}",
                    f.name(),
                    table.name,
                    names.join(", ")
                );
            };
            if sources[pos].is_some() {
                bail!(
                    "two of the file's columns match column {} of table {}",
                    table.columns[pos].name,
                    table.name
                );
            }
            if !convertible(f.data_type(), &types[pos]) {
                bail!(
                    "column {}: the file has {}, which does not convert to {} (table {}) without loss",
                    f.name(),
                    f.data_type(),
                    sql_name(&types[pos]),
                    table.name
                );
            }
            sources[pos] = Some(fi);
        }
        for (c, src) in table.columns.iter().zip(&sources) {
            let nullable = c.field_type.is_some_and(|t| t.nullable);
            if src.is_none() && (!nullable || c.id == table.handle_column_id) {
                bail!(
                    "column {} of table {} is NOT NULL but the file has no column of that name",
                    c.name,
                    table.name
                );
            }
        }
        Ok(Conform {
            table,
            types,
            sources,
        })
    }

    /// The batch's columns in the table's order and types; `first_row` is
    /// the batch's first row number in the files (for messages).
    pub(super) fn apply(&self, batch: &RecordBatch, first_row: u64) -> Result<Vec<ArrayRef>> {
        let opts = CastOptions {
            safe: false,
            ..Default::default()
        };
        let mut out = Vec::with_capacity(self.types.len());
        for ((c, t), src) in self
            .table
            .columns
            .iter()
            .zip(&self.types)
            .zip(&self.sources)
        {
            let a = match src {
                None => arrow::array::new_null_array(t, batch.num_rows()),
                Some(i) => cast_with_options(batch.column(*i), t, &opts).map_err(|e| {
                    anyhow!(
                        "column {} (rows {}..{}): {e}",
                        c.name,
                        first_row + 1,
                        first_row + batch.num_rows() as u64
                    )
                })?,
            };
            let ft = c.field_type.unwrap_or_default();
            if !ft.nullable && a.null_count() > 0 {
                let row = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
                bail!(
                    "column {} is NOT NULL but row {} has no value",
                    c.name,
                    first_row + row as u64 + 1
                );
            }
            if ft.max_len > 0 {
                let v = a.as_string::<i32>();
                for i in (0..v.len()).filter(|&i| v.is_valid(i)) {
                    if v.value(i).chars().count() > ft.max_len as usize {
                        bail!(
                            "column {}: row {} is too long for VARCHAR({}): '{}'",
                            c.name,
                            first_row + i as u64 + 1,
                            ft.max_len,
                            v.value(i)
                        );
                    }
                }
            }
            out.push(a);
        }
        Ok(out)
    }
}
