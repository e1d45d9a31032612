//! Co-located joins: a hash join whose two sides are scans of tables
//! clustered on the join key runs in the tasks of its scans' stage, each
//! task joining its own range of the key, with no exchange between
//! compute processes.
//!
//! ```text
//!   one process                        distributed, co-located (task i)
//!   HashJoin(Partitioned, ok = lk)     HashJoin(Partitioned, ok = lk)
//!     Repartition(Hash ok)               LocalRepartition(Hash ok)   (in the task)
//!       scan orders                        scan orders,   ok ∈ [bᵢ, bᵢ₊₁)
//!     Repartition(Hash lk)               LocalRepartition(Hash lk)
//!       scan lineitem                      scan lineitem, lk ∈ [bᵢ, bᵢ₊₁)
//! ```
//!
//! A partitioned join in a distributed plan shuffles both its sides
//! between compute processes: every row crosses a process boundary,
//! encoded, copied and decoded, and the keys of one side never narrow the
//! other's scan (they live in different stages). A broadcast join
//! (`broadcast.rs`) avoids the shuffle but sends its build side whole to
//! every task, where each builds the whole hash table. TPC-H joins orders
//! and lineitem on the order key in ten of its queries (Q21 joins three
//! copies of lineitem and orders), and both tables rise with it: the
//! order key is clustered in both (`stats.rs`: the regions' value ranges
//! of the column overlap at most at their ends). Citus and Greenplum call
//! such a join co-located: the rows that can meet are in the same place,
//! so each place joins its own.
//!
//! Here the place is a task. Each scan on either side is split into tasks
//! by ranges of its key column rather than by regions (`tasks.rs`): the
//! bounds the tables' statistics give, `[lo, hi]`, cut into as many equal
//! ranges as the stage has tasks, the first range open below and the
//! last open above, so every value (also one written after the
//! statistics) is in exactly one task. Task i scans the whole table with
//! its range added to the scan's filter; the stores skip the packs
//! outside it by their zone maps, which a clustered column makes tight.
//! Both sides use the same ranges, so each pair of rows with equal keys is
//! in one task and every row is in exactly one: inner, outer, semi and
//! anti joins all give each task's part of the answer. Within the task
//! the join's hash repartitions stay, as a [`LocalRepartitionExec`] that
//! the distributed planner does not cut at (it cuts at every hash
//! `RepartitionExec`), and the task's join hands its build keys to its
//! probe scan as a join in one process does (`mpp::worker`'s stage
//! rewrite).
//!
//! Which joins: a hash join (not null-aware) with an equi-key pair whose
//! two columns each come, through nodes that keep each row in its task
//! (projections, filters, the probe side of a join whose build side is
//! collected, either side of another co-located join on that key, the
//! group keys of an aggregation whose input is co-located), from a
//! region scan's NOT NULL BIGINT column that the statistics call
//! clustered. A grouped aggregation above a hash repartition whose group
//! keys include such a column is made local the same way where a
//! co-located join reads the same scan (Q18's lineitem grouped by
//! `l_orderkey` and semi-joined to orders): alone, it would trade its
//! shuffle of partial groups for tasks that each ask every region. Scans
//! joined, directly or through other co-located joins, share one split:
//! their bounds are the widest of their columns'.
//!
//! The rule has two parts. [`colocation`] is asked by the broadcast rule
//! right after DataFusion's join selection, so such a join stays (or
//! becomes) partitioned instead of broadcast; [`Colocate`] runs after the
//! rules that add repartitions, makes the joins' and aggregations'
//! repartitions local and marks the scans with their split. Where the two
//! disagree (a plan shape the second does not follow), the join keeps its
//! network shuffles: slower, never wrong. Two more guards: a join above a
//! co-located one on the same key that is not co-located itself (its other
//! side cannot be traced) gets a real hash repartition on the co-located
//! side, which DataFusion, planning before the repartitions became local,
//! found partitioned already and left (its rows sit in the task of their
//! key's range, the other side's in the task of their hash); and a scan
//! that two nodes would split by different columns, or a union of
//! co-located inputs, leaves the whole plan as it was.
//!
//! Caveats: the split is by value, not by region, so each task asks every
//! region of the table (one request per store, `dispatch.rs`), where a
//! region split asks each region once; a skewed key makes unequal tasks
//! (the ranges are equal in width, not in rows). The failpoint
//! `colocated_joins_off` turns the rule off, for timing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::common::ScalarValue as DfScalar;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use quarry_coprocessor::expr::{CmpOp, Expr, ScalarValue};
use quarry_coprocessor::storage::KeyRange;

