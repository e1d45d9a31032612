//! HAVING in the regions: the group sieve's planner rule and its check.
//!
//! ```text
//!  FilterExec(having)                      FilterExec(having)
//!    AggregateExec(Final)          ==>       AggregateExec(Final)
//!      RepartitionExec(Hash)                   RepartitionExec(Hash)
//!        RegionScanExec(… partial                RegionScanExec(… partial
//!          aggregation)                            aggregation; sieve: having)
//! ```
//!
//! A HAVING over groups that each live in one region can be judged in the
//! region: TPC-H Q18's `GROUP BY l_orderkey HAVING sum(l_quantity) > 300`
//! sends 1.5 million partial groups to compute at SF 1 for 57 answers.
//! The store's half is `quarry_coprocessor::sieve`: each response leaves
//! out the groups the HAVING rejects, except those at the two ends of its
//! key range. This module is compute's half.
//!
//! **The rule** ([`HavingIntoRegions`]) matches a filter directly over a
//! final aggregation whose input is a region scan's partial aggregation
//! (through repartitions only), and gives the scan a sieve when
//! * a conjunct of the filter translates into the coprocessor's
//!   expressions, reading group keys and states that are their own final
//!   value (SUM, COUNT, MIN, MAX; not AVG's sum and count) of the answer's
//!   own type (not SUM of BIGINT, a DECIMAL state for a BIGINT answer);
//! * a group key is a plain BIGINT, INT or DATE column that the table's
//!   statistics call *clustered*: at the last analysis its regions' value
//!   ranges overlapped at most at their ends (`stats.rs`), as an order
//!   key's do in a table loaded in order. On any other key the check
//!   below would fail and the scan run twice.
//!
//! The filter and the final aggregation stay: the groups at the ends of
//! each response still need merging and judging, and the sieve only ever
//! leaves out groups the filter would reject.
//!
//! **The check** ([`run`]). The dispatcher notes each response's smallest
//! and largest key (`quarry_coprocessor::sieve::key_range`) (the sieve keeps both rows, so they are in the data);
//! the scan hands nothing on until every region has answered. If the
//! ranges overlap at most at their ends, every group left out was whole in
//! its response, and the held batches go on. Otherwise — rows written
//! since the analysis, out of key order — the scan runs again without the
//! sieve and its rows go on instead; EXPLAIN ANALYZE says which happened.
//! Holding the batches costs nothing here: the final aggregation above
//! waits for its whole input anyway.
//!
//! Under MPP a sieved scan runs as one task (`mpp/tasks.rs`), which sees
//! every response; a scan that is nevertheless a task with a share of the
//! table drops the sieve, since it would see only its share's ranges. A
//! co-located scan (`mpp/colocate.rs`) keeps it in every task: a task's
//! share is a range of the clustered key, so it sees every response that
//! holds any of its groups.
//! Left out: filters that reach the aggregation through a projection;
//! string keys.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
#[allow(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;
use futures::stream::BoxStream;
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_coprocessor::aggregate::AggregateFunction;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::sieve::sievable_key;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::{AggKind, DagRequest, GroupSieve};

use super::pushdown;
use super::region_scan::RegionScanExec;
use crate::dispatch::{DispatchStats, Dispatcher};
use crate::Result;

/// Physical optimizer rule: see the module docs.
#[derive(Debug)]
pub struct HavingIntoRegions;

