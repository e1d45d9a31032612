//! Rows a physical plan is expected to produce, for sizing stages.
//!
//! DataFusion's own statistics stop where MPP needs them: a broadcast
//! (`BroadcastExec`) reports nothing, so every join above one is unknown,
//! and a semi join is taken to keep all of its probe side. TPC-H Q20's
//! `partsupp` semi-joined to the 2 thousand `forest%` parts came out as
//! 800 thousand rows, where 8 thousand arrive. This module estimates the
//! way the join order does (`join_order.rs`), on the physical plan:
//!
//! * a leaf by its statistics (a region scan: the table's rows, the share
//!   its filters keep, each column's distinct values; `region_scan.rs`);
//! * nodes that pass rows on (repartitions, coalesces, broadcasts, sorts,
//!   key collectors) as their input, at most their `fetch`; a projection
//!   keeps its columns' distinct counts; a filter left above a scan keeps
//!   a fifth (DataFusion's default);
//! * an aggregation at most the product of its group keys' distinct
//!   values, one row without groups (a partial one, that once per input
//!   partition); a limit once per output partition;
//! * a hash join on its most selective key pair `a = b`: an inner join
//!   |A|·|B| / max(NDV(a), NDV(b)); a semi join the share of its side
//!   whose keys the other side has, NDV(other) / NDV(own) at most 1 (a
//!   region scan is cut by the build side's keys in the stores, so that
//!   is what reaches compute); an anti join, an outer join's preserved
//!   side, all of it;
//! * unions the sum, an inner nested-loop or cross join the product.
//!
//! Anything else is unknown (None), which callers read as "large": an
//! estimate only ever makes a stage smaller where it is known to be small.
//! Distinct counts are capped by rows at every step; columns whose origin
//! is lost (an expression, an aggregate) count as all distinct.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::{InterleaveExec, UnionExec};
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, PhysicalExpr, StatisticsArgs, StatisticsContext,
};

use crate::df::join_keys::input_of_join_column;
use crate::df::selectivity::DEFAULT_SELECTIVITY;

/// A plan's expected rows and, per output column, its distinct values
/// where known.
#[derive(Debug, Clone)]
pub struct Estimate {
    pub rows: f64,
    distinct: Vec<Option<f64>>,
}

impl Estimate {
    /// Distinct values of output column `i`: at least one, at most the
    /// rows (all of them where unknown).
    pub fn distinct(&self, i: usize) -> f64 {
        let d = self.distinct.get(i).copied().flatten().unwrap_or(self.rows);
        d.min(self.rows).max(1.0)
    }

    fn of_expr(&self, e: &Arc<dyn PhysicalExpr>) -> Option<f64> {
        e.downcast_ref::<Column>().map(|c| self.distinct(c.index()))
    }

    fn capped(mut self, rows: f64) -> Self {
        self.rows = self.rows.min(rows);
        self
    }
}

/// The expected rows of `plan` (see the module docs), None where unknown.
pub fn estimate(plan: &Arc<dyn ExecutionPlan>) -> Option<Estimate> {
    let children = plan.children();
    let est = if children.is_empty() {
        leaf(plan.as_ref())?
    } else if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let input = estimate(p.input())?;
        let distinct = p.expr().iter().map(|e| input.of_expr(&e.expr)).collect();
        Estimate {
            rows: input.rows,
            distinct,
        }
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let input = estimate(f.input())?;
        let rows = (input.rows * DEFAULT_SELECTIVITY).max(1.0);
        let distinct = match f.projection() {
            Some(p) => p.iter().map(|i| Some(input.distinct(*i))).collect(),
            None => (0..input.distinct.len())
                .map(|i| Some(input.distinct(i)))
                .collect(),
        };
        Estimate { rows, distinct }
    } else if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        aggregation(a)?
    } else if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        hash_join(j)?
    } else if plan.is::<UnionExec>() || plan.is::<InterleaveExec>() {
        let mut rows = 0.0;
        for child in &children {
            rows += estimate(child)?.rows;
        }
        all_distinct(plan, rows)
    } else if plan.is::<CrossJoinExec>()
        || plan
            .downcast_ref::<NestedLoopJoinExec>()
            .is_some_and(|j| j.join_type() == &JoinType::Inner)
    {
        let mut rows = 1.0;
        for child in &children {
            rows *= estimate(child)?.rows;
        }
        all_distinct(plan, rows)
    } else if passes_rows(plan, &children) {
        estimate(children[0])?
    } else {
        return None;
    };
    // A limit holds per output partition (a local limit, a top-k sort
    // that keeps its partitions; one partition for a global one).
    let partitions = plan.output_partitioning().partition_count().max(1);
    Some(match plan.fetch() {
        Some(n) => est.capped(n.saturating_mul(partitions) as f64),
        None => est,
    })
}

