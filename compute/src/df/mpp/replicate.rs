//! Small broadcast build sides computed where they are used: a
//! one-task stage that only reads small tables and feeds a broadcast
//! join is taken out of its own stage and run inside every task of the
//! stage that joins with it.
//!
//! ```text
//!  before                                   after
//!  Stage 7 (3 tasks)                        Stage 7 (3 tasks)
//!    HashJoin(n_nationkey = s_nationkey)      HashJoin(n_nationkey = s_nationkey)
//!      Coalesce                                 Coalesce
//!        [Stage 5] NetworkBroadcast               RegionScan nation   (in each task)
//!      HashJoin(s_suppkey = ps_suppkey)         HashJoin(s_suppkey = ps_suppkey)
//!        Coalesce                                 Coalesce
//!          [Stage 6] NetworkBroadcast               RegionScan supplier  ◀ nation's keys
//!        RegionScan partsupp (task's share)       RegionScan partsupp    ◀ supplier's keys
//!  Stage 5: Broadcast ◀ RegionScan nation
//!  Stage 6: Broadcast ◀ RegionScan supplier
//! ```
//!
//! Why: `datafusion-distributed` gives every broadcast build side a
//! stage of its own, and a stage is a wall for the join key filters
//! that, in one process, narrow a scan by the keys of the joins above it
//! (`df/join_keys.rs`; the workers add them within the stage they run).
//! TPC-H's dimension chains (region → nation → supplier → partsupp in
//! Q2 and Q11, nation → customer/supplier in Q5, Q7, Q8) lose exactly
//! those filters: Q11's partsupp scan returned all 800 K rows at SF 1
//! in place of the 32 K of German suppliers, and every tiny stage cost a
//! task set-up on a worker and a stream per consumer task. With the
//! small side in the consumer's stage, the worker hands keys down the
//! chain as one process does, and the stage and its streams are gone.
//!
//! The price is the small side read once per consumer task instead of
//! once in all, hence the bounds: the stage runs as one task (its tables
//! have one region each, or are small enough for `auto` to keep them in
//! one), it has no exchange of its own, the tables it reads have at most
//! [`REPLICATE_MAX_ROWS`] rows together by their statistics (or are read
//! by key), and it reads the same rows every time ([`super::broadcast`]'s
//! `repeatable`: region scans at the query's one snapshot, no LIMIT, no
//! volatile function), so every task's copy is the same build side the
//! broadcast would have sent. This is the same trade as TiDB's
//! broadcast join of a small table, with the table read where it is
//! joined instead of shipped there.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion_distributed::{
    BroadcastExec, NetworkBoundary, NetworkBoundaryExt, NetworkBroadcastExec, Stage,
};

use crate::df::region_scan::RegionScanExec;

/// The most rows (by the tables' statistics, summed over the scans) a
/// one-task broadcast stage may read to be run in every consumer task.
pub const REPLICATE_MAX_ROWS: u64 = 200_000;

/// The distributed query planner followed by [`replicate_small_broadcasts`],
/// then by the join keys that cross stages
/// (`cross_stage::keys_across_stages`, over `workers`' live processes),
/// then by the probe sides that start early (`early_probes.rs`).
#[derive(Debug)]
pub struct ReplicatingPlanner {
    pub inner: Arc<dyn QueryPlanner + Send + Sync>,
    pub workers: Arc<super::workers::Workers>,
    /// The most build keys a join hands its probe scan as a list
    /// (`ScanContext::join_key_list_max`), for the coordinator's stage.
    pub join_key_list_max: usize,
}

#[async_trait]
impl QueryPlanner for ReplicatingPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = self
            .inner
            .create_physical_plan(logical_plan, session)
            .await?;
        let plan = replicate_small_broadcasts(plan)?;
        let plan = super::cross_stage::keys_across_stages(plan, self.workers.urls().len())?;
        let plan = super::early_probes::start_probe_sides_early(plan)?;
        super::head_stage::finish_head_stage(plan, session.config_options(), self.join_key_list_max)
    }
}

