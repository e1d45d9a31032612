//! Join keys across stages: a broadcast hash join's build keys narrow the
//! region scans of the stages below its probe side's shuffles, through a
//! board in each compute process (TiFlash's runtime filters between MPP
//! tasks; Spark's runtime filters and dynamic partition pruning).
//!
//! ```text
//!  TPC-H Q18 under mpp = 'force'
//!
//!  Stage 6 (a task on every process)
//!    HashJoin(RightSemi, CollectLeft, l_orderkey = o_orderkey)
//!      CrossStageKeysExec(slot 0) ── 57 keys ──▶ board[query, slot 0]
//!        broadcast of Stage 2 (the 57 big orders)       │ (in this process)
//!      HashJoin(Partitioned, o_orderkey = l_orderkey)    │
//!        shuffle of Stage 4                              │
//!        shuffle of Stage 5                              │
//!  Stage 4:  … RegionScanExec(orders)   waits for slot 0 ◀┤
//!  Stage 5:  RegionScanExec(lineitem)   waits for slot 0 ◀┘
//! ```
//!
//! In one process a hash join hands its build keys to the region scan its
//! probe key comes from (`df/join_keys.rs`): the stores send only the rows
//! that can join. In a distributed plan the workers do that only within
//! the stage they run, so a join above a shuffle narrowed nothing below
//! it: Q18 shuffled all of orders and lineitem to join them, for 57
//! orders. The semi-join reductions of `broadcast.rs` and
//! `across_shuffles.rs` copy a build side into the stage below where it
//! is cheap to compute again; Q18's is an aggregation of all of lineitem.
//!
//! Here the keys travel at run time instead, without a network hop:
//! * A broadcast join's build side is whole in every task of its stage,
//!   so every process that runs one of the stage's tasks holds all the
//!   keys once the build side is in. [`CrossStageKeysExec`], over the
//!   build side, copies them to this process's board under the query's
//!   id (`MppOptions::query_id`) and a slot number.
//! * The coordinator ([`keys_across_stages`], after the plan is cut into
//!   stages) follows the probe key down the probe side, through the
//!   nodes and joins `join_keys` follows and through shuffles, gathers
//!   and broadcasts into the stages below (an inner join's key on to both
//!   of its inputs), and tags each region scan it reaches past an
//!   exchange with the slot. (Q5 at SF 1: the nations of ASIA, posted by
//!   the join at the top of lineitem's stage, narrow customer in the
//!   stage that joins it with orders and broadcasts them to lineitem's.)
//!   A scan is not tagged where the statistics say the keys would keep
//!   most of its rows (the build side's estimated rows, or fewer where
//!   the key's values are bounded lower by the rows estimated on its way
//!   down to its table column and that column's distinct values, past
//!   `BLOOM_MAX_SHARE` of the scan's key column's distinct values; a
//!   build side with no estimate is not weighed): it would wait for the
//!   keys, and so for the build side,
//!   to narrow little (Q15's whole supplier table over its view; a
//!   join's keys weighed out are not replaced by the keys of joins below
//!   that bound them, which narrow no more). The
//!   estimate is trusted only where no join above narrows the build
//!   side with its own keys at run time, which it does not know of (a
//!   whole customer table that the nations of one country narrow).
//!   Such a scan, when it runs, waits for its slot on its own
//!   process's board, as it waits for a join in its own stage, bounded
//!   the same way, and then adds the keys to its regions' selection (a
//!   list, a range, a Bloom filter or none, as `join_keys` judges them).
//! * A join of any mode whose build key's values all come out of such a
//!   broadcast join further down its build side hands that join's slot
//!   to its own probe side's scans (`bounds`): Q21's partitioned anti
//!   join of late lineitem rows, whose orders a broadcast semi join in a
//!   stage below allows.
//!
//! Why this cannot hang or go wrong:
//! * A join whose keys a scan waits for either reads that scan's output
//!   (its probe side) or sits on the build side of a join that does
//!   (the bounds above); a hash join collects its build side before it
//!   reads its probe side, so the keys come from work the scans do not
//!   wait on, and the wait is bounded besides: one bound for all of a
//!   scan's joins, then it reads unnarrowed.
//! * The slot is used only where the join's stage has at least as many
//!   tasks as there are live compute processes, so the route handler
//!   (`routes.rs`) deals one to each, and every scan's process has the
//!   keys. A process that joined since the plan was made may run a scan
//!   with no join of the slot: the scan's bounded wait
//!   (`region_scan::MAX_FILTER_WAIT`) passes and it reads unnarrowed.
//! * Keys only ever drop probe rows the join would drop: the same join
//!   types and key paths as in one process, and a build side with no
//!   shuffle or task share in its stage (all of its rows in each task).
//!
//! The board holds each slot's keys while a join or scan of the query in
//! this process holds them (the join's node keeps them for its task's
//! life: up to 32 MiB a slot at `MAX_BLOOM_KEYS`); an ended query's
//! entries are swept when the next slot is made.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock, Weak};

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use datafusion_distributed::{
    BroadcastExec, DistributedLeafExec, NetworkBroadcastExec, NetworkCoalesceExec,
    NetworkShuffleExec, Stage,
};
use parking_lot::Mutex;

