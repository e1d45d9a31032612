//! The share of a table's rows a filter condition keeps, measured on a
//! sample of the rows, for conditions the column statistics cannot
//! estimate (`selectivity.rs`).
//!
//! The column statistics (`stats.rs`) describe one column at a time: a
//! column against a constant, a range, a set. A condition between two
//! columns of a row has no estimate there, and DataFusion's default, a
//! fifth of the rows, stands in for it. TPC-H's `l_receiptdate >
//! l_commitdate` (Q4, Q12, Q21) keeps 63% of lineitem; taken as 20%, Q21's
//! lineitem ⋈ supplier ⋈ nation at SF 10 looked like 0.5 M rows where it is
//! 1.5 M, small enough to broadcast to every MPP task — two copies of a
//! 268 MB hash table in each compute process.
//!
//! So a condition that reads two or more columns is measured, the way
//! Oracle's dynamic sampling and SQL Server's sampled statistics do,
//! rather than guessed: storage
//! evaluates it over the first [`SAMPLE_ROWS_PER_REGION`] rows of every
//! region of the table (a projection of the condition with a per-region
//! limit, so each region stops after that many rows), and compute counts
//! the TRUE answers. Like the statistics themselves, this runs in the
//! background: the statement that first meets the condition is planned
//! with the default, later ones with the measured share, which is kept in
//! the table's statistics (a new statistics value, so the plan cache
//! plans again: `plan_cache.rs` keys plans by the statistics' identity).
//! A new analysis of the table starts over with no measured shares.
//!
//! The measurement is keyed by the condition rewritten over only the
//! columns it reads, in column-id order: the same condition in scans that
//! read different columns is measured once. A compute process measures
//! one condition at a time, reading around the stores' block cache. At
//! most [`MAX_MEASURED_PER_TABLE`] conditions are measured per analysis
//! of a table, so statements with ever-new constants in such conditions
//! do not keep the stores busy; a measurement that fails is tried again
//! by a later plan, and one that ends after a new analysis is dropped.
//! A condition that carries a statement's parameters (a prepared
//! statement's, or a plan kept for its literals' shape: `late_filters.rs`)
//! is not measured: while planning, its constants are type defaults.
//!
//! Caveats, and why one column is left alone: the first rows of each
//! region are not a uniform sample. A condition on a column that rises
//! with the row handle (an order key, a time in a table appended in time
//! order) sees the oldest rows of each region. One column against
//! constants is what column statistics are for, and that is where such
//! order bites (`ts > now() - INTERVAL '1 day'` would measure none), so
//! those keep the statistics' estimate or the default; a condition
//! between a row's own columns is rarely moved by where the row sits. An
//! estimate is only a planning hint: no answer depends on it.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Instant;

use arrow::array::AsArray;
use arrow::datatypes::DataType;
use prost::Message;
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{expr::Kind, DagRequest, Expr as ProtoExpr, Projection, TableScan};
use quarry_proto::meta::TableDef;

use super::region_scan::ScanContext;
use crate::Result;

/// The rows of each region a condition is measured on.
pub const SAMPLE_ROWS_PER_REGION: u64 = 4096;

/// The most conditions measured per analysis of a table.
pub const MAX_MEASURED_PER_TABLE: usize = 256;

/// A condition whose encoding is longer is not measured (its key would
/// be kept twice per table: a long IN list is better left at the default).
pub const MAX_CONDITION_BYTES: usize = 4096;

/// What storage runs to measure `condition` (over `scan`'s columns): the
/// condition as the only output, over a scan of only the columns it
/// reads, at most [`SAMPLE_ROWS_PER_REGION`] rows per region. Its encoding
/// is the measurement's key. None for a condition not to measure: one
/// that reads fewer than two columns (module docs), or whose encoding is
/// past [`MAX_CONDITION_BYTES`] or fails.
pub fn sample_request(scan: &TableScan, condition: &Expr) -> Option<DagRequest> {
    // The columns it reads, in column-id order, and where each moves.
    let mut read: Vec<usize> = condition.columns();
    if read.len() < 2 || read.iter().any(|&i| i >= scan.columns.len()) {
        return None;
    }
    let mut proto = condition.to_proto().ok()?;
    if proto.encoded_len() > MAX_CONDITION_BYTES {
        return None;
    }
    read.sort_by_key(|&i| scan.columns[i].column_id);
    let moved: HashMap<u32, u32> = read
        .iter()
        .enumerate()
        .map(|(to, &from)| (from as u32, to as u32))
        .collect();
    renumber(&mut proto, &moved);
    Some(DagRequest {
        scan: Some(TableScan {
            table_id: scan.table_id,
            columns: read.iter().map(|&i| scan.columns[i].clone()).collect(),
            layout: scan.layout,
        }),
        projection: Some(Projection { exprs: vec![proto] }),
        limit: SAMPLE_ROWS_PER_REGION,
        // A sample, not what queries read: leave the block cache alone.
        not_fill_cache: true,
        ..Default::default()
    })
}