use crate::df::join_keys::{input_of_join_column, key_below};
use crate::df::region_scan::RegionScanExec;
use crate::df::start_early::StartEarlyExec;

/// Turns co-located joins off (both parts of the rule), for timing.
pub const OFF: &str = "colocated_joins_off";

/// Where a column of a plan's output comes from: a clustered NOT NULL
/// BIGINT column of a region scan, each of whose rows stays in its task.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The scan node's address (the plan's nodes are not copied while the
    /// rule runs).
    scan: usize,
    key: Expr,
    name: String,
    lo: i64,
    hi: i64,
}

fn address(plan: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(plan) as *const () as usize
}

/// How a co-located scan is split into tasks: by ranges of one BIGINT
/// column, `[lo, hi]` cut into equal parts, the same for every scan it is
/// joined with.
#[derive(Debug, Clone, PartialEq)]
pub struct CoPartition {
    /// The column, over the scan's read columns.
    pub key: Expr,
    /// Its name, for EXPLAIN.
    pub name: String,
    pub lo: i64,
    pub hi: i64,
}

impl CoPartition {
    /// Where task `i` of `n` starts (None: the first task, unbounded
    /// below; values under `lo` go to it). Task `i` holds
    /// `[start(i), start(i + 1))`, the last one unbounded above.
    pub fn start(&self, i: usize, n: usize) -> Option<i64> {
        if i == 0 || n == 0 {
            return None;
        }
        let width = self.hi as i128 - self.lo as i128 + 1;
        Some((self.lo as i128 + width * i as i128 / n as i128) as i64)
    }
}

/// Task `i` of `n` of `scan`, co-located by `co`: the whole table
/// (`table`), with its selection also keeping only the task's range of
/// the column (the stores skip the packs outside it by their zone maps).
pub fn task_scan(
    scan: &RegionScanExec,
    co: &CoPartition,
    i: usize,
    n: usize,
    table: KeyRange,
) -> crate::Result<RegionScanExec> {
    let bound =
        |op, v: i64| Expr::compare(op, co.key.clone(), Expr::literal(ScalarValue::Int64(v)));
    let end = co.start(i + 1, n).filter(|_| i + 1 < n);
    let mut dag = scan.dag().clone();
    let selection = dag.selection.get_or_insert_with(Default::default);
    let mut shown = Vec::new();
    for (op, v, sign) in [(CmpOp::Ge, co.start(i, n), ">="), (CmpOp::Lt, end, "<")] {
        if let Some(v) = v {
            selection.conditions.push(bound(op, v)?.to_proto()?);
            shown.push(format!("{} {sign} {v}", co.name));
        }
    }
    let shown = match shown.is_empty() {
        true => "all".to_string(),
        false => shown.join(" AND "),
    };
    Ok(scan
        .with_dag(dag, scan.storage().to_string())
        .with_share(vec![table])
        .with_value_range_shown(shown))
}

/// The bounds the statistics give `scan`'s BIGINT column `key` (over its
/// read columns) when it is NOT NULL and clustered (its regions' value
/// ranges apart, `stats.rs`), with the column's name.
fn clustered_bounds(scan: &RegionScanExec, key: &Expr) -> Option<(String, i64, i64)> {
    let Expr::Column { index, .. } = key else {
        return None;
    };
    let (def, c) = scan.read_column(*index)?;
    if def.field_type.as_ref().is_none_or(|t| t.nullable) || !c.clustered {
        return None;
    }
    match (&c.min, &c.max) {
        (DfScalar::Int64(Some(lo)), DfScalar::Int64(Some(hi))) if lo <= hi => {
            Some((def.name.clone(), *lo, *hi))
        }
        _ => None,
    }
}

