//! A logical plan that is a physical plan already made: how a spread
//! statement's kept physical plan reaches the distributed planner.
//!
//! A statement spread over compute processes is cut into stages at each
//! run (its tasks and workers are the live membership's of the moment:
//! `plan_cache.rs`, "Spread queries"), by `datafusion-distributed`'s
//! query planner, which takes a *logical* plan, asks the planner below
//! it (Quarry's, `shared_subplan::QuarryQueryPlanner`) for the one-process
//! physical plan, and distributes that. Made from scratch, that physical
//! plan (DataFusion's initial planning and every physical optimizer
//! rule) was a tenth of the three compute processes' CPU in a loop of
//! TPC-H Q6 under `mpp = 'force'`, and all of it on the query's critical
//! path, before a task starts (`docs/performance.md`).
//!
//! So the plan cache keeps it as a one-process query's is kept (a copy
//! from before any run, when [`super::plan_cache::reusable`] allows),
//! and each run hands a fresh copy (`fresh_run.rs`) down wrapped in
//! [`PrePlanned`], a logical leaf with the statement's schema that the
//! planner below answers with the copy itself ([`unwrap`]), skipping
//! planning. The distributed planner then cuts it as it cuts a plan it
//! was just given: the result is the plan a run from scratch makes.
//!
//! The kept plan depends only on what its cache entry is checked
//! against (the tables' definitions and statistics) and on the physical
//! rules, which are the same under `auto` and `force` (they differ in
//! how a plan is cut, not in the plan cut), so one entry serves both.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::common::{DFSchemaRef, Result as DfResult};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::physical_plan::ExecutionPlan;

/// A physical plan standing in a logical plan's place (module docs).
#[derive(Debug, Clone)]
pub struct PrePlanned {
    plan: Arc<dyn ExecutionPlan>,
    schema: DFSchemaRef,
}

impl PrePlanned {
    fn address(&self) -> usize {
        Arc::as_ptr(&self.plan) as *const () as usize
    }
}

impl PartialEq for PrePlanned {
    fn eq(&self, other: &Self) -> bool {
        self.address() == other.address()
    }
}

impl Eq for PrePlanned {}

impl Hash for PrePlanned {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.address().hash(state)
    }
}

impl PartialOrd for PrePlanned {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.address().cmp(&other.address()))
    }
}

impl UserDefinedLogicalNodeCore for PrePlanned {
    fn name(&self) -> &str {
        "PrePlanned"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PrePlanned: {}", self.plan.name())
    }

    fn with_exprs_and_inputs(&self, _: Vec<Expr>, _: Vec<LogicalPlan>) -> DfResult<Self> {
        Ok(self.clone())
    }
}

/// `physical`, the physical plan of `logical`, as a logical plan.
pub fn wrap(physical: Arc<dyn ExecutionPlan>, logical: &LogicalPlan) -> LogicalPlan {
    LogicalPlan::Extension(Extension {
        node: Arc::new(PrePlanned {
            plan: physical,
            schema: logical.schema().clone(),
        }),
    })
}

/// The physical plan `plan` wraps, if it is a [`wrap`].
pub fn unwrap(plan: &LogicalPlan) -> Option<Arc<dyn ExecutionPlan>> {
    let LogicalPlan::Extension(ext) = plan else {
        return None;
    };
    ext.node
        .as_any()
        .downcast_ref::<PrePlanned>()
        .map(|p| p.plan.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn the_planner_below_the_distributed_one_answers_a_wrap_with_its_plan() {
        let ctx = SessionContext::new();
        let logical = ctx
            .sql("SELECT 1 AS one")
            .await
            .unwrap()
            .into_optimized_plan()
            .unwrap();
        let physical = ctx.state().create_physical_plan(&logical).await.unwrap();
        let wrapped = wrap(physical.clone(), &logical);
        assert_eq!(wrapped.schema(), logical.schema());
        let back = unwrap(&wrapped).expect("a wrapped plan");
        assert!(Arc::ptr_eq(&back, &physical));
        assert!(unwrap(&logical).is_none());

        let state = crate::df::shared_subplan::install(ctx.state());
        let planned = state
            .query_planner()
            .create_physical_plan(&wrapped, &state)
            .await
            .unwrap();
        assert!(
            Arc::ptr_eq(&planned, &physical),
            "planned again: {planned:?}"
        );
    }
}
