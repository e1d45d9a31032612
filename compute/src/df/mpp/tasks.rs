//! How many tasks a region scan runs as, and each task's share of the
//! table: the distributed planner's two events for Quarry's leaf.
//!
//! * [`DesiredTasks`] (asked while the planner sizes each stage): one task
//!   under `auto` for a table under [`AUTO_MIN_ROWS`]
//!   rows, a scan that reads a few rows by key (pinned primary keys, a
//!   selective index) or one that aggregates in the stores, one task in
//!   every mode for a scan with a group sieve, else one per
//!   region of the table (the planner caps the count at the live compute
//!   processes: a task per process). It also fills the region cache with the
//!   table's regions, which the second event reads without waiting.
//!   Asked for a join whose build side is broadcast (a hash join that
//!   collects it, a nested-loop or cross join), it answers at most the
//!   largest count of the region scans on the join's probe side in its
//!   stage. The planner would otherwise run the stage in about as many
//!   tasks as the broadcast's own stage has (the larger of its inputs'
//!   counts): at SF 1 a probe scan of a one-region table (Q14's part,
//!   Q10's customer) ran in three tasks, two of them with no region to
//!   scan, each still set up and sent a copy of the build side. Where the
//!   probe side also reads a shuffle, a union, or a leaf that is not a
//!   region scan, the planner's count stands. The failpoint
//!   `probe_sized_broadcasts_off` turns this off, for timing.
//!
//!   Asked for a node that is small by `small_stage` (under `auto` or
//!   `force`), it answers one task, which then holds for the node's whole
//!   stage (the library lets a maximum anywhere in a stage bound all of
//!   it): a consumer of shuffles whose inputs are each estimated under
//!   [`SMALL_STAGE_ROWS`] rows, or a broadcast join whose output and
//!   probe-side joins are, each of whose probe scans the stores cut by a
//!   join's build keys or is small itself (`estimate.rs`). One task then builds each hash
//!   table once and takes one stream from each producer task; the
//!   library drops the exchange between a one-task stage and a one-task
//!   consumer, so a chain of them becomes one stage (the coordinator's
//!   own finishes its join filters in `head_stage.rs`). Under `force` a
//!   scan of a table of at least [`AUTO_MIN_ROWS`] rows stays split
//!   whatever its join's estimate, so every statement that reads one
//!   runs across the compute processes. The failpoint
//!   `small_stages_one_task_off` turns this off.
//! * [`scale_up_region_scan`] (once the count `n` is final): the table's
//!   regions, ordered by leader store and then by key, dealt into `n`
//!   contiguous runs, each clipped to the table's key range; the scan
//!   becomes a `DistributedLeafExec` of `n` scans, task `i` running the
//!   one limited to run `i` (and a stage run as one task, the original
//!   scan of the whole table). Runs of one
//!   store's regions go to one task, so each worker asks different stores
//!   (TiFlash's split by leader). The runs are key ranges: together they
//!   are the table's whole range, each key in exactly one, whatever the
//!   regions do between planning and the scan.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    BroadcastExec, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DesiredTaskCountHandler,
    DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};

use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::PhysicalExpr;

use super::{MppMode, MppOptions, AUTO_MIN_ROWS};
use crate::df::join_keys::{build_key_probe, key_below, key_into_join};
use crate::df::region_scan::{RegionScanExec, ScanContext};
use crate::region_cache::Located;

/// A stage expected to handle fewer rows than this runs as one task
/// (`small_stage`): at about a hundred thousand rows, a task costs
/// more to set up and feed than it saves.
pub const SMALL_STAGE_ROWS: f64 = 100_000.0;

/// Asked for a task count far above any cluster's: the planner takes the
/// number of live workers.
const AS_MANY_AS_WORKERS: usize = 1 << 16;

/// The desired-task-count handler of region scans.
pub struct DesiredTasks {
    scan: ScanContext,
}

impl DesiredTasks {
    pub fn new(scan: ScanContext) -> Self {
        DesiredTasks { scan }
    }
}