/// `plan` with every broadcast of a small one-task stage replaced by the
/// stage's plan itself (module docs). Bottom-up, so a chain of them
/// (nation into supplier's stage, then that into partsupp's) folds whole.
pub fn replicate_small_broadcasts(
    plan: Arc<dyn ExecutionPlan>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    // At the coalesce the library puts above every broadcast, and only
    // one without a row limit: a first-N of a build side computed again
    // in each task could keep other rows in each.
    plan.transform_up(|node| {
        let Some(coalesce) = node.downcast_ref::<CoalescePartitionsExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(nb) = coalesce.input().downcast_ref::<NetworkBroadcastExec>() else {
            return Ok(Transformed::no(node));
        };
        let Stage::Local(stage) = nb.input_stage() else {
            return Ok(Transformed::no(node));
        };
        let Some(head) = stage.plan.downcast_ref::<BroadcastExec>() else {
            return Ok(Transformed::no(node));
        };
        if stage.tasks != 1 || coalesce.fetch().is_some() {
            return Ok(Transformed::no(node));
        }
        let input = without_local_broadcasts(head.input().clone())?;
        if !replicable(&input)? {
            return Ok(Transformed::no(node));
        }
        let replaced = node.replace_children(
            vec![input],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?;
        Ok(Transformed::yes(replaced))
    })
    .map(|t| t.data)
}

/// `plan` without the broadcasts to a single consumer task that the
/// library leaves where it took a one-task-to-one-task exchange out (a
/// stage replicated into its consumer, now a part of this one): each
/// passes its input's partitions through, but serves each partition to
/// one consumer only, once.
fn without_local_broadcasts(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| match node.downcast_ref::<BroadcastExec>() {
        Some(b) if b.consumer_task_count() == 1 => Ok(Transformed::yes(b.input().clone())),
        _ => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// Whether every task may compute `plan` itself: no exchange in it, the
/// same rows each time, and small tables only.
pub(super) fn replicable(plan: &Arc<dyn ExecutionPlan>) -> DfResult<bool> {
    if plan.exists(|p| Ok(p.is_network_boundary()))? || !super::broadcast::repeatable(plan)? {
        return Ok(false);
    }
    let mut rows = 0u64;
    let mut small = true;
    plan.apply(|node| {
        if !node.children().is_empty() {
            return Ok(TreeNodeRecursion::Continue);
        }
        small = if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
            if scan.reads_few_rows() {
                true
            } else if let Some(r) = scan.table_rows() {
                rows = rows.saturating_add(r);
                rows <= REPLICATE_MAX_ROWS
            } else {
                false
            }
        } else {
            // A memory table or files: read in place, no store asked.
            node.is::<DataSourceExec>()
        };
        Ok(match small {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    })?;
    Ok(small)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::df::mpp::test_plans::{hash_join, source};
    use datafusion::common::JoinType;
    use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
    use datafusion::physical_plan::limit::GlobalLimitExec;

    /// A broadcast join of `build`, computed in a stage of `tasks` tasks.
    fn broadcast_join(build: Arc<dyn ExecutionPlan>, tasks: usize) -> Arc<dyn ExecutionPlan> {
        let broadcast = Arc::new(BroadcastExec::new(build, 3));
        let network = Arc::new(NetworkBroadcastExec::try_new(broadcast, tasks).unwrap());
        Arc::new(hash_join(
            Arc::new(CoalescePartitionsExec::new(network)),
            source("p", 10),
            JoinType::Inner,
            PartitionMode::CollectLeft,
        ))
    }

    fn broadcasts(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut n = 0;
        plan.apply(|p| {
            n += usize::from(p.is::<NetworkBroadcastExec>());
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        n
    }

    #[test]
    fn a_small_one_task_broadcast_runs_in_its_consumer() {
        let plan = replicate_small_broadcasts(broadcast_join(source("b", 10), 1)).unwrap();
        assert_eq!(broadcasts(&plan), 0);
        let join = plan.downcast_ref::<HashJoinExec>().unwrap();
        let coalesce = join
            .left()
            .downcast_ref::<CoalescePartitionsExec>()
            .unwrap();
        assert!(coalesce.input().is::<DataSourceExec>());
    }

    /// A stage of several tasks (each computing part of the build side),
    /// or one that may read other rows a second time (any 5 of them),
    /// or one read up to a row limit, stays a broadcast.
    #[test]
    fn a_many_task_or_unrepeatable_broadcast_stays() {
        let plan = replicate_small_broadcasts(broadcast_join(source("b", 10), 3)).unwrap();
        assert_eq!(broadcasts(&plan), 1);
        let limited = Arc::new(GlobalLimitExec::new(source("b", 10), 0, Some(5)));
        let plan = replicate_small_broadcasts(broadcast_join(limited, 1)).unwrap();
        assert_eq!(broadcasts(&plan), 1);
        // Nor a broadcast read up to a row limit (its first 5 rows).
        let broadcast = Arc::new(BroadcastExec::new(source("b", 10), 3));
        let network = Arc::new(NetworkBroadcastExec::try_new(broadcast, 1).unwrap());
        let first = Arc::new(CoalescePartitionsExec::new(network).with_fetch(Some(5)));
        let plan = replicate_small_broadcasts(first).unwrap();
        assert_eq!(broadcasts(&plan), 1);
    }
}
