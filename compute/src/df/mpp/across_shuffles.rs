//! A small build side's keys below the shuffles under its join: an
//! inner join with a small dimension table as its build side narrows the
//! rows its probe key comes from, as low as that key can be followed,
//! when that is past a shuffle.
//!
//! ```text
//!  Q7, before                               after
//!  HashJoin(n2.n_nationkey = s_nationkey)   HashJoin(n2.n_nationkey = s_nationkey)
//!    nation n2 (2 rows)                       nation n2
//!    HashJoin(partitioned, o ⋈ l)  ◀ shuffle   HashJoin(partitioned, o ⋈ l)
//!      orders                                  orders
//!      HashJoin(s_suppkey = l_suppkey)         HashJoin(s_suppkey = l_suppkey)
//!        supplier                                RightSemi(keys(nation n2) = s_nationkey)
//!        lineitem                                  nation n2 (a copy), supplier
//!                                                lineitem
//! ```
//!
//! In one process a join hands its build side's keys to the scan its
//! probe key comes from, through the joins and aggregations between them
//! (`df/join_keys.rs`): Q7's two nations narrow supplier to 800 rows and
//! those lineitem to a twelfth. A distributed plan cuts that path at
//! every shuffle (a partitioned join, an aggregation's final step): the
//! workers hand keys on only within the stage they run, so Q7 shuffled
//! all of lineitem's 1.8 M rows of its two years. Here the path is
//! followed at planning time instead: where it crosses a shuffle, a
//! right-semi join of the build side's keys goes at its end, in the
//! stage below, where the worker hands those keys to the scan.
//!
//! `(A ⋈ B) ⋉ K = (A ⋉ K) ⋈ B` for an inner join when the key is A's, so
//! the join's answer is unchanged as long as the copy of the build side
//! that gives the keys finds the same rows: the build side must be
//! [`super::replicate`]'s kind of plan (small tables only, no exchange,
//! the same rows every time), which also makes it cheap to compute again
//! in each task (`replicate.rs` then runs it inside the stage that uses
//! it), and selective (at most half its tables' rows by the statistics:
//! a whole table's keys narrow nothing). Only single-key inner joins are
//! followed, and only through nodes the key passes unchanged
//! (`join_keys::key_below`) and inner joins without a row limit
//! (`join_keys::input_of_join_column`); the path stops at other joins.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, NullEquality, Result as DfResult};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};

use super::broadcast::{is_reduction, key_below_one, REDUCE_KEY};
use crate::df::region_scan::RegionScanExec;

/// `join` with its probe side narrowed below a shuffle by its build
/// side's keys (module docs); None where that does not apply.
pub(super) fn reduce_below_shuffles(
    join: &HashJoinExec,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    if join.join_type() != &JoinType::Inner
        || join.mode != PartitionMode::CollectLeft
        || join.on().len() != 1
    {
        return Ok(None);
    }
    let (build_key, probe_key) = &join.on()[0];
    let Some(probe_key) = probe_key.downcast_ref::<Column>() else {
        return Ok(None);
    };
    // (Nor over a build side that holds a reduction already: each copy
    // would compute that one's build side again.)
    if build_key.downcast_ref::<Column>().is_none()
        || join.left().exists(|p| Ok(is_reduction(p)))?
        || !super::replicate::replicable(join.left())?
        || !selective(join.left())
    {
        return Ok(None);
    }
    let keys = vec![(build_key.clone(), format!("{REDUCE_KEY}0"))];
    let build = Arc::new(ProjectionExec::try_new(
        keys,
        reset_plan_states(join.left().clone())?,
    )?) as Arc<dyn ExecutionPlan>;
    let sunk = sink(
        join.right().clone(),
        probe_key.index(),
        &build,
        join.null_equality(),
        false,
    )?;
    let Some(probe) = sunk else {
        return Ok(None);
    };
    let reduced = join
        .builder()
        .with_new_children(vec![join.left().clone(), probe])?
        .build()?;
    Ok(Some(Arc::new(reduced)))
}

/// Whether `build` keeps at most half the rows of the tables it reads,
/// by the statistics' estimates: a whole table's keys (Q7's customer,
/// before the nations narrow it in the stage above) would narrow nothing
/// and cost a hash table in every task.
fn selective(build: &Arc<dyn ExecutionPlan>) -> bool {
    let mut read = 0u64;
    let _ = build.apply(|node| {
        if !node.children().is_empty() {
            return Ok(TreeNodeRecursion::Continue);
        }
        let rows = match node.downcast_ref::<RegionScanExec>() {
            Some(scan) => scan.table_rows(),
            None => super::broadcast::estimated_rows(node.as_ref()).map(|r| r as u64),
        };
        read = read.saturating_add(rows.unwrap_or(0));
        Ok(TreeNodeRecursion::Continue)
    });
    super::broadcast::estimated_rows(build.as_ref())
        .is_some_and(|rows| (rows as u64).saturating_mul(2) <= read)
}