#[async_trait]
impl DesiredTaskCountHandler for DesiredTasks {
    async fn handle(
        &self,
        ev: DesiredTaskCountEvent<'_>,
    ) -> Option<DfResult<DesiredTaskCountEventResponse>> {
        let mode = ev
            .session_config
            .options()
            .extensions
            .get::<MppOptions>()
            .map_or(MppMode::Off, |o| o.mode());
        if let Some(scan) = ev.plan.as_ref().downcast_ref::<RegionScanExec>() {
            return Some(Ok(self.scan_tasks(scan, mode).await));
        }
        if mode != MppMode::Off
            && small_stage(ev.plan, mode)
            && !quarry_proto::failpoint::fires("small_stages_one_task_off")
        {
            return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
        }
        // A join whose build side is broadcast runs in at most as many
        // tasks as its probe side's scans ask for: a task more would scan
        // nothing, yet take a copy of the build side and cost a stage's
        // set-up. (The planner takes the larger of the two sides' counts,
        // and sizes a broadcast's consumers by about its producer stage's
        // tasks.)
        let probe = broadcast_probe_side(ev.plan)?;
        let scans = in_stage_scans(probe)?;
        if scans.is_empty() || quarry_proto::failpoint::fires("probe_sized_broadcasts_off") {
            return None;
        }
        let mut most = 1;
        for scan in scans {
            most = most.max(usize::from(self.scan_tasks(scan, mode).await.task_count));
        }
        Some(Ok(DesiredTaskCountEventResponse::maximum(most)))
    }
}

impl DesiredTasks {
    /// The task count of `scan` under `mode`: see the module docs.
    async fn scan_tasks(
        &self,
        scan: &RegionScanExec,
        mode: MppMode,
    ) -> DesiredTaskCountEventResponse {
        // A scan with a group sieve answers a few rows, and its check
        // needs every response's key range in one place: one task in
        // every mode (`group_sieve.rs`); unless it is co-located, each
        // task then holding every response of its groups.
        if scan.dag().group_sieve.is_some() && scan.co_partition().is_none() {
            return DesiredTaskCountEventResponse::maximum(1);
        }
        // An aggregating scan's work is done in the stores, whichever
        // process asks; spreading it only adds a hop for its few rows.
        // (A co-located one is spread all the same: its stage holds the
        // join it is co-located for, `colocate.rs`.)
        let large = scan.table_rows().is_some_and(|r| r >= AUTO_MIN_ROWS)
            && !scan.reads_few_rows()
            && (scan.dag().aggregation.is_none() || scan.co_partition().is_some());
        let spread = match mode {
            MppMode::Off => false,
            MppMode::Auto => large,
            MppMode::Force => true,
        };
        if !spread {
            return DesiredTaskCountEventResponse::maximum(1);
        }
        // The regions, for the split that follows (a failure here only
        // leaves the scan in one task). A task per region at most: a
        // task given no region would scan nothing, yet cost a stage's
        // set-up on its worker and a stream to every consumer.
        let (start, end) = table_record_range(scan.table().id);
        match self.scan.dispatcher.regions(&start, &end).await {
            Ok(regions) => {
                DesiredTaskCountEventResponse::desired(regions.len().clamp(1, AS_MANY_AS_WORKERS))
            }
            Err(e) => {
                tracing::debug!(table = %scan.table().name, "MPP: regions unknown: {e}");
                DesiredTaskCountEventResponse::maximum(1)
            }
        }
    }
}

