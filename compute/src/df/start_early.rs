//! A nested-loop join's two inputs at once.
//!
//! DataFusion's `NestedLoopJoinExec` collects its left input, then polls
//! its right one: nothing below the right side starts before the left
//! side has ended. An uncorrelated scalar subquery becomes such a join
//! (TPC-H Q11's `HAVING sum(…) > (SELECT sum(…) * 0.0001 …)`, Q22's
//! `c_acctbal > (SELECT avg(c_acctbal) …)`), and both of its sides are
//! chains of region scans that mostly wait on round trips to the stores:
//! run one after the other, the query costs the sum of two latencies.
//!
//! [`StartRightEarly`], a physical optimizer rule, puts a
//! [`StartEarlyExec`] over each nested-loop join's right input. When the
//! join executes a partition, the wrapper starts driving that partition
//! of its input on a task of its own, and hands the join its batches
//! through a channel of two: the right side's scans, joins and
//! aggregations run while the left side is collected, and once two
//! batches wait the task waits too, so at most two batches are held
//! ahead of the join.
//!
//! CAVEATS
//!
//! * A join whose left side turns out empty would not have needed its
//!   right side (an inner join answers no rows); that work is done anyway
//!   up to the two batches. Dropping the join's stream (an answer
//!   complete, a cancel, an error) aborts the task.
//! * In a distributed plan the wrapper travels with its stage
//!   (`mpp/codec.rs`): a worker starts the right side early too, and the
//!   stage it runs has every node the coordinator planned, which
//!   EXPLAIN ANALYZE needs to match each task's metrics to its node.
//!   Where its input streams rows in over an exchange, it is made lazy
//!   (`mpp/early_probes.rs`): started early, it would take two batches
//!   and leave the rest in the network's buffers and flow-control
//!   windows, which the other side's stream may share, while the join
//!   collects its other side. A lazy wrapper starts its input as usual.
//! * `mpp/early_probes.rs` also puts it over a hash join's probe side.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::NestedLoopJoinExec;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

/// Batches a started input may hold ahead of its consumer.
const AHEAD: usize = 2;

/// Its input, started when executed rather than when first polled.
#[derive(Debug)]
pub struct StartEarlyExec {
    input: Arc<dyn ExecutionPlan>,
    /// False: its input runs when first polled, as without the wrapper
    /// (where its input streams rows in over an exchange of a distributed
    /// plan, `mpp/early_probes.rs`).
    eager: bool,
}

impl StartEarlyExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        StartEarlyExec { input, eager: true }
    }

    /// The wrapper kept as a node, its input started as usual.
    pub fn lazy(input: Arc<dyn ExecutionPlan>) -> Self {
        StartEarlyExec {
            input,
            eager: false,
        }
    }

    pub fn is_eager(&self) -> bool {
        self.eager
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for StartEarlyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match self.eager {
            true => write!(f, "StartEarlyExec"),
            false => write!(f, "StartEarlyExec: lazy"),
        }
    }
}

impl ExecutionPlan for StartEarlyExec {
    fn name(&self) -> &str {
        "StartEarlyExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(StartEarlyExec {
            input: children.swap_remove(0),
            eager: self.eager,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if !self.eager {
            return self.input.execute(partition, context);
        }
        let mut builder = RecordBatchReceiverStream::builder(self.schema(), AHEAD);
        let tx = builder.tx();
        let input = self.input.clone();
        builder.spawn(async move {
            let mut batches = input.execute(partition, context)?;
            while let Some(b) = batches.next().await {
                let failed = b.is_err();
                // The consumer is gone (or got the error): stop.
                if tx.send(b).await.is_err() || failed {
                    break;
                }
            }
            Ok(())
        });
        Ok(builder.build())
    }
}

/// The physical optimizer rule: see the module docs.
#[derive(Debug)]
pub struct StartRightEarly;

impl PhysicalOptimizerRule for StartRightEarly {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let right = join.right();
            if right.downcast_ref::<StartEarlyExec>().is_some() {
                return Ok(Transformed::no(node));
            }
            let started: Arc<dyn ExecutionPlan> = Arc::new(StartEarlyExec::new(right.clone()));
            let left = join.left().clone();
            Ok(Transformed::yes(replace_children_if_necessary(
                node.clone(),
                vec![left, started],
            )?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quarry_start_right_early"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use arrow::datatypes::Int64Type;
    use datafusion::datasource::MemTable;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    /// A session over `t(k, v)` = (1, 10) … (10, 100), with the rule or
    /// without it.
    fn session(early: bool) -> SessionContext {
        let state = SessionStateBuilder::new().with_default_features().build();
        let mut rules = state.physical_optimizers().to_vec();
        if early {
            rules.push(Arc::new(StartRightEarly));
        }
        let state = SessionStateBuilder::new_from_existing(state)
            .with_physical_optimizer_rules(rules)
            .build();
        let ctx = SessionContext::new_with_state(state);
        let t = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from_iter_values(1..=10)) as _),
            (
                "v",
                Arc::new(Int64Array::from_iter_values((1..=10).map(|k| k * 10))) as _,
            ),
        ])
        .unwrap();
        let table = MemTable::try_new(t.schema(), vec![vec![t]]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        ctx
    }

    fn count_nodes(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
        let here = usize::from(plan.name() == name);
        here + plan
            .children()
            .into_iter()
            .map(|c| count_nodes(c, name))
            .sum::<usize>()
    }

    #[tokio::test]
    async fn a_nested_loop_join_starts_its_right_side_and_answers_the_same() {
        // Only a comparison joins them: a nested-loop join.
        let sql = "SELECT a.k FROM t a JOIN t b ON a.v > b.v * 8 ORDER BY a.k";
        let mut answers = Vec::new();
        for early in [false, true] {
            let ctx = session(early);
            let plan = ctx
                .sql(sql)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap();
            assert_eq!(
                count_nodes(&plan, "NestedLoopJoinExec"),
                1,
                "an inequality join is a nested-loop join"
            );
            assert_eq!(count_nodes(&plan, "StartEarlyExec"), usize::from(early));
            let batches = collect(plan, ctx.task_ctx()).await.unwrap();
            let keys: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            answers.push(keys);
        }
        // a.v > 8 × b.v: b = 1 for a = 9 and 10.
        assert_eq!(answers[0], vec![9, 10]);
        assert_eq!(answers[0], answers[1]);
    }

    #[test]
    fn the_rule_wraps_a_right_side_once() {
        let ctx = session(true);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let plan = rt.block_on(async {
            ctx.sql("SELECT a.k FROM t a JOIN t b ON a.v > b.v * 8")
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap()
        });
        let again = StartRightEarly
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert_eq!(count_nodes(&again, "StartEarlyExec"), 1);
    }
}
