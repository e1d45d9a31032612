//! A whole table at one snapshot, streamed in handle order: what BACKUP
//! reads.
//!
//! A table's rows are keyed by handle, and its regions cut that key space
//! into consecutive ranges, so reading the regions one after another in
//! key order and each region's rows in handle order yields the whole table
//! in handle order, with no sort across regions (a query's `ORDER BY` made
//! DataFusion gather and sort the table in compute: the whole table in
//! memory, and nothing written until the last region had answered).
//!
//! ```text
//!   regions (located once, key order) ─▶ one scan per region, a few at
//!   once (`REGIONS_AHEAD`), each gathered ─▶ put in handle order if it is
//!   not ─▶ emitted in region order
//! ```
//!
//! A region's pages arrive in key order, and a region's keys are in handle
//! order except where a column table's delta holds rows whose handles fall
//! inside a pack's span (updates not yet merged): such a region is sorted
//! by handle on its own (one region's rows, tens of megabytes, copied
//! twice by the sort). A region that splits while it is
//! read is read by the dispatcher as its parts, which may answer in any
//! order; the same check and sort put it right. So compute holds at most
//! `REGIONS_AHEAD` regions' rows, and the first ones stream out while the
//! stores still scan the rest.
//!
//! Everything else is a query's: the dispatcher's retries, splits, leader
//! changes and lock resolution, at the snapshot `read_ts` the caller holds
//! GC below.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::coprocessor::{DagRequest, TableScan};
use quarry_proto::meta::{ColumnDef, TableDef};

use crate::df::pushdown::column_info;
use crate::df::region_scan::conform;
use crate::df::rowid_column;
use crate::df::table::table_schema;
use crate::dispatch::Dispatcher;
use crate::output::QueryStream;
use crate::{Error, Result};

/// Regions read at once, ahead of the one being emitted: enough to keep
/// every store of a small cluster scanning, few enough that compute holds
/// only a few regions' rows.
pub const REGIONS_AHEAD: usize = 4;

/// The name the handles travel under when the table has no primary key:
/// `_rowid`, or with more underscores in front when a column has that name.
pub fn rowid_field_name(table: &TableDef) -> String {
    let mut name = crate::df::ROWID.to_string();
    while table.columns.iter().any(|c| c.name == name) {
        name.insert(0, '_');
    }
    name
}

/// Where the handles are in the batches [`scan_in_handle_order`]
/// streams: first when the table has no primary key, else at its key's
/// place.
pub fn handle_position(table: &TableDef) -> Result<usize> {
    if table.handle_column_id == 0 {
        return Ok(0);
    }
    table.key_position().ok_or_else(|| {
        Error::Internal(format!(
            "table {}'s primary key is not a column",
            table.name
        ))
    })
}

/// Streams every row of `table` at `read_ts` in handle order: the
/// table's columns in its order, after the handles (BIGINT, named by
/// [`rowid_field_name`]) when it has no primary key (the key is then the
/// handle). DECIMAL(p ≤ 18) columns come as Decimal64 (the values the
/// stores send; [`quarry_coprocessor::ipc::narrow_schema`]), not widened
/// to the Decimal128 a query computes on. `table` is the definition the
/// rows are read as; the caller makes sure it is the one at `read_ts`.
pub async fn scan_in_handle_order(
    dispatcher: Arc<Dispatcher>,
    table: &TableDef,
    read_ts: u64,
    deadline: Instant,
) -> Result<QueryStream> {
    let rowid = (table.handle_column_id == 0).then(|| rowid_column(&rowid_field_name(table)));
    let columns: Vec<&ColumnDef> = rowid.iter().chain(&table.columns).collect();
    let mut fields = table_schema(table)?.fields().to_vec();
    if let Some(r) = &rowid {
        fields.insert(0, Arc::new(Field::new(&r.name, DataType::Int64, false)));
    }
    let wide: SchemaRef = Arc::new(Schema::new(fields));
    // DECIMAL(p ≤ 18) as Decimal64, as narrow pages carry them; pages
    // sent wide (`encode = "rows"` or `"arrow-decimal128"`) are cast
    // (`conform`). Rows decode by the table's own (wide) types.
    let schema = quarry_coprocessor::ipc::narrow_schema(&wide);
    let handle_pos = handle_position(table)?;
    if schema.field(handle_pos).data_type() != &DataType::Int64 {
        return Err(Error::Internal(format!(
            "table {}'s handle column is not a BIGINT",
            table.name
        )));
    }
    let dag = Arc::new(whole_table_dag(table, &columns, read_ts));
    let row_types: Vec<DataType> = wide
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let (start, end) = table_record_range(table.id);
    let records = KeyRangeRef::new(&start, &end);
    let pieces: Vec<KeyRange> = dispatcher
        .regions(&start, &end)
        .await?
        .iter()
        .filter_map(|l| KeyRangeRef::of_region(&l.region).intersect(records))
        .collect();
    let out_schema = schema.clone();
    let batches = futures::stream::iter(pieces)
        .map(move |range| {
            let (dispatcher, dag, schema, row_types) = (
                dispatcher.clone(),
                dag.clone(),
                schema.clone(),
                row_types.clone(),
            );
            async move {
                let mut scan = dispatcher
                    .stream(&dag, vec![range], row_types, deadline)
                    .keeping_decimal64();
                let mut got = Vec::new();
                while let Some(b) = scan.next().await {
                    let b = conform(b?, &schema).map_err(crate::df::errors::from_df)?;
                    if b.num_rows() > 0 {
                        got.push(b);
                    }
                }
                in_handle_order(got, &schema, handle_pos)
            }
        })
        .buffered(REGIONS_AHEAD)
        .map_ok(|batches| futures::stream::iter(batches.into_iter().map(Ok)))
        .try_flatten()
        .boxed();
    Ok(QueryStream {
        schema: out_schema,
        batches,
    })
}