/// Whether `plan` is expected to handle fewer than [`SMALL_STAGE_ROWS`]
/// rows (`estimate.rs`), so that its stage runs as one task (the whole
/// stage: nodes above it in the stage too):
/// * a consumer of shuffles only, each of whose inputs is small (a
///   partitioned join or final aggregation over a few thousand rows,
///   Q20's and Q17's, in one task rather than one per compute process,
///   each fed by every task below);
/// * a join whose build side is broadcast, whose output and whose probe
///   side's joins in its stage are small, over region scans not split
///   for a co-located join, each cut in the stores by a join's build keys
///   (or small itself): the rows that reach compute are then about the
///   joins', and one task builds each hash table once rather than once
///   per task.
fn small_stage(plan: &Arc<dyn ExecutionPlan>, mode: MppMode) -> bool {
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::Partitioning;
    let small = |p: &Arc<dyn ExecutionPlan>| {
        super::estimate::estimate(p).is_some_and(|e| e.rows < SMALL_STAGE_ROWS)
    };
    let children = plan.children();
    let shuffled = |c: &&Arc<dyn ExecutionPlan>| {
        c.downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)))
    };
    if !children.is_empty() && children.iter().all(shuffled) {
        return children.iter().all(|c| small(c));
    }
    let Some(probe) = broadcast_probe_side(plan) else {
        return false;
    };
    let Some(scans) = in_stage_scans(probe) else {
        return false;
    };
    // (Under `force`, a scan that `auto` would spread, of a table of at
    // least AUTO_MIN_ROWS rows, stays split: `force` runs every statement
    // that reads one across the compute processes.)
    let spread_anyway = |s: &&RegionScanExec| {
        mode == MppMode::Force && s.table_rows().is_some_and(|r| r >= AUTO_MIN_ROWS)
    };
    let joins = in_stage_joins(probe);
    if scans.is_empty()
        || scans
            .iter()
            .any(|s| s.co_partition().is_some() || spread_anyway(s))
        || !small(plan)
        || !joins.iter().all(|j| small(j))
    {
        return false;
    }
    // Each scan is cut in the stores by some join's build keys, or small
    // itself: a scan no key filter reaches would come whole to one task.
    let mut cut: Vec<*const RegionScanExec> = Vec::new();
    for join in std::iter::once(plan).chain(joins) {
        if let Some(j) = join.downcast_ref::<HashJoinExec>() {
            for (_, key) in j.on() {
                scans_cut_by(j.right(), key, &mut cut);
            }
        }
    }
    scans.iter().all(|s| {
        cut.contains(&std::ptr::from_ref(*s))
            || s.estimated_statistics()
                .num_rows
                .get_value()
                .is_some_and(|r| (*r as f64) < SMALL_STAGE_ROWS)
    })
}

/// The region scans in `plan`'s part of its stage that a filter on `key`
/// (over `plan`'s output) reaches as join key filters do
/// (`join_keys.rs`): through nodes that pass the key down, into the side
/// of a join the key's column comes from, to a scan that takes build keys
/// on it.
fn scans_cut_by(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    out: &mut Vec<*const RegionScanExec>,
) {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        if build_key_probe(scan, key).is_some() {
            out.push(std::ptr::from_ref(scan));
        }
        return;
    }
    if plan.is::<BroadcastExec>() || plan.is::<CoalescePartitionsExec>() {
        return;
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let Some(column) = key.as_ref().downcast_ref::<Column>() else {
            return;
        };
        if let Some((left, below)) = key_into_join(join, column.index()) {
            scans_cut_by(if left { join.left() } else { join.right() }, &below, out);
        }
        return;
    }
    if let (Some(below), [child]) = (key_below(plan, key), &plan.children()[..]) {
        scans_cut_by(child, &below, out);
    }
}

/// The joins in `plan`'s part of its stage (not below a broadcast or a
/// coalesce: other stages).
fn in_stage_joins(plan: &Arc<dyn ExecutionPlan>) -> Vec<&Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::{CrossJoinExec, NestedLoopJoinExec};
    if plan.is::<BroadcastExec>() || plan.is::<CoalescePartitionsExec>() {
        return Vec::new();
    }
    let mut joins: Vec<&Arc<dyn ExecutionPlan>> = plan
        .children()
        .into_iter()
        .flat_map(in_stage_joins)
        .collect();
    if plan.is::<HashJoinExec>() || plan.is::<NestedLoopJoinExec>() || plan.is::<CrossJoinExec>() {
        joins.push(plan);
    }
    joins
}

/// The probe side of `plan` where it is a join whose build side (the
/// left) the planner broadcasts: a hash join collecting its left side,
/// or a nested-loop or cross join.
fn broadcast_probe_side(plan: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::joins::{
        CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
    };
    let collects_left = plan
        .downcast_ref::<HashJoinExec>()
        .is_some_and(|j| j.mode == PartitionMode::CollectLeft)
        || plan.is::<NestedLoopJoinExec>()
        || plan.is::<CrossJoinExec>();
    match plan.children().as_slice() {
        [build, probe] if collects_left && is_broadcast(build) => Some(probe),
        _ => None,
    }
}

