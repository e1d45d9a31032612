//! What a region scan knows from its table's statistics: a read
//! column's definition and statistics, a join key's distinct values, the
//! clustered group keys the group sieve needs, and the scan's own
//! estimate of its rows (for the join order, DataFusion and MPP's stage
//! sizing), with conditions the statistics cannot estimate measured on a
//! sample (`measured_share.rs`).

use super::*;

impl RegionScanExec {
    /// The table's rows by its statistics, if known.
    pub fn table_rows(&self) -> Option<u64> {
        self.table_stats.as_ref().map(|s| s.rows)
    }

    /// The table's definition and statistics of read column `index` (the
    /// DAG's scan's), where the statistics are known.
    pub fn read_column(&self, index: usize) -> Option<(&ColumnDef, &ColumnStatistics)> {
        let (Some(scan), Some(stats)) = (&self.dag.scan, &self.table_stats) else {
            return None;
        };
        let id = scan.columns.get(index)?.column_id;
        let def = self.table.columns.iter().find(|c| c.id == id)?;
        Some((def, stats.columns.get(&id)?))
    }

    /// The distinct values the table's statistics give the column that
    /// `key` (over the scan's output) reads, when it reads one BIGINT
    /// column: what a join key filter on it is weighed against.
    pub fn key_distinct(&self, key: &Arc<dyn PhysicalExpr>) -> Option<u64> {
        match self.probe_key(key)? {
            Expr::Column { index, .. } => self.read_column(index).map(|(_, c)| c.distinct),
            _ => None,
        }
    }

    /// Whether output column `i` of an aggregating scan is a group key
    /// that reads a table column the statistics call clustered (its
    /// regions' value ranges apart: `group_sieve.rs`).
    pub fn clustered_output(&self, i: usize) -> bool {
        let Some(aggregation) = &self.dag.aggregation else {
            return false;
        };
        let Ok(scan_types) = self.scan_types() else {
            return false;
        };
        match aggregation
            .group_by
            .get(i)
            .and_then(|e| Expr::from_proto(e, &scan_types).ok())
        {
            Some(Expr::Column { index, .. }) => {
                self.read_column(index).is_some_and(|(_, c)| c.clustered)
            }
            _ => false,
        }
    }

    /// The table's statistics, and where conditions they cannot estimate
    /// are measured.
    pub fn set_table_stats(
        &mut self,
        stats: Option<Arc<TableStatistics>>,
        measurer: Option<Arc<TableStats>>,
    ) {
        self.table_stats = stats;
        self.measurer = measurer;
    }

    /// The share of rows `condition` (over the scan's columns) was
    /// measured to keep, if it was; starts its measurement otherwise.
    fn measured_share(&self, condition: &Expr) -> Option<f64> {
        let (Some(measurer), Some(stats), Some(scan)) =
            (&self.measurer, &self.table_stats, &self.dag.scan)
        else {
            return None;
        };
        if quarry_proto::failpoint::fires("measured_shares_off") {
            return None;
        }
        let sample = crate::df::measured_share::sample_request(scan, condition)?;
        measurer.measured_share(&self.table, &self.ctx, stats, sample)
    }

    /// The estimated rows out of a plain scan: the table's row count, the
    /// share of it the filter keeps (`selectivity.rs`), at most the limit;
    /// and for each output that is a table
    /// column with statistics, its range, NULLs and distinct values (at
    /// most the rows out). Aggregating scans are unknown. The join order
    /// (`join_order.rs`) asks it before DataFusion does.
    pub fn estimated_statistics(&self) -> Statistics {
        let mut stats = Statistics::new_unknown(&self.schema);
        let Some(table) = self.table_stats.as_deref() else {
            return stats;
        };
        if self.dag.aggregation.is_some() {
            return stats;
        }
        let (Some(scan), Ok(scan_types)) = (self.dag.scan.as_ref(), self.scan_types()) else {
            return stats;
        };
        let column = |i: usize| {
            scan.columns
                .get(i)
                .and_then(|c| table.columns.get(&c.column_id))
        };
        let kept = match &self.dag.selection {
            Some(s) => {
                // A condition that does not decode counts as unknown; one
                // with the statement's parameters (type defaults while
                // planning) is not measured. (A range side always has a
                // constant, so no column's bounds are split between the two.)
                let late = self
                    .late
                    .as_ref()
                    .map(|l| l.positions())
                    .unwrap_or_default();
                let (mut plain, mut with_params, mut unknown) = (Vec::new(), Vec::new(), 0);
                for (i, c) in s.conditions.iter().enumerate() {
                    match Expr::from_proto(c, &scan_types) {
                        Ok(e) if late.contains(&i) => with_params.push(e),
                        Ok(e) => plain.push(e),
                        Err(_) => unknown += 1,
                    }
                }
                let measured = |e: &Expr| self.measured_share(e);
                conjunction_measured(&plain, &column, table.rows, &measured)
                    * conjunction(&with_params, &column, table.rows)
                    * DEFAULT_SELECTIVITY.powi(unknown)
            }
            None => 1.0,
        };
        let mut rows = ((table.rows as f64 * kept).ceil() as usize).max(1);
        if self.dag.limit > 0 {
            rows = rows.min(self.dag.limit as usize);
        }
        stats.num_rows = Precision::Inexact(rows);
        let Some(outputs) = self.plain_outputs() else {
            return stats;
        };
        for (out, expr) in stats.column_statistics.iter_mut().zip(&outputs) {
            let Expr::Column { index, .. } = expr else {
                continue;
            };
            let Some(c) = column(*index) else {
                continue;
            };
            // Min and max only bound a column: a filter may narrow it.
            if !c.min.is_null() && !c.max.is_null() {
                out.min_value = Precision::Inexact(c.min.clone());
                out.max_value = Precision::Inexact(c.max.clone());
            }
            out.null_count = Precision::Inexact((c.nulls as f64 * kept) as usize);
            out.distinct_count = Precision::Inexact((c.distinct as usize).min(rows));
        }
        stats
    }
}