/// Where output column `index` of `plan` comes from, if a co-located
/// split can follow it (module docs). `through_hash`: `plan` may be a hash
/// repartition, the one a join or aggregation would make local.
fn origin(plan: &Arc<dyn ExecutionPlan>, index: usize, through_hash: bool) -> Option<Origin> {
    if plan.fetch().is_some() {
        return None;
    }
    let column: Arc<dyn PhysicalExpr> =
        Arc::new(Column::new(plan.schema().field(index).name(), index));
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        if scan.share().is_some() || scan.dag().group_sieve.is_some() {
            return None;
        }
        let key = scan.probe_key(&column)?;
        let (name, lo, hi) = clustered_bounds(scan, &key)?;
        return Some(Origin {
            scan: address(plan),
            key,
            name,
            lo,
            hi,
        });
    }
    // Stage boundaries: a shuffle (unless it is the one being made
    // local) and the gathers the planner cuts below.
    let shuffle = plan
        .downcast_ref::<RepartitionExec>()
        .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)));
    if (shuffle && !through_hash)
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<SortPreservingMergeExec>()
    {
        return None;
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let (left, i) = input_of_join_column(join, index)?;
        return match join.mode {
            // The build side is whole in every task: only the probe
            // side's rows are split.
            PartitionMode::CollectLeft if !left => origin(join.right(), i, false),
            PartitionMode::Partitioned => {
                let (l, r, a, b) = colocation(join)?;
                match left {
                    true if i == l => Some(a),
                    false if i == r => Some(b),
                    _ => None,
                }
            }
            _ => None,
        };
    }
    // Nodes that keep or drop rows by their key, passing it through: the
    // same walk as join key filters (`join_keys::key_below`), and a probe
    // side started early.
    let below = match plan.is::<StartEarlyExec>() {
        true => column,
        false => key_below(plan, &column)?,
    };
    let [child] = plan.children()[..] else {
        return None;
    };
    origin(child, below.downcast_ref::<Column>()?.index(), false)
}

/// Whether `join` can run co-located (module docs): the indexes of its
/// key columns on the two sides and where each comes from.
pub fn colocation(join: &HashJoinExec) -> Option<(usize, usize, Origin, Origin)> {
    if join.null_aware || join.mode == PartitionMode::Auto || quarry_proto::failpoint::fires(OFF) {
        return None;
    }
    // (A local repartition travels with column keys only: `codec.rs`.)
    if !hashed_by_columns(join.left()) || !hashed_by_columns(join.right()) {
        return None;
    }
    join.on().iter().find_map(|(l, r)| {
        let l = l.downcast_ref::<Column>()?.index();
        let r = r.downcast_ref::<Column>()?.index();
        let a = origin(join.left(), l, true)?;
        let b = origin(join.right(), r, true)?;
        Some((l, r, a, b))
    })
}

/// Whether `plan` is not a hash repartition, or one by columns only.
fn hashed_by_columns(plan: &Arc<dyn ExecutionPlan>) -> bool {
    match plan.downcast_ref::<RepartitionExec>() {
        Some(r) => match r.partitioning() {
            Partitioning::Hash(keys, _) => keys.iter().all(|k| k.is::<Column>()),
            _ => true,
        },
        None => true,
    }
}

/// Whether `plan`'s partitioning may come from a local repartition: one is
/// reached without passing a repartition, coalesce or broadcast.
fn fed_locally(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if plan.is::<LocalRepartitionExec>() {
        return true;
    }
    if plan.is::<RepartitionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<SortPreservingMergeExec>()
        || plan.is::<datafusion_distributed::BroadcastExec>()
    {
        return false;
    }
    plan.children().into_iter().any(fed_locally)
}

