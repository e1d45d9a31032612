//! Physical optimizer rules: partial aggregation and top-k move into the
//! regions.
//!
//! DataFusion plans an aggregation in two stages, and puts whatever lies
//! between the Partial stage and the table scan — projections computing
//! the aggregates' arguments, round-robin repartitioning — in compute:
//!
//! ```text
//!  AggregateExec(Final)                     AggregateExec(Final)
//!    RepartitionExec(Hash)                    RepartitionExec(Hash)
//!      AggregateExec(Partial)         ==>       RegionScanExec (storage: scan →
//!        RepartitionExec(RoundRobin)              selection → partial aggregation)
//!          ProjectionExec(args)
//!            RegionScanExec(scan → selection)
//! ```
//!
//! When every group key and every aggregate argument translates into the
//! coprocessor's expressions ([`pushdown::physical`]), and every aggregate
//! is one the coprocessor runs with the same state (COUNT, MIN, MAX, and
//! Quarry's SUM and AVG — `aggregates.rs`), the Partial subtree becomes a
//! region scan whose DAG ends in that partial aggregation and whose output
//! schema is exactly the Partial's. DataFusion's Final stage then merges
//! the regions' states column-wise: no row crosses the network. Anything
//! else (DISTINCT, FILTER clauses, grouping sets, a function storage does
//! not have) leaves the plan as it was: correct, but rows travel.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result as DfResult;
use datafusion::execution::SessionState;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
#[allow(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use quarry_coprocessor::aggregate::AggregateFunction;
use quarry_coprocessor::expr::Expr;
use quarry_proto::coprocessor::{AggFunc, AggKind, Aggregation, DagRequest, SortKey, TopN};

use super::aggregates::QuarryAggregate;
use super::pushdown;
use super::region_scan::RegionScanExec;

/// Adds Quarry's rules after DataFusion's own.
pub fn install(state: SessionState) -> SessionState {
    let mut rules = state.physical_optimizers().to_vec();
    rules.push(Arc::new(PartialAggregateIntoRegions));
    // Over the partial aggregations the rule above put in the regions.
    rules.push(Arc::new(super::group_sieve::HavingIntoRegions));
    rules.push(Arc::new(TopKIntoRegions));
    // Before the join filters: a copy not shared takes them as before.
    rules.push(Arc::new(super::shared_subplan::AssignSharedRuns));
    // Last: it wraps join build sides, which the rules above do not expect.
    rules.push(Arc::new(super::join_keys::BloomJoinFilters));
    // After the join filters: a scan that shares its run may drop them.
    rules.push(Arc::new(super::shared_scan::ShareIdenticalScans));
    // Last: whatever arithmetic is left in compute is checked.
    rules.push(Arc::new(super::checked_arithmetic::CheckedArithmetic));
    // A nested-loop join's right side runs while its left is collected.
    rules.push(Arc::new(super::start_early::StartRightEarly));
    datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rules(rules)
        .build()
}