/// Whether `plan` is a broadcast (under the coalesce a join collects it
/// through).
fn is_broadcast(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    match plan.downcast_ref::<CoalescePartitionsExec>() {
        Some(c) => c.input().is::<BroadcastExec>(),
        None => plan.is::<BroadcastExec>(),
    }
}

/// The region scans in `plan`'s part of its stage, or None where that part
/// also reads an exchange whose tasks the planner counts (a shuffle), a
/// leaf that is not a region scan, or a union (the planner gives a union's
/// inputs tasks of their own, adding up their counts). Broadcasts and the
/// inputs of coalesces are other stages, and add nothing.
fn in_stage_scans(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<&RegionScanExec>> {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
    use datafusion::physical_plan::union::{InterleaveExec, UnionExec};
    use datafusion::physical_plan::Partitioning;
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        return Some(vec![scan]);
    }
    let shuffle = plan
        .downcast_ref::<RepartitionExec>()
        .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)));
    // (The library's union that gives each input its own tasks is not
    // exported; it is known by its name.)
    let union = plan.is::<UnionExec>()
        || plan.is::<InterleaveExec>()
        || plan.name() == "ChildrenIsolatorUnionExec";
    if shuffle || union || plan.children().is_empty() {
        return None;
    }
    if plan.is::<BroadcastExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<SortPreservingMergeExec>()
    {
        return Some(Vec::new());
    }
    let mut scans = Vec::new();
    for child in plan.children() {
        scans.extend(in_stage_scans(child)?);
    }
    Some(scans)
}

