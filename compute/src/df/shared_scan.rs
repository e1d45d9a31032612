//! One run for identical aggregating region scans within a plan.
//!
//! DataFusion inlines every reference to a view or CTE, so a query that
//! names one twice holds two copies of its plan. TPC-H Q15 is the example:
//! `revenue0`, a quarter of lineitem grouped by supplier, is joined to
//! supplier and also read by `(SELECT max(total_revenue) FROM revenue0)`.
//! After [`PartialAggregateIntoRegions`](super::rules) both copies end in
//! region scans with the same DAG, and each would read the same quarter of
//! lineitem in every region.
//!
//! [`ShareIdenticalScans`], a physical optimizer rule that runs last,
//! groups the plan's aggregating region scans by table and DAG and gives
//! each group of two or more one [`SharedRun`]:
//!
//! ```text
//!  HashJoinExec                          the first scan polled runs the DAG
//!    AggregateExec(Final)                over the regions and keeps its
//!      RegionScanExec(lineitem) ──┐      batches (partial states);
//!    …                            ├──▶ SharedRun ◀── the others wait for
//!      AggregateExec(Final)       │      it and replay the same batches
//!        RegionScanExec(lineitem)─┘
//! ```
//!
//! Only aggregating scans share: their output is partial states, at most
//! groups × regions rows, so holding it until every consumer has read it
//! is cheap; a plain scan's output can be a whole table. A scan that
//! shares also gives up a join's build-key filter (`join_keys.rs`) when
//! another scan of its group has none: that one must read every group
//! anyway, and the shared run costs one scan where the filter could at
//! best make the second one cheaper.
//!
//! The runner's consumer does not see the first batch before the last
//! region has answered (the batches are collected, then replayed): an
//! aggregating scan feeds a Final aggregation, which waits for all of them
//! anyway. An error in the run reaches every consumer.
//!
//! Left out: sharing plain scans (Q17's and Q21's reads of lineitem,
//! whose filters differ) would need a bounded buffer and consumers that
//! advance together. Joins and aggregations a query repeats whole (Q2's
//! and Q11's reads of partsupp with their joins) share one run one level
//! up, in the logical plan (`shared_subplan/`).

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use futures::{Stream, TryStreamExt};
use parking_lot::Mutex;
use quarry_proto::coprocessor::DagRequest;

use super::region_scan::RegionScanExec;
use crate::dispatch::DispatchStats;

/// The result of one region scan's run, shared by every scan that holds it.
#[derive(Debug)]
pub struct SharedRun {
    result: tokio::sync::OnceCell<Result<Vec<RecordBatch>, Arc<DataFusionError>>>,
    /// How many scans share this run (for EXPLAIN).
    pub scans: usize,
    /// The run's totals, which every sharing scan shows in EXPLAIN ANALYZE.
    pub last_run: Arc<Mutex<Option<DispatchStats>>>,
}

impl SharedRun {
    pub fn new(scans: usize) -> Self {
        SharedRun {
            result: tokio::sync::OnceCell::new(),
            scans,
            last_run: Arc::default(),
        }
    }

    /// A run of the same scans not started yet (`fresh_run.rs`).
    pub fn fresh(&self) -> Arc<SharedRun> {
        Arc::new(SharedRun::new(self.scans))
    }

    /// The run's batches: `run` drives the regions for the first caller;
    /// every later (or concurrent) caller waits for that and gets the same
    /// batches, or the same error.
    pub async fn batches<S>(&self, run: S) -> DfResult<Vec<RecordBatch>>
    where
        S: Stream<Item = DfResult<RecordBatch>>,
    {
        let result = self
            .result
            .get_or_init(|| async { run.try_collect::<Vec<_>>().await.map_err(Arc::new) })
            .await;
        match result {
            Ok(batches) => Ok(batches.clone()),
            Err(e) => Err(DataFusionError::Shared(e.clone())),
        }
    }
}

/// The physical optimizer rule: see the module docs.
#[derive(Debug)]
pub struct ShareIdenticalScans;

