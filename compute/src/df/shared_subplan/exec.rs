//! The shared plan's run: [`SharedSubplanExec`] over each copy, and
//! [`AssignSharedRuns`], which gives the copies of one id one
//! [`SharedRun`].
//!
//! The run is one output partition (DataFusion coalesces the copy's
//! partitions under the marker), so one copy runs it whole: the first
//! copy polled runs its own plan and keeps its batches; a copy polled
//! while that runs waits for it; every copy then replays the batches.
//! Were partitions shared one by one, two copies could each run part of
//! the plan, and each would build its joins' hash tables and scan their
//! probe sides whole.
//!
//! A run whose batches pass [`SHARED_BYTES_MAX`], or more than the
//! query's memory pool grants, stops being shared: the copy that ran it
//! hands on what it kept and streams the rest of its own plan, and the
//! others run theirs, so no copy's plan runs twice at once. A run that
//! fails fails every use with the same error. A copy dropped while it
//! runs (a LIMIT above it met, a cancel) leaves the run to the next copy
//! that asks, which runs its own plan.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result as DfResult, Statistics};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{Distribution, EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    displayable, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use parking_lot::Mutex;

use crate::df::join_keys::{key_below, key_into_join, narrows_probe_side, BLOOM_MAX_SHARE};
use crate::df::mpp::broadcast::estimated_rows;
use crate::df::region_scan::RegionScanExec;

/// The most bytes of batches a shared run keeps for its uses.
pub const SHARED_BYTES_MAX: usize = 64 << 20;

/// One use of a shared plan, over its own copy of the plan.
#[derive(Debug)]
pub struct SharedSubplanExec {
    id: usize,
    input: Arc<dyn ExecutionPlan>,
    /// The run every copy of `id` shares, and this copy's place among
    /// them ([`AssignSharedRuns`]); None: this copy runs on its own.
    run: Option<(Arc<SharedRun>, usize)>,
    properties: Arc<PlanProperties>,
}

impl SharedSubplanExec {
    pub fn new(id: usize, input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SharedSubplanExec {
            id,
            input,
            run: None,
            properties: Arc::new(properties),
        }
    }

    /// The run it shares, and its place among the copies that share it.
    pub(crate) fn run(&self) -> Option<&(Arc<SharedRun>, usize)> {
        self.run.as_ref()
    }

    pub(crate) fn with_run(&self, run: Option<(Arc<SharedRun>, usize)>) -> Self {
        SharedSubplanExec {
            id: self.id,
            input: self.input.clone(),
            run,
            properties: self.properties.clone(),
        }
    }
}

impl DisplayAs for SharedSubplanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SharedSubplanExec: id={}", self.id)?;
        match &self.run {
            Some((run, _)) => write!(f, ", uses={}", run.uses),
            None => write!(f, ", not shared"),
        }
    }
}

impl ExecutionPlan for SharedSubplanExec {
    fn name(&self) -> &str {
        "SharedSubplanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    /// The copy's, whole: what the join above chooses its build side by.
    fn child_stats_requests(&self, _: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(None)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        Ok(input_stats[0].clone())
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    /// The same run (`fresh_run.rs` gives a copy its own after this), and
    /// the same properties when the schema is the same: they depend on
    /// nothing else, and operators above keep theirs when a child's are
    /// the same (a kept plan's copy is not planned again).
    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children.swap_remove(0);
        let mut new = SharedSubplanExec::new(self.id, input);
        if new.schema() == self.schema() {
            new.properties = self.properties.clone();
        }
        new.run = self.run.clone();
        Ok(Arc::new(new))
    }

    /// A fresh copy runs on its own: a plan run again (a recursive
    /// query's term, each round) must not replay an earlier run.
    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.with_run(None)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let Some((run, me)) = self.run.clone() else {
            return self.input.execute(partition, context);
        };
        let own = self.input.clone();
        let schema = self.schema();
        let batches =
            futures::stream::once(async move { run.stream(me, own, context).await }).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }
}

