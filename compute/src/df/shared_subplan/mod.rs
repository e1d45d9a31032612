//! One run for a join or aggregation that a query computes twice.
//!
//! DataFusion inlines every reference to a view, a CTE or a repeated
//! subquery, so a query that names the same work twice computes it twice.
//! TPC-H Q11 is the example: its `HAVING sum(…) > (SELECT sum(…) * 0.0001
//! FROM partsupp, supplier, nation WHERE … 'GERMANY')` repeats the outer
//! query's join, so the plan reads nation, then supplier, then the
//! 31.7 thousand German rows of partsupp, twice, and the two partsupp
//! scans queue behind each other in the same stores. Q15's `revenue0`
//! view, a quarter of lineitem grouped by supplier, is aggregated twice
//! in compute (its region scans already run once: `shared_scan.rs`).
//!
//! [`ShareCommonSubplans`], a logical optimizer rule that runs after
//! DataFusion's own, finds joins and aggregations that appear more than
//! once and puts one plan for them, [`SharedSubplan`], where each
//! appeared:
//!
//! ```text
//!  Aggregate(sum by ps_partkey)           Aggregate(sum)
//!    Projection(ps_partkey, …)              Projection(ps_availqty, …)
//!      SharedSubplan id=0 ─────────┬─────────── SharedSubplan id=0
//!        Join(s_suppkey = ps_suppkey)    the same plan, reading every
//!          …                             column either copy read
//! ```
//!
//! *What counts as the same.* Two subtrees are the same ([`Shape`], by
//! DataFusion's expression equality) when they are built of the same
//! scans of Quarry's tables (table id, filters, limit), filters, joins,
//! aggregations, aliases and computing projections, in the same shape:
//! the columns each reads are not part of it, since projection pruning
//! gives each copy just what its parent uses (Q11's outer copy reads
//! `ps_partkey`, the subquery's does not). The shared plan reads every
//! column either read, and a projection over each use gives that use its
//! own columns back. Only the largest such subtrees share (a join inside
//! a shared join is not shared again). Nothing volatile (`random()`),
//! correlated or holding a subquery shares.
//!
//! *Running it.* Each use plans the shared plan (DataFusion's physical
//! planner plans every input it meets), and [`SharedSubplanExec`]
//! marks each copy. A physical rule ([`AssignSharedRuns`]) gives the
//! copies of one id one [`SharedRun`](exec::SharedRun): the first copy
//! polled runs its plan and keeps its batches, and the others replay
//! them. Filters from above never cross the marker: DataFusion's dynamic
//! filters stop at a node that does not take them, and a join's
//! build-key filters (`join_keys.rs`) only travel through the operators
//! they know, so the one run reads what every use needs. Where a hash
//! join's keys would have reached into a copy, and so cut its scans,
//! the rule takes the markers of that id out instead, and each copy runs
//! with its filters as if never shared: one unfiltered run can cost more
//! than two filtered ones.
//!
//! CAVEATS
//!
//! * The shared run is collected before any use sees its first batch.
//!   Past [`exec::SHARED_BYTES_MAX`] (or what the query's memory pool
//!   allows) it stops being shared: the copy that ran it streams on, and
//!   every other copy runs its own plan, as before this rule.
//! * The marker stops DataFusion's own dynamic filters before the rule
//!   decides; a copy the rule leaves alone gets Quarry's key filters
//!   (BIGINT keys) but not DataFusion's for other key types.
//! * A kept run holds its batches, and their share of the query's memory
//!   pool, until the query ends, not only until the last use replayed it.
//! * A HAVING over a shared aggregation is not judged in the regions
//!   (`group_sieve.rs` does not look through the marker).
//! * Recursive queries are left alone: their terms run once per round.
//! * Distributed plans (`mpp/`) plan each copy on its own: the marker is
//!   not planned there.

pub mod exec;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, Result as DfResult};
use datafusion::datasource::source_as_provider;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, Projection, TableScan, TableScanBuilder, UserDefinedLogicalNode,
    UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

pub use exec::{AssignSharedRuns, SharedSubplanExec};

use super::table::QuarryTable;

