//! Broadcast joins for distributed plans: a partitioned hash join with a
//! small build side becomes a `CollectLeft` join, whose build side
//! `datafusion-distributed` broadcasts to every task of the probe side's
//! stage.
//!
//! DataFusion picks a join's mode for one process: it collects a build
//! side into one hash table only under 1 MiB or, where the size is not
//! estimated (Quarry's scans estimate rows only), 128 K rows
//! (`hash_join_single_partition_threshold[_rows]`), else it hash-partitions
//! both sides, which in one process is an in-memory repartition. In a
//! distributed plan a partitioned join costs two network shuffles, the
//! probe side's whole (lineitem's 6 M rows in Q5, Q3 and Q21), and it
//! parts the join from its probe scan: the build side's keys, which in one
//! process narrow the probe scan in the stores (`df/join_keys.rs`), live
//! in one stage and the scan in another. A broadcast sends the build side
//! once per task instead, keeps the join in its probe scan's stage, and
//! each worker hands the keys to that scan (`mpp::worker`'s stage
//! rewrite). TiDB's MPP makes the same choice by
//! `tidb_broadcast_join_threshold_count`, Spark by a size.
//!
//! The cost is memory: every task holds the build side's whole hash
//! table, hence the bound, [`BROADCAST_MAX_ROWS`] by the statistics'
//! estimate (`region_scan.rs`, selectivity and join cardinality from the
//! tables' statistics), or more rows of a narrow build side while they
//! stay under [`BROADCAST_MAX_BYTES`] by its column types
//! (`broadcast_rows`). A join with unknown statistics stays
//! partitioned. The bytes matter where an estimate is far above the truth
//! and the build side is only keys: TPC-H Q18's `HAVING sum(l_quantity) >
//! 300` keeps 624 of SF 10's 15 M orders, but without statistics of a
//! sum DataFusion estimates a fifth of them, 3 M. Partitioned, its semi
//! join shuffled all of orders ⋈ customer and lineitem (60 M rows, about
//! 1 GB held in each compute process); broadcast, its keys narrow those
//! scans in the stores (`cross_stage.rs`), as they do in one process. By
//! the estimate, 3 M BIGINT keys are 24 MB in each task, and a few times
//! that as a hash table (an entry, a link and a hash a row); however
//! narrow its columns, no build side past [`BROADCAST_MAX_NARROW_ROWS`]
//! is broadcast, the most keys a join hands the scans
//! (`join_keys::MAX_BLOOM_KEYS`).
//!
//! Joins that emit build-side rows (left semi, left anti, left outer)
//! cannot be broadcast, and stay partitioned: both sides cross the
//! network, and the probe side whole. When such a join's build side is
//! small and its probe side at least twice as big, the rule narrows the
//! probe side first by a **semi-join reduction** (Spark's injected
//! runtime filter, in its semi-join form): below the join, the probe
//! side becomes `probe ⋉ keys(build)`, a broadcast right-semi join of
//! the build side's keys, placed as low as the keys can be followed
//! (through projections, filters, repartitions and the group keys of
//! aggregations), normally right above the probe side's region scan,
//! where the worker hands the keys to the scan. `L ⋉ R`, `L ▷ R` and
//! `L ⟕ R` are unchanged when R loses the rows that match no key of L
//! (such rows never meet a row of L), so the answer is the same, as long
//! as the copy of L that gives the keys finds the same rows as L: so L
//! must be repeatable (region scans at the query's one snapshot,
//! projections, filters, joins, aggregations whose answer does not
//! depend on row order; no LIMIT or top-k, which may pick different rows
//! among ties, no other aggregation, no volatile function: `repeatable`).
//! The price is the build side computed twice (once for the join, once
//! for its keys; the copy leaves out semi joins, anti joins and filters on
//! top of L, and the probe side of an inner join in L whose keys all come
//! from its build side and which keeps, by the statistics, at least as
//! many rows as that build side has, when its keys are plain columns and
//! it stays under the broadcast bound: a copy with more keys narrows
//! less but never wrongly), hence the size bounds. Q4, Q17, Q20 and Q21 take
//! this path.
//!
//! The rule runs right after DataFusion's `join_selection`, before the
//! rules that add the repartitions and coalesces a mode needs
//! (`EnsureRequirements`), so the plan's distribution is worked out for
//! the mode chosen here. Only join types that never emit build-side rows
//! are broadcast (a broadcast build side is in every task, so such rows
//! would come out once per task): inner, right, right semi, right anti,
//! right mark; the same list `datafusion-distributed` broadcasts.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, NullEquality, Result as DfResult};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions, StatisticsArgs,
    StatisticsContext,
};

