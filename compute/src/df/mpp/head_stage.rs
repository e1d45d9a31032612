//! The coordinator's own stage, finished as one process's plan is.
//!
//! The coordinator plans a distributed query without the join filters
//! handed to region scans (DataFusion's dynamic filters, Quarry's key
//! filters, `join_keys.rs`): a join and the scan it probes may end up in
//! different stages. Each worker adds them to the stage it runs
//! (`mod.rs`, `stage_as_one_process_plans_it`). The stage the coordinator
//! runs itself, the head, is no worker's: it gets them here, once the
//! plan is cut.
//!
//! That matters where the head holds joins over region scans. The
//! library folds a one-task stage into a one-task consumer (it drops the
//! exchange between them), so a stage sized to one task
//! (`tasks.rs`, small stages) under the final gather ends up in the head;
//! and where no exchange is left at all, the library answers the plan it
//! was given, a one-process plan without key filters. Q20's supplier scan
//! then read 10 thousand rows rather than the 412 of CANADA's.
//!
//! The stages below the head are hidden while it is finished (each
//! network boundary behind an opaque leaf), so nothing reaches into a
//! stage a worker will finish itself, and a join in the head never hands
//! keys to a scan in another process.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::config::ConfigOptions;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::NetworkBoundaryExt;

/// `plan` with its head stage (everything not below a network boundary)
/// given its join filters as one process's plan is.
///
/// The join filters are one run's (`BuildKeys` sinks): like every
/// distributed plan, the result runs once, each run (and each retry)
/// being planned and cut anew (`running.rs`, `plan_cache.rs`).
pub fn finish_head_stage(
    plan: Arc<dyn ExecutionPlan>,
    options: &ConfigOptions,
    join_key_list_max: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    // With task counts decided at run time the plan is not cut yet: a
    // join here could be linked to a scan that ends up in another stage.
    let dynamic = datafusion_distributed::DistributedConfig::from_config_options(options)
        .is_ok_and(|d| d.dynamic_task_count);
    if dynamic {
        return Ok(plan);
    }
    // The options a worker's stage is finished with (`mod.rs`): the
    // coordinator plans with DataFusion's join filters off.
    let mut options = options.clone();
    crate::df::join_filter_options(&mut options, join_key_list_max);
    let hidden = plan.transform_down(|node| {
        if node.is_network_boundary() {
            let opaque = Arc::new(Opaque(node)) as Arc<dyn ExecutionPlan>;
            return Ok(Transformed::new(opaque, true, TreeNodeRecursion::Jump));
        }
        Ok(Transformed::no(node))
    })?;
    let head = FilterPushdown::new_post_optimization().optimize(hidden.data, &options)?;
    let head = crate::df::join_keys::add_build_keys(head)?;
    head.transform_up(|node| match node.downcast_ref::<Opaque>() {
        Some(o) => Ok(Transformed::yes(o.0.clone())),
        None => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// A network boundary seen as a leaf: its stage out of reach.
#[derive(Debug)]
struct Opaque(Arc<dyn ExecutionPlan>);

impl DisplayAs for Opaque {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.fmt_as(t, f)
    }
}

impl ExecutionPlan for Opaque {
    fn name(&self) -> &str {
        "Opaque"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.0.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, p: usize, ctx: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        self.0.execute(p, ctx)
    }
}
