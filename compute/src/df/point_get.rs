//! Point reads: a selection that pins a row table's primary key to
//! constants (`id = 5`, `id IN (1, 2, 3)`) reads only those rows' keys
//! instead of the table's whole range (TiDB's PointGet / BatchPointGet).
//!
//! A row's lock and versions sit right after its key, before the next
//! handle's (`coprocessor::codec::mvcc`), so the range [row key, next
//! handle's row key) holds everything a snapshot read of it needs. The
//! selection still runs in the regions, so the narrowing only has to be
//! a superset of the answer. A column-layout table is left alone: its rows
//! may sit in a pack keyed by an earlier handle.

use arrow::datatypes::DataType;
use quarry_coprocessor::codec::key::{record_key, row_keys_end, table_record_range};
use quarry_coprocessor::expr::{CmpOp, Expr, ScalarValue};
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::{Layout, TableDef};

/// The most keys read one by one; a longer list reads the table's range.
pub const MAX_POINT_KEYS: usize = 1024;

/// The key ranges the scan of `dag` over `table` must read.
pub fn scan_ranges(table: &TableDef, dag: &DagRequest) -> Vec<KeyRange> {
    let (start, end) = table_record_range(table.id);
    match pinned_handles(table, dag) {
        Some(handles) => handles
            .into_iter()
            .map(|h| {
                let k = record_key(table.id, h);
                let end = row_keys_end(&k);
                KeyRange::new(k, end)
            })
            .collect(),
        None => vec![KeyRange::new(start, end)],
    }
}

/// The handles a conjunct of the selection pins the primary key to,
/// sorted and distinct, if any does (and the table is row-layout).
pub(crate) fn pinned_handles(table: &TableDef, dag: &DagRequest) -> Option<Vec<i64>> {
    if table.layout != Layout::Row as i32 || table.handle_column_id == 0 {
        return None;
    }
    let scan = dag.scan.as_ref()?;
    let key = scan
        .columns
        .iter()
        .position(|c| c.column_id == table.handle_column_id)?;
    let types: Vec<DataType> = scan
        .columns
        .iter()
        .map(|c| c.field_type.as_ref().and_then(|f| arrow_type(f).ok()))
        .collect::<Option<_>>()?;
    let is_key = |e: &Expr| matches!(e, Expr::Column { index, .. } if *index == key);
    for c in &dag.selection.as_ref()?.conditions {
        let Ok(e) = Expr::from_proto(c, &types) else {
            continue;
        };
        let mut handles = match &e {
            Expr::Compare {
                op: CmpOp::Eq,
                left,
                right,
            } => match (left.as_ref(), right.as_ref()) {
                (k, Expr::Literal(ScalarValue::Int64(h)))
                | (Expr::Literal(ScalarValue::Int64(h)), k)
                    if is_key(k) =>
                {
                    vec![*h]
                }
                _ => continue,
            },
            Expr::InList {
                expr,
                list,
                negated: false,
                ..
            } if is_key(expr) && list.len() <= MAX_POINT_KEYS => {
                let mut hs = Vec::with_capacity(list.len());
                for v in list.iter() {
                    match v {
                        ScalarValue::Int64(h) => hs.push(*h),
                        // NULL matches nothing.
                        ScalarValue::Null(_) => {}
                        _ => return None,
                    }
                }
                hs
            }
            _ => continue,
        };
        handles.sort_unstable();
        handles.dedup();
        return Some(handles);
    }
    None
}