/// The most rows (by the statistics' estimate) a hash join's build side
/// may have to be broadcast to every task of a distributed query, however
/// wide they are.
pub const BROADCAST_MAX_ROWS: usize = 1_000_000;

/// Past [`BROADCAST_MAX_ROWS`], the most bytes (estimated rows × the
/// width of a row by its column types, `row_width`) a build side may
/// have to be broadcast: 4 M rows of one BIGINT key.
pub const BROADCAST_MAX_BYTES: usize = 32 << 20;

/// The most rows a narrow build side may have to be broadcast, whatever
/// its width: the keys a join hands the scans as a set, no more
/// (`join_keys::MAX_BLOOM_KEYS`), and a bound on the hash table's own
/// bytes a row, which `row_width` leaves out.
pub const BROADCAST_MAX_NARROW_ROWS: usize = crate::df::join_keys::MAX_BLOOM_KEYS;

/// The bytes a row of `schema` is counted as for [`BROADCAST_MAX_BYTES`]:
/// each fixed-width column its width, and any other (text, lists) 32
/// bytes, the width of a TPC-H name or comment.
fn row_width(schema: &arrow::datatypes::Schema) -> usize {
    schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(32).max(1))
        .sum::<usize>()
        .max(1)
}

/// `plan`'s estimated rows when it is small enough to broadcast: at most
/// [`BROADCAST_MAX_ROWS`] rows, or more under [`BROADCAST_MAX_BYTES`]
/// (module docs); None when it is not, or its size is unknown.
pub(crate) fn broadcast_rows(plan: &dyn ExecutionPlan) -> Option<usize> {
    let rows = rows_at_most(plan)?;
    let bytes = match quarry_proto::failpoint::fires("broadcast_bytes_off") {
        true => usize::MAX,
        false => rows.saturating_mul(row_width(&plan.schema())),
    };
    let narrow = rows <= BROADCAST_MAX_NARROW_ROWS && bytes <= BROADCAST_MAX_BYTES;
    (rows <= BROADCAST_MAX_ROWS || narrow).then_some(rows)
}

/// `rules` with [`BroadcastSmallBuildSides`] right after DataFusion's
/// `join_selection` (at the end if there is none).
pub fn after_join_selection(
    rules: &[Arc<dyn PhysicalOptimizerRule + Send + Sync>],
) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut out = rules.to_vec();
    let at = rules
        .iter()
        .position(|r| r.name() == "join_selection")
        .map_or(out.len(), |i| i + 1);
    out.insert(at, Arc::new(BroadcastSmallBuildSides));
    // Co-located joins' repartitions made local, once every repartition
    // is in the plan (`colocate.rs`).
    let check = out
        .iter()
        .position(|r| r.name() == "SanityCheckPlan")
        .unwrap_or(out.len());
    out.insert(check, Arc::new(super::colocate::Colocate));
    out
}

/// Makes partitioned hash joins with a build side small enough to
/// broadcast (`broadcast_rows`) `CollectLeft`, and narrows the
/// probe side of left semi, anti and outer joins with such a build side
/// by its keys (module docs).
#[derive(Debug)]
pub struct BroadcastSmallBuildSides;