impl PhysicalOptimizerRule for ShareIdenticalScans {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Scans of a distributed plan run in several processes (`mpp/`).
        if crate::df::mpp::is_distributed(config) {
            return Ok(plan);
        }
        // Groups of equal aggregating scans, each as (table, DAG) and how
        // many scans run it and how many of them have no join filter.
        let mut groups: Vec<(i64, DagRequest, usize, usize)> = Vec::new();
        plan.apply(|node| {
            if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
                // (A scan whose constants come with each run has only
                // placeholders' defaults in its DAG: never shared.)
                if scan.dag().aggregation.is_some() && !scan.has_late_filters() {
                    let (table, dag) = (scan.table().id, scan.dag());
                    let i = match groups.iter().position(|g| g.0 == table && &g.1 == dag) {
                        Some(i) => i,
                        None => {
                            groups.push((table, dag.clone(), 0, 0));
                            groups.len() - 1
                        }
                    };
                    groups[i].2 += 1;
                    groups[i].3 += usize::from(!scan.has_join_filters());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        // A group whose every member has its own join filter runs apart.
        groups.retain(|g| g.2 > 1 && g.3 > 0);
        if groups.is_empty() {
            return Ok(plan);
        }
        let runs: Vec<Arc<SharedRun>> = groups
            .iter()
            .map(|g| Arc::new(SharedRun::new(g.2)))
            .collect();
        plan.transform_up(|node| {
            let Some(scan) = node.downcast_ref::<RegionScanExec>() else {
                return Ok(Transformed::no(node));
            };
            let (table, dag) = (scan.table().id, scan.dag());
            if scan.has_late_filters() {
                return Ok(Transformed::no(node));
            }
            match groups.iter().position(|g| g.0 == table && &g.1 == dag) {
                Some(i) => Ok(Transformed::yes(Arc::new(scan.sharing(runs[i].clone())))),
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quarry_share_identical_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow::array::Int64Array;
    use futures::StreamExt;

    use super::*;

    fn batch(v: i64) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from(vec![v])) as arrow::array::ArrayRef,
        )])
        .unwrap()
    }

    /// A run that counts how often it is driven, yielding after each batch
    /// so that concurrent consumers interleave.
    fn counted_run(
        runs: &Arc<AtomicUsize>,
        result: Vec<DfResult<RecordBatch>>,
    ) -> impl Stream<Item = DfResult<RecordBatch>> {
        let runs = runs.clone();
        futures::stream::once(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            futures::stream::iter(result)
        })
        .flatten()
        .then(|b| async move {
            tokio::task::yield_now().await;
            b
        })
    }

    #[tokio::test]
    async fn concurrent_consumers_share_one_run() {
        let run = SharedRun::new(2);
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = tokio::join!(
            run.batches(counted_run(&runs, vec![Ok(batch(1)), Ok(batch(2))])),
            run.batches(counted_run(&runs, vec![Ok(batch(7))])),
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        // A consumer that comes after the run replays it too.
        let c = run.batches(counted_run(&runs, vec![])).await.unwrap();
        assert_eq!((c, runs.load(Ordering::SeqCst)), (a, 1));
    }

    #[tokio::test]
    async fn an_error_reaches_every_consumer() {
        let run = SharedRun::new(2);
        let runs = Arc::new(AtomicUsize::new(0));
        let failing = || {
            counted_run(
                &runs,
                vec![
                    Ok(batch(1)),
                    Err(DataFusionError::Execution("store 2 is down".into())),
                ],
            )
        };
        let (a, b) = tokio::join!(run.batches(failing()), run.batches(failing()));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        for r in [a, b] {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("store 2 is down"), "{e}");
        }
    }

    #[tokio::test]
    async fn a_dropped_runner_hands_the_run_to_a_waiting_consumer() {
        let run = SharedRun::new(2);
        let runs = Arc::new(AtomicUsize::new(0));
        // The first consumer is cancelled while its run waits on storage.
        let stalled = futures::stream::once(async {
            futures::future::pending::<()>().await;
            Ok(batch(0))
        });
        let first = run.batches(stalled);
        let timed = tokio::time::timeout(std::time::Duration::from_millis(20), first).await;
        assert!(timed.is_err());
        let b = run
            .batches(counted_run(&runs, vec![Ok(batch(3))]))
            .await
            .unwrap();
        assert_eq!((b, runs.load(Ordering::SeqCst)), (vec![batch(3)], 1));
    }
}
