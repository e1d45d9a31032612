//! A kept physical plan's copy for one run, its joins' links made anew.
//!
//! WHY
//!
//! The plan cache keeps a statement's physical plan so that a statement
//! that comes again skips physical planning (`plan_cache.rs`). A plan
//! with joins used to be planned for every run: its operators are linked
//! by state that lives for one run, and DataFusion's `reset_plan_states`
//! drops those links rather than making them again. Physical planning is
//! a fixed cost of every join query: about a fifth of compute's samples
//! in TPC-H Q11 (`docs/performance.md`), all of it before the first
//! region request goes out.
//!
//! WHAT LINKS OPERATORS FOR ONE RUN
//!
//! - A hash join's build keys: its [`BuildKeysExec`] copies them into a
//!   [`BuildKeys`], which the probe side's region scans wait for and turn
//!   into a Bloom filter or a key list (`join_keys.rs`).
//! - Identical aggregating region scans sharing one run
//!   (`shared_scan.rs`): the first one polled runs, the others replay.
//! - The copies of a shared subplan sharing one run
//!   (`shared_subplan/`).
//! - DataFusion's own join filters: a hash join's
//!   `DynamicFilterPhysicalExpr` (its build side's bounds and key list),
//!   which its optimizer's filter pushdown hands to the probe side's
//!   region scans, or to a filter above what cannot take it (each holds
//!   a copy remapped to its own columns, sharing the join's state), and
//!   which the join fills in and completes when its build side is done.
//!   Quarry takes it out of the scans that its own build keys reach
//!   (`join_keys.rs`); it stays where they do not (TPC-H Q15: the join on
//!   the greatest revenue leaves its filter in a `FilterExec` above the
//!   join with `revenue0`, a shared subplan that takes no filter).
//!
//! [`fresh_run`] copies the kept plan bottom-up: each operator as its
//! `reset_state` makes it (new metrics, new run state), except these,
//! whose copies get a fresh `BuildKeys`, run or join filter, one per
//! kept one: every operator that shared one in the kept plan shares the
//! same fresh one in the copy, and nothing in the copy is shared with the
//! kept plan or with another run's copy. Two runs of one statement at
//! once each have their own links. A join filter is made as the join's
//! planning makes it (on the join's probe keys, `true` until the build
//! side is done) and each holder's copy of it remapped to the same
//! columns as the kept one was; a holder finds its filter's join by the
//! filter's expression id, which the kept plan's copies share.
//!
//! WHAT IS NOT LINKED AGAIN
//!
//! A join filter held by anything but a region scan or a `FilterExec`, a
//! filter whose join
//! is not in the plan, and another stage's build keys
//! (`mpp/cross_stage.rs`): a plan with one is not kept
//! (`plan_cache::reusable`), and is planned for each run. A top-k sort's
//! and an aggregate's DataFusion filters are switched off (`df/mod.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{internal_err, Result as DfResult};
use datafusion::physical_expr::expressions::{lit, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::ExecutionPlan;

use super::join_keys::{BuildKeys, BuildKeysExec};
use super::region_scan::RegionScanExec;
use super::shared_subplan::SharedSubplanExec;
use super::{shared_scan, shared_subplan};

/// A copy of `kept` (never run) for one run: see the module docs.
pub fn fresh_run(kept: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let mut links = Links {
        join_filters: fresh_join_filters(&kept)?,
        ..Links::default()
    };
    kept.transform_up(|node| {
        let copy: Arc<dyn ExecutionPlan> = if let Some(scan) = node.downcast_ref::<RegionScanExec>()
        {
            let scan_runs = &mut links.scan_runs;
            let keys = &mut links.keys;
            let join_filters = &links.join_filters;
            Arc::new(scan.for_run(
                |k| fresh_of(keys, k, |k| k.fresh()),
                |f| with_fresh_join_filters(f, join_filters),
                |r| fresh_of(scan_runs, r, |r| r.fresh()),
            )?)
        } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
            let predicate = with_fresh_join_filters(filter.predicate(), &links.join_filters)?;
            let copy = FilterExecBuilder::from(filter).with_predicate(predicate);
            Arc::new(copy.build()?)
        } else if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            let copy = join.builder().reset_state().build()?;
            match produced_id(join).and_then(|id| links.join_filters.get(&id)) {
                Some(fresh) => Arc::new(copy.with_dynamic_filter_expr(fresh.clone())?),
                None => Arc::new(copy),
            }
        } else if let Some(tap) = node.downcast_ref::<BuildKeysExec>() {
            let sink = fresh_of(&mut links.keys, tap.sink(), |k| k.fresh());
            Arc::new(tap.with_sink(sink))
        } else if let Some(copy) = node.downcast_ref::<SharedSubplanExec>() {
            let run = copy.run().map(|(run, me)| {
                let run = fresh_of(&mut links.subplan_runs, run, |r| r.fresh());
                (run, *me)
            });
            Arc::new(copy.with_run(run))
        } else {
            node.reset_state()?
        };
        Ok(Transformed::yes(copy))
    })
    .map(|t| t.data)
}