impl PhysicalOptimizerRule for BroadcastSmallBuildSides {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if join.mode == PartitionMode::Auto || join.null_aware {
                return Ok(Transformed::no(node));
            }
            // A join of two co-located sides runs partitioned in their
            // scans' tasks, with no exchange (`colocate.rs`): one that is
            // partitioned stays so, and so does one that collects a build
            // side it emits rows of (a semi, anti or outer join, which
            // cannot be broadcast and so ran in one task: Q4's orders ⋉
            // lineitem). One that may be broadcast stays collected: its
            // build side was judged small.
            if super::colocate::colocation(join).is_some() {
                if join.mode == PartitionMode::Partitioned {
                    return Ok(Transformed::no(node));
                }
                if !never_emits_build_rows(join.join_type()) {
                    let partitioned = join
                        .builder()
                        .with_partition_mode(PartitionMode::Partitioned)
                        .build()?;
                    return Ok(Transformed::yes(Arc::new(partitioned)));
                }
            }
            let Some(build_rows) = broadcast_rows(join.left().as_ref()) else {
                return Ok(Transformed::no(node));
            };
            if never_emits_build_rows(join.join_type()) {
                let (join, changed) = match join.mode {
                    PartitionMode::CollectLeft => (node.clone(), false),
                    _ => {
                        let collect = join
                            .builder()
                            .with_partition_mode(PartitionMode::CollectLeft)
                            .build()?;
                        (Arc::new(collect) as Arc<dyn ExecutionPlan>, true)
                    }
                };
                // A small dimension table's keys, past the shuffles
                // below the join (`across_shuffles.rs`).
                let collected = join.downcast_ref::<HashJoinExec>().expect("a hash join");
                if let Some(reduced) = super::across_shuffles::reduce_below_shuffles(collected)? {
                    return Ok(Transformed::yes(reduced));
                }
                return Ok(match changed {
                    true => Transformed::yes(join),
                    false => Transformed::no(join),
                });
            }
            match reduce_probe_side(join, build_rows)? {
                Some(reduced) => Ok(Transformed::yes(reduced)),
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quarry_broadcast_small_build_sides"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether a join of this type emits only rows that a probe-side row
/// produced (so each task, holding the whole build side, emits its own
/// share and nothing twice).
fn never_emits_build_rows(join_type: &JoinType) -> bool {
    matches!(
        join_type,
        JoinType::Inner
            | JoinType::Right
            | JoinType::RightSemi
            | JoinType::RightAnti
            | JoinType::RightMark
    )
}

/// `join` (partitioned, its build side `build_rows` rows) with its probe
/// side narrowed to the rows whose keys the build side has (module docs);
/// None where that does not apply or would not pay.
fn reduce_probe_side(
    join: &HashJoinExec,
    build_rows: usize,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    if !matches!(
        join.join_type(),
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::Left
    ) {
        return Ok(None);
    }
    // One reduction below another computes the first one's build side a
    // third time (Q21: an anti join over a semi join over one chain of
    // joins ran 1.4× slower with both reduced than with the lower one).
    if join.left().exists(|p| Ok(is_reduction(p)))? {
        return Ok(None);
    }
    // A probe side of unknown size (an aggregation's, say) is tried.
    if estimated_rows(join.right().as_ref()).is_some_and(|p| p < build_rows.saturating_mul(2)) {
        return Ok(None);
    }
    // The probe side's keys must be its columns, to be followed down.
    let Some(probe_keys) = join
        .on()
        .iter()
        .map(|(_, r)| r.downcast_ref::<Column>().map(|c| c.index()))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    // The build side again, its join keys only (a fresh copy: the
    // original runs as the join's build side), or a cheaper plan whose
    // keys include the build side's: only where the keys are plain
    // columns (a key expression a stripped filter guarded, a cast of
    // text, say, could fail on rows the query never reaches), and only
    // while it stays small enough to broadcast.
    let build_keys: Vec<Arc<dyn PhysicalExpr>> = join.on().iter().map(|(l, _)| l.clone()).collect();
    let plain_keys = build_keys
        .iter()
        .all(|k| k.downcast_ref::<Column>().is_some());
    let (superset, superset_keys) = keys_superset(join.left().clone(), build_keys.clone());
    let (source, build_keys) = match plain_keys && broadcast_rows(superset.as_ref()).is_some() {
        true => (superset, superset_keys),
        false => (join.left().clone(), build_keys),
    };
    // The copy must find the same rows as the original: no LIMIT, no
    // volatile expression, nothing that depends on the order rows come
    // in (module docs).
    if !repeatable(&source)? {
        return Ok(None);
    }
    let keys = build_keys
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, format!("{REDUCE_KEY}{i}")));
    let build = Arc::new(ProjectionExec::try_new(keys, reset_plan_states(source)?)?)
        as Arc<dyn ExecutionPlan>;
    let probe = semi_reduce(
        join.right().clone(),
        &probe_keys,
        &build,
        join.null_equality(),
    )?;
    let reduced = join
        .builder()
        .with_new_children(vec![join.left().clone(), probe])?
        .build()?;
    Ok(Some(Arc::new(reduced)))
}

pub(super) use super::repeatable::repeatable;

/// Whether `plan` is a semi-join reduction this rule made.
pub(super) fn is_reduction(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<HashJoinExec>().is_some_and(|j| {
        j.join_type() == &JoinType::RightSemi
            && j.left()
                .downcast_ref::<ProjectionExec>()
                .and_then(|p| p.expr().first())
                .is_some_and(|e| e.alias.starts_with(REDUCE_KEY))
    })
}

/// The name of a reduction's build side's key columns (and a number).
pub(super) const REDUCE_KEY: &str = "__reduce_key_";

