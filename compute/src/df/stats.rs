//! Table and column statistics, so that DataFusion can order joins.
//!
//! Without statistics DataFusion keeps joins in the order the query names
//! the tables and builds its hash tables on whichever side comes first: a
//! join of lineitem and a filtered part builds on six million rows. With a
//! row count per table, its join selection puts the smaller side on the
//! build side (and picks a single-partition join for a small one), and the
//! join's key filter then cuts the big side in the regions.
//!
//! Row counts alone mislead it once joins stack up. DataFusion estimates a
//! join's output as `|L| × |R| / max(NDV(key))`, and without distinct
//! counts it takes each side's row count for NDV: customer ⋈ orders ⋈
//! lineitem (TPC-H Q18) comes out at 150 thousand rows instead of six
//! million, so the join was chosen as the build side of the semi join with
//! `IN (… HAVING sum(l_quantity) > 300)` — a hash table of six million rows
//! to keep 57 orders. So each table's statistics also hold, for every
//! integer, date and string column, its NULL count and an estimate of its
//! distinct values, and for all but strings its minimum and maximum, the
//! way TiDB's ANALYZE keeps NDV per column. DataFusion then also estimates
//! GROUP BY outputs by the keys' NDV, and the region scan estimates its
//! own filters with them (`selectivity.rs`).
//!
//! All of it is one aggregation over the table's regions, run in storage
//! like any other: COUNT(*), and per column MIN, MAX, COUNT and
//! APPROX_DISTINCT (a HyperLogLog sketch per region that compute merges:
//! `quarry_coprocessor::aggregate::sketch`); decimals and floats are not
//! decoded, and the answer is a few kilobytes per column and region. It
//! runs in the background: the first statement over a table is planned
//! without statistics (DataFusion's defaults), later ones with the last
//! result. Once that is older than [`REFRESH_AFTER`], a statement over the
//! table starts a COUNT(*) (which storage answers from pack headers,
//! without decoding a value), and only a row count that has moved by more
//! than [`REANALYZE_CHANGE`] since the analysis starts a new one: like
//! TiDB's auto-analyze ratio, a table that has not changed is not read
//! again every few minutes (an analysis reads every integer, date and
//! string column of the table). They are estimates for planning; no
//! answer depends on them.
//!
//! The regions' partial MIN and MAX also say whether a column is
//! *clustered*: whether its regions' value ranges overlapped at most at
//! their ends, as an order key's do in a table loaded in order. Grouping
//! by such a column lets a HAVING run in the regions (`group_sieve.rs`).
//!
//! Left out: an UPDATE that keeps the row count (there is none yet) does
//! not trigger a new analysis; histograms; LIKE selectivity.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use parking_lot::Mutex;
use quarry_coprocessor::aggregate::{AggregateFunction, Aggregator};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::sieve::key_values;
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::{AggFunc, AggKind, Aggregation, ColumnInfo, DagRequest, TableScan};
use quarry_proto::meta::TableDef;

use super::measured_share;
use super::region_scan::ScanContext;
use crate::Result;

/// How old statistics may be before a statement starts new ones.
pub const REFRESH_AFTER: Duration = Duration::from_secs(300);

/// How far a table's row count must move (as a share of the analyzed
/// count) before its statistics are taken again.
pub const REANALYZE_CHANGE: f64 = 0.1;

pub use crate::table_stats::{ColumnStatistics, TableStatistics};

struct Entry {
    /// None while the first analysis runs.
    stats: Option<Arc<TableStatistics>>,
    /// When the analysis in `stats` (or the one under way) started.
    at: Instant,
    /// How many analyses have ended: a condition measured under an older
    /// one is dropped.
    generation: u64,
}

/// One measurement at a time per compute process (`measured_share.rs`).
static MEASURING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// The statistics of the cluster's tables, by table id.
#[derive(Default)]
pub struct TableStats {
    tables: Mutex<HashMap<i64, Entry>>,
    /// By table id, the keys of the conditions measured or being measured
    /// since the table's last analysis (`measured_share.rs`).
    measuring: Mutex<HashMap<i64, HashSet<Vec<u8>>>>,
}

impl std::fmt::Debug for TableStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableStats").finish_non_exhaustive()
    }
}

