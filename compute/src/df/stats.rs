//! Table row counts, so that DataFusion can order joins.
//!
//! Without statistics DataFusion keeps joins in the order the query names
//! the tables and builds its hash tables on whichever side comes first: a
//! join of lineitem and a filtered part builds on six million rows. With a
//! row count per table, its join selection puts the smaller side on the
//! build side (and picks a single-partition join for a small one), and the
//! join's key filter then cuts the big side in the regions.
//!
//! A count is a COUNT(*) over the table's regions: keys only, so a
//! column-layout table reads just its pack headers. It runs in the
//! background: the first statement over a table is planned without a
//! count (DataFusion's defaults), later ones with the last count, which is
//! refreshed once it is older than [`REFRESH_AFTER`]. The counts are
//! estimates for planning; no answer depends on them.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Int64Type};
use parking_lot::Mutex;
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{AggFunc, AggKind, Aggregation, DagRequest, TableScan};
use quarry_proto::meta::TableDef;

use super::region_scan::ScanContext;
use crate::Result;

/// How old a count may be before a statement starts a new one.
pub const REFRESH_AFTER: Duration = Duration::from_secs(300);

struct Count {
    /// None while the first count runs.
    rows: Option<u64>,
    /// When the count in `rows` (or the one under way) started.
    at: Instant,
}

/// The row counts of the cluster's tables, by table id.
#[derive(Default)]
pub struct TableRows {
    counts: Mutex<HashMap<i64, Count>>,
}

impl TableRows {
    /// The last count of `table`, if any; starts a new one in the
    /// background when there is none or it is stale (at most one at a
    /// time per table).
    pub fn get(self: &Arc<Self>, table: &TableDef, scan: &ScanContext) -> Option<u64> {
        let now = Instant::now();
        let mut counts = self.counts.lock();
        let last = counts.get(&table.id);
        let rows = last.and_then(|c| c.rows);
        if last.is_some_and(|c| now.duration_since(c.at) < REFRESH_AFTER) {
            return rows;
        }
        counts.insert(table.id, Count { rows, at: now });
        drop(counts);
        let (this, def, scan) = (self.clone(), table.clone(), scan.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                match count_rows(&def, &scan).await {
                    Ok(n) => {
                        if let Some(c) = this.counts.lock().get_mut(&def.id) {
                            c.rows = Some(n);
                        }
                    }
                    Err(e) => tracing::debug!(table = %def.name, "row count failed: {e}"),
                }
            });
        }
        rows
    }
}

/// COUNT(*) of `table` over all its regions (keys only).
async fn count_rows(table: &TableDef, scan: &ScanContext) -> Result<u64> {
    let dag = DagRequest {
        scan: Some(TableScan {
            table_id: table.id,
            columns: vec![],
            layout: table.layout,
        }),
        aggregation: Some(Aggregation {
            group_by: vec![],
            aggs: vec![AggFunc {
                kind: AggKind::CountStar as i32,
                arg: None,
            }],
        }),
        ..Default::default()
    };
    let (start, end) = table_record_range(table.id);
    let mut rows = 0u64;
    scan.dispatcher
        .run(
            &dag,
            vec![KeyRange::new(start, end)],
            &[DataType::Int64],
            Instant::now() + scan.timeout,
            &mut |b| {
                if let Some(c) = b.columns().first() {
                    rows += c
                        .as_primitive::<Int64Type>()
                        .iter()
                        .map(|v| v.unwrap_or(0).max(0) as u64)
                        .sum::<u64>();
                }
                Ok(ControlFlow::Continue(()))
            },
        )
        .await?;
    Ok(rows)
}
