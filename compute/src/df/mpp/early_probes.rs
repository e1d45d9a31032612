//! A hash join's probe side started with its build side, where all of
//! the probe side's reading happens in other stages.
//!
//! A hash join collects its build side before it polls its probe side.
//! In one process that order is what lets the build keys narrow the
//! probe side's scans (`df/join_keys.rs`). In a distributed plan a probe
//! side that arrives over an exchange (`NetworkShuffleExec` and its
//! kin) is computed by other stages, and `datafusion-distributed` starts
//! a stage's work only when its consumer first polls it: the two sides'
//! stages run one after the other, though neither waits for the other.
//! TPC-H Q15 under `force` is the example:
//!
//! ```text
//!  Stage 6  HashJoin(max(total_revenue) = total_revenue)
//!             broadcast of Stage 3: max over Stage 2 ◀ Stage 1 (lineitem, by supplier)
//!             … FinalAggregate ◀ shuffle of Stage 5 (lineitem, by supplier)
//! ```
//!
//! Stages 1 and 5 are the two copies of its `revenue0` view: the same
//! requests to the same regions at the query's one snapshot. Run one
//! after the other, the stores read a quarter of lineitem twice; started
//! together, a store answers the second request from the read of the
//! first (`raftstore/src/node/same_reads.rs`), and the two chains of
//! stages overlap.
//!
//! [`start_probe_sides_early`] (run by the coordinator once the plan is
//! cut into stages) puts a `StartEarlyExec` (`df/start_early.rs`) over
//! such a probe side: when the join executes a partition, its probe
//! side's partition starts at once and holds at most two batches ahead
//! of the join. Only where nothing on the probe side waits for keys
//! that starting early would make it wait for longer (a scan's wait for
//! keys is bounded, and past the bound it reads unnarrowed):
//! * the probe side reads over an exchange, and only into an operator
//!   in its stage that takes all of its input before it gives a row (a
//!   final aggregation, a sort), which keeps reading the exchange to its
//!   end: a probe side that streamed the exchange's rows up would take
//!   two batches and leave the rest in the network's buffers and in the
//!   HTTP/2 flow-control windows, which the build side's stream from
//!   the same process shares, while the build side is collected (TPC-H
//!   Q21's partitioned joins of lineitem, planned without statistics);
//! * no region scan below it, in this stage or the ones below, waits
//!   for keys from another stage (`cross_stage.rs`);
//! * the join's probe keys reach no region scan within the stage (where
//!   the worker hands the join's keys to it);
//! * the join is not itself on the probe side of a hash join in its
//!   stage (whose keys may reach through it; a stage's plan executes its
//!   nodes when it starts, so a started probe side would start at once).
//!
//! CAVEATS
//!
//! * The probe side's aggregations and sorts now hold their memory
//!   while the build side is collected, not after.
//! * A join whose build side turns out empty would not have needed its
//!   probe side (an inner join answers no rows): that work is done.
//! * For the same reason a nested-loop join's wrapper
//!   (`StartRightEarly`, placed before the plan is cut into stages) over
//!   a right side that streams an exchange's rows is made lazy here: it
//!   stays in the plan (EXPLAIN ANALYZE counts its node) and starts its
//!   input as usual.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{DistributedLeafExec, NetworkBoundaryExt};

use super::cross_stage::key_paths;
use crate::df::join_keys;
use crate::df::region_scan::RegionScanExec;
use crate::df::start_early::StartEarlyExec;

/// `plan` (a distributed plan, cut into stages) with the probe sides
/// that may start early started early (module docs).
pub fn start_probe_sides_early(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    // A switch to time the plans without it side by side.
    let plan = match quarry_proto::failpoint::fires("early_probes_off") {
        true => plan,
        false => rewrite(plan, false)?,
    };
    lazy_over_streamed_exchanges(plan)
}

/// `plan` with each eager `StartEarlyExec` whose input streams an
/// exchange's rows up made lazy: a nested-loop join's right side
/// (`StartRightEarly`, which runs before the plan is cut into stages)
/// that reads over an exchange would otherwise stall it (see
/// [`exchanges`]).
fn lazy_over_streamed_exchanges(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(early) = node.downcast_ref::<StartEarlyExec>() else {
            return Ok(Transformed::no(node));
        };
        if !early.is_eager() || exchanges(early.input()) != Some(Exchanges::Streamed) {
            return Ok(Transformed::no(node));
        }
        let lazy: Arc<dyn ExecutionPlan> = Arc::new(StartEarlyExec::lazy(early.input().clone()));
        Ok(Transformed::yes(lazy))
    })
    .map(|t| t.data)
}