/// Every column of `table` at `read_ts`, read once: the stores leave the
/// blocks out of their block caches, which keep what queries read.
fn whole_table_dag(table: &TableDef, columns: &[&ColumnDef], read_ts: u64) -> DagRequest {
    DagRequest {
        scan: Some(TableScan {
            table_id: table.id,
            columns: columns.iter().map(|c| column_info(c)).collect(),
            layout: table.layout,
        }),
        read_ts,
        not_fill_cache: true,
        ..Default::default()
    }
}

/// One region's batches in handle order: as they came when they already
/// are (the usual case), else sorted.
fn in_handle_order(
    batches: Vec<RecordBatch>,
    schema: &SchemaRef,
    handle_pos: usize,
) -> Result<Vec<RecordBatch>> {
    let mut last: Option<i64> = None;
    let mut ordered = true;
    for b in &batches {
        let handles = b.column(handle_pos).as_primitive::<Int64Type>().values();
        ordered &= handles.windows(2).all(|w| w[0] < w[1])
            && last.is_none_or(|l| handles.first().is_none_or(|f| *f > l));
        last = handles.last().copied().or(last);
        if !ordered {
            break;
        }
    }
    if ordered {
        return Ok(batches);
    }
    let all = concat_batches(schema, &batches)?;
    tracing::debug!(
        rows = all.num_rows(),
        "a region's rows came out of handle order (delta rows among packs, or a split); sorted"
    );
    let order = sort_to_indices(all.column(handle_pos), None, None)?;
    Ok(vec![take_record_batch(&all, &order)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    #[test]
    fn a_backup_reads_every_column_at_its_snapshot_without_filling_the_cache() {
        let col = |id, name: &str| ColumnDef {
            id,
            name: name.into(),
            ..Default::default()
        };
        let table = TableDef {
            id: 7,
            columns: vec![col(1, "a"), col(2, "b")],
            ..Default::default()
        };
        let columns: Vec<&ColumnDef> = table.columns.iter().collect();
        let dag = whole_table_dag(&table, &columns, 42);
        assert!(dag.not_fill_cache);
        assert_eq!(dag.read_ts, 42);
        let scan = dag.scan.unwrap();
        assert_eq!(scan.table_id, 7);
        let ids: Vec<i64> = scan.columns.iter().map(|c| c.column_id).collect();
        assert_eq!(ids, [1, 2]);
        assert!(dag.selection.is_none() && dag.aggregation.is_none() && dag.limit == 0);
    }

    fn batch(schema: &SchemaRef, handles: &[i64]) -> RecordBatch {
        let names: Vec<String> = handles.iter().map(|h| format!("r{h}")).collect();
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(handles.to_vec())),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap()
    }

    fn handles(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn a_region_in_order_passes_through_and_one_out_of_order_is_sorted_whole() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("h", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let ordered = vec![batch(&schema, &[1, 2, 5]), batch(&schema, &[7, 9])];
        let got = in_handle_order(ordered.clone(), &schema, 0).unwrap();
        assert_eq!(got.len(), 2, "kept as they came");
        assert_eq!(handles(&got), vec![1, 2, 5, 7, 9]);

        // A pack of 1..=10 and a delta row (an update of 4) after it, and
        // a split region's parts answering in the wrong order.
        for parts in [
            vec![batch(&schema, &[1, 2, 3, 5]), batch(&schema, &[4])],
            vec![batch(&schema, &[6, 7]), batch(&schema, &[1, 3])],
        ] {
            let got = in_handle_order(parts.clone(), &schema, 0).unwrap();
            let mut want = handles(&parts);
            want.sort();
            assert_eq!(handles(&got), want);
            let names = got[0].column(1).as_string::<i32>();
            for (i, h) in want.iter().enumerate() {
                assert_eq!(names.value(i), format!("r{h}"), "rows move whole");
            }
        }
    }

    #[test]
    fn the_handle_field_never_takes_a_columns_name() {
        let col = |name: &str| ColumnDef {
            name: name.into(),
            ..Default::default()
        };
        let mut t = TableDef {
            columns: vec![col("a")],
            ..Default::default()
        };
        assert_eq!(rowid_field_name(&t), "_rowid");
        t.columns.push(col("_rowid"));
        t.columns.push(col("__rowid"));
        assert_eq!(rowid_field_name(&t), "___rowid");
    }
}