use super::{broadcast, MppOptions};
use crate::df::join_keys::{self, BuildKeys};
use crate::df::region_scan::RegionScanExec;

/// The keys of each (query id, slot) in this process.
type Board = HashMap<(String, u32), Weak<BuildKeys>>;

static BOARD: LazyLock<Mutex<Board>> = LazyLock::new(Default::default);

/// The keys of `slot` of `query` in this process: the ones its join is
/// filling, or an empty set that the join will fill when it starts.
pub fn board_entry(query: &str, slot: u32) -> Arc<BuildKeys> {
    let mut board = BOARD.lock();
    if let Some(keys) = board
        .get(&(query.to_string(), slot))
        .and_then(Weak::upgrade)
    {
        return keys;
    }
    // Ended queries' slots go as new ones come.
    board.retain(|_, keys| keys.strong_count() > 0);
    // A broadcast build side is one partition: one end fills the slot.
    let keys = BuildKeys::new(format!("slot {slot}"), 1);
    board.insert((query.to_string(), slot), Arc::downgrade(&keys));
    keys
}

/// Slots on the board, for tests.
#[cfg(test)]
fn board_len() -> usize {
    BOARD
        .lock()
        .values()
        .filter(|k| k.strong_count() > 0)
        .count()
}

/// A broadcast hash join's build side, passed through unchanged while its
/// join key is copied to its slot on the board (module docs).
#[derive(Debug)]
pub struct CrossStageKeysExec {
    input: Arc<dyn ExecutionPlan>,
    /// The build key: a BIGINT column of the input.
    key: Column,
    slot: u32,
    /// The slots this node filled, kept while the plan lives (the task
    /// does): a scan of the query that starts after the build side ended
    /// still finds them.
    held: Mutex<Vec<Arc<BuildKeys>>>,
}

impl CrossStageKeysExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, key: Column, slot: u32) -> Self {
        CrossStageKeysExec {
            input,
            key,
            slot,
            held: Mutex::new(Vec::new()),
        }
    }

    pub fn key(&self) -> &Column {
        &self.key
    }

    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl DisplayAs for CrossStageKeysExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CrossStageKeysExec: key={}, slot={}",
            self.key, self.slot
        )
    }
}

