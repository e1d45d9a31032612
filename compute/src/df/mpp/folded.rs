//! Nodes a worker adds to the stage it runs, folded into their inputs so
//! that the stage still walks as the coordinator planned it.
//!
//! EXPLAIN ANALYZE of a distributed query (`datafusion-distributed`'s)
//! matches each worker's metrics to the coordinator's plan node by node,
//! in pre-order: a node the worker adds would shift every metric after
//! it onto the wrong node (a scan's rows shown on its repartition, a
//! network read's bytes on a scan), silently. A worker adds two kinds of
//! pass-through node:
//!
//! * a [`BuildKeysExec`] over a hash join's build side, which copies its
//!   keys to the probe side's region scan (`join_keys.rs`; the
//!   coordinator plans without them, `mpp/mod.rs`);
//! * a [`CountStreams`] at the top of the stage, below the head (a hash
//!   repartition or broadcast) that the library puts over it again for
//!   each consumer, which counts each partition in
//!   `quarry_compute_mpp_task_streams_running` from its start until its
//!   stream ends or is dropped: what shows that a cancelled distributed
//!   query stopped on every process, not only in the stores. (The
//!   worker's task state is no measure: the library leaves it in a cache
//!   that drops it some time after the task ends.)
//!
//! [`Folded`] runs such a node but shows its input in its place: its
//! input's children, name, display and metrics, and downcasts see the
//! input (DataFusion's `downcast_delegate`).

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan,
    InputDistributionRequirements, PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;

use crate::df::join_keys::BuildKeysExec;

/// `stage` (the plan a worker runs for one task) with the nodes the
/// worker added folded into their inputs and its partitions' streams
/// counted. The worker's last rewrite: a rule run after it would find
/// the folded nodes only as their inputs (a second `add_build_keys`
/// would tap a build side again).
pub fn as_planned(stage: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let stage = stage
        .transform_up(|node| {
            Ok(match node.is::<BuildKeysExec>() {
                true => Transformed::yes(Arc::new(Folded(node)) as Arc<dyn ExecutionPlan>),
                false => Transformed::no(node),
            })
        })?
        .data;
    counting_streams(stage)
}

/// `stage` with a folded [`CountStreams`] at its top, below its head.
fn counting_streams(stage: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let counted = |input: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
        Arc::new(Folded(Arc::new(CountStreams(input))))
    };
    let is_head =
        stage.is::<RepartitionExec>() || stage.is::<datafusion_distributed::BroadcastExec>();
    match stage.children().as_slice() {
        [input] if is_head => {
            let input = counted((*input).clone());
            replace_children_if_necessary(stage.clone(), vec![input])
        }
        _ => Ok(counted(stage)),
    }
}

/// A pass-through node (one input, its rows unchanged) shown as its
/// input.
#[derive(Debug)]
struct Folded(Arc<dyn ExecutionPlan>);

impl Folded {
    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        self.0.children()[0]
    }
}

impl DisplayAs for Folded {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.input().fmt_as(t, f)
    }
}

impl ExecutionPlan for Folded {
    fn name(&self) -> &str {
        self.input().name()
    }

    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input().as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.0.properties()
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        self.input().input_distribution_requirements()
    }

    fn required_input_ordering(
        &self,
    ) -> Vec<Option<datafusion::physical_expr::OrderingRequirements>> {
        self.input().required_input_ordering()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.input().maintains_input_order()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.input().children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.input().apply_expressions(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let input = self
            .input()
            .clone()
            .replace_children(children, recompute())?;
        let node = self.0.clone().replace_children(vec![input], recompute())?;
        Ok(Arc::new(Folded(node)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.0.execute(partition, context)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.input().metrics()
    }
}

/// Counts each partition's stream while it lives.
#[derive(Debug)]
struct CountStreams(Arc<dyn ExecutionPlan>);

impl DisplayAs for CountStreams {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CountStreams")
    }
}

impl ExecutionPlan for CountStreams {
    fn name(&self) -> &str {
        "CountStreams"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.0.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.0]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CountStreams(children.swap_remove(0))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let running = crate::metrics::mpp_task_stream();
        let stream = self.0.execute(partition, context)?;
        let schema = stream.schema();
        let counted = stream.map(move |batch| {
            let _running = &running;
            batch
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::Partitioning;

    fn source() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
    }

    /// The names of `plan`'s nodes in pre-order, as EXPLAIN ANALYZE
    /// matches metrics to them.
    fn names(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
        let mut names = Vec::new();
        plan.apply(|node| {
            names.push(node.name().to_string());
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        names
    }

    #[tokio::test]
    async fn counted_below_the_head_the_stage_walks_as_planned() {
        let input = source();
        let head: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(input.clone(), Partitioning::RoundRobinBatch(2)).unwrap(),
        );
        let counted = as_planned(head.clone()).unwrap();
        // The same nodes in the same order, the head still a repartition.
        assert_eq!(names(&counted), names(&head));
        assert!(counted.is::<RepartitionExec>());
        // Its input is the counted node, seen as the source.
        let below = counted.children()[0].clone();
        assert!(below.is::<datafusion::datasource::source::DataSourceExec>());

        let before = crate::metrics::MPP_TASK_STREAMS.get();
        let mut stream = below.execute(0, Arc::new(TaskContext::default())).unwrap();
        assert_eq!(crate::metrics::MPP_TASK_STREAMS.get(), before + 1);
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            rows += batch.unwrap().num_rows();
        }
        assert_eq!(rows, 3);
        drop(stream);
        assert_eq!(crate::metrics::MPP_TASK_STREAMS.get(), before);

        // A stage with no head is counted at its top.
        let top = as_planned(input.clone()).unwrap();
        assert_eq!(names(&top), names(&input));
    }
}