impl PhysicalOptimizerRule for HavingIntoRegions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        super::rules::replace_bottom_up(plan, sieve_under)
    }

    fn name(&self) -> &str {
        "quarry_having_into_regions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with a sieve in the scan under it, when `node` is a filter over
/// a final aggregation of a region scan's partial groups that qualifies.
fn sieve_under(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let filter = node.downcast_ref::<FilterExec>()?;
    let agg = filter.input().downcast_ref::<AggregateExec>()?;
    if !matches!(
        agg.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || !agg.group_expr().is_single()
    {
        return None;
    }
    let scan = scan_under(agg.input())?;
    let dag = scan.dag();
    let aggregation = dag.aggregation.as_ref()?;
    if dag.group_sieve.is_some() || scan.share().is_some() {
        return None;
    }
    let groups = aggregation.group_by.len();
    // The final aggregation's keys are the partial's, in order.
    let keys = agg.group_expr().expr();
    if groups == 0
        || keys.len() != groups
        || keys
            .iter()
            .enumerate()
            .any(|(i, (e, _))| e.downcast_ref::<Column>().is_none_or(|c| c.index() != i))
        || agg.aggr_expr().len() != aggregation.aggs.len()
        || agg.schema().fields().len() != groups + aggregation.aggs.len()
    {
        return None;
    }
    // Each final output column's partial state column, where the state is
    // the final value.
    let row_types = scan.row_types();
    let mut state_of: Vec<Option<usize>> = (0..groups).map(Some).collect();
    let mut at = groups;
    let scan_types = scan.scan_types().ok()?;
    for f in &aggregation.aggs {
        let kind = AggKind::try_from(f.kind).ok()?;
        let arg_type = match &f.arg {
            Some(e) => Some(Expr::from_proto(e, &scan_types).ok()?.data_type()),
            None => None,
        };
        let width = AggregateFunction::new(kind, arg_type)
            .ok()?
            .state_types()
            .len();
        let own_final = width == 1
            && matches!(
                kind,
                AggKind::Sum | AggKind::Count | AggKind::CountStar | AggKind::Min | AggKind::Max
            );
        state_of.push(own_final.then_some(at));
        at += width;
    }
    if at != row_types.len() {
        return None;
    }
    // A column the store judges must have the type compute judges: SUM of
    // BIGINT is a DECIMAL state but a BIGINT answer, whose arithmetic
    // DataFusion wraps and whose overflow the final sum reports. Decimals
    // of one scale hold the same values at any precision.
    let final_types = agg.schema();
    let same_values = |i: usize, j: usize| {
        let (f, s) = (final_types.field(i).data_type(), &row_types[j]);
        f == s
            || matches!(
                (f, s),
                (DataType::Decimal128(_, a), DataType::Decimal128(_, b)) if a == b
            )
    };
    let state_of: Vec<Option<usize>> = state_of
        .into_iter()
        .enumerate()
        .map(|(i, j)| j.filter(|&j| same_values(i, j)))
        .collect();
    let key = (0..groups).find(|&i| sievable_key(&row_types[i]) && scan.clustered_output(i))?;
    let mut conditions = Vec::new();
    let mut shown = Vec::new();
    for conjunct in split_conjunction(filter.predicate()) {
        let translated = pushdown::physical(conjunct, &mut |i| {
            let j = (*state_of.get(i)?)?;
            Some(Expr::Column {
                index: j,
                data_type: row_types.get(j)?.clone(),
            })
        });
        if let Some(c) = translated.and_then(|e| e.to_proto().ok()) {
            conditions.push(c);
            shown.push(conjunct.to_string());
        }
    }
    if conditions.is_empty() {
        return None;
    }
    let key_name = agg.schema().field(key).name().clone();
    let dag = DagRequest {
        group_sieve: Some(GroupSieve {
            key_column: key as u32,
            conditions,
        }),
        ..dag.clone()
    };
    let storage = format!(
        "{}; having {} (groups inside each region's range of {key_name})",
        scan.storage(),
        shown.join(" AND ")
    );
    let sieved: Arc<dyn ExecutionPlan> = Arc::new(scan.with_dag(dag, storage));
    let input = replace_scan(agg.input(), sieved)?;
    let agg = replace_children_if_necessary(filter.input().clone(), vec![input]).ok()?;
    replace_children_if_necessary(node.clone(), vec![agg]).ok()
}

/// The region scan under `plan`, through operators that only move
/// batches between partitions.
fn scan_under(plan: &Arc<dyn ExecutionPlan>) -> Option<&RegionScanExec> {
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        return Some(scan);
    }
    if passes_batches(plan) {
        return scan_under(plan.children().first()?);
    }
    None
}

/// `plan` with the region scan under it replaced by `scan`.
fn replace_scan(
    plan: &Arc<dyn ExecutionPlan>,
    scan: Arc<dyn ExecutionPlan>,
) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.downcast_ref::<RegionScanExec>().is_some() {
        return Some(scan);
    }
    let child = replace_scan(plan.children().first()?, scan)?;
    replace_children_if_necessary(plan.clone(), vec![child]).ok()
}

#[allow(deprecated)]
fn passes_batches(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.children().len() == 1
        && (plan.downcast_ref::<RepartitionExec>().is_some()
            || plan.is::<super::mpp::colocate::LocalRepartitionExec>()
            || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
            || plan.downcast_ref::<CoalesceBatchesExec>().is_some()
            || plan.downcast_ref::<CooperativeExec>().is_some())
}

/// Whether `ranges` overlap at most at their ends: sorted by their
/// starts, each ends at or before the next one starts.
pub fn ranges_apart(ranges: &[(i64, i64)]) -> bool {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[0].1 <= w[1].0)
}

/// A sieved scan's batches, the statistics of the run they came from, and
/// what EXPLAIN ANALYZE says about it: see the module docs.
pub async fn run(
    dispatcher: &Dispatcher,
    dag: &DagRequest,
    ranges: Vec<KeyRange>,
    row_types: Vec<DataType>,
    deadline: Instant,
) -> (
    BoxStream<'static, Result<RecordBatch>>,
    Arc<Mutex<DispatchStats>>,
    String,
) {
    let mut sieved = dispatcher.stream(dag, ranges.clone(), row_types.clone(), deadline);
    let stats = sieved.stats();
    let mut held = Vec::new();
    while let Some(b) = sieved.next().await {
        match b {
            Ok(b) => held.push(b),
            Err(e) => {
                let said = "group sieve: the scan failed".to_string();
                return (futures::stream::iter([Err(e)]).boxed(), stats, said);
            }
        }
    }
    let (apart, responses) = {
        let st = stats.lock();
        (ranges_apart(&st.key_ranges), st.key_ranges.len())
    };
    if apart {
        let said = format!(
            "group sieve: {responses} responses' key ranges apart, groups judged in storage"
        );
        return (
            futures::stream::iter(held.into_iter().map(Ok)).boxed(),
            stats,
            said,
        );
    }
    drop(held);
    let mut whole = dag.clone();
    whole.group_sieve = None;
    let again = dispatcher.stream(&whole, ranges, row_types, deadline);
    let stats = again.stats();
    let said =
        "group sieve: responses' key ranges overlapped, scanned again without it".to_string();
    (again.boxed(), stats, said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_that_touch_at_their_ends_are_apart_and_overlaps_are_not() {
        assert!(ranges_apart(&[]));
        assert!(ranges_apart(&[(5, 9)]));
        // In any order; a one-key range between two that end on its key.
        assert!(ranges_apart(&[(10, 20), (1, 5), (5, 5), (5, 10)]));
        assert!(!ranges_apart(&[(1, 9), (5, 5)]));
        assert!(!ranges_apart(&[(1, 5), (4, 10)]));
        // A row written later, far from its neighbours' keys.
        assert!(!ranges_apart(&[(1, 100), (101, 200), (3, 300)]));
    }
}