impl ExecutionPlan for CrossStageKeysExec {
    fn name(&self) -> &str {
        "CrossStageKeysExec"
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
        Ok(Arc::new(CrossStageKeysExec::new(
            children.swap_remove(0),
            self.key.clone(),
            self.slot,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let query = context
            .session_config()
            .options()
            .extensions
            .get::<MppOptions>()
            .map(|o| o.query_id.clone())
            .unwrap_or_default();
        let input = self.input.execute(partition, context)?;
        if query.is_empty() {
            return Ok(input);
        }
        let sink = board_entry(&query, self.slot);
        self.held.lock().push(sink.clone());
        Ok(join_keys::tap_keys(input, Arc::new(self.key.clone()), sink))
    }
}

/// `plan` (a distributed plan, cut into stages) with each broadcast hash
/// join whose probe key reaches region scans past a shuffle sending them
/// its keys (module docs), `workers` being the live compute processes.
pub fn keys_across_stages(
    plan: Arc<dyn ExecutionPlan>,
    workers: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let mut slots = 0u32;
    let narrowed = narrowed_build_sides(&plan)?;
    // The coordinator's own stage is one task.
    rewrite(plan, 1, workers, &mut slots, &narrowed)
}

/// A node's address, which names it while the plan it is in lives.
fn node_address(plan: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(plan) as *const () as usize
}

/// The hash joins (by [`node_address`]) whose build side the keys of a
/// join above them may narrow at run time: a probe key followed down as
/// [`follow`] follows it (through exchanges too) that enters a join's
/// build side.
fn narrowed_build_sides(plan: &Arc<dyn ExecutionPlan>) -> DfResult<HashSet<usize>> {
    let mut narrowed = HashSet::new();
    plan.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            if join_keys::narrows_probe_side(join) {
                for (_, probe) in join.on() {
                    mark_narrowed(join.right(), probe, &mut narrowed);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(narrowed)
}

/// Adds to `narrowed` the joins below `plan` whose build side a filter
/// on `key` (over `plan`'s output) enters.
fn mark_narrowed(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    narrowed: &mut HashSet<usize>,
) {
    use datafusion_distributed::NetworkBoundaryExt;
    if plan.is_network_boundary() || plan.is::<BroadcastExec>() {
        if let [child] = &plan.children()[..] {
            mark_narrowed(child, key, narrowed);
        }
        return;
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let Some(column) = key.as_ref().downcast_ref::<Column>() else {
            return;
        };
        for (left, key) in key_paths(join, column.index()) {
            if left {
                narrowed.insert(node_address(plan));
            }
            let child = if left { join.left() } else { join.right() };
            mark_narrowed(child, &key, narrowed);
        }
        return;
    }
    if let (Some(below), [child]) = (join_keys::key_below(plan, key), &plan.children()[..]) {
        mark_narrowed(child, &below, narrowed);
    }
}

/// [`keys_across_stages`] below `plan`, which runs in a stage of `tasks`
/// tasks; `narrowed`: the joins whose build side keys from above narrow
/// ([`narrowed_build_sides`]).
fn rewrite(
    plan: Arc<dyn ExecutionPlan>,
    tasks: usize,
    workers: usize,
    slots: &mut u32,
    narrowed: &HashSet<usize>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let child_tasks = match stage_below(&plan) {
        Some(stage) => stage.task_count(),
        None => tasks,
    };
    let address = node_address(&plan);
    let children = plan
        .children()
        .into_iter()
        .map(|c| rewrite(c.clone(), child_tasks, workers, slots, narrowed))
        .collect::<DfResult<Vec<_>>>()?;
    let plan = replace_children_if_necessary(plan, children)?;
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(plan);
    };
    if !join_keys::narrows_probe_side(join) {
        return Ok(plan);
    }
    let publishes = tasks >= workers.max(2) && publishes(join)?;
    let left_schema = join.left().schema();
    let (mut left, mut right) = (join.left().clone(), join.right().clone());
    let mut sent = false;
    for (build, probe) in join.on() {
        let Some(build) = build.downcast_ref::<Column>() else {
            continue;
        };
        if build.data_type(&left_schema)? != DataType::Int64 {
            continue;
        }
        // This join's own keys, where its build side is whole in each
        // of its tasks.
        if publishes {
            // (Not weighed where keys from above narrow the build side
            // at run time: its estimate does not know them.)
            let build_key: Arc<dyn PhysicalExpr> = Arc::new(build.clone());
            let tag = Tag {
                slot: *slots,
                build_keys: match narrowed.contains(&address) {
                    true => None,
                    // Weighed only where the build side's rows are
                    // estimated (a bound alone can be far above the
                    // truth: Q18's 57 big orders, bounded by all of
                    // lineitem's order keys); its keys are fewer where
                    // the bound says so.
                    false => broadcast::estimated_rows(join.left().as_ref()).map(|rows| {
                        rows.min(distinct_bound(join.left(), &build_key).unwrap_or(rows))
                    }),
                },
            };
            if let Some(r) = follow(&right, probe, tag, false) {
                left = Arc::new(CrossStageKeysExec::new(left, build.clone(), *slots));
                right = r;
                *slots += 1;
                sent = true;
                continue;
            }
            // Weighed out: keys that bound these (below) narrow no more.
            let unweighed = Tag {
                build_keys: None,
                ..tag
            };
            if tag.build_keys.is_some() && follow(&right, probe, unweighed, false).is_some() {
                continue;
            }
        }
        // Keys that bound the build key's values, posted by joins below
        // the build side (any join's, partitioned ones too: Q21's anti
        // join of late lineitem rows, whose orders are bounded by a
        // broadcast semi join in a stage below).
        let mut found = Vec::new();
        let mut next = *slots;
        let build_key: Arc<dyn PhysicalExpr> = Arc::new(build.clone());
        let bounded = bounds(&left, &build_key, tasks, workers, &mut next, &mut found)?;
        let mut tagged = right.clone();
        let mut any = false;
        for slot in found {
            let tag = Tag {
                slot,
                build_keys: None,
            };
            if let Some(r) = follow(&tagged, probe, tag, false) {
                tagged = r;
                any = true;
            }
        }
        if any {
            (left, right, *slots, sent) = (bounded, tagged, next, true);
        }
    }
    if !sent {
        return Ok(plan);
    }
    replace_children_if_necessary(plan, vec![left, right])
}

/// `plan` with the joins that bound the values of `key` (an expression
/// over `plan`'s output) posting their build keys, and those joins'
/// slots in `found`: a broadcast join whose probe key `key` comes from
/// (every row it outputs has one of its build keys), found through the
/// nodes `key` passes unchanged, shuffles and gathers, and joins whose
/// rows carry a key equal to the other input's (inner and semi joins on
/// it). `tasks`: the tasks of `plan`'s stage; a join posts only where
/// its stage has a task on every live process.
fn bounds(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    tasks: usize,
    workers: usize,
    slots: &mut u32,
    found: &mut Vec<u32>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion_distributed::NetworkBoundaryExt;
    if plan.is_network_boundary() {
        let (Some(stage), [child]) = (stage_below(plan), &plan.children()[..]) else {
            return Ok(plan.clone());
        };
        let below = bounds(child, key, stage.task_count(), workers, slots, found)?;
        return replace_children_if_necessary(plan.clone(), vec![below]);
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let Some(column) = key.as_ref().downcast_ref::<Column>() else {
            return Ok(plan.clone());
        };
        if plan.fetch().is_some() {
            return Ok(plan.clone());
        }
        return bounds_through_join(join, plan, column.index(), tasks, workers, slots, found);
    }
    let Some(below) = join_keys::key_below(plan, key) else {
        return Ok(plan.clone());
    };
    let [child] = &plan.children()[..] else {
        return Ok(plan.clone());
    };
    let child = bounds(child, &below, tasks, workers, slots, found)?;
    replace_children_if_necessary(plan.clone(), vec![child])
}

/// [`bounds`] at a join, output column `index` being the key.
fn bounds_through_join(
    join: &HashJoinExec,
    plan: &Arc<dyn ExecutionPlan>,
    index: usize,
    tasks: usize,
    workers: usize,
    slots: &mut u32,
    found: &mut Vec<u32>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let Some((on_left, child_index)) = join_keys::input_of_join_column(join, index) else {
        return Ok(plan.clone());
    };
    // Rows out of an inner or semi join met a row of the other input
    // with an equal key.
    let matched = matches!(
        join.join_type(),
        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi
    );
    let other = match matched {
        true => equal_key_across(join, on_left, child_index),
        false => None,
    };
    let mut children = vec![join.left().clone(), join.right().clone()];
    // A broadcast join bounds its probe key by its build keys.
    if let (false, Some(build)) = (on_left, &other) {
        let left_type = build.data_type(&join.left().schema())?;
        if left_type == DataType::Int64 && tasks >= workers.max(2) && publishes(join)? {
            match posted_slot(join.left(), build) {
                Some(slot) => found.push(slot),
                None => {
                    children[0] = Arc::new(CrossStageKeysExec::new(
                        children[0].clone(),
                        build.clone(),
                        *slots,
                    ));
                    found.push(*slots);
                    *slots += 1;
                }
            }
        }
    }
    let side = usize::from(!on_left);
    let name = children[side].schema().field(child_index).name().clone();
    let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&name, child_index));
    children[side] = bounds(&children[side], &key, tasks, workers, slots, found)?;
    if let Some(other) = other {
        let side = usize::from(on_left);
        let key: Arc<dyn PhysicalExpr> = Arc::new(other);
        children[side] = bounds(&children[side], &key, tasks, workers, slots, found)?;
    }
    replace_children_if_necessary(plan.clone(), children)
}

/// Where a filter on output column `index` of `join` goes, each input
/// with the key over it (true: the left input): into the input the column
/// comes from (`join_keys::input_of_join_column`), and for an inner join
/// whose keys pair that column with one of the other input's, into that
/// input by its column too (rows of either input without the key never
/// join). The one way keys are followed through a join, here and in
/// `early_probes.rs`.
pub(super) fn key_paths(join: &HashJoinExec, index: usize) -> Vec<(bool, Arc<dyn PhysicalExpr>)> {
    let Some((on_left, child_index)) = join_keys::input_of_join_column(join, index) else {
        return Vec::new();
    };
    let mut paths = vec![(on_left, child_index)];
    if join.join_type() == &JoinType::Inner {
        if let Some(other) = equal_key_across(join, on_left, child_index) {
            paths.push((!on_left, other.index()));
        }
    }
    paths
        .into_iter()
        .filter_map(|(left, i)| {
            let child = if left { join.left() } else { join.right() };
            let name = child.schema().fields().get(i)?.name().clone();
            Some((
                left,
                Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
            ))
        })
        .collect()
}

/// The column of `join`'s other input that its keys pair with column
/// `index` of one input (the left one when `on_left`), where both are
/// plain columns.
fn equal_key_across(join: &HashJoinExec, on_left: bool, index: usize) -> Option<Column> {
    join.on().iter().find_map(|(l, r)| {
        let (mine, other) = if on_left { (l, r) } else { (r, l) };
        let mine = mine.downcast_ref::<Column>()?;
        let other = other.downcast_ref::<Column>()?;
        (mine.index() == index).then(|| other.clone())
    })
}

/// The slot that a join's build side (`left`) already posts `key` to.
fn posted_slot(left: &Arc<dyn ExecutionPlan>, key: &Column) -> Option<u32> {
    let mut node = left;
    while let Some(keys) = node.downcast_ref::<CrossStageKeysExec>() {
        if keys.key().index() == key.index() {
            return Some(keys.slot());
        }
        node = &keys.input;
    }
    None
}

/// The stage under `plan` when it is a network boundary with its stage
/// in this plan.
fn stage_below(plan: &Arc<dyn ExecutionPlan>) -> Option<&Stage> {
    use datafusion_distributed::NetworkBoundaryExt;
    let boundary = plan.as_network_boundary()?;
    matches!(boundary.input_stage(), Stage::Local(_)).then(|| boundary.input_stage())
}

/// Whether `join` may send its build keys to other stages: it narrows
/// its probe side as in one process, collects a build side of one
/// partition, and that build side is whole in each task (no shuffle,
/// gather or task share of a scan in its stage; a broadcast brings all
/// of its input).
fn publishes(join: &HashJoinExec) -> DfResult<bool> {
    use datafusion_distributed::NetworkBoundaryExt;
    if join.mode != PartitionMode::CollectLeft
        || !join_keys::narrows_probe_side(join)
        || join.left().properties().partitioning.partition_count() != 1
    {
        return Ok(false);
    }
    let mut whole = true;
    join.left().apply(|node| {
        // (The library's union that runs some of its children in each
        // task is not exported: known by its name.)
        if node.is::<DistributedLeafExec>() || node.name() == "ChildrenIsolatorUnionExec" {
            whole = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        if node.is::<NetworkShuffleExec>() || node.is::<NetworkCoalesceExec>() {
            whole = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        // A broadcast brings all of its stage's rows to each task,
        // whatever that stage holds.
        if node.as_network_boundary().is_some() {
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(whole)
}

/// The slot a scan is tagged with, and how many distinct keys its join's
/// build side has by the statistics: its estimated rows, or fewer where
/// [`distinct_bound`] says so (None: not weighed).
#[derive(Clone, Copy)]
struct Tag {
    slot: u32,
    build_keys: Option<usize>,
}

/// At most how many distinct values `key` (a column of `plan`'s output)
/// has, by the statistics: the fewest rows estimated for any node it
/// passes on its way down to the table column it reads, and that
/// column's distinct values (no node on the way up makes new values; an
/// inner join's key has only values both of its inputs have). None where
/// nothing is known.
fn distinct_bound(plan: &Arc<dyn ExecutionPlan>, key: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    use datafusion_distributed::NetworkBoundaryExt;
    let here = broadcast::estimated_rows(plan.as_ref());
    let below = || -> Option<usize> {
        if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
            return scan.key_distinct(key).map(|d| d as usize);
        }
        if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
            let column = key.as_ref().downcast_ref::<Column>()?;
            return key_paths(join, column.index())
                .into_iter()
                .map(|(left, k)| distinct_bound(if left { join.left() } else { join.right() }, &k))
                .fold(None, min_known);
        }
        let [child] = &plan.children()[..] else {
            return None;
        };
        if plan.is_network_boundary() || plan.is::<BroadcastExec>() {
            return distinct_bound(child, key);
        }
        distinct_bound(child, &join_keys::key_below(plan, key)?)
    };
    min_known(here, below())
}

/// The smaller of two bounds, either of which may be unknown.
fn min_known(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `plan` with its region scans that `key` (an expression over `plan`'s
/// output) comes from tagged with `tag`'s slot, where they run in another
/// stage (`crossed`: a shuffle or gather lies above `plan`); None where
/// no such scan is reached.
///
/// Not a scan whose key column the statistics give fewer than
/// `1 / BLOOM_MAX_SHARE` times as many distinct values as the build side
/// may have keys ([`distinct_bound`]): those keys would keep most of its
/// rows (a join with a whole dimension table, TPC-H Q15's supplier over
/// its `revenue0` view), and waiting for them would hold the scan's stage
/// back until the build side is in. (Q15's two copies of its view then run at once, and the
/// stores answer their equal requests once: `same_reads.rs`.)
fn follow(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    tag: Tag,
    crossed: bool,
) -> Option<Arc<dyn ExecutionPlan>> {
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        if !crossed || !scan.context().join_bloom_filters {
            return None;
        }
        if let (Some(keys), Some(distinct)) = (tag.build_keys, scan.key_distinct(key)) {
            if keys as f64 > distinct as f64 * join_keys::BLOOM_MAX_SHARE {
                return None;
            }
        }
        let probe = scan.probe_key(key)?;
        return Some(Arc::new(scan.with_remote_keys(tag.slot, probe)));
    }
    if let Some(leaf) = plan.downcast_ref::<DistributedLeafExec>() {
        let tagged = |p: &Arc<dyn ExecutionPlan>| follow(p, key, tag, crossed);
        let original = tagged(leaf.original())?;
        let variants = leaf
            .variants()
            .iter()
            .map(tagged)
            .collect::<Option<Vec<_>>>()?;
        return DistributedLeafExec::try_new(original, variants)
            .ok()
            .map(|l| Arc::new(l) as Arc<dyn ExecutionPlan>);
    }
    if plan.is::<NetworkShuffleExec>()
        || plan.is::<NetworkCoalesceExec>()
        || plan.is::<NetworkBroadcastExec>()
    {
        // The stage below outputs the same columns (a broadcast stage all
        // of them to each consumer task: a key its rows lack drops them
        // in every task alike).
        let [stage] = plan.children()[..] else {
            return None;
        };
        let below = follow(stage, key, tag, true)?;
        return replace_children_if_necessary(plan.clone(), vec![below]).ok();
    }
    if plan.is::<BroadcastExec>() {
        // A broadcast stage's head: its input's rows, to each consumer.
        let [child] = plan.children()[..] else {
            return None;
        };
        let below = follow(child, key, tag, crossed)?;
        return replace_children_if_necessary(plan.clone(), vec![below]).ok();
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        if plan.fetch().is_some() {
            return None;
        }
        let column = key.as_ref().downcast_ref::<Column>()?;
        return through_join(join, plan, column.index(), tag, crossed);
    }
    let below = join_keys::key_below(plan, key)?;
    let [child] = plan.children()[..] else {
        return None;
    };
    let child = follow(child, &below, tag, crossed)?;
    replace_children_if_necessary(plan.clone(), vec![child]).ok()
}

/// [`follow`] below a join, into the input that output column `index`
/// comes from (`join_keys::input_of_join_column`), and, where that is one
/// of an inner join's keys, into the other input by its side of the key
/// too: rows of either input without the key never join.
fn through_join(
    join: &HashJoinExec,
    plan: &Arc<dyn ExecutionPlan>,
    index: usize,
    tag: Tag,
    crossed: bool,
) -> Option<Arc<dyn ExecutionPlan>> {
    let mut children = vec![join.left().clone(), join.right().clone()];
    let mut tagged = false;
    for (left, key) in key_paths(join, index) {
        let side = usize::from(!left);
        if let Some(c) = follow(&children[side], &key, tag, crossed) {
            children[side] = c;
            tagged = true;
        }
    }
    if !tagged {
        return None;
    }
    replace_children_if_necessary(plan.clone(), children).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::prelude::SessionConfig;
    use futures::StreamExt;

    fn keys_source(keys: Vec<i64>) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(keys))]).unwrap();
        MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
    }

    fn context(query: &str) -> Arc<TaskContext> {
        let config = SessionConfig::new().with_option_extension(MppOptions {
            query_id: query.into(),
            ..Default::default()
        });
        Arc::new(TaskContext::default().with_session_config(config))
    }

    /// A join's keys reach a scan of the same query in this process
    /// through the board, whichever starts first, and only that query's.
    #[tokio::test]
    async fn the_board_hands_a_joins_keys_to_the_querys_scans() {
        let soon = std::time::Instant::now() + std::time::Duration::from_secs(2);
        // The scan first: it waits on an empty slot.
        let early = board_entry("q-board-1", 0);
        let exec = CrossStageKeysExec::new(keys_source(vec![5, 9, 5]), Column::new("k", 0), 0);
        let rows: usize = exec
            .execute(0, context("q-board-1"))
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .fold(0, |n, r| async move { n + r })
            .await;
        assert_eq!(rows, 3, "the build side passes through whole");
        assert!(early.wait(soon).await, "the slot is filled at the end");
        let probe = quarry_coprocessor::expr::Expr::Column {
            index: 0,
            data_type: DataType::Int64,
        };
        let f = early.filter(&probe, false, 100, None);
        assert!(f.shown.contains("2 keys"), "{}", f.shown);
        // A scan that starts after the join ended finds the keys while
        // the join's plan lives.
        assert!(board_entry("q-board-1", 0).wait(soon).await);
        // Another task's copy of the build side on this process adds
        // nothing to a complete slot (its keys are the same).
        let again = CrossStageKeysExec::new(keys_source(vec![5, 9, 11]), Column::new("k", 0), 0);
        let _ = again
            .execute(0, context("q-board-1"))
            .unwrap()
            .count()
            .await;
        let f = early.filter(&probe, false, 100, None);
        assert!(f.shown.contains("2 keys"), "{}", f.shown);
        // Another query's slot 0 is its own, and empty.
        let other = board_entry("q-board-2", 0);
        let quick = std::time::Instant::now() + std::time::Duration::from_millis(50);
        assert!(!other.wait(quick).await);
        // Without a query id (not a distributed task) nothing is posted.
        let before = board_len();
        let bare = CrossStageKeysExec::new(keys_source(vec![1]), Column::new("k", 0), 7);
        let _ = bare
            .execute(0, Arc::new(TaskContext::default()))
            .unwrap()
            .count()
            .await;
        assert_eq!(board_len(), before);
        drop((exec, again, early, other));
    }
}