/// `plan` narrowed to the rows whose column `key` some row of `build`
/// has, by a right-semi join as low as the key can be followed; None
/// where the path crossed no shuffle (`crossed`: one was crossed above
/// `plan`), as the workers then hand the keys down themselves.
fn sink(
    plan: Arc<dyn ExecutionPlan>,
    key: usize,
    build: &Arc<dyn ExecutionPlan>,
    null_equality: NullEquality,
    crossed: bool,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(below) = key_below_one(&plan, key) {
        let crossed = crossed || is_final_aggregation(&plan);
        let child = plan.children()[0].clone();
        return match sink(child, below, build, null_equality, crossed)? {
            Some(child) => plan
                .replace_children(
                    vec![child],
                    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
                )
                .map(Some),
            None => Ok(None),
        };
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        // (An inner join with a row limit passes only some of its rows:
        // narrowing below it would let others through.)
        if join.join_type() == &JoinType::Inner && plan.fetch().is_none() {
            let Some((on_left, key)) = crate::df::join_keys::input_of_join_column(join, key) else {
                return Ok(None);
            };
            let crossed = crossed || join.mode == PartitionMode::Partitioned;
            let side = usize::from(!on_left);
            let child = join.children()[side].clone();
            let Some(child) = sink(child, key, build, null_equality, crossed)? else {
                return Ok(None);
            };
            let mut children = vec![join.left().clone(), join.right().clone()];
            children[side] = child;
            let rebuilt = join.builder().with_new_children(children)?.build()?;
            return Ok(Some(Arc::new(rebuilt)));
        }
    }
    if !crossed {
        return Ok(None);
    }
    super::broadcast::semi_join(build, plan, &[key], null_equality).map(Some)
}

/// Whether `plan` is the final step of an aggregation in parts (a
/// shuffle of the partial step's groups goes below it).
fn is_final_aggregation(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<AggregateExec>().is_some_and(|a| {
        matches!(
            a.mode(),
            AggregateMode::Final | AggregateMode::FinalPartitioned
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::df::mpp::test_plans::{hash_join, source};
    use datafusion::datasource::source::DataSourceExec;

    /// `source(name, rows)` under a filter, estimated to keep a fifth
    /// of its rows (DataFusion's default selectivity for a predicate it
    /// cannot analyse): a selective build side.
    fn few(name: &str, rows: usize) -> Arc<dyn ExecutionPlan> {
        use datafusion::physical_expr::expressions::IsNotNullExpr;
        use datafusion::physical_plan::filter::FilterExec;
        let predicate = Arc::new(IsNotNullExpr::new(Arc::new(Column::new(name, 0))));
        Arc::new(FilterExec::try_new(predicate, source(name, rows)).unwrap())
    }

    /// The keys of a whole table narrow nothing: no reduction.
    #[test]
    fn a_build_side_of_a_whole_table_is_not_reduced_by() {
        let inner = Arc::new(join(
            source("a", 100),
            source("b", 100),
            PartitionMode::Partitioned,
        ));
        let top = join(source("d", 5), inner, PartitionMode::CollectLeft);
        assert!(reduce_below_shuffles(&top).unwrap().is_none());
    }

    fn join(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
        mode: PartitionMode,
    ) -> HashJoinExec {
        hash_join(left, right, JoinType::Inner, mode)
    }

    /// `dim ⋈ (a ⋈ b)`: with `a ⋈ b` partitioned (a shuffle), `a` is
    /// narrowed by dim's keys below it; with it collected in one task,
    /// nothing changes (the worker hands the keys down itself).
    #[test]
    fn the_keys_go_below_a_partitioned_join_and_no_further_than_needed() {
        for (mode, narrowed) in [
            (PartitionMode::Partitioned, true),
            (PartitionMode::CollectLeft, false),
        ] {
            let inner = Arc::new(join(source("a", 100), source("b", 100), mode));
            let top = join(few("d", 5), inner, PartitionMode::CollectLeft);
            let reduced = reduce_below_shuffles(&top).unwrap();
            assert_eq!(reduced.is_some(), narrowed, "{mode:?}");
            let Some(reduced) = reduced else { continue };
            let top = reduced.downcast_ref::<HashJoinExec>().unwrap();
            let inner = top.right().downcast_ref::<HashJoinExec>().unwrap();
            let semi = inner.left().downcast_ref::<HashJoinExec>().unwrap();
            assert_eq!(semi.join_type(), &JoinType::RightSemi);
            assert!(semi.right().is::<DataSourceExec>());
            assert!(is_reduction(inner.left()));
        }
    }
}