/// [`start_probe_sides_early`] below `plan`; `under_probe`: `plan` is on
/// the probe side of a hash join in its stage, whose keys may reach
/// into it.
fn rewrite(plan: Arc<dyn ExecutionPlan>, under_probe: bool) -> DfResult<Arc<dyn ExecutionPlan>> {
    let join = plan.downcast_ref::<HashJoinExec>();
    let children = plan
        .children()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            // A stage below starts afresh; a join's probe side is under
            // its keys.
            let under = match (plan.is_network_boundary(), join) {
                (true, _) => false,
                (false, Some(_)) => under_probe || i == 1,
                (false, None) => under_probe,
            };
            rewrite(c.clone(), under)
        })
        .collect::<DfResult<Vec<_>>>()?;
    let plan = replace_children_if_necessary(plan, children)?;
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(plan);
    };
    if under_probe || !may_start_early(join)? {
        return Ok(plan);
    }
    let started: Arc<dyn ExecutionPlan> = Arc::new(StartEarlyExec::new(join.right().clone()));
    replace_children_if_necessary(plan.clone(), vec![join.left().clone(), started])
}

/// Whether `join`'s probe side may start with its build side: it reads
/// over an exchange, no scan below it (in any stage) waits for keys from
/// another stage, and no scan in this stage for `join`'s own keys.
fn may_start_early(join: &HashJoinExec) -> DfResult<bool> {
    let probe = join.right();
    if probe.is::<StartEarlyExec>() {
        return Ok(false);
    }
    if exchanges(probe) != Some(Exchanges::Held) || waits_for_other_stages(probe)? {
        return Ok(false);
    }
    Ok(!join
        .on()
        .iter()
        .any(|(_, key)| reaches_scan_in_stage(probe, key)))
}

/// How a stage's plan reads over exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exchanges {
    /// Each behind an operator that takes all of its input before it
    /// gives a row (a final aggregation, a sort).
    Held,
    /// One at least streams its rows straight up.
    Streamed,
}

/// How `plan` reads over exchanges within its stage (None: it does not).
/// A probe side started early whose exchange streams straight up would
/// take two batches and leave the rest in the network's buffers (up to
/// the library's budget per connection) and in the HTTP/2 flow-control
/// windows, which the build side's stream from the same process shares,
/// while the build side is collected. Only a held one starts early: an
/// aggregation or a sort in the stage keeps reading the exchange to its
/// end, and holds what it read as an operator's memory.
fn exchanges(plan: &Arc<dyn ExecutionPlan>) -> Option<Exchanges> {
    if plan.is_network_boundary() {
        return Some(Exchanges::Streamed);
    }
    let holds = holds_its_input(plan);
    let below = plan
        .children()
        .into_iter()
        .filter_map(exchanges)
        .max_by_key(|e| *e == Exchanges::Streamed)?;
    Some(match holds {
        true => Exchanges::Held,
        false => below,
    })
}

/// Whether `plan` takes all of its input before it gives a row: a final
/// aggregation or a sort.
fn holds_its_input(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    use datafusion::physical_plan::sorts::sort::SortExec;
    use datafusion::physical_plan::InputOrderMode;
    // (An aggregation over input ordered by its group keys gives each
    // group as it ends.)
    plan.is::<SortExec>()
        || plan.downcast_ref::<AggregateExec>().is_some_and(|a| {
            a.input_order_mode() == &InputOrderMode::Linear
                && !matches!(
                    a.mode(),
                    AggregateMode::Partial | AggregateMode::PartialReduce
                )
        })
}

/// Whether a region scan in `plan`, or in the stages below it, waits for
/// keys from a join in another stage (`cross_stage.rs`).
fn waits_for_other_stages(plan: &Arc<dyn ExecutionPlan>) -> DfResult<bool> {
    let waits = |scan: &Arc<dyn ExecutionPlan>| {
        scan.downcast_ref::<RegionScanExec>()
            .is_some_and(|s| !s.remote_keys().is_empty())
    };
    let mut found = false;
    plan.apply(|n| {
        found |= waits(n);
        if let Some(leaf) = n.downcast_ref::<DistributedLeafExec>() {
            found |= waits(leaf.original()) || leaf.variants().iter().any(waits);
        }
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    })?;
    Ok(found)
}

/// Whether a filter on `key` (over `plan`'s output) would reach a table
/// read in `plan`'s stage, followed as the join key filters are
/// (`join_keys::key_below`, and through joins as `cross_stage::key_paths`
/// says).
fn reaches_scan_in_stage(plan: &Arc<dyn ExecutionPlan>, key: &Arc<dyn PhysicalExpr>) -> bool {
    if plan.is_network_boundary() {
        return false;
    }
    if plan.is::<RegionScanExec>() || plan.is::<DistributedLeafExec>() {
        return true;
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let Some(column) = key.as_ref().downcast_ref::<Column>() else {
            return false;
        };
        return key_paths(join, column.index()).iter().any(|(left, k)| {
            reaches_scan_in_stage(if *left { join.left() } else { join.right() }, k)
        });
    }
    match (join_keys::key_below(plan, key), &plan.children()[..]) {
        (Some(below), [child]) => reaches_scan_in_stage(child, &below),
        _ => false,
    }
}