/// What a shared run came to.
#[derive(Debug)]
enum Outcome {
    /// Every batch, kept for every use (and counted in the query's pool).
    Kept(Vec<RecordBatch>, #[allow(dead_code)] MemoryReservation),
    Failed(Arc<DataFusionError>),
    /// Too large to keep: the runner streams on, the others run their own.
    TooLarge,
}

/// The run that the copies of one shared plan share.
pub struct SharedRun {
    outcome: tokio::sync::OnceCell<Outcome>,
    /// A run too large to keep: the copy that ran it (its place), what it
    /// kept and the rest of its stream.
    handoff: Mutex<Option<(usize, Vec<RecordBatch>, SendableRecordBatchStream)>>,
    /// How many copies use it (for EXPLAIN).
    pub uses: usize,
    max_bytes: usize,
}

impl fmt::Debug for SharedRun {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SharedRun")
            .field("outcome", &self.outcome)
            .field("uses", &self.uses)
            .finish_non_exhaustive()
    }
}

impl SharedRun {
    pub fn new(uses: usize, max_bytes: usize) -> Self {
        SharedRun {
            outcome: tokio::sync::OnceCell::new(),
            handoff: Mutex::new(None),
            uses,
            max_bytes,
        }
    }

    /// A run for the same copies, not started yet (`fresh_run.rs`).
    pub fn fresh(&self) -> Arc<SharedRun> {
        Arc::new(SharedRun::new(self.uses, self.max_bytes))
    }

    /// The batches for the copy at place `me`, whose plan is `own`.
    pub async fn stream(
        self: Arc<Self>,
        me: usize,
        own: Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let schema = own.schema();
        let outcome = self
            .outcome
            .get_or_init(|| self.run(me, own.clone(), context.clone()))
            .await;
        let replay = |batches: Vec<RecordBatch>| -> SendableRecordBatchStream {
            Box::pin(RecordBatchStreamAdapter::new(
                schema.clone(),
                futures::stream::iter(batches.into_iter().map(Ok)),
            ))
        };
        match outcome {
            Outcome::Kept(batches, _) => Ok(replay(batches.clone())),
            Outcome::Failed(e) => Err(DataFusionError::Shared(e.clone())),
            Outcome::TooLarge => {
                let mine = {
                    let mut handoff = self.handoff.lock();
                    match handoff.as_ref() {
                        Some((runner, _, _)) if *runner == me => handoff.take(),
                        _ => None,
                    }
                };
                match mine {
                    Some((_, kept, rest)) => {
                        let rest = replay(kept).chain(rest);
                        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rest)))
                    }
                    None => own.execute(0, context),
                }
            }
        }
    }

    /// Runs `own` and keeps its batches, up to the limits.
    async fn run(
        &self,
        me: usize,
        own: Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
    ) -> Outcome {
        let reservation = MemoryConsumer::new("SharedSubplan").register(context.memory_pool());
        let mut stream = match own.execute(0, context) {
            Ok(s) => s,
            Err(e) => return Outcome::Failed(Arc::new(e)),
        };
        let mut kept = Vec::new();
        while let Some(next) = stream.next().await {
            let batch = match next {
                Ok(b) => b,
                Err(e) => return Outcome::Failed(Arc::new(e)),
            };
            let bytes = batch.get_array_memory_size();
            kept.push(batch);
            if reservation.size() + bytes > self.max_bytes || reservation.try_grow(bytes).is_err() {
                *self.handoff.lock() = Some((me, kept, stream));
                return Outcome::TooLarge;
            }
        }
        Outcome::Kept(kept, reservation)
    }
}

/// The physical optimizer rule: gives the copies of each shared plan one
/// run, or takes the marker out where sharing would cost more than it
/// saves, so that the copies plan on as if never shared: a plan with one
/// copy left, copies that differ (the logical rule does not make those),
/// and a plan that a hash join's build keys would reach
/// (`join_keys.rs`: a join above whose probe side leads to the copy
/// through operators that pass rows on), since the one run must serve
/// every use and could not take those keys. Runs before the join key
/// filters are placed, which then pass through the copies left alone and
/// stop at the markers kept.
#[derive(Debug)]
pub struct AssignSharedRuns;