impl TableStats {
    /// The last statistics of `table`, if any; starts a new analysis in the
    /// background when there is none or it is stale (at most one at a time
    /// per table).
    pub fn get(
        self: &Arc<Self>,
        table: &TableDef,
        scan: &ScanContext,
    ) -> Option<Arc<TableStatistics>> {
        let now = Instant::now();
        let mut tables = self.tables.lock();
        let last = tables.get(&table.id);
        let stats = last.and_then(|c| c.stats.clone());
        if last.is_some_and(|c| now.duration_since(c.at) < REFRESH_AFTER) {
            return stats;
        }
        let generation = last.map_or(0, |c| c.generation);
        tables.insert(
            table.id,
            Entry {
                stats: stats.clone(),
                at: now,
                generation,
            },
        );
        drop(tables);
        let (this, def, scan, last) = (self.clone(), table.clone(), scan.clone(), stats.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            // Counted from now, so that a statement's analyses are seen
            // as running as soon as it is planned (the bench waits for
            // them: `bench tpch --computes`).
            let counted = crate::metrics::table_analysis();
            rt.spawn(async move {
                let _counted = counted;
                if let Some(last) = &last {
                    match count_rows(&def, &scan).await {
                        Ok(rows) if !changed(last.rows, rows) => return,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(table = %def.name, "row count failed: {e}");
                            return;
                        }
                    }
                }
                match analyze(&def, &scan).await {
                    Ok(s) => {
                        tracing::debug!(table = %def.name, ?s, "table statistics");
                        if let Some(c) = this.tables.lock().get_mut(&def.id) {
                            c.stats = Some(Arc::new(s));
                            c.generation += 1;
                        }
                        this.measuring.lock().remove(&def.id);
                    }
                    Err(e) => tracing::debug!(table = %def.name, "table statistics failed: {e}"),
                }
            });
        }
        stats
    }

    /// The share of rows the condition of `sample` (a request of
    /// `measured_share::sample_request`) was measured to keep in `table`,
    /// as `stats` (the statistics a plan reads) hold it; when it has not
    /// been measured since the table's last analysis, starts measuring it
    /// in the background (once) and answers None. A finished measurement
    /// makes new statistics for the table, which later plans read.
    pub fn measured_share(
        self: &Arc<Self>,
        table: &TableDef,
        scan: &ScanContext,
        stats: &TableStatistics,
        sample: DagRequest,
    ) -> Option<f64> {
        let key = measured_share::key_of(&sample);
        if let Some(share) = stats.measured.get(&key) {
            return Some(*share);
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let generation = self.tables.lock().get(&table.id)?.generation;
        {
            let mut measuring = self.measuring.lock();
            let tried = measuring.entry(table.id).or_default();
            if tried.len() >= measured_share::MAX_MEASURED_PER_TABLE || !tried.insert(key.clone()) {
                return None;
            }
        }
        let (this, def, scan) = (self.clone(), table.clone(), scan.clone());
        let counted = crate::metrics::table_analysis();
        rt.spawn(async move {
            let _counted = counted;
            let measured = match MEASURING.acquire().await {
                Ok(_one) => measured_share::measure(&def, &sample, &scan).await,
                Err(_) => return,
            };
            match measured {
                Ok(Some(share)) => {
                    tracing::debug!(table = %def.name, share, "measured a condition's share");
                    if let Some(c) = this.tables.lock().get_mut(&def.id) {
                        // Dropped when a new analysis ended meanwhile.
                        if let Some(last) = c.stats.as_ref().filter(|_| c.generation == generation)
                        {
                            let mut next = TableStatistics::clone(last);
                            next.measured.insert(key, share);
                            c.stats = Some(Arc::new(next));
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(table = %def.name, "measuring a condition failed: {e}");
                    // A later plan tries again.
                    if let Some(tried) = this.measuring.lock().get_mut(&def.id) {
                        tried.remove(&key);
                    }
                }
            }
        });
        None
    }
}

/// The aggregates computed for a column of type `t`: ranges for numbers
/// and dates, NULLs and distinct values for those and strings; None for
/// other types.
fn per_column(t: &DataType) -> Option<&'static [AggKind]> {
    const RANGE: &[AggKind] = &[
        AggKind::Count,
        AggKind::ApproxDistinct,
        AggKind::Min,
        AggKind::Max,
    ];
    match t {
        DataType::Int64 | DataType::Int32 | DataType::Date32 => Some(RANGE),
        DataType::Utf8 => Some(&RANGE[..2]),
        _ => None,
    }
}

/// Whether a table analyzed at `analyzed` rows and now holding `now` has
/// changed enough for new statistics.
fn changed(analyzed: u64, now: u64) -> bool {
    analyzed.abs_diff(now) as f64 > analyzed as f64 * REANALYZE_CHANGE
}

/// `table`'s rows, counted in its regions.
pub async fn count_rows(table: &TableDef, scan: &ScanContext) -> Result<u64> {
    let funcs = vec![AggregateFunction::new(AggKind::CountStar, None)?];
    let aggs = vec![AggFunc {
        kind: AggKind::CountStar as i32,
        arg: None,
    }];
    let (result, _) = aggregate(table, vec![], funcs, aggs, scan).await?;
    let c = result.column(0).as_primitive::<Int64Type>();
    Ok(if c.is_empty() || c.is_null(0) {
        0
    } else {
        c.value(0).max(0) as u64
    })
}

/// One aggregation (no grouping) of `columns` over all of `table`'s
/// regions, merged: one row; and the regions' partial states as they
/// came (a row per region, or per part of one).
async fn aggregate(
    table: &TableDef,
    columns: Vec<ColumnInfo>,
    funcs: Vec<AggregateFunction>,
    aggs: Vec<AggFunc>,
    scan: &ScanContext,
) -> Result<(RecordBatch, Vec<RecordBatch>)> {
    let dag = DagRequest {
        scan: Some(TableScan {
            table_id: table.id,
            columns,
            layout: table.layout,
        }),
        aggregation: Some(Aggregation {
            group_by: vec![],
            aggs,
        }),
        ..Default::default()
    };
    let state_types: Vec<DataType> = funcs.iter().flat_map(|f| f.state_types()).collect();
    let mut merged = Aggregator::final_stage(vec![], funcs)?;
    let mut partials = Vec::new();
    let (start, end) = table_record_range(table.id);
    scan.dispatcher
        .run(
            &dag,
            vec![KeyRange::new(start, end)],
            &state_types,
            Instant::now() + scan.timeout,
            &mut |b| {
                merged.merge(&b)?;
                partials.push(b);
                Ok(ControlFlow::Continue(()))
            },
        )
        .await?;
    Ok((merged.finish()?, partials))
}

/// Whether the value ranges in the partial MIN and MAX state columns
/// `min` and `max` (a row per region) overlap at most at their ends.
fn clustered(partials: &[RecordBatch], min: usize, max: usize) -> bool {
    let mut ranges = Vec::new();
    for b in partials {
        let (Ok(lo), Ok(hi)) = (key_values(b.column(min)), key_values(b.column(max))) else {
            return false;
        };
        let (lo, hi) = (
            lo.as_primitive::<Int64Type>(),
            hi.as_primitive::<Int64Type>(),
        );
        for i in 0..b.num_rows() {
            if lo.is_valid(i) && hi.is_valid(i) {
                ranges.push((lo.value(i), hi.value(i)));
            }
        }
    }
    super::group_sieve::ranges_apart(&ranges)
}

/// Runs the statistics aggregation of `table` over all its regions.
pub async fn analyze(table: &TableDef, scan: &ScanContext) -> Result<TableStatistics> {
    let mut columns = Vec::new();
    let mut types = Vec::new();
    for c in &table.columns {
        let Some(t) = c.field_type.as_ref().and_then(|f| arrow_type(f).ok()) else {
            continue;
        };
        if per_column(&t).is_some() {
            columns.push(super::pushdown::column_info(c));
            types.push(t);
        }
    }
    let mut funcs = vec![AggregateFunction::new(AggKind::CountStar, None)?];
    let mut aggs = vec![AggFunc {
        kind: AggKind::CountStar as i32,
        arg: None,
    }];
    for (index, t) in types.iter().enumerate() {
        let arg = Expr::Column {
            index,
            data_type: t.clone(),
        };
        for &kind in per_column(t).unwrap_or_default() {
            funcs.push(AggregateFunction::new(kind, Some(t.clone()))?);
            aggs.push(AggFunc {
                kind: kind as i32,
                arg: Some(arg.to_proto()?),
            });
        }
    }
    let (result, partials) = aggregate(table, columns.clone(), funcs, aggs, scan).await?;
    let count = |i: usize| -> u64 {
        let c = result.column(i).as_primitive::<Int64Type>();
        if c.is_empty() || c.is_null(0) {
            0
        } else {
            c.value(0).max(0) as u64
        }
    };
    let scalar =
        |i: usize| ScalarValue::try_from_array(result.column(i), 0).map_err(super::from_df);
    let rows = count(0);
    let mut stats = TableStatistics {
        rows,
        columns: HashMap::new(),
        measured: HashMap::new(),
    };
    let mut at = 1;
    for (info, t) in columns.iter().zip(&types) {
        let mut c = ColumnStatistics {
            min: ScalarValue::Null,
            max: ScalarValue::Null,
            nulls: 0,
            distinct: 0,
            clustered: false,
        };
        for &kind in per_column(t).unwrap_or_default() {
            match kind {
                AggKind::Count => c.nulls = rows.saturating_sub(count(at)),
                AggKind::ApproxDistinct => c.distinct = count(at),
                AggKind::Min => c.min = scalar(at)?,
                // MAX follows MIN (`per_column`).
                AggKind::Max => {
                    c.max = scalar(at)?;
                    c.clustered = clustered(&partials, at - 1, at);
                }
                _ => {}
            }
            at += 1;
        }
        stats.columns.insert(info.column_id, c);
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::changed;

    #[test]
    fn only_a_moved_row_count_asks_for_new_statistics() {
        assert!(!changed(6_001_215, 6_001_215));
        assert!(!changed(1000, 1100));
        assert!(!changed(1000, 900));
        assert!(changed(1000, 1101));
        assert!(changed(1000, 899));
        // An empty table analyzed before its load.
        assert!(changed(0, 5));
        assert!(!changed(0, 0));
    }
}