/// Installs the logical rule (after every other) and the physical
/// planner that plans its marker. The physical rule that gives the
/// copies their run, [`AssignSharedRuns`], is among Quarry's physical
/// rules (`rules.rs`), before the join key filters.
pub fn install(state: SessionState) -> SessionState {
    let mut optimizers = state.optimizers().to_vec();
    optimizers.push(Arc::new(ShareCommonSubplans));
    datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_optimizer_rules(optimizers)
        .with_query_planner(Arc::new(QuarryQueryPlanner))
        .build()
}

/// One use of a plan shared with other uses of the same `id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct SharedSubplan {
    pub id: usize,
    pub input: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for SharedSubplan {
    fn name(&self) -> &str {
        "SharedSubplan"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SharedSubplan: id={}", self.id)
    }

    fn with_exprs_and_inputs(&self, _: Vec<Expr>, mut inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        Ok(SharedSubplan {
            id: self.id,
            input: inputs.swap_remove(0),
        })
    }
}

/// The logical optimizer rule: see the module docs.
#[derive(Debug, Default)]
pub struct ShareCommonSubplans;

impl OptimizerRule for ShareCommonSubplans {
    fn name(&self) -> &str {
        "quarry_share_common_subplans"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        None
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        share(plan)
    }
}

/// `plan` with its repeated joins and aggregations shared.
pub fn share(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    // A test's switch: each use runs its own copy (to time both side by
    // side in one cluster).
    if quarry_proto::failpoint::hit("shared_subplan_off").is_some() {
        return Ok(Transformed::no(plan));
    }
    // The optimizer runs its rules several times: once is enough.
    if plan.exists(|n| Ok(shared_id(n).is_some()))? {
        return Ok(Transformed::no(plan));
    }
    // How often each candidate's shape appears anywhere in the plan.
    // (A recursive query's term runs once per round, over that round's
    // rows: nothing in it is shared.)
    let mut counts: HashMap<Shape, usize> = HashMap::new();
    plan.apply(|node| {
        if matches!(node, LogicalPlan::RecursiveQuery(_)) {
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(s) = candidate(node) {
            *counts.entry(s).or_default() += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if counts.values().all(|&n| n < 2) {
        return Ok(Transformed::no(plan));
    }
    // The largest repeated subtrees, top down, by shape.
    let repeated =
        |node: &LogicalPlan| candidate(node).filter(|s| counts.get(s).is_some_and(|&n| n >= 2));
    let mut uses: Vec<(Shape, Vec<LogicalPlan>)> = Vec::new();
    plan.apply(|node| {
        if matches!(node, LogicalPlan::RecursiveQuery(_)) {
            return Ok(TreeNodeRecursion::Jump);
        }
        let Some(s) = repeated(node) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        match uses.iter_mut().find(|u| u.0 == s) {
            Some(u) => u.1.push(node.clone()),
            None => uses.push((s, vec![node.clone()])),
        }
        Ok(TreeNodeRecursion::Jump)
    })?;
    // One plan per shape that still appears twice, reading what each use
    // reads; a shape whose uses cannot be merged stays as it is.
    let mut shared: HashMap<Shape, (usize, LogicalPlan)> = HashMap::new();
    for (s, plans) in uses {
        if plans.len() < 2 {
            continue;
        }
        let Ok(merged) = plans[1..]
            .iter()
            .try_fold(plans[0].clone(), |m, p| merge(&m, p))
        else {
            continue;
        };
        let covers = plans.iter().all(|p| {
            p.schema()
                .columns()
                .iter()
                .all(|c| merged.schema().has_column(c))
        });
        if covers {
            let id = shared.len();
            shared.insert(s, (id, merged));
        }
    }
    if shared.is_empty() {
        return Ok(Transformed::no(plan));
    }
    plan.transform_down(|node| {
        if matches!(node, LogicalPlan::RecursiveQuery(_)) {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        let Some(s) = repeated(&node) else {
            return Ok(Transformed::no(node));
        };
        let Some((id, merged)) = shared.get(&s) else {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        };
        let marker = LogicalPlan::Extension(Extension {
            node: Arc::new(SharedSubplan {
                id: *id,
                input: merged.clone(),
            }),
        });
        let own = node.schema().columns().into_iter().map(Expr::Column);
        let projected = Projection::try_new(own.collect(), Arc::new(marker))?;
        Ok(Transformed::new(
            LogicalPlan::Projection(projected),
            true,
            TreeNodeRecursion::Jump,
        ))
    })
}

/// The id of a [`SharedSubplan`] node.
fn shared_id(plan: &LogicalPlan) -> Option<usize> {
    match plan {
        LogicalPlan::Extension(e) => {
            let node: &dyn UserDefinedLogicalNode = e.node.as_ref();
            node.as_any().downcast_ref::<SharedSubplan>().map(|s| s.id)
        }
        _ => None,
    }
}

/// The shape of a join or aggregation worth sharing (see [`shape`]).
fn candidate(plan: &LogicalPlan) -> Option<Shape> {
    match plan {
        LogicalPlan::Join(_) | LogicalPlan::Aggregate(_) => shape(plan),
        _ => None,
    }
}

/// What a subtree computes, less the columns it passes on: equal for two
/// subtrees that one plan reading both's columns can stand for. Compared
/// as expressions (DataFusion's `Expr` equality), never as text, which
/// could make two different literals alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    /// The node's kind and what its expressions alone do not say (a
    /// join's type and key count, an aggregation's group count, an
    /// alias, a scan's table id and limit).
    node: String,
    exprs: Vec<Expr>,
    inputs: Vec<Shape>,
}

/// The [`Shape`] of `plan`. None for a subtree with anything but scans
/// of Quarry's tables, filters, joins, aggregations, aliases and
/// projections (a table function's or a recursive query's work table's
/// scan is named, not identified, by its table name), or with a
/// volatile, correlated or subquery expression.
pub(crate) fn shape(plan: &LogicalPlan) -> Option<Shape> {
    let node = match plan {
        LogicalPlan::Projection(p) if passes_columns(p) => return shape(&p.input),
        LogicalPlan::TableScan(scan) => {
            let table = table_identity(scan)?;
            if !scan.filters.iter().all(fixed) {
                return None;
            }
            // A filter that is the literal `true` keeps every row: a
            // distributed plan's decorrelated scalar subquery leaves one
            // on a scan (TPC-H Q11's outer partsupp), and its copy of
            // the subquery's join is still the same work.
            let filters = scan.filters.iter().filter(|f| !is_true(f)).cloned();
            return Some(Shape {
                node: format!("scan {table} {} {:?}", scan.table_name, scan.fetch),
                exprs: filters.collect(),
                inputs: Vec::new(),
            });
        }
        LogicalPlan::Join(j) => format!(
            "join {:?} {:?} {:?} {} {} {}",
            j.join_type,
            j.join_constraint,
            j.null_equality,
            j.null_aware,
            j.on.len(),
            j.filter.is_some()
        ),
        LogicalPlan::Aggregate(a) => format!("aggregate {}", a.group_expr.len()),
        LogicalPlan::SubqueryAlias(a) => format!("alias {:?}", a.alias.to_string()),
        LogicalPlan::Projection(_) => "projection".to_string(),
        LogicalPlan::Filter(_) => "filter".to_string(),
        _ => return None,
    };
    let exprs = plan.expressions();
    if !exprs.iter().all(fixed) {
        return None;
    }
    let inputs = plan
        .inputs()
        .into_iter()
        .map(shape)
        .collect::<Option<Vec<_>>>()?;
    Some(Shape {
        node,
        exprs,
        inputs,
    })
}

/// What a scan reads: a Quarry table, by its id. (In unit tests, also
/// DataFusion's in-memory tables, by their place in memory.)
fn table_identity(scan: &TableScan) -> Option<String> {
    let provider = source_as_provider(&scan.source).ok()?;
    if let Some(table) = provider.downcast_ref::<QuarryTable>() {
        return Some(format!("table {}", table.definition().id));
    }
    #[cfg(test)]
    if provider
        .downcast_ref::<datafusion::datasource::MemTable>()
        .is_some()
    {
        let at = Arc::as_ptr(&provider) as *const () as usize;
        return Some(format!("memory table {at:x}"));
    }
    None
}

/// The literal `true`.
fn is_true(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Literal(datafusion::common::ScalarValue::Boolean(Some(true)), _)
    )
}

/// A projection that only passes columns on.
fn passes_columns(p: &Projection) -> bool {
    p.expr.iter().all(|e| matches!(e, Expr::Column(_)))
}

/// An expression whose value one run may stand for in every use: not
/// volatile, not correlated, without a subquery.
fn fixed(e: &Expr) -> bool {
    !e.exists(|e| {
        Ok(e.is_volatile_node()
            || matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::OuterReferenceColumn(..)
            ))
    })
    .unwrap_or(true)
}

/// One plan of the shape `a` and `b` share, reading the columns of both.
fn merge(a: &LogicalPlan, b: &LogicalPlan) -> DfResult<LogicalPlan> {
    match (a, b) {
        (LogicalPlan::Projection(pa), LogicalPlan::Projection(pb))
            if passes_columns(pa) && passes_columns(pb) =>
        {
            let input = merge(&pa.input, &pb.input)?;
            let mut expr = pa.expr.clone();
            for e in &pb.expr {
                if !expr.contains(e) {
                    expr.push(e.clone());
                }
            }
            Ok(LogicalPlan::Projection(Projection::try_new(
                expr,
                Arc::new(input),
            )?))
        }
        (LogicalPlan::Projection(pa), _) if passes_columns(pa) => merge(&pa.input, b),
        (_, LogicalPlan::Projection(pb)) if passes_columns(pb) => merge(a, &pb.input),
        (LogicalPlan::TableScan(sa), LogicalPlan::TableScan(sb)) => {
            if !Arc::ptr_eq(&sa.source, &sb.source) && sa.table_name != sb.table_name {
                return datafusion::common::plan_err!("shared scans of different tables");
            }
            let projection = match (&sa.projection, &sb.projection) {
                (Some(pa), Some(pb)) => {
                    let mut p: Vec<usize> = pa.iter().chain(pb).copied().collect();
                    p.sort_unstable();
                    p.dedup();
                    Some(p)
                }
                _ => None,
            };
            let mut requests = sa.statistics_requests.clone();
            requests.extend(sb.statistics_requests.iter().cloned());
            let scan = TableScanBuilder::new(sa.table_name.clone(), sa.source.clone())
                .with_projection(projection)
                .with_filters(sa.filters.iter().filter(|f| !is_true(f)).cloned().collect())
                .with_fetch(sa.fetch)
                .with_statistics_requests(requests)
                .build()?;
            Ok(LogicalPlan::TableScan(scan))
        }
        _ => {
            let (ia, ib) = (a.inputs(), b.inputs());
            if ia.len() != ib.len() {
                return datafusion::common::plan_err!("shared subplans of different shapes");
            }
            let inputs = ia
                .into_iter()
                .zip(ib)
                .map(|(x, y)| merge(x, y))
                .collect::<DfResult<Vec<_>>>()?;
            a.with_new_exprs(a.expressions(), inputs)
        }
    }
}

/// DataFusion's physical planner, planning [`SharedSubplan`] too.
#[derive(Debug)]
struct QuarryQueryPlanner;

#[async_trait]
impl QueryPlanner for QuarryQueryPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // A spread statement's kept plan, already made
        // (`preplanned.rs`).
        if let Some(physical) = crate::df::preplanned::unwrap(plan) {
            return Ok(physical);
        }
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(SharedSubplanPlanner)])
            .create_physical_plan(plan, session)
            .await
    }
}

/// `plan`'s one-process physical plan in `session`: what a distributed
/// state's planner distributes (`preplanned.rs`).
pub async fn one_process_plan(
    plan: &LogicalPlan,
    session: &dyn datafusion::catalog::Session,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    QuarryQueryPlanner.create_physical_plan(plan, session).await
}

#[derive(Debug)]
struct SharedSubplanPlanner;

#[async_trait]
impl ExtensionPlanner for SharedSubplanPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn datafusion::catalog::Session,
        _ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(shared) = node.as_any().downcast_ref::<SharedSubplan>() else {
            return Ok(None);
        };
        let input = physical_inputs[0].clone();
        // Each process of a distributed plan runs its own copy.
        if crate::df::mpp::is_distributed(session.config_options()) {
            return Ok(Some(input));
        }
        Ok(Some(Arc::new(SharedSubplanExec::new(shared.id, input))))
    }
}

#[cfg(test)]
mod tests;