/// The key a measurement of `sample` is kept under.
pub fn key_of(sample: &DagRequest) -> Vec<u8> {
    sample.encode_to_vec()
}

/// `e` with each column index `i` replaced by `moved[i]`.
fn renumber(e: &mut ProtoExpr, moved: &HashMap<u32, u32>) {
    match &mut e.kind {
        Some(Kind::Column(i)) => {
            if let Some(to) = moved.get(i) {
                *i = *to;
            }
        }
        Some(Kind::Func(f)) => {
            for a in &mut f.args {
                renumber(a, moved);
            }
        }
        Some(Kind::Literal(_)) | None => {}
    }
}

/// Runs `sample` over `table`'s regions: the share of the sampled rows
/// for which the condition is TRUE (NULL counts as not kept), smoothed
/// by half a row so that a condition no sampled row passes is rare, not
/// impossible (an estimate of one row would make its side look like a
/// free broadcast); None when the table has no rows.
pub async fn measure(
    table: &TableDef,
    sample: &DagRequest,
    scan: &ScanContext,
) -> Result<Option<f64>> {
    let (start, end) = table_record_range(table.id);
    let (mut kept, mut rows) = (0u64, 0u64);
    scan.dispatcher
        .run(
            sample,
            vec![KeyRange::new(start, end)],
            &[DataType::Boolean],
            Instant::now() + scan.timeout,
            &mut |b| {
                if let Some(c) = b.column(0).as_boolean_opt() {
                    rows += c.len() as u64;
                    kept += c.true_count() as u64;
                }
                Ok(ControlFlow::Continue(()))
            },
        )
        .await?;
    Ok((rows > 0).then(|| (kept as f64 + 0.5) / (rows as f64 + 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_coprocessor::expr::CmpOp;
    use quarry_proto::coprocessor::ColumnInfo;

    fn info(column_id: i64) -> ColumnInfo {
        ColumnInfo {
            column_id,
            field_type: Some(quarry_proto::meta::FieldType {
                kind: quarry_proto::meta::TypeKind::Date as i32,
                nullable: false,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn receipt_after_commit(receipt: usize, commit: usize) -> Expr {
        Expr::Compare {
            op: CmpOp::Gt,
            left: Box::new(Expr::Column {
                index: receipt,
                data_type: DataType::Date32,
            }),
            right: Box::new(Expr::Column {
                index: commit,
                data_type: DataType::Date32,
            }),
        }
    }

    #[test]
    fn one_condition_in_scans_of_different_columns_is_one_measurement() {
        // lineitem's l_commitdate is column 12, l_receiptdate 13.
        let narrow = TableScan {
            table_id: 7,
            columns: vec![info(1), info(12), info(13)],
            layout: 0,
        };
        let wide = TableScan {
            table_id: 7,
            columns: vec![info(13), info(3), info(4), info(12)],
            layout: 0,
        };
        let a = sample_request(&narrow, &receipt_after_commit(2, 1)).expect("encodes");
        let b = sample_request(&wide, &receipt_after_commit(0, 3)).expect("encodes");
        assert_eq!(key_of(&a), key_of(&b));
        // Only the two columns it reads, in column-id order.
        let ids: Vec<i64> = a
            .scan
            .as_ref()
            .unwrap()
            .columns
            .iter()
            .map(|c| c.column_id)
            .collect();
        assert_eq!(ids, vec![12, 13]);
        assert_eq!(a.limit, SAMPLE_ROWS_PER_REGION);
        assert!(a.not_fill_cache);
        // The other way round is another condition.
        let c = sample_request(&narrow, &receipt_after_commit(1, 2)).expect("encodes");
        assert_ne!(key_of(&a), key_of(&c));
    }

    #[test]
    fn one_column_or_a_column_past_the_scan_has_no_request() {
        let scan = TableScan {
            table_id: 7,
            columns: vec![info(12)],
            layout: 0,
        };
        assert!(sample_request(&scan, &receipt_after_commit(1, 0)).is_none());
        // A column against itself reads one column: left to statistics.
        assert!(sample_request(&scan, &receipt_after_commit(0, 0)).is_none());
    }
}