/// The scale-up handler of region scans: see the module docs.
pub fn scale_up_region_scan(
    ev: ScaleUpLeafNodeEvent,
) -> Option<DfResult<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.as_ref().downcast_ref::<RegionScanExec>()?;
    if ev.task_count <= 1 {
        return None;
    }
    let (start, end) = table_record_range(scan.table().id);
    // A co-located scan: task i reads the whole table, keeping its range
    // of the column (`colocate.rs`), as every scan it is joined with does.
    if let Some(co) = scan.co_partition() {
        let table = KeyRange::new(start, end);
        let variants = (0..ev.task_count)
            .map(|i| {
                super::colocate::task_scan(scan, co, i, ev.task_count, table.clone())
                    .map(|v| Arc::new(v) as Arc<dyn ExecutionPlan>)
                    .map_err(crate::df::region_scan::external)
            })
            .collect::<DfResult<Vec<_>>>();
        return Some(variants.and_then(|variants| {
            DistributedLeafExec::try_new(ev.plan.clone(), variants)
                .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf)))
        }));
    }
    let regions = scan
        .context()
        .dispatcher
        .cached_regions(&start, &end)
        .unwrap_or_default();
    let tasks = split(&regions, KeyRangeRef::new(&start, &end), ev.task_count);
    let variants = tasks
        .into_iter()
        .map(|share| Arc::new(scan.with_share(share)) as Arc<dyn ExecutionPlan>);
    // (Task i runs variant i; a stage that ends up run as one task, as
    // the coordinator's own may, runs the original: the whole table.)
    Some(
        DistributedLeafExec::try_new(ev.plan.clone(), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// `table`'s key range in `n` disjoint parts whose union is all of it:
/// `regions` (in key order, covering it) ordered by leader store, then
/// dealt out in contiguous runs. Without regions, the first task gets the
/// whole range and the rest nothing.
pub fn split(regions: &[Located], table: KeyRangeRef<'_>, n: usize) -> Vec<Vec<KeyRange>> {
    let mut tasks = vec![Vec::new(); n.max(1)];
    let mut parts: Vec<(u64, KeyRange)> = regions
        .iter()
        .filter_map(|r| {
            KeyRangeRef::of_region(&r.region)
                .intersect(table)
                .map(|k| (r.store_id(), k))
        })
        .collect();
    if !covers(&parts, table) {
        tasks[0].push(table.to_owned());
        return tasks;
    }
    parts.sort_by(|a, b| (a.0, &a.1.start).cmp(&(b.0, &b.1.start)));
    let (len, n) = (parts.len(), tasks.len());
    for (i, (_, range)) in parts.into_iter().enumerate() {
        tasks[i * n / len].push(range);
    }
    tasks
}

/// Whether `parts` (clipped to `table`) cover it without gaps.
fn covers(parts: &[(u64, KeyRange)], table: KeyRangeRef<'_>) -> bool {
    let mut ranges: Vec<&KeyRange> = parts.iter().map(|(_, r)| r).collect();
    ranges.sort_by(|a, b| a.start.cmp(&b.start));
    let mut at: &[u8] = table.start;
    for r in ranges {
        if r.start.as_slice() > at {
            return false;
        }
        if r.end.is_empty() {
            return true;
        }
        if r.end.as_slice() > at {
            at = &r.end;
        }
    }
    !table.end.is_empty() && at >= table.end
}

/// `ranges` narrowed to the parts inside `mine` (a task's share).
pub fn intersect_all(ranges: &[KeyRange], mine: &[KeyRange]) -> Vec<KeyRange> {
    let mut out: Vec<KeyRange> = ranges
        .iter()
        .flat_map(|r| {
            mine.iter()
                .filter_map(move |m| r.as_ref().intersect(m.as_ref()))
        })
        .collect();
    out.sort_by(|a, b| a.start.cmp(&b.start));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_proto::meta::{Peer, Region};

    use crate::df::mpp::test_plans::{hash_join, source};
    use datafusion::common::JoinType;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::PartitionMode;
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::Partitioning;

    fn collect_left_join(
        build: Arc<dyn ExecutionPlan>,
        probe: Arc<dyn ExecutionPlan>,
    ) -> Arc<dyn ExecutionPlan> {
        Arc::new(hash_join(
            build,
            probe,
            JoinType::Inner,
            PartitionMode::CollectLeft,
        ))
    }

    /// Which joins are sized by their probe side, and what of the probe
    /// side is looked at: its stage's leaves, not the stages below it.
    #[test]
    fn a_broadcast_joins_tasks_follow_its_probe_sides_scans() {
        let broadcast = || {
            Arc::new(CoalescePartitionsExec::new(Arc::new(BroadcastExec::new(
                source("b", 10),
                3,
            )))) as _
        };
        let join = collect_left_join(broadcast(), source("p", 10));
        let probe = broadcast_probe_side(&join).expect("a broadcast join");
        assert_eq!(probe.name(), "DataSourceExec");
        // A build side collected without a broadcast is no such join.
        let local = collect_left_join(
            Arc::new(CoalescePartitionsExec::new(source("b", 10))),
            source("p", 10),
        );
        assert!(broadcast_probe_side(&local).is_none());
        // A leaf that is not a region scan, or a shuffle (its stage's
        // count is the planner's): no answer.
        assert!(in_stage_scans(&source("p", 10)).is_none());
        let shuffle: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(
                source("p", 10),
                Partitioning::Hash(vec![Arc::new(Column::new("p", 0))], 3),
            )
            .unwrap(),
        );
        assert!(in_stage_scans(&shuffle).is_none());
        // Another broadcast join's build side, and a coalesce's input, are
        // other stages: nothing of this one.
        assert_eq!(in_stage_scans(&broadcast()).map(|s| s.len()), Some(0));
        let nested = collect_left_join(broadcast(), shuffle);
        assert!(in_stage_scans(&nested).is_none());
    }

    /// A join over two shuffles runs as one task when both inputs are
    /// estimated under SMALL_STAGE_ROWS, not when either is larger; a
    /// join that reads no shuffle is not this rule's.
    #[test]
    fn a_join_over_small_shuffles_runs_as_one_task() {
        let shuffled = |rows: usize| -> Arc<dyn ExecutionPlan> {
            Arc::new(
                RepartitionExec::try_new(
                    source("k", rows),
                    Partitioning::Hash(vec![Arc::new(Column::new("k", 0))], 3),
                )
                .unwrap(),
            )
        };
        let join = |l, r| -> Arc<dyn ExecutionPlan> {
            Arc::new(hash_join(l, r, JoinType::Inner, PartitionMode::Partitioned))
        };
        let big = SMALL_STAGE_ROWS as usize;
        for mode in [MppMode::Auto, MppMode::Force] {
            assert!(small_stage(&join(shuffled(1_000), shuffled(5_000)), mode));
            assert!(!small_stage(&join(shuffled(1_000), shuffled(big)), mode));
            assert!(!small_stage(&join(source("a", 10), source("b", 10)), mode));
        }
    }

    fn region(id: u64, start: &[u8], end: &[u8], store: u64) -> Located {
        Located {
            region: Region {
                id,
                start_key: start.to_vec(),
                end_key: end.to_vec(),
                ..Default::default()
            },
            leader: Peer {
                store_id: store,
                ..Default::default()
            },
            addr: format!("store{store}"),
        }
    }

    /// Every key of the table in exactly one task: checked by walking
    /// the union of the tasks' ranges in order.
    fn assert_partition(tasks: &[Vec<KeyRange>], table: KeyRangeRef<'_>) {
        let mut all: Vec<&KeyRange> = tasks.iter().flatten().collect();
        all.sort_by(|a, b| a.start.cmp(&b.start));
        let mut at = table.start.to_vec();
        for r in all {
            assert_eq!(r.start, at, "a gap or an overlap at {at:?}");
            at = r.end.clone();
        }
        assert_eq!(at, table.end.to_vec());
    }

    #[test]
    fn regions_are_dealt_by_leader_store_and_cover_the_table_once() {
        let table = KeyRangeRef::new(b"t1", b"t2");
        // Regions reach past the table on both sides.
        let regions = vec![
            region(1, b"", b"t1a", 1),
            region(2, b"t1a", b"t1c", 2),
            region(3, b"t1c", b"t1e", 3),
            region(4, b"t1e", b"t1g", 1),
            region(5, b"t1g", b"t1i", 2),
            region(6, b"t1i", b"", 3),
        ];
        let tasks = split(&regions, table, 3);
        assert_eq!(tasks.len(), 3);
        assert_partition(&tasks, table);
        // Task 0 has store 1's regions (the first clipped at "t1").
        assert_eq!(
            tasks[0],
            vec![KeyRange::new(b"t1", b"t1a"), KeyRange::new(b"t1e", b"t1g")]
        );
        assert_eq!(
            tasks[2],
            vec![KeyRange::new(b"t1c", b"t1e"), KeyRange::new(b"t1i", b"t2")]
        );
        // More tasks than regions: some tasks scan nothing.
        let tasks = split(&regions[..2], KeyRangeRef::new(b"t1", b"t1c"), 4);
        assert_partition(&tasks, KeyRangeRef::new(b"t1", b"t1c"));
        assert_eq!(tasks.iter().filter(|t| t.is_empty()).count(), 2);
    }

    #[test]
    fn without_the_regions_the_first_task_scans_everything() {
        let table = KeyRangeRef::new(b"t1", b"t2");
        // A gap between the cached regions: not trusted.
        let regions = vec![region(1, b"", b"t1a", 1), region(2, b"t1b", b"", 2)];
        let tasks = split(&regions, table, 2);
        assert_eq!(tasks[0], vec![table.to_owned()]);
        assert!(tasks[1].is_empty());
        let tasks = split(&[], table, 3);
        assert_eq!(tasks[0], vec![table.to_owned()]);
    }

    #[test]
    fn a_tasks_ranges_narrow_the_scan() {
        let scan = vec![KeyRange::new(b"t1", b"t2")];
        let mine = vec![KeyRange::new(b"t1e", b"t1g"), KeyRange::new(b"t1", b"t1a")];
        assert_eq!(
            intersect_all(&scan, &mine),
            vec![KeyRange::new(b"t1", b"t1a"), KeyRange::new(b"t1e", b"t1g")]
        );
        let points = vec![
            KeyRange::new(b"t1b", b"t1b\0"),
            KeyRange::new(b"t1f", b"t1f\0"),
        ];
        assert_eq!(
            intersect_all(&points, &mine),
            vec![KeyRange::new(b"t1f", b"t1f\0")]
        );
    }
}