/// `plan` with a real hash repartition on each input, of a node that is
/// not co-located, that needs its inputs hash-partitioned alike and whose
/// partitioning may come from a local repartition. DataFusion, planning
/// before the repartitions were local, found such an input (a co-located
/// join's output) partitioned already and left it; but its rows sit in
/// the task of their key's range, while the node's other input, shuffled,
/// sends each key to the task of its hash. None: a union of such inputs,
/// which this cannot align (the rule then leaves the plan as it was).
#[allow(deprecated)]
fn realigned(
    plan: Arc<dyn ExecutionPlan>,
    colocated: &std::collections::HashSet<usize>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    use datafusion::physical_plan::union::InterleaveExec;
    use datafusion::physical_plan::{Distribution, ExecutionPlanProperties};
    let mut unaligned = false;
    let plan = plan
        .transform_up(|node| {
            if node.children().len() < 2 || colocated.contains(&address(&node)) {
                return Ok(Transformed::no(node));
            }
            if node.is::<InterleaveExec>() {
                unaligned |= node.children().into_iter().any(fed_locally);
                return Ok(Transformed::no(node));
            }
            let required = node.required_input_distribution();
            let mut changed = false;
            let mut children = Vec::new();
            for (child, req) in node.children().into_iter().zip(required) {
                match req {
                    Distribution::HashPartitioned(keys) | Distribution::KeyPartitioned(keys)
                        if fed_locally(child) =>
                    {
                        let n = child.output_partitioning().partition_count();
                        let r =
                            RepartitionExec::try_new(child.clone(), Partitioning::Hash(keys, n))?;
                        children.push(Arc::new(r) as Arc<dyn ExecutionPlan>);
                        changed = true;
                    }
                    _ => children.push(child.clone()),
                }
            }
            if !changed {
                return Ok(Transformed::no(node));
            }
            replace_children_if_necessary(node, children).map(Transformed::yes)
        })?
        .data;
    Ok((!unaligned).then_some(plan))
}

/// `plan` with its hash repartition made local, if it is one.
fn localized(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    match LocalRepartitionExec::new(plan.clone()) {
        Some(local) => Arc::new(local),
        None => plan.clone(),
    }
}

/// The rule's second part: see the module docs.
#[derive(Debug)]
pub struct Colocate;