/// `plan` with every node `replace` answers for replaced, children first.
pub(super) fn replace_bottom_up(
    plan: Arc<dyn ExecutionPlan>,
    replace: impl Fn(&Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(match replace(&node) {
            Some(n) => Transformed::yes(n),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

#[derive(Debug)]
pub struct PartialAggregateIntoRegions;

impl PhysicalOptimizerRule for PartialAggregateIntoRegions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        replace_bottom_up(plan, |node| {
            push_partial(node).map(|scan| Arc::new(scan) as Arc<dyn ExecutionPlan>)
        })
    }

    fn name(&self) -> &str {
        "quarry_partial_aggregate_into_regions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What the Partial stage reads, as expressions over the region scan's
/// columns, and the scan under it.
fn inputs_over_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<(Vec<Expr>, &RegionScanExec)> {
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        return Some((scan.plain_outputs()?, scan));
    }
    if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
        // Round-robin only spreads batches over partitions; a hash
        // repartition under a Partial stage would be a different plan.
        if !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
            return None;
        }
        return inputs_over_scan(r.input());
    }
    #[allow(deprecated)]
    if let Some(c) = plan.downcast_ref::<CoalesceBatchesExec>() {
        return inputs_over_scan(c.input());
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let (below, scan) = inputs_over_scan(p.input())?;
        let exprs = p
            .expr()
            .iter()
            .map(|pe| pushdown::physical(&pe.expr, &mut |i| below.get(i).cloned()))
            .collect::<Option<Vec<_>>>()?;
        return Some((exprs, scan));
    }
    None
}

/// The coprocessor's function for a DataFusion aggregate, with its
/// argument over the scan.
fn agg_func(
    a: &AggregateFunctionExpr,
    inputs: &[Expr],
) -> Option<(AggFunc, AggregateFunction, String)> {
    if a.is_distinct() || !a.order_bys().is_empty() || a.ignore_nulls() {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else {
        return None;
    };
    let ours = a.fun().inner().downcast_ref::<QuarryAggregate>();
    let mut kind = match (a.fun().name(), ours) {
        (_, Some(q)) => q.kind(),
        ("count", None) => AggKind::Count,
        ("min", None) => AggKind::Min,
        ("max", None) => AggKind::Max,
        _ => return None,
    };
    let arg = pushdown::physical(arg, &mut |i| inputs.get(i).cloned())?;
    // COUNT(*) is COUNT(1) to DataFusion: a constant that is never NULL.
    if kind == AggKind::Count && arg.as_literal().is_some_and(|v| !v.is_null()) {
        kind = AggKind::CountStar;
    }
    let (arg, arg_type) = if kind == AggKind::CountStar {
        (None, None)
    } else {
        let t = arg.data_type();
        (Some(arg), Some(t))
    };
    let function = AggregateFunction::new(kind, arg_type).ok()?;
    // The states must line up with DataFusion's, column for column.
    let fields = a.state_fields().ok()?;
    if fields.len() != function.state_types().len() {
        return None;
    }
    let shown = a.name().to_string();
    Some((
        AggFunc {
            kind: kind as i32,
            arg: match arg {
                Some(e) => Some(e.to_proto().ok()?),
                None => None,
            },
        },
        function,
        shown,
    ))
}

/// The region scan that replaces `node`, when `node` is a Partial
/// aggregation over a region scan that storage can run.
fn push_partial(node: &Arc<dyn ExecutionPlan>) -> Option<RegionScanExec> {
    let agg = node.downcast_ref::<AggregateExec>()?;
    if *agg.mode() != AggregateMode::Partial
        || !agg.group_expr().is_single()
        || agg.filter_expr().iter().any(Option::is_some)
        || agg.limit_options().is_some()
    {
        return None;
    }
    let (inputs, scan) = inputs_over_scan(agg.input())?;
    let mut group_by = Vec::new();
    let mut row_types = Vec::new();
    let mut keys_shown = Vec::new();
    for (e, name) in agg.group_expr().expr() {
        let k = pushdown::physical(e, &mut |i| inputs.get(i).cloned())?;
        row_types.push(k.data_type());
        group_by.push(k.to_proto().ok()?);
        keys_shown.push(name.clone());
    }
    let mut aggs = Vec::new();
    let mut aggs_shown = Vec::new();
    for a in agg.aggr_expr() {
        let (f, function, shown) = agg_func(a, &inputs)?;
        row_types.extend(function.state_types());
        aggs.push(f);
        aggs_shown.push(shown);
    }
    let schema = agg.schema();
    if schema.fields().len() != row_types.len() {
        return None;
    }
    let mut dag = DagRequest {
        aggregation: Some(Aggregation { group_by, aggs }),
        projection: None,
        limit: 0,
        ..scan.dag().clone()
    };
    // COUNT(*) alone, unfiltered, needs no column: the regions count keys
    // (packs know their row counts without decoding).
    let keys_only = dag.aggregation.as_ref().is_some_and(|a| {
        a.group_by.is_empty() && a.aggs.iter().all(|f| f.kind == AggKind::CountStar as i32)
    }) && dag.selection.is_none();
    if keys_only {
        if let Some(s) = dag.scan.as_mut() {
            s.columns.clear();
        }
    }
    let base = scan
        .storage()
        .split("; ")
        .filter(|s| !s.starts_with("scan "))
        .collect::<Vec<_>>();
    let mut storage = vec![format!(
        "scan {}",
        Some(
            scan.table()
                .columns
                .iter()
                .filter(|c| dag
                    .scan
                    .as_ref()
                    .is_some_and(|s| s.columns.iter().any(|sc| sc.column_id == c.id)))
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "(keys only)".into())
    )];
    storage.extend(base.into_iter().map(String::from));
    storage.push(format!(
        "partial aggregate [{}]{}",
        aggs_shown.join(", "),
        if keys_shown.is_empty() {
            String::new()
        } else {
            format!(" group by [{}]", keys_shown.join(", "))
        }
    ));
    Some(scan.derive(dag, row_types, schema, storage.join("; ")))
}

/// Physical optimizer rule: `ORDER BY … LIMIT k` keeps only each region's
/// first k rows.
///
/// ```text
///  SortExec(TopK, fetch=k)               SortExec(TopK, fetch=k)
///    CooperativeExec             ==>       CooperativeExec
///      RegionScanExec(scan)                  RegionScanExec(scan → top-k)
/// ```
///
/// When every sort key translates into the coprocessor's expressions, the
/// region scan's DAG gets a top-N of k rows by those keys (after the
/// selection, before the projection): each region sends at most k rows,
/// and DataFusion's sort, which stays, picks the answer among the regions'
/// candidates. Between the sort and the scan only operators that pass rows
/// through unchanged are allowed.
#[derive(Debug)]
pub struct TopKIntoRegions;

/// Above this many rows a top-k is a big sort: rows travel as they are.
const MAX_PUSHED_TOP_K: usize = 100_000;

impl PhysicalOptimizerRule for TopKIntoRegions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        replace_bottom_up(plan, push_top_k)
    }

    fn name(&self) -> &str {
        "quarry_top_k_into_regions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn push_top_k(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let sort = node.downcast_ref::<SortExec>()?;
    let fetch = sort.fetch().filter(|&k| k <= MAX_PUSHED_TOP_K)?;
    let input = with_top_k(sort.input(), sort.expr(), fetch)?;
    replace_children_if_necessary(node.clone(), vec![input]).ok()
}

/// `plan` with the region scan under it keeping its first `fetch` rows by
/// `keys` (over `plan`'s columns, which pass-through nodes keep).
fn with_top_k(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &LexOrdering,
    fetch: usize,
) -> Option<Arc<dyn ExecutionPlan>> {
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        let outputs = scan.plain_outputs()?;
        let mut sort_keys = Vec::new();
        let mut shown = Vec::new();
        for k in keys.iter() {
            let e = pushdown::physical(&k.expr, &mut |i| outputs.get(i).cloned())?;
            sort_keys.push(SortKey {
                expr: Some(e.to_proto().ok()?),
                descending: k.options.descending,
                nulls_first: k.options.nulls_first,
            });
            shown.push(k.to_string());
        }
        let dag = DagRequest {
            top_n: Some(TopN {
                keys: sort_keys,
                limit: fetch as u64,
            }),
            ..scan.dag().clone()
        };
        let storage = format!(
            "{}; top-k {fetch} by [{}]",
            scan.storage(),
            shown.join(", ")
        );
        return Some(Arc::new(scan.with_dag(dag, storage)));
    }
    let passes_rows = plan.downcast_ref::<CooperativeExec>().is_some()
        || plan
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)))
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some();
    #[allow(deprecated)]
    let passes_rows = passes_rows || plan.downcast_ref::<CoalesceBatchesExec>().is_some();
    if !passes_rows {
        return None;
    }
    let children = plan.children();
    let [child] = children.as_slice() else {
        return None;
    };
    let child = with_top_k(child, keys, fetch)?;
    replace_children_if_necessary(plan.clone(), vec![child]).ok()
}
