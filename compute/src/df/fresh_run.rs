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
//!
//! [`fresh_run`] copies the kept plan bottom-up: each operator as its
//! `reset_state` makes it (new metrics, new run state), except these
//! three, whose copies get a fresh `BuildKeys` or run, one per kept one:
//! every operator that shared a `BuildKeys` or a run in the kept plan
//! shares the same fresh one in the copy, and nothing in the copy is
//! shared with the kept plan or with another run's copy. Two runs of one
//! statement at once each have their own links.
//!
//! WHAT IS NOT LINKED AGAIN
//!
//! DataFusion's own dynamic filters (a join's bounds and key lists, a
//! top-k sort's threshold) are made by its optimizer's filter pushdown,
//! which links the producing operator to the consuming scan; a join's
//! reset drops its filter. A plan whose region scans hold one, or
//! another stage's build keys (`mpp/cross_stage.rs`), is therefore not
//! kept (`plan_cache::reusable`); where every key of a join reaches a
//! region scan as build keys, Quarry takes DataFusion's filter out of the
//! scans (`join_keys.rs`), so TPC-H's joins, on BIGINT keys, keep theirs.
//! A join whose filter finds no consumer builds none, kept or not.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::ExecutionPlan;

use super::join_keys::{BuildKeys, BuildKeysExec};
use super::region_scan::RegionScanExec;
use super::shared_subplan::SharedSubplanExec;
use super::{shared_scan, shared_subplan};

/// A copy of `kept` (never run) for one run: see the module docs.
pub fn fresh_run(kept: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let mut links = Links::default();
    kept.transform_up(|node| {
        let copy: Arc<dyn ExecutionPlan> = if let Some(scan) = node.downcast_ref::<RegionScanExec>()
        {
            let scan_runs = &mut links.scan_runs;
            let keys = &mut links.keys;
            Arc::new(scan.for_run(
                |k| fresh_of(keys, k, |k| k.fresh()),
                |r| fresh_of(scan_runs, r, |r| r.fresh()),
            ))
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
/// (the kept plan holds it alive while its copy is made).
#[derive(Default)]
struct Links {
    keys: HashMap<usize, Arc<BuildKeys>>,
    scan_runs: HashMap<usize, Arc<shared_scan::SharedRun>>,
    subplan_runs: HashMap<usize, Arc<shared_subplan::exec::SharedRun>>,
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
    use datafusion::common::tree_node::TreeNodeRecursion;
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
}
