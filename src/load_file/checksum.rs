//! The load's checksum: the row count and, per column, the count of
//! non-NULL values and an exact sum, computed from the files' batches
//! ([`Checksum::add`]) and by the cluster over the table
//! ([`table_checksum`], one aggregate query pushed down like any other:
//! strings count by their length in bytes and DATEs as days, both of
//! which the stores evaluate, so the query answers one row per region).

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Decimal64Type, Float64Type, Int64Type,
};
use quarry_compute::engine::QueryEngine;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::meta::TableDef;

use super::quote;

/// One column's part of a [`Checksum`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ColumnSum {
    /// Values that are not NULL.
    pub count: i128,
    /// The exact sum of the column's values as integers (see the module
    /// docs), or of DOUBLEs in `float`.
    pub sum: i128,
    pub float: f64,
}

/// Row count and per-column sums over a table's columns, computed the
/// same way from a file's batches and by the cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Checksum {
    pub rows: i128,
    pub columns: Vec<ColumnSum>,
}

impl Checksum {
    pub(crate) fn new(columns: usize) -> Self {
        Checksum {
            rows: 0,
            columns: vec![ColumnSum::default(); columns],
        }
    }

    /// Adds a conformed batch (columns in the table's order and types).
    /// Column at a time over the values and the null bitmap: a backup
    /// and a restore run every value of the table through here.
    pub(crate) fn add(&mut self, arrays: &[ArrayRef]) -> Result<()> {
        self.rows += arrays.first().map_or(0, |a| a.len()) as i128;
        for (sum, a) in self.columns.iter_mut().zip(arrays) {
            sum.count += (a.len() - a.null_count()) as i128;
            let ints: i128 = match a.data_type() {
                DataType::Int64 => exact_sum(a.as_primitive::<Int64Type>(), |v| Some(v as i128))
                    .ok_or_else(|| anyhow!("checksum overflow"))?,
                DataType::Decimal128(..) => exact_sum(a.as_primitive::<Decimal128Type>(), Some)
                    .ok_or_else(|| anyhow!("decimal checksum overflow"))?,
                // The same sum as the Decimal128 the values widen to.
                DataType::Decimal64(..) => {
                    exact_sum(a.as_primitive::<Decimal64Type>(), |v| Some(v as i128))
                        .ok_or_else(|| anyhow!("decimal checksum overflow"))?
                }
                DataType::Date32 => exact_sum(a.as_primitive::<Date32Type>(), |v| Some(v as i128))
                    .ok_or_else(|| anyhow!("checksum overflow"))?,
                DataType::Utf8 => {
                    // Bytes per value, from the offsets.
                    let v = a.as_string::<i32>();
                    let o = v.value_offsets();
                    match v.nulls() {
                        None => (o[v.len()] - o[0]) as i128,
                        Some(n) => n.valid_indices().map(|i| (o[i + 1] - o[i]) as i128).sum(),
                    }
                }
                DataType::Boolean => a.as_boolean().true_count() as i128,
                DataType::Float64 => {
                    let v = a.as_primitive::<Float64Type>();
                    sum.float += v.iter().flatten().sum::<f64>();
                    0
                }
                other => bail!("no checksum for type {other}"),
            };
            sum.sum = sum
                .sum
                .checked_add(ints)
                .ok_or_else(|| anyhow!("checksum overflow"))?;
        }
        Ok(())
    }

    /// Adds another part's sums (a restore's files, read by several
    /// threads).
    pub(crate) fn absorb(&mut self, other: &Checksum) {
        self.rows += other.rows;
        for (a, b) in self.columns.iter_mut().zip(&other.columns) {
            a.count += b.count;
            a.sum += b.sum;
            a.float += b.float;
        }
    }

    pub(super) fn minus(&self, before: &Checksum) -> Checksum {
        Checksum {
            rows: self.rows - before.rows,
            columns: self
                .columns
                .iter()
                .zip(&before.columns)
                .map(|(a, b)| ColumnSum {
                    count: a.count - b.count,
                    sum: a.sum - b.sum,
                    float: a.float - b.float,
                })
                .collect(),
        }
    }