/// A plan whose values of `keys` include those of `plan`'s `keys` (plain
/// columns of `plan`), and those keys over it: `plan` without the semi
/// and anti joins and filters on top of it, which only drop rows (Q21's
/// anti join's build side is a semi join over a chain of joins: its keys
/// come from the chain alone, computed once more rather than twice), and
/// without the probe side of an inner join whose keys all come from its
/// build side, where by the statistics that join keeps at least as many
/// rows as its build side has (Q17: the parts of a brand and container,
/// not those parts joined with all of lineitem to find the same keys).
fn keys_superset(
    plan: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
) -> (Arc<dyn ExecutionPlan>, Vec<Arc<dyn PhysicalExpr>>) {
    if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        if matches!(j.join_type(), JoinType::LeftSemi | JoinType::LeftAnti)
            && j.projection.is_none()
        {
            return keys_superset(j.left().clone(), keys);
        }
        if let Some(build_keys) = build_side_keys(j, &keys) {
            let keeps_build_rows = match (estimated_rows(j.left().as_ref()), estimated_rows(j)) {
                (Some(build), Some(joined)) => build <= joined,
                _ => false,
            };
            if keeps_build_rows && j.fetch().is_none() {
                return keys_superset(j.left().clone(), build_keys);
            }
        }
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        if f.projection().is_none() {
            return keys_superset(f.input().clone(), keys);
        }
    }
    // Through a projection of the keys as they are, where something
    // below it can go.
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let below: Option<Vec<Arc<dyn PhysicalExpr>>> = keys
            .iter()
            .map(|k| {
                let e = &p.expr().get(k.downcast_ref::<Column>()?.index())?.expr;
                e.downcast_ref::<Column>().map(|_| e.clone())
            })
            .collect();
        if let Some(below) = below {
            let (inner, inner_keys) = keys_superset(p.input().clone(), below);
            if !Arc::ptr_eq(&inner, p.input()) {
                return (inner, inner_keys);
            }
        }
    }
    (plan, keys)
}