/// The fresh state made for each kept one, by the kept one's address
/// (the kept plan holds it alive while its copy is made); join filters by
/// the kept filter's expression id.
#[derive(Default)]
struct Links {
    keys: HashMap<usize, Arc<BuildKeys>>,
    scan_runs: HashMap<usize, Arc<shared_scan::SharedRun>>,
    subplan_runs: HashMap<usize, Arc<shared_subplan::exec::SharedRun>>,
    join_filters: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
}

/// The expression id of the join filter `join` produces, if it has one.
pub(super) fn produced_id(join: &HashJoinExec) -> Option<u64> {
    let produced = join.dynamic_expressions_produced();
    produced.first().and_then(|f| f.expression_id())
}

/// A fresh filter for each hash join in `kept` that produces one, made
/// as the join's planning makes it: on its probe keys, `true` until its
/// build side is done.
fn fresh_join_filters(
    kept: &Arc<dyn ExecutionPlan>,
) -> DfResult<HashMap<u64, Arc<DynamicFilterPhysicalExpr>>> {
    let mut made = HashMap::new();
    kept.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            if let Some(id) = produced_id(join) {
                let probe_keys = join.on().iter().map(|(_, r)| r.clone()).collect();
                let fresh = DynamicFilterPhysicalExpr::new(probe_keys, lit(true));
                made.insert(id, Arc::new(fresh));
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(made)
}

/// `filter` (a scan's or a `FilterExec`'s) with each join filter in it replaced by the fresh
/// one of its join, remapped to the same columns as the kept one. A join
/// filter whose join is not in `fresh` is an internal error:
/// `plan_cache::reusable` keeps no such plan.
fn with_fresh_join_filters(
    filter: &Arc<dyn PhysicalExpr>,
    fresh: &HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
) -> DfResult<Arc<dyn PhysicalExpr>> {
    filter
        .clone()
        .transform_down(|e| {
            if e.downcast_ref::<DynamicFilterPhysicalExpr>().is_none() {
                return Ok(Transformed::no(e));
            }
            let made = e.expression_id().and_then(|id| fresh.get(&id));
            let Some(made) = made else {
                return internal_err!("a kept plan's join filter {e} has no join in the plan");
            };
            let columns = e.children().into_iter().cloned().collect();
            let copy = (made.clone() as Arc<dyn PhysicalExpr>).with_new_children(columns)?;
            Ok(Transformed::new(copy, true, TreeNodeRecursion::Jump))
        })
        .map(|t| t.data)
}

/// The fresh one for `kept`: made by `fresh` the first time, the same
/// one after.
fn fresh_of<T>(
    made: &mut HashMap<usize, Arc<T>>,
    kept: &Arc<T>,
    fresh: impl FnOnce(&T) -> Arc<T>,
) -> Arc<T> {
    let at = Arc::as_ptr(kept) as usize;
    made.entry(at).or_insert_with(|| fresh(kept)).clone()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use arrow::array::{Int64Array, RecordBatch};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::execution::TaskContext;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::union::UnionExec;

    use super::*;

    /// Two uses of one shared subplan, each over a tap of the same build
    /// keys (as a join's tap and the scans it narrows share them).
    fn kept() -> (Arc<dyn ExecutionPlan>, Arc<BuildKeys>) {
        let batch =
            RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![3, 1, 2])) as _)])
                .unwrap();
        let schema = batch.schema();
        let keys = BuildKeys::new("k".into(), 1);
        let run = Arc::new(shared_subplan::exec::SharedRun::new(2, 1 << 20));
        let uses = (0..2)
            .map(|me| {
                let source =
                    MemorySourceConfig::try_new_exec(&[vec![batch.clone()]], schema.clone(), None)
                        .unwrap();
                let tap = BuildKeysExec::new(source, col("k", &schema).unwrap());
                let tap = Arc::new(tap.with_sink(keys.clone()));
                Arc::new(SharedSubplanExec::new(0, tap).with_run(Some((run.clone(), me))))
                    as Arc<dyn ExecutionPlan>
            })
            .collect();
        (UnionExec::try_new(uses).unwrap(), keys)
    }

    /// The build keys and runs that `plan`'s operators hold, in plan
    /// order.
    fn links(
        plan: &Arc<dyn ExecutionPlan>,
    ) -> (
        Vec<Arc<BuildKeys>>,
        Vec<Arc<shared_subplan::exec::SharedRun>>,
    ) {
        let (mut keys, mut runs) = (Vec::new(), Vec::new());
        plan.apply(|node| {
            if let Some(tap) = node.downcast_ref::<BuildKeysExec>() {
                keys.push(tap.sink().clone());
            }
            if let Some(copy) = node.downcast_ref::<SharedSubplanExec>() {
                runs.push(copy.run().unwrap().0.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        (keys, runs)
    }

    /// Whether `a`, `b` and `c` are three different instances.
    fn distinct<T>(a: &Arc<T>, b: &Arc<T>, c: &Arc<T>) -> bool {
        !Arc::ptr_eq(a, b) && !Arc::ptr_eq(b, c) && !Arc::ptr_eq(a, c)
    }

    #[tokio::test]
    async fn each_copy_links_its_operators_as_the_kept_plan_with_state_of_its_own() {
        let (kept, kept_keys) = kept();
        let (first, second) = (
            fresh_run(kept.clone()).unwrap(),
            fresh_run(kept.clone()).unwrap(),
        );
        let (k0, r0) = links(&kept);
        let (k1, r1) = links(&first);
        let (k2, r2) = links(&second);
        // Shared as in the kept plan...
        for (keys, runs) in [(&k1, &r1), (&k2, &r2)] {
            assert_eq!((keys.len(), runs.len()), (2, 2));
            assert!(
                Arc::ptr_eq(&keys[0], &keys[1]),
                "the taps' keys are no longer shared"
            );
            assert!(
                Arc::ptr_eq(&runs[0], &runs[1]),
                "the copies' run is no longer shared"
            );
        }
        // ... and with nothing of the kept plan's or another copy's.
        assert!(distinct(&k0[0], &k1[0], &k2[0]));
        assert!(distinct(&r0[0], &r1[0], &r2[0]));

        // A run fills its own keys; the kept plan's stay empty for the
        // next copy.
        let ctx = Arc::new(TaskContext::default());
        let rows: usize = datafusion::physical_plan::collect(first.clone(), ctx)
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 6);
        let first_keys = &k1[0];
        assert!(first_keys.wait(Instant::now()).await, "the run's keys");
        assert!(
            !kept_keys.wait(Instant::now()).await,
            "the kept plan's keys"
        );
    }

    /// A hash join on `k` producing `filter`, over two empty inputs, the
    /// probe side's under a filter that holds a copy of it (as DataFusion
    /// leaves one above what takes no filter).
    fn join_with(filter: &Arc<DynamicFilterPhysicalExpr>) -> Arc<dyn ExecutionPlan> {
        use arrow::datatypes::{DataType, Field, Schema};
        use datafusion::common::{JoinType, NullEquality};
        use datafusion::physical_plan::empty::EmptyExec;
        use datafusion::physical_plan::joins::PartitionMode;
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let source = || Arc::new(EmptyExec::new(schema.clone())) as Arc<dyn ExecutionPlan>;
        let k = col("k", &schema).unwrap();
        let held = (filter.clone() as Arc<dyn PhysicalExpr>)
            .with_new_children(vec![k.clone()])
            .unwrap();
        let join = HashJoinExec::try_new(
            source(),
            Arc::new(FilterExec::try_new(held, source()).unwrap()),
            vec![(k.clone(), k)],
            None,
            &JoinType::Inner,
            None,
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )
        .unwrap();
        Arc::new(join.with_dynamic_filter_expr(filter.clone()).unwrap())
    }

    #[test]
    fn each_copy_of_a_join_makes_its_filter_anew_and_a_scan_remaps_that_one() {
        use datafusion::physical_expr::expressions::Column;
        let kept_filter = Arc::new(DynamicFilterPhysicalExpr::new(
            vec![Arc::new(Column::new("k", 0)) as Arc<dyn PhysicalExpr>],
            lit(true),
        ));
        let kept_id = kept_filter.expression_id().unwrap();
        let kept = join_with(&kept_filter);
        // A scan's copy of the filter, remapped to its own columns.
        let remapped = vec![Arc::new(Column::new("o_k", 3)) as Arc<dyn PhysicalExpr>];
        let held = (kept_filter.clone() as Arc<dyn PhysicalExpr>)
            .with_new_children(remapped.clone())
            .unwrap();

        let fresh = fresh_join_filters(&kept).unwrap();
        let made = fresh.get(&kept_id).expect("no fresh filter for the join");
        let made_id = made.expression_id().unwrap();
        assert_ne!(made_id, kept_id);
        let copy = with_fresh_join_filters(&held, &fresh).unwrap();
        assert_eq!(copy.expression_id(), Some(made_id));
        assert_eq!(
            copy.children().into_iter().cloned().collect::<Vec<_>>(),
            remapped
        );
        // The run's join fills in its filter: the scan's copy sees it,
        // remapped; the kept one does not.
        let k = Arc::new(Column::new("k", 0)) as Arc<dyn PhysicalExpr>;
        made.update(Arc::new(
            datafusion::physical_expr::expressions::IsNotNullExpr::new(k),
        ))
        .unwrap();
        assert_eq!(
            copy.snapshot().unwrap().unwrap().to_string(),
            "o_k@3 IS NOT NULL"
        );
        assert_eq!(held.snapshot().unwrap().unwrap().to_string(), "true");

        // Each copy's join produces a filter of its own, and the copy's
        // filter holds that one.
        assert!(super::super::plan_cache::reusable(&kept));
        let produced_and_held = |p: &Arc<dyn ExecutionPlan>| {
            let join = p.downcast_ref::<HashJoinExec>().unwrap();
            let filter = join.right().downcast_ref::<FilterExec>().unwrap();
            let held = filter.predicate().expression_id().unwrap();
            (produced_id(join).unwrap(), held)
        };
        let (first, second) = (
            fresh_run(kept.clone()).unwrap(),
            fresh_run(kept.clone()).unwrap(),
        );
        let ids = [&kept, &first, &second].map(produced_and_held);
        assert_eq!(ids[0], (kept_id, kept_id));
        for (made, held) in ids {
            assert_eq!(made, held, "a filter waits for another run's join");
        }
        let ids = ids.map(|(made, _)| made);
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);

        // A filter whose join is not in the plan is not linked to a
        // filter that never completes: such a plan is not kept.
        let orphan = Arc::new(DynamicFilterPhysicalExpr::new(vec![], lit(true))) as _;
        let err = with_fresh_join_filters(&orphan, &fresh).unwrap_err();
        assert!(err.to_string().contains("has no join in the plan"), "{err}");
        let source = kept.children()[0].clone();
        let waits_for_no_join = Arc::new(FilterExec::try_new(orphan, source).unwrap()) as _;
        assert!(!super::super::plan_cache::reusable(&waits_for_no_join));
    }
}