impl PhysicalOptimizerRule for Colocate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if quarry_proto::failpoint::fires(OFF) {
            return Ok(plan);
        }
        // An aggregation is made local only over a scan that a co-located
        // join also reads: alone, it would trade its shuffle of partial
        // groups for tasks that each ask every region (and Q11's two
        // equal reads of partsupp, which the stores answer once, would
        // differ). The first pass finds those scans, assuming every
        // aggregation local; the second keeps the aggregations over them.
        let (_, first, _) = colocated(plan.clone(), None)?;
        let joined = first.joined();
        let (rewritten, groups, nodes) = colocated(plan.clone(), Some(&joined))?;
        let splits = groups.splits();
        // A scan that two co-located nodes would split by different
        // columns cannot be split both ways: nothing is co-located then.
        if splits.is_empty() || first.conflict || groups.conflict {
            return Ok(plan);
        }
        let Some(rewritten) = realigned(rewritten, &nodes)? else {
            return Ok(plan);
        };
        rewritten
            .transform_up(|node| {
                let Some(co) = splits.get(&address(&node)) else {
                    return Ok(Transformed::no(node));
                };
                match node.downcast_ref::<RegionScanExec>() {
                    Some(scan) => Ok(Transformed::yes(
                        Arc::new(scan.with_co_partition(co.clone())) as Arc<dyn ExecutionPlan>,
                    )),
                    None => Ok(Transformed::no(node)),
                }
            })
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quarry_colocated_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with its co-located joins' repartitions local, and those of
/// its aggregations over co-located scans (over the scans in `joined`
/// only, when given), and the groups of scans that share a split.
fn colocated(
    plan: Arc<dyn ExecutionPlan>,
    joined: Option<&std::collections::HashSet<usize>>,
) -> DfResult<(
    Arc<dyn ExecutionPlan>,
    Groups,
    std::collections::HashSet<usize>,
)> {
    let mut groups = Groups::default();
    // The nodes made co-located (their addresses in the new plan).
    let mut nodes = std::collections::HashSet::new();
    let plan = plan
        .transform_up(|node| {
            if let Some(join) = node.downcast_ref::<HashJoinExec>() {
                if join.mode != PartitionMode::Partitioned {
                    return Ok(Transformed::no(node));
                }
                let Some((_, _, a, b)) = colocation(join) else {
                    return Ok(Transformed::no(node));
                };
                groups.join(a, b);
                let children = node.children().into_iter().map(localized).collect();
                let joined = replace_children_if_necessary(node.clone(), children)?;
                nodes.insert(address(&joined));
                return Ok(Transformed::yes(joined));
            }
            if let Some(agg) = node.downcast_ref::<AggregateExec>() {
                let partitioned = matches!(
                    agg.mode(),
                    AggregateMode::FinalPartitioned | AggregateMode::SinglePartitioned
                );
                let shuffled = agg
                    .input()
                    .downcast_ref::<RepartitionExec>()
                    .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)));
                if !partitioned
                    || !shuffled
                    || !agg.group_expr().is_single()
                    || !hashed_by_columns(agg.input())
                {
                    return Ok(Transformed::no(node));
                }
                let found = agg.group_expr().expr().iter().find_map(|(e, _)| {
                    let o = origin(agg.input(), e.downcast_ref::<Column>()?.index(), true)?;
                    joined.is_none_or(|j| j.contains(&o.scan)).then_some(o)
                });
                let Some(o) = found else {
                    return Ok(Transformed::no(node));
                };
                groups.add(o);
                let input = localized(agg.input());
                let local = replace_children_if_necessary(node.clone(), vec![input])?;
                nodes.insert(address(&local));
                return Ok(Transformed::yes(local));
            }
            Ok(Transformed::no(node))
        })?
        .data;
    Ok((plan, groups, nodes))
}

/// Scans joined co-located, in groups that share one split (union-find by
/// scan address).
#[derive(Default)]
struct Groups {
    parent: HashMap<usize, usize>,
    origins: HashMap<usize, Origin>,
    /// A scan was added by two different columns.
    conflict: bool,
}

impl Groups {
    fn add(&mut self, o: Origin) -> usize {
        self.parent.entry(o.scan).or_insert(o.scan);
        let at = o.scan;
        match self.origins.get(&at) {
            Some(had) => self.conflict |= had.key != o.key,
            None => {
                self.origins.insert(at, o);
            }
        }
        at
    }

    fn root(&self, mut at: usize) -> usize {
        while let Some(&p) = self.parent.get(&at) {
            if p == at {
                break;
            }
            at = p;
        }
        at
    }

    fn join(&mut self, a: Origin, b: Origin) {
        let (a, b) = (self.add(a), self.add(b));
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            self.parent.insert(rb, ra);
        }
    }

    /// The scans in a group of two or more: read by a co-located join.
    fn joined(&self) -> std::collections::HashSet<usize> {
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        for scan in self.origins.keys() {
            *sizes.entry(self.root(*scan)).or_default() += 1;
        }
        (self.origins.keys())
            .filter(|s| sizes[&self.root(**s)] > 1)
            .copied()
            .collect()
    }

    /// Each scan's split: its group's widest bounds.
    fn splits(&self) -> HashMap<usize, CoPartition> {
        let mut bounds: HashMap<usize, (i64, i64)> = HashMap::new();
        for (scan, o) in &self.origins {
            let b = bounds.entry(self.root(*scan)).or_insert((o.lo, o.hi));
            *b = (b.0.min(o.lo), b.1.max(o.hi));
        }
        self.origins
            .iter()
            .map(|(scan, o)| {
                let (lo, hi) = bounds[&self.root(*scan)];
                let co = CoPartition {
                    key: o.key.clone(),
                    name: o.name.clone(),
                    lo,
                    hi,
                };
                (*scan, co)
            })
            .collect()
    }
}