/// `keys` (columns of an inner join's output) as columns of its build
/// side, where they all come from it.
fn build_side_keys(
    join: &HashJoinExec,
    keys: &[Arc<dyn PhysicalExpr>],
) -> Option<Vec<Arc<dyn PhysicalExpr>>> {
    if join.join_type() != &JoinType::Inner {
        return None;
    }
    let schema = join.left().schema();
    keys.iter()
        .map(|k| {
            let column = k.downcast_ref::<Column>()?;
            match crate::df::join_keys::input_of_join_column(join, column.index())? {
                (true, i) => {
                    Some(Arc::new(Column::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
                }
                (false, _) => None,
            }
        })
        .collect()
}

/// `plan ⋉ build` on `plan`'s columns `keys` (the build side's columns in
/// order), as low in `plan` as the key columns can be followed.
fn semi_reduce(
    plan: Arc<dyn ExecutionPlan>,
    keys: &[usize],
    build: &Arc<dyn ExecutionPlan>,
    null_equality: NullEquality,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    // As low as the keys can be followed. Where only some can (Q2's
    // `ps_partkey = p_partkey AND ps_supplycost = min(ps_supplycost)`
    // above its aggregation, whose group key is the first and whose
    // aggregate the second), it goes below on those, with the build
    // side's keys narrowed to them: a semi join on some of the keys
    // drops only rows that match no build-side row on all of them, and
    // the aggregation then reads only the groups of the parts the outer
    // query found.
    let each: Vec<Option<usize>> = keys.iter().map(|&k| key_below_one(&plan, k)).collect();
    if each.iter().any(Option::is_some) {
        let build = match each.iter().all(Option::is_some) {
            true => build.clone(),
            false => {
                let schema = build.schema();
                let kept = each
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.is_some())
                    .map(|(i, _)| {
                        let name = schema.field(i).name().clone();
                        (
                            Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                            name,
                        )
                    });
                Arc::new(ProjectionExec::try_new(kept, build.clone())?) as Arc<dyn ExecutionPlan>
            }
        };
        let below: Vec<usize> = each.into_iter().flatten().collect();
        let child = plan.children()[0].clone();
        let reduced = semi_reduce(child, &below, &build, null_equality)?;
        return plan.replace_children(
            vec![reduced],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        );
    }
    semi_join(build, plan, keys, null_equality)
}

/// `plan ⋉ build`: a broadcast right-semi join of `build`'s columns, in
/// order, to `plan`'s columns `keys`.
pub(super) fn semi_join(
    build: &Arc<dyn ExecutionPlan>,
    plan: Arc<dyn ExecutionPlan>,
    keys: &[usize],
    null_equality: NullEquality,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let build_schema = build.schema();
    let probe_schema = plan.schema();
    let on = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let b = Arc::new(Column::new(build_schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>;
            let p = Arc::new(Column::new(probe_schema.field(k).name(), k)) as Arc<dyn PhysicalExpr>;
            (b, p)
        })
        .collect();
    Ok(Arc::new(HashJoinExec::try_new(
        build.clone(),
        plan,
        on,
        None,
        &JoinType::RightSemi,
        None,
        PartitionMode::CollectLeft,
        null_equality,
        false,
    )?))
}

/// Where `plan`'s output column `key` comes from in its one child, where
/// `plan` passes it down unchanged and a semi join on it may run below
/// it (`join_keys::key_below`, the rule join key filters follow).
pub(super) fn key_below_one(plan: &Arc<dyn ExecutionPlan>, key: usize) -> Option<usize> {
    let schema = plan.schema();
    let key = Arc::new(Column::new(schema.field(key).name(), key)) as Arc<dyn PhysicalExpr>;
    let below = crate::df::join_keys::key_below(plan, &key)?;
    below.downcast_ref::<Column>().map(|c| c.index())
}

/// The statistics' estimate of `plan`'s rows, or where they have none,
/// a bound from its inputs': a projection, a filter, a coalesce or a
/// repartition has at most its input's rows, and an inner nested-loop
/// join at most the product of its inputs' (DataFusion does not estimate
/// a join without equal keys; TPC-H Q22's customers above the average
/// balance join a one-row aggregation). A bound above the truth only
/// keeps a join partitioned that could have been broadcast.
fn rows_at_most(plan: &dyn ExecutionPlan) -> Option<usize> {
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::NestedLoopJoinExec;
    if let Some(rows) = estimated_rows(plan) {
        return Some(rows);
    }
    if let Some(j) = plan.downcast_ref::<NestedLoopJoinExec>() {
        if j.join_type() != &JoinType::Inner {
            return None;
        }
        return rows_at_most(j.left().as_ref())?.checked_mul(rows_at_most(j.right().as_ref())?);
    }
    let keeps_at_most_its_input = plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<RepartitionExec>();
    match plan.children().as_slice() {
        [input] if keeps_at_most_its_input => rows_at_most(input.as_ref()),
        _ => None,
    }
}

/// The statistics' estimate of `plan`'s rows (None: unknown).
pub(crate) fn estimated_rows(plan: &dyn ExecutionPlan) -> Option<usize> {
    let stats = StatisticsContext::new()
        .compute(plan, &StatisticsArgs::new())
        .ok()?;
    stats.num_rows.get_value().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::df::mpp::test_plans::{hash_join, source};
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::NullEquality;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_expr::expressions::Column;

    fn join(build: usize, probe: usize, join_type: JoinType) -> Arc<dyn ExecutionPlan> {
        join_of(source("b", build), source("p", probe), join_type)
    }

    /// A partitioned join of `build` and `probe` on their first columns.
    fn join_of(
        build: Arc<dyn ExecutionPlan>,
        probe: Arc<dyn ExecutionPlan>,
        join_type: JoinType,
    ) -> Arc<dyn ExecutionPlan> {
        Arc::new(hash_join(
            build,
            probe,
            join_type,
            PartitionMode::Partitioned,
        ))
    }

    fn mode_after_rule(plan: Arc<dyn ExecutionPlan>) -> PartitionMode {
        let plan = BroadcastSmallBuildSides
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        plan.downcast_ref::<HashJoinExec>().unwrap().mode
    }

    #[test]
    fn a_small_build_side_is_broadcast_a_large_one_stays_partitioned() {
        assert_eq!(
            mode_after_rule(join(500_000, 10, JoinType::Inner)),
            PartitionMode::CollectLeft
        );
        // Past the row bound, a build side of one BIGINT is still
        // broadcast while its bytes stay under the byte bound.
        let keys_fit = BROADCAST_MAX_BYTES / 8;
        assert_eq!(
            mode_after_rule(join(BROADCAST_MAX_ROWS + 1, 10, JoinType::Inner)),
            PartitionMode::CollectLeft
        );
        assert_eq!(
            mode_after_rule(join(keys_fit, 10, JoinType::Inner)),
            PartitionMode::CollectLeft
        );
        assert_eq!(
            mode_after_rule(join(keys_fit + 1, 10, JoinType::Inner)),
            PartitionMode::Partitioned
        );
    }

    #[test]
    fn a_narrow_build_side_is_bounded_in_rows_too() {
        // Four bytes a row: the bytes would allow 8 M rows, the row cap 4 M.
        let ints = |rows: usize| {
            let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false)]));
            let keys = arrow::array::Int32Array::from_iter_values(0..rows as i32);
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
            MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
                as Arc<dyn ExecutionPlan>
        };
        assert!(broadcast_rows(ints(BROADCAST_MAX_NARROW_ROWS).as_ref()).is_some());
        assert!(broadcast_rows(ints(BROADCAST_MAX_NARROW_ROWS + 1).as_ref()).is_none());
    }

    #[test]
    fn a_wide_build_side_past_the_row_bound_stays_partitioned() {
        // Three text columns and a BIGINT: 104 bytes a row, so the row
        // bound decides.
        let fields = ["k", "a", "b", "c"].map(|n| match n {
            "k" => Field::new(n, DataType::Int64, false),
            _ => Field::new(n, DataType::Utf8, false),
        });
        let wide = |rows: usize| {
            let schema = Arc::new(Schema::new(fields.to_vec()));
            let text = Arc::new(arrow::array::StringArray::from_iter_values(
                std::iter::repeat_n("x", rows),
            ));
            let columns: Vec<arrow::array::ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                text.clone(),
                text.clone(),
                text,
            ];
            let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
            MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
                as Arc<dyn ExecutionPlan>
        };
        assert_eq!(row_width(&wide(1).schema()), 8 + 3 * 32);
        assert!(broadcast_rows(wide(BROADCAST_MAX_ROWS).as_ref()).is_some());
        assert!(broadcast_rows(wide(BROADCAST_MAX_ROWS + 1).as_ref()).is_none());
    }

    #[test]
    fn joins_that_emit_build_rows_are_never_broadcast() {
        // Each task would emit the build side's unmatched (or matched)
        // rows once: duplicates.
        for t in [
            JoinType::Left,
            JoinType::LeftSemi,
            JoinType::LeftAnti,
            JoinType::Full,
        ] {
            assert_eq!(mode_after_rule(join(10, 10, t)), PartitionMode::Partitioned);
        }
        assert_eq!(
            mode_after_rule(join(10, 10, JoinType::RightSemi)),
            PartitionMode::CollectLeft
        );
    }

    /// The probe side under a left semi, anti or outer join becomes
    /// `probe ⋉ keys(build)`: a right semi join, its build side the
    /// build's keys.
    fn reduced_probe(join: Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        let plan = BroadcastSmallBuildSides
            .optimize(join, &ConfigOptions::default())
            .unwrap();
        let outer = plan.downcast_ref::<HashJoinExec>().unwrap();
        let probe = outer.right().downcast_ref::<HashJoinExec>()?;
        assert_eq!(probe.join_type(), &JoinType::RightSemi);
        assert_eq!(probe.mode, PartitionMode::CollectLeft);
        assert!(probe.left().downcast_ref::<ProjectionExec>().is_some());
        Some(probe.right().clone())
    }

    #[test]
    fn a_big_probe_side_under_a_left_semi_anti_or_outer_join_is_narrowed_first() {
        for t in [JoinType::LeftSemi, JoinType::LeftAnti, JoinType::Left] {
            assert!(reduced_probe(join(10, 100, t)).is_some(), "{t}");
        }
        // Not when the probe side is not much bigger: the build side is
        // computed twice for it.
        assert!(reduced_probe(join(100, 150, JoinType::LeftSemi)).is_none());
        // Nor for a full join (it emits the probe side's unmatched rows).
        assert!(reduced_probe(join(10, 100, JoinType::Full)).is_none());
    }

    /// A build side under a LIMIT may keep other rows when read a second
    /// time (any 10 of them): its keys would narrow the probe side wrongly.
    #[test]
    fn a_build_side_that_may_read_differently_twice_is_not_reduced_by() {
        use datafusion::physical_plan::limit::GlobalLimitExec;
        let limited = Arc::new(GlobalLimitExec::new(source("b", 1000), 0, Some(10)));
        let semi = join_of(limited, source("p", 100), JoinType::LeftSemi);
        assert!(reduced_probe(semi).is_none());
    }

    /// A grouping of `source("k", 100)` by `k % 10` computing `f` of a
    /// column of `input_type` (the source's keys cast to it).
    fn aggregation_of(
        f: Arc<datafusion::logical_expr::AggregateUDF>,
        input_type: DataType,
        distinct: bool,
    ) -> Arc<dyn ExecutionPlan> {
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::aggregate::AggregateExprBuilder;
        use datafusion::physical_expr::expressions::{binary, cast, lit};
        use datafusion::physical_plan::aggregates::{
            AggregateExec, AggregateMode, PhysicalGroupBy,
        };
        let rows = source("k", 100);
        let schema = rows.schema();
        let k = Arc::new(Column::new("k", 0)) as Arc<dyn PhysicalExpr>;
        let values = ProjectionExec::try_new(
            vec![
                (
                    binary(k.clone(), Operator::Modulo, lit(10i64), &schema).unwrap(),
                    "g".to_string(),
                ),
                (cast(k, &schema, input_type).unwrap(), "v".to_string()),
            ],
            rows,
        )
        .unwrap();
        let schema = values.schema();
        let aggregate = AggregateExprBuilder::new(f, vec![Arc::new(Column::new("v", 1))])
            .schema(schema.clone())
            .alias("a")
            .with_distinct(distinct)
            .build()
            .unwrap();
        Arc::new(
            AggregateExec::try_new(
                AggregateMode::Single,
                PhysicalGroupBy::new_single(vec![(Arc::new(Column::new("g", 0)), "g".into())]),
                vec![Arc::new(aggregate)],
                vec![None],
                Arc::new(values),
                schema,
            )
            .unwrap(),
        )
    }

    #[test]
    fn an_aggregation_is_repeatable_where_its_answer_does_not_depend_on_row_order() {
        use datafusion::functions_aggregate::average::avg_udaf;
        use datafusion::functions_aggregate::min_max::max_udaf;
        use datafusion::functions_aggregate::sum::sum_udaf;
        let decimal = DataType::Decimal128(15, 2);
        // Quarry's AVG (`df/aggregates.rs`): a decimal sum divided into
        // a float once, at the end.
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build();
        crate::df::aggregates::register(&mut state);
        let quarry_avg = state.aggregate_functions()["avg"].clone();
        for (f, input, repeats) in [
            (quarry_avg.clone(), decimal.clone(), true),
            (quarry_avg.clone(), DataType::Float64, false),
            (sum_udaf(), DataType::Int64, true),
            (avg_udaf(), decimal.clone(), true),
            (sum_udaf(), decimal, true),
            (max_udaf(), DataType::Float64, true),
            // (A float sum's last bits depend on the order it adds in.)
            (sum_udaf(), DataType::Float64, false),
            (avg_udaf(), DataType::Float64, false),
        ] {
            let name = format!("{}({input})", f.name());
            let plan = aggregation_of(f, input, false);
            assert_eq!(repeatable(&plan).unwrap(), repeats, "{name}");
        }
        // DISTINCT: its state lists the values, added up in a hash set's
        // order.
        for (f, input, repeats) in [
            (sum_udaf(), DataType::Int64, true),
            (sum_udaf(), DataType::Float64, false),
            (avg_udaf(), DataType::Float64, false),
            (quarry_avg, DataType::Float64, false),
        ] {
            let name = format!("{}(DISTINCT {input})", f.name());
            let plan = aggregation_of(f, input, true);
            assert_eq!(repeatable(&plan).unwrap(), repeats, "{name}");
        }
    }

    /// Q22's shape: the customers above the average balance (a
    /// nested-loop join of a one-row aggregation, which DataFusion does
    /// not estimate) anti-joined to all of orders. The orders are
    /// narrowed by the customers' keys first.
    #[test]
    fn a_build_side_with_a_nested_loop_join_to_an_average_narrows_its_probe_side() {
        use datafusion::common::JoinSide;
        use datafusion::functions_aggregate::average::avg_udaf;
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::binary;
        use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
        use datafusion::physical_plan::joins::NestedLoopJoinExec;
        // (Ten averages, one per group, stand in for Q22's one.)
        let average = aggregation_of(avg_udaf(), DataType::Decimal128(15, 2), false);
        let one = Arc::new(
            ProjectionExec::try_new(
                vec![(
                    Arc::new(Column::new("a", 1)) as Arc<dyn PhysicalExpr>,
                    "a".to_string(),
                )],
                average,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;
        let customers = source("b", 1000);
        let filter_schema = Schema::new(vec![
            Field::new("a", DataType::Decimal128(19, 6), true),
            Field::new("b", DataType::Int64, false),
        ]);
        let above = binary(
            datafusion::physical_expr::expressions::cast(
                Arc::new(Column::new("b", 1)),
                &filter_schema,
                DataType::Decimal128(19, 6),
            )
            .unwrap(),
            Operator::Gt,
            Arc::new(Column::new("a", 0)),
            &filter_schema,
        )
        .unwrap();
        let filter = JoinFilter::new(
            above,
            vec![
                ColumnIndex {
                    index: 0,
                    side: JoinSide::Left,
                },
                ColumnIndex {
                    index: 0,
                    side: JoinSide::Right,
                },
            ],
            Arc::new(filter_schema),
        );
        let nested = Arc::new(
            NestedLoopJoinExec::try_new(
                one,
                customers,
                Some(filter),
                &JoinType::Inner,
                Some(vec![1]),
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;
        let anti = join_of(nested, source("p", 1_000_000), JoinType::LeftAnti);
        assert!(reduced_probe(anti).is_some());
    }

    /// Q2's shape: a left semi join on a group key and an aggregate of
    /// the probe side's aggregation. The reduction goes below the
    /// aggregation on the group key alone (a semi join on some of the
    /// keys drops only rows that match on none of all of them), so the
    /// aggregation reads only the groups the build side has.
    #[test]
    fn a_reduction_on_a_group_key_and_an_aggregate_goes_below_the_grouping_on_the_key() {
        use datafusion::functions_aggregate::min_max::min_udaf;
        use datafusion::physical_expr::aggregate::AggregateExprBuilder;
        use datafusion::physical_plan::aggregates::{
            AggregateExec, AggregateMode, PhysicalGroupBy,
        };
        let two = |a: &str, b: &str, rows: i64| {
            let schema = Arc::new(Schema::new(vec![
                Field::new(a, DataType::Int64, false),
                Field::new(b, DataType::Int64, false),
            ]));
            let keys = Arc::new(Int64Array::from_iter_values(0..rows));
            let batch = RecordBatch::try_new(schema.clone(), vec![keys.clone(), keys]).unwrap();
            MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
                as Arc<dyn ExecutionPlan>
        };
        let rows = two("p", "c", 1000);
        let schema = rows.schema();
        let min = AggregateExprBuilder::new(min_udaf(), vec![Arc::new(Column::new("c", 1))])
            .schema(schema.clone())
            .alias("m")
            .build()
            .unwrap();
        let grouped = Arc::new(
            AggregateExec::try_new(
                AggregateMode::Single,
                PhysicalGroupBy::new_single(vec![(Arc::new(Column::new("p", 0)), "p".into())]),
                vec![Arc::new(min)],
                vec![None],
                rows,
                schema,
            )
            .unwrap(),
        ) as Arc<dyn ExecutionPlan>;
        let on = vec![
            (
                Arc::new(Column::new("b", 0)) as _,
                Arc::new(Column::new("p", 0)) as _,
            ),
            (
                Arc::new(Column::new("bm", 1)) as _,
                Arc::new(Column::new("m", 1)) as _,
            ),
        ];
        let semi = Arc::new(
            HashJoinExec::try_new(
                two("b", "bm", 10),
                grouped,
                on,
                None,
                &JoinType::LeftSemi,
                None,
                PartitionMode::Partitioned,
                NullEquality::NullEqualsNothing,
                false,
            )
            .unwrap(),
        );
        let probe = BroadcastSmallBuildSides
            .optimize(semi, &ConfigOptions::default())
            .unwrap()
            .downcast_ref::<HashJoinExec>()
            .unwrap()
            .right()
            .clone();
        let aggregation = probe
            .downcast_ref::<AggregateExec>()
            .expect("the aggregation stays on top");
        let below = aggregation
            .input()
            .downcast_ref::<HashJoinExec>()
            .expect("a reduction below the aggregation");
        assert_eq!(below.join_type(), &JoinType::RightSemi);
        assert_eq!(below.on().len(), 1, "on the group key alone");
        assert!(below.right().downcast_ref::<DataSourceExec>().is_some());
    }

    /// Nor is a probe side narrowed below a row limit: other rows would
    /// pass it. The reduction goes right above it.
    #[test]
    fn a_reduction_stays_above_a_row_limit_on_the_probe_side() {
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        let limited = CoalescePartitionsExec::new(source("p", 1000)).with_fetch(Some(500));
        let semi = join_of(source("b", 10), Arc::new(limited), JoinType::LeftSemi);
        let below = reduced_probe(semi).expect("a reduction");
        assert_eq!(below.fetch(), Some(500));
    }
}