/// A node of one input whose output is its input's rows (or fewer), with
/// the same columns: a repartition, coalesce, broadcast, sort, merge, or
/// one of Quarry's key collectors.
fn passes_rows(plan: &Arc<dyn ExecutionPlan>, children: &[&Arc<dyn ExecutionPlan>]) -> bool {
    let [input] = children else {
        return false;
    };
    let (out, inp) = (plan.schema(), input.schema());
    out.fields().len() == inp.fields().len()
        && out
            .fields()
            .iter()
            .zip(inp.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

fn leaf(plan: &dyn ExecutionPlan) -> Option<Estimate> {
    let stats = StatisticsContext::new()
        .compute(plan, &StatisticsArgs::new())
        .ok()?;
    let rows = *stats.num_rows.get_value()? as f64;
    let distinct = stats
        .column_statistics
        .iter()
        .map(|c| c.distinct_count.get_value().map(|d| *d as f64))
        .collect();
    Some(Estimate { rows, distinct })
}

fn all_distinct(plan: &Arc<dyn ExecutionPlan>, rows: f64) -> Estimate {
    Estimate {
        rows,
        distinct: vec![None; plan.schema().fields().len()],
    }
}

fn aggregation(a: &AggregateExec) -> Option<Estimate> {
    let input = estimate(a.input())?;
    let groups = a.group_expr();
    if !groups.is_single() {
        return None;
    }
    let mut rows = 1.0_f64;
    let mut distinct = Vec::new();
    for (e, _) in groups.expr() {
        let d = input.of_expr(e).unwrap_or(input.rows);
        rows *= d;
        distinct.push(Some(d));
    }
    // A partial aggregation emits its groups once per input partition.
    let copies = match a.mode() {
        AggregateMode::Partial => a.input().output_partitioning().partition_count().max(1),
        _ => 1,
    } as f64;
    let rows = if groups.expr().is_empty() {
        copies
    } else {
        (rows * copies).min(input.rows)
    };
    distinct.resize(a.schema().fields().len(), None);
    Some(Estimate { rows, distinct })
}

fn hash_join(j: &HashJoinExec) -> Option<Estimate> {
    let (l, r) = (estimate(j.left())?, estimate(j.right())?);
    // Each key pair's distinct values on the two sides; only the most
    // selective pair counts (a key of two columns, as Q9's part and
    // supplier, is not two independent conditions).
    let pairs: Vec<(f64, f64)> = j
        .on()
        .iter()
        .filter_map(|(a, b)| Some((l.of_expr(a)?, r.of_expr(b)?)))
        .collect();
    let least = |f: &dyn Fn(f64, f64) -> f64| {
        pairs
            .iter()
            .map(|&(dl, dr)| f(dl, dr))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
    };
    let inner = least(&|dl, dr| l.rows * r.rows / dl.max(dr)).unwrap_or(l.rows * r.rows);
    let left_share = least(&|dl, dr| (dr / dl).min(1.0)).unwrap_or(1.0);
    let right_share = least(&|dl, dr| (dl / dr).min(1.0)).unwrap_or(1.0);
    let rows = match j.join_type() {
        JoinType::Inner => inner,
        JoinType::LeftSemi => l.rows * left_share,
        JoinType::RightSemi => r.rows * right_share,
        JoinType::LeftAnti | JoinType::LeftMark => l.rows,
        JoinType::RightAnti | JoinType::RightMark => r.rows,
        JoinType::Left => inner.max(l.rows),
        JoinType::Right => inner.max(r.rows),
        JoinType::Full => inner.max(l.rows) + r.rows,
    };
    let width = j.schema().fields().len();
    let distinct = (0..width)
        .map(|i| {
            let (left, index) = input_of_join_column(j, i)?;
            Some(if left {
                l.distinct(index)
            } else {
                r.distinct(index)
            })
        })
        .collect();
    Some(Estimate { rows, distinct })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::df::mpp::test_plans::{hash_join as join, source};
    use datafusion::physical_plan::aggregates::PhysicalGroupBy;
    use datafusion::physical_plan::joins::PartitionMode;

    fn rows(plan: &Arc<dyn ExecutionPlan>) -> f64 {
        estimate(plan).expect("an estimate").rows
    }

    /// Sources hold 0 … n - 1, so each value once: a join keeps the
    /// smaller side, a semi join its side's share of the other's keys.
    #[test]
    fn joins_keep_the_share_of_keys_the_other_side_has() {
        let j = |kind| -> Arc<dyn ExecutionPlan> {
            Arc::new(join(
                source("b", 100),
                source("p", 10_000),
                kind,
                PartitionMode::CollectLeft,
            ))
        };
        assert_eq!(rows(&j(JoinType::Inner)), 100.0);
        assert_eq!(rows(&j(JoinType::RightSemi)), 100.0);
        assert_eq!(rows(&j(JoinType::LeftSemi)), 100.0);
        assert_eq!(rows(&j(JoinType::RightAnti)), 10_000.0);
        assert_eq!(rows(&j(JoinType::Right)), 10_000.0);
    }

    #[test]
    fn an_aggregation_keeps_at_most_its_groups_and_a_fetch_caps_rows() {
        let input = Arc::new(join(
            source("b", 500),
            source("p", 10_000),
            JoinType::RightSemi,
            PartitionMode::CollectLeft,
        )) as Arc<dyn ExecutionPlan>;
        let key = Arc::new(Column::new("p", 0)) as Arc<dyn PhysicalExpr>;
        let agg = AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(vec![(key, "p".into())]),
            vec![],
            vec![],
            input.clone(),
            input.schema(),
        )
        .unwrap();
        let agg = Arc::new(agg) as Arc<dyn ExecutionPlan>;
        assert_eq!(rows(&agg), 500.0);
        let none = AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(vec![]),
            vec![],
            vec![],
            input.clone(),
            input.schema(),
        )
        .unwrap();
        assert_eq!(rows(&(Arc::new(none) as _)), 1.0);
        let limited = datafusion::physical_plan::limit::GlobalLimitExec::new(input, 0, Some(7));
        assert_eq!(rows(&(Arc::new(limited) as _)), 7.0);
    }
}
