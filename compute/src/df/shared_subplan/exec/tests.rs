//! The shared run: one run for every copy, its error for every copy, and
//! each copy on its own once the run is too large to keep.

use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::common::collect;

use super::*;

fn batch(values: &[i64]) -> RecordBatch {
    RecordBatch::try_from_iter([(
        "v",
        Arc::new(Int64Array::from(values.to_vec())) as arrow::array::ArrayRef,
    )])
    .unwrap()
}

/// A plan of `batches` that counts how often it is executed, and fails
/// after them when `fail` says so.
#[derive(Debug)]
struct Counted {
    input: Arc<dyn ExecutionPlan>,
    runs: Arc<AtomicUsize>,
    fail: bool,
}

impl DisplayAs for Counted {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Counted")
    }
}

impl ExecutionPlan for Counted {
    fn name(&self) -> &str {
        "Counted"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(&self, p: usize, ctx: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let rows = self.input.execute(p, ctx)?;
        let fail = self.fail;
        let tail = futures::stream::iter(
            fail.then(|| Err(DataFusionError::Execution("store 2 is down".into()))),
        );
        // Each batch yields first, so that concurrent copies interleave.
        let rows = rows
            .then(|b| async move {
                tokio::task::yield_now().await;
                b
            })
            .chain(tail);
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), rows)))
    }
}

/// `copies` uses of one shared plan of three batches, each over its own
/// counted copy, sharing a run that keeps at most `max_bytes`.
fn uses(copies: usize, max_bytes: usize, fail: bool) -> (Vec<SharedSubplanExec>, Arc<AtomicUsize>) {
    let batches = vec![batch(&[1, 2]), batch(&[3]), batch(&[4, 5, 6])];
    let schema = batches[0].schema();
    let runs = Arc::new(AtomicUsize::new(0));
    let run = Arc::new(SharedRun::new(copies, max_bytes));
    let execs = (0..copies)
        .map(|i| {
            let source = MemorySourceConfig::try_new_exec(
                std::slice::from_ref(&batches),
                schema.clone(),
                None,
            )
            .unwrap();
            let copy = Arc::new(Counted {
                input: source,
                runs: runs.clone(),
                fail,
            });
            SharedSubplanExec::new(0, copy).with_run(Some((run.clone(), i)))
        })
        .collect();
    (execs, runs)
}

fn values(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

async fn answer(exec: &SharedSubplanExec) -> DfResult<Vec<i64>> {
    let stream = exec.execute(0, Arc::new(TaskContext::default()))?;
    collect(stream).await.map(|b| values(&b))
}

#[tokio::test]
async fn concurrent_copies_share_one_run() {
    let (execs, runs) = uses(3, SHARED_BYTES_MAX, false);
    let (a, b, c) = tokio::join!(answer(&execs[0]), answer(&execs[1]), answer(&execs[2]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for r in [a, b, c] {
        assert_eq!(r.unwrap(), [1, 2, 3, 4, 5, 6]);
    }
    // A copy that asks after the run replays it too.
    assert_eq!(answer(&execs[1]).await.unwrap(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_error_reaches_every_copy() {
    let (execs, runs) = uses(2, SHARED_BYTES_MAX, true);
    let (a, b) = tokio::join!(answer(&execs[0]), answer(&execs[1]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for r in [a, b] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("store 2 is down"), "{e}");
    }
}

#[tokio::test]
async fn a_run_too_large_to_keep_leaves_each_copy_its_own() {
    // One byte: the first batch is already too much.
    let (execs, runs) = uses(2, 1, false);
    let (a, b) = tokio::join!(answer(&execs[0]), answer(&execs[1]));
    // The runner streamed on; the other ran its own copy, once.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(a.unwrap(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(b.unwrap(), [1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn a_dropped_runner_leaves_the_run_to_the_next_copy() {
    let (execs, runs) = uses(2, SHARED_BYTES_MAX, false);
    // The first copy starts the run and is dropped after its first poll.
    let mut first = execs[0]
        .execute(0, Arc::new(TaskContext::default()))
        .unwrap();
    let polled = futures::poll!(first.next());
    assert!(polled.is_pending());
    drop(first);
    assert_eq!(answer(&execs[1]).await.unwrap(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[test]
fn the_rule_gives_the_copies_of_an_id_one_run_and_a_lone_copy_none() {
    let (execs, _) = uses(1, SHARED_BYTES_MAX, false);
    let copy = || execs[0].input.clone();
    let marker = |id| Arc::new(SharedSubplanExec::new(id, copy())) as Arc<dyn ExecutionPlan>;
    let union =
        datafusion::physical_plan::union::UnionExec::try_new(vec![marker(0), marker(1), marker(0)])
            .unwrap();
    let plan = AssignSharedRuns
        .optimize(union, &ConfigOptions::default())
        .unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(true)
        .to_string();
    assert_eq!(shown.matches("id=0, uses=2").count(), 2, "{shown}");
    // The lone copy of id 1 runs as if never marked.
    assert_eq!(shown.matches("SharedSubplanExec").count(), 2, "{shown}");
    assert_eq!(shown.matches("Counted").count(), 3, "{shown}");
}