    /// The first difference from `other`, named by column.
    pub(crate) fn difference(&self, other: &Checksum, table: &TableDef) -> Option<String> {
        if self.rows != other.rows {
            return Some(format!("{} rows against {}", self.rows, other.rows));
        }
        if self.columns.len() != other.columns.len() || self.columns.len() != table.columns.len() {
            return Some(format!(
                "{} columns against {} (the table has {})",
                self.columns.len(),
                other.columns.len(),
                table.columns.len()
            ));
        }
        for ((a, b), c) in self.columns.iter().zip(&other.columns).zip(&table.columns) {
            // Equal (infinities too), both NaN (a NaN or opposite
            // infinities summed), or within rounding of each other.
            let close = a.float == b.float
                || (a.float.is_nan() && b.float.is_nan())
                || (a.float - b.float).abs() <= 1e-9 * a.float.abs().max(b.float.abs());
            if a.count != b.count || a.sum != b.sum || !close {
                return Some(format!(
                    "column {}: {} values summing to {} against {} summing to {}",
                    c.name,
                    a.count,
                    if a.float != 0.0 {
                        a.float.to_string()
                    } else {
                        a.sum.to_string()
                    },
                    b.count,
                    if b.float != 0.0 {
                        b.float.to_string()
                    } else {
                        b.sum.to_string()
                    },
                ));
            }
        }
        None
    }

