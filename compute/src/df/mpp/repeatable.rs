//! Whether a plan finds the same rows when it runs again: what a
//! semi-join reduction's copy of a build side (`broadcast.rs`) and a
//! broadcast stage computed again in each consumer task (`replicate.rs`)
//! must do to leave the answer as it is.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::df::region_scan::RegionScanExec;

/// Whether running `plan` again gives the same rows, as a set: it is
/// made only of region scans without a limit (a snapshot read: every
/// task reads at the query's one `read_ts`), in-memory or file sources,
/// projections, filters, hash and nested-loop joins, repartitions and
/// exact aggregations ([`exact_aggregation`]), none with a row limit
/// (`fetch`) and none evaluating a volatile expression (`random()`).
/// Anything else (a LIMIT or top-k, which may keep different rows among
/// ties; an aggregation whose answer depends on the order its rows come
/// in; a window) is not reduced by.
pub(crate) fn repeatable(plan: &Arc<dyn ExecutionPlan>) -> DfResult<bool> {
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_expr_common::physical_expr::is_volatile;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::NestedLoopJoinExec;
    let mut ok = true;
    plan.apply(|node| {
        let fine = node.fetch().is_none()
            && if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
                scan.dag().limit == 0
            } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
                !p.expr().iter().any(|e| is_volatile(&e.expr))
            } else if let Some(f) = node.downcast_ref::<FilterExec>() {
                !is_volatile(f.predicate())
            } else if let Some(j) = node.downcast_ref::<HashJoinExec>() {
                !j.filter().is_some_and(|f| is_volatile(f.expression()))
            } else if let Some(j) = node.downcast_ref::<NestedLoopJoinExec>() {
                !j.filter().is_some_and(|f| is_volatile(f.expression()))
            } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
                exact_aggregation(a)
            } else {
                // (A DataSourceExec is a memory table or files: the
                // same rows each time.)
                node.is::<RepartitionExec>()
                    || node.is::<CoalescePartitionsExec>()
                    || node.is::<DataSourceExec>()
            };
        ok = fine;
        Ok(match fine {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    })?;
    Ok(ok)
}

/// Whether `agg` answers the same whatever order and split its input
/// rows come in, so that a copy of it over the same rows finds the same
/// groups and values: TPC-H Q22's customers above the average balance
/// (a decimal average), whose keys narrow the orders its anti join
/// reads. Its functions are COUNT, MIN and MAX of anything and SUM and
/// AVG that add up exact types (integers and decimals: a float sum's
/// last bits depend on the order it adds in; Quarry's AVG of a decimal
/// adds decimals and divides once, into a float, at the end), none
/// ordered within (`ARRAY_AGG(x ORDER BY y)` and the like are not in the
/// list anyway) and none over a volatile argument, filter or group key.
fn exact_aggregation(agg: &AggregateExec) -> bool {
    use datafusion::physical_expr_common::physical_expr::is_volatile;
    let functions = agg.aggr_expr().iter().all(|f| {
        let exact = match f.fun().name() {
            "count" | "min" | "max" => true,
            // What they add up, as their state holds it (a DISTINCT
            // one's is a list of the values: added up in a hash set's
            // order).
            "sum" | "avg" => f
                .state_fields()
                .is_ok_and(|state| state.iter().all(|s| !holds_floats(s.data_type()))),
            _ => false,
        };
        exact && f.order_bys().is_empty() && !f.expressions().iter().any(is_volatile)
    });
    let filters = agg.filter_expr().iter().flatten().any(is_volatile);
    let keys = agg.group_expr().expr().iter().any(|(e, _)| is_volatile(e));
    // (A limit on its groups keeps some of them, which ones depending on
    // the order rows come in.)
    functions && !filters && !keys && agg.limit_options().is_none()
}

/// Whether values of type `t` are, or hold, floating-point numbers.
fn holds_floats(t: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType;
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_floats(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_floats(f.data_type())),
        t => t.is_floating(),
    }
}