/// A hash repartition inside a task: a co-located join's or aggregation's
/// (module docs). It runs as the `RepartitionExec` it holds; only its type
/// differs, so the distributed planner does not cut the plan at it.
#[derive(Debug)]
pub struct LocalRepartitionExec {
    /// A `RepartitionExec` with hash partitioning.
    inner: Arc<dyn ExecutionPlan>,
}

impl LocalRepartitionExec {
    /// `inner` made local (None: it is not a hash `RepartitionExec`).
    pub fn new(inner: Arc<dyn ExecutionPlan>) -> Option<Self> {
        let hash = inner
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)));
        hash.then_some(LocalRepartitionExec { inner })
    }

    /// The repartition it runs.
    pub fn repartition(&self) -> &RepartitionExec {
        self.inner
            .downcast_ref::<RepartitionExec>()
            .expect("a LocalRepartitionExec holds a RepartitionExec")
    }
}

impl DisplayAs for LocalRepartitionExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Local")?;
        self.repartition().fmt_as(t, f)?;
        write!(f, ", co-located")
    }
}

impl ExecutionPlan for LocalRepartitionExec {
    fn name(&self) -> &str {
        "LocalRepartitionExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.inner.children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.inner.maintains_input_order()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.inner.benefits_from_input_partitioning()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(LocalRepartitionExec {
            inner: replace_children_if_necessary(self.inner.clone(), children)?,
        }))
    }

    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(LocalRepartitionExec {
            inner: self.inner.clone().reset_state()?,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.inner.metrics()
    }

    #[allow(deprecated)]
    fn partition_statistics(
        &self,
        partition: Option<usize>,
    ) -> DfResult<Arc<datafusion::common::Statistics>> {
        self.inner.partition_statistics(partition)
    }

    fn cardinality_effect(&self) -> datafusion::physical_plan::execution_plan::CardinalityEffect {
        self.inner.cardinality_effect()
    }

    fn gather_filters_for_pushdown(
        &self,
        phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        config: &ConfigOptions,
    ) -> DfResult<FilterDescription> {
        self.inner
            .gather_filters_for_pushdown(phase, parent_filters, config)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        config: &ConfigOptions,
    ) -> DfResult<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let inner =
            self.inner
                .handle_child_pushdown_result(phase, child_pushdown_result, config)?;
        Ok(FilterPushdownPropagation {
            filters: inner.filters,
            updated_node: inner
                .updated_node
                .map(|n| Arc::new(LocalRepartitionExec { inner: n }) as Arc<dyn ExecutionPlan>),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn co(lo: i64, hi: i64) -> CoPartition {
        CoPartition {
            key: Expr::Column {
                index: 0,
                data_type: DataType::Int64,
            },
            name: "k".into(),
            lo,
            hi,
        }
    }

    /// The task whose range holds `v`, asserting that exactly one does.
    fn task_of(c: &CoPartition, n: usize, v: i64) -> usize {
        let holds = |i: usize| {
            c.start(i, n).is_none_or(|s| s <= v)
                && (i + 1 == n || c.start(i + 1, n).is_some_and(|e| v < e))
        };
        let tasks: Vec<usize> = (0..n).filter(|&i| holds(i)).collect();
        assert_eq!(tasks.len(), 1, "{v} in tasks {tasks:?} of {n} over {c:?}");
        tasks[0]
    }

    #[test]
    fn every_value_is_in_exactly_one_tasks_range() {
        for (lo, hi) in [
            (1, 6_000_000),
            (5, 5),
            (-10, 10),
            (i64::MIN, i64::MAX),
            (0, 2),
        ] {
            let c = co(lo, hi);
            for n in 1..=5 {
                let mut last = 0;
                for v in [
                    i64::MIN,
                    lo.saturating_sub(1),
                    lo,
                    lo / 2 + hi / 2,
                    hi,
                    hi.saturating_add(1),
                    i64::MAX,
                ] {
                    let t = task_of(&c, n, v);
                    // Ranges are in key order.
                    if v >= lo {
                        assert!(t >= last, "{v}: task {t} after {last}");
                        last = t;
                    }
                }
            }
        }
        // Equal widths over the bounds: the order keys of SF 1 in three.
        let c = co(1, 6_000_000);
        assert_eq!(c.start(1, 3), Some(2_000_001));
        assert_eq!(c.start(2, 3), Some(4_000_001));
        assert_eq!(task_of(&c, 3, 2_000_000), 0);
        assert_eq!(task_of(&c, 3, 2_000_001), 1);
        assert_eq!(task_of(&c, 3, 7_000_000), 2);
    }

    fn origin(scan: usize, lo: i64, hi: i64) -> Origin {
        Origin {
            scan,
            key: co(0, 0).key,
            name: format!("c{scan}"),
            lo,
            hi,
        }
    }

    #[test]
    fn scans_joined_through_other_joins_share_the_widest_bounds() {
        let mut g = Groups::default();
        g.join(origin(1, 10, 20), origin(2, 0, 15));
        g.join(origin(3, 5, 30), origin(2, 0, 15));
        g.add(origin(4, 100, 200));
        assert_eq!(g.joined(), [1, 2, 3].into_iter().collect());
        let splits = g.splits();
        for scan in [1, 2, 3] {
            assert_eq!((splits[&scan].lo, splits[&scan].hi), (0, 30), "scan {scan}");
        }
        assert_eq!((splits[&4].lo, splits[&4].hi), (100, 200));
        assert_eq!(splits[&1].name, "c1");
        assert!(!g.conflict);
        // The same scan by another column: it cannot be split both ways.
        let mut other = origin(1, 10, 20);
        other.key = Expr::Column {
            index: 1,
            data_type: DataType::Int64,
        };
        g.add(other);
        assert!(g.conflict);
    }

    #[test]
    fn a_node_fed_by_a_co_located_join_gets_a_real_repartition() {
        use crate::df::mpp::test_plans::{hash_join, source};
        use datafusion::common::JoinType;
        let hash = |p: Arc<dyn ExecutionPlan>| {
            let key = Arc::new(Column::new(p.schema().field(0).name(), 0)) as _;
            Arc::new(RepartitionExec::try_new(p, Partitioning::Hash(vec![key], 2)).unwrap())
                as Arc<dyn ExecutionPlan>
        };
        let inner = hash_join(
            localized(&hash(source("a", 10))),
            localized(&hash(source("b", 10))),
            JoinType::Inner,
            PartitionMode::Partitioned,
        );
        let inner: Arc<dyn ExecutionPlan> = Arc::new(inner);
        let colocated = [address(&inner)].into_iter().collect();
        // The join above it is not co-located: its other side is a
        // network shuffle, so the co-located side must be one too.
        let outer: Arc<dyn ExecutionPlan> = Arc::new(hash_join(
            inner.clone(),
            hash(source("c", 10)),
            JoinType::Inner,
            PartitionMode::Partitioned,
        ));
        let fixed = realigned(outer, &colocated).unwrap().unwrap();
        let [left, right] = fixed.children()[..] else {
            panic!("two inputs")
        };
        assert!(left.is::<RepartitionExec>(), "{}", left.name());
        assert!(Arc::ptr_eq(left.children()[0], &inner));
        assert!(right.is::<RepartitionExec>());
        // The co-located join itself keeps its local inputs.
        let kept = realigned(inner.clone(), &colocated).unwrap().unwrap();
        assert!(Arc::ptr_eq(&kept, &inner));
    }
}