    /// A short digest to print (FNV-1a over the exact parts).
    pub fn digest(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |v: i128| {
            for b in v.to_le_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(self.rows);
        for c in &self.columns {
            eat(c.count);
            eat(c.sum);
        }
        format!("{h:016x}")
    }
}

/// The sum of the valid values of `v` as `i128`s (`as_i128` of each),
/// None on overflow.
fn exact_sum<T: ArrowPrimitiveType>(
    v: &PrimitiveArray<T>,
    as_i128: impl Fn(T::Native) -> Option<i128>,
) -> Option<i128> {
    let add = |s: i128, x: T::Native| s.checked_add(as_i128(x)?);
    match v.nulls() {
        None => v.values().iter().try_fold(0i128, |s, x| add(s, *x)),
        Some(_) => v.iter().flatten().try_fold(0i128, add),
    }
}

/// The query that computes a [`Checksum`] over `table` in the cluster.
fn checksum_sql(table: &TableDef) -> Result<String> {
    let mut items = vec!["count(*)".to_string()];
    for c in &table.columns {
        let col = quote(&c.name);
        let t = arrow_type(&c.field_type.unwrap_or_default())?;
        items.push(format!("count({col})"));
        items.push(match t {
            DataType::Float64 => format!("sum({col})"),
            DataType::Int64 | DataType::Date32 => {
                format!("sum(CAST(CAST({col} AS BIGINT) AS DECIMAL(38,0)))")
            }
            DataType::Decimal128(..) => format!("sum({col})"),
            DataType::Utf8 => format!("sum(CAST(octet_length({col}) AS DECIMAL(38,0)))"),
            DataType::Boolean => {
                format!("sum(CASE WHEN {col} THEN CAST(1 AS DECIMAL(38,0)) ELSE 0 END)")
            }
            other => bail!("no checksum for type {other}"),
        });
    }
    Ok(format!(
        "SELECT {} FROM {}",
        items.join(", "),
        quote(&table.name)
    ))
}

/// Runs [`checksum_sql`] through an in-process query engine.
pub(crate) async fn table_checksum(engine: &QueryEngine, table: &TableDef) -> Result<Checksum> {
    let out = engine
        .sql(&checksum_sql(table)?)
        .await
        .context("computing the table's checksum")?;
    let batch = out
        .batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or_else(|| anyhow!("the checksum query answered no row"))?;
    // Each aggregate as an exact integer (NULL sums of no rows are 0).
    let int = |i: usize| -> Result<i128> {
        let a = batch.column(i);
        if a.is_null(0) {
            return Ok(0);
        }
        Ok(match a.data_type() {
            DataType::Int64 => a.as_primitive::<Int64Type>().value(0) as i128,
            DataType::Decimal128(..) => a.as_primitive::<Decimal128Type>().value(0),
            other => bail!("checksum column of type {other}"),
        })
    };
    let mut sum = Checksum {
        rows: int(0)?,
        columns: vec![],
    };
    for i in 0..table.columns.len() {
        let (count, value) = (1 + 2 * i, 2 + 2 * i);
        let a = batch.column(value);
        let mut c = ColumnSum {
            count: int(count)?,
            ..Default::default()
        };
        if *a.data_type() == DataType::Float64 {
            if !a.is_null(0) {
                c.float = a.as_primitive::<Float64Type>().value(0);
            }
        } else {
            c.sum = int(value)?;
        }
        sum.columns.push(c);
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BooleanArray, Date32Array, Decimal128Array, Decimal64Array, Float64Array, Int64Array,
        StringArray,
    };

    use super::*;

    #[test]
    fn sums_count_only_the_values_that_are_there() {
        let with_nulls: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(5), None, Some(-2)])),
            Arc::new(
                Decimal128Array::from(vec![Some(1050), Some(-25), None])
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(Date32Array::from(vec![None, Some(8766), Some(1)])),
            Arc::new(StringArray::from(vec![Some("ab"), None, Some("héllo")])),
            Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            Arc::new(Float64Array::from(vec![Some(0.5), Some(2.0), None])),
        ];
        // The same values, no NULLs: the other path.
        let dense: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![5, -2])),
            Arc::new(
                Decimal128Array::from(vec![1050, -25])
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(Date32Array::from(vec![8766, 1])),
            Arc::new(StringArray::from(vec!["ab", "héllo"]).slice(0, 2)),
            Arc::new(BooleanArray::from(vec![true, false])),
            Arc::new(Float64Array::from(vec![0.5, 2.0])),
        ];
        for (arrays, rows) in [(with_nulls, 3), (dense, 2)] {
            let mut sum = Checksum::new(6);
            sum.add(&arrays).unwrap();
            assert_eq!(sum.rows, rows);
            let sums: Vec<i128> = sum.columns.iter().map(|c| c.sum).collect();
            assert_eq!(sums, vec![3, 1025, 8767, 8, 1, 0]);
            let counts: Vec<i128> = sum.columns.iter().map(|c| c.count).collect();
            assert_eq!(counts, vec![2; 6]);
            assert_eq!(sum.columns[5].float, 2.5);
        }
        // A backup reads DECIMAL(p ≤ 18) as Decimal64: the same sum as
        // the Decimal128 it restores as.
        let narrow: ArrayRef = Arc::new(
            Decimal64Array::from(vec![Some(1050), Some(-25), None])
                .with_precision_and_scale(15, 2)
                .unwrap(),
        );
        let mut sum = Checksum::new(1);
        sum.add(&[narrow]).unwrap();
        assert_eq!((sum.columns[0].sum, sum.columns[0].count), (1025, 2));
        // A slice's offsets start past zero.
        let sliced: ArrayRef = Arc::new(StringArray::from(vec!["xyz", "ab", "c"]).slice(1, 2));
        let mut sum = Checksum::new(1);
        sum.add(&[sliced]).unwrap();
        assert_eq!(sum.columns[0].sum, 3);
        let big: ArrayRef = Arc::new(
            Decimal128Array::from(vec![i128::MAX, 1])
                .with_precision_and_scale(38, 0)
                .unwrap(),
        );
        let err = Checksum::new(1).add(&[big]).unwrap_err();
        assert!(err.to_string().contains("overflow"), "{err}");
    }
}