impl PhysicalOptimizerRule for AssignSharedRuns {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Each id's copies, and whether they are the same plan (the
        // optimizer's passes after the logical rule could, in principle,
        // change one copy and not the other).
        let mut ids: Vec<(usize, usize, bool)> = Vec::new();
        let mut plans = Vec::new();
        plan.apply(|node| {
            if let Some(s) = node.downcast_ref::<SharedSubplanExec>() {
                let shown = (
                    s.schema(),
                    displayable(s.input.as_ref()).indent(true).to_string(),
                );
                match ids.iter().position(|i| i.0 == s.id) {
                    Some(i) => {
                        ids[i].1 += 1;
                        ids[i].2 &= plans[i] == shown;
                    }
                    None => {
                        ids.push((s.id, 1, true));
                        plans.push(shown);
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if ids.is_empty() {
            return Ok(plan);
        }
        let narrowed = narrowed_by_joins(&plan)?;
        let runs: Vec<Option<Arc<SharedRun>>> = ids
            .iter()
            .map(|&(id, uses, same)| {
                (uses >= 2 && same && !narrowed.contains(&id))
                    .then(|| Arc::new(SharedRun::new(uses, SHARED_BYTES_MAX)))
            })
            .collect();
        let mut places = vec![0; ids.len()];
        plan.transform_down(|node| {
            let Some(s) = node.downcast_ref::<SharedSubplanExec>() else {
                return Ok(Transformed::no(node));
            };
            let i = ids.iter().position(|i| i.0 == s.id).unwrap_or_default();
            let new: Arc<dyn ExecutionPlan> = match &runs[i] {
                Some(run) => Arc::new(s.with_run(Some((run.clone(), places[i])))),
                None => s.input.clone(),
            };
            places[i] += 1;
            Ok(Transformed::new(new, true, TreeNodeRecursion::Jump))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quarry_assign_shared_runs"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The ids of the markers through which some hash join's keys would
/// reach a scan on its probe side, walking down as the join key filters
/// do, and cut it: not where the build side's rows are estimated at more
/// than [`BLOOM_MAX_SHARE`] of the probe column's distinct values, the
/// share past which the scan goes without the filter (TPC-H Q15's
/// supplier join over its `revenue0` view).
fn narrowed_by_joins(plan: &Arc<dyn ExecutionPlan>) -> DfResult<HashSet<usize>> {
    let mut ids = HashSet::new();
    plan.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            if narrows_probe_side(join) {
                let build_rows = estimated_rows(join.left().as_ref());
                for (_, probe) in join.on() {
                    reach(join.right(), probe, build_rows, None, &mut ids);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(ids)
}

/// Adds to `ids` the marker (`within`, or one below) through which a
/// condition on `key` (over `plan`'s output) reaches a scan that keys
/// from `build_rows` rows would cut.
fn reach(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    build_rows: Option<usize>,
    within: Option<usize>,
    ids: &mut HashSet<usize>,
) {
    if let Some(marker) = plan.downcast_ref::<SharedSubplanExec>() {
        return reach(&marker.input, key, build_rows, Some(marker.id), ids);
    }
    if plan.children().is_empty() {
        let distinct = plan
            .downcast_ref::<RegionScanExec>()
            .and_then(|scan| scan.key_distinct(key));
        let too_many = match (build_rows, distinct) {
            (Some(rows), Some(d)) => rows as f64 > d as f64 * BLOOM_MAX_SHARE,
            _ => false,
        };
        if !too_many {
            ids.extend(within);
        }
        return;
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let Some(column) = key.as_ref().downcast_ref::<Column>() else {
            return;
        };
        if let Some((on_left, below)) = key_into_join(join, column.index()) {
            let child = if on_left { join.left() } else { join.right() };
            reach(child, &below, build_rows, within, ids);
        }
        return;
    }
    if let (Some(below), [child]) = (key_below(plan, key), &plan.children()[..]) {
        reach(child, &below, build_rows, within, ids);
    }
}

#[cfg(test)]
mod tests;
