//! Running a planned query: at a fresh timestamp checked against the
//! catalog it was planned over, or at a transaction's snapshot; its
//! answer streamed in the types it announced.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use futures::{StreamExt, TryStreamExt};
use quarry_proto::coprocessor::DagRequest;

use super::fresh_run::fresh_run;
use super::plan_cache::Plans;
use super::region_scan::RegionScanExec;
use crate::output::{QueryOutput, QueryStream};
use crate::{Error, Result};

use super::*;

impl SqlSession {
    pub async fn run(&self, q: PlannedQuery) -> Result<QueryOutput> {
        let out = self.stream_fresh(q).await?;
        Self::gather(out).await
    }

    /// Runs `q` over the snapshot at `read_ts` (a transaction's start_ts),
    /// all of its answer gathered.
    pub async fn run_at(&self, q: PlannedQuery, read_ts: u64) -> Result<QueryOutput> {
        let out = self.stream_at(q, read_ts).await?;
        Self::gather(out).await
    }

    async fn gather(out: QueryStream) -> Result<QueryOutput> {
        let batches: Vec<RecordBatch> = out.batches.try_collect().await?;
        let schema = batches.first().map_or(out.schema, |b| b.schema());
        Ok(QueryOutput { schema, batches })
    }

    /// Starts `q` over the snapshot at `read_ts`: its batches come as the
    /// plan makes them (an aggregation's at its end, a scan's as the
    /// regions answer), so compute holds no more of a large answer than
    /// its operators do. The snapshot stays held for GC (`gc_hold.rs`)
    /// until the stream ends or is dropped; a query whose run is slow is
    /// logged, with its measured plan, at its end.
    pub async fn stream_at(&self, q: PlannedQuery, read_ts: u64) -> Result<QueryStream> {
        self.stream_when(q, futures::future::ready(Ok(read_ts)), false)
            .await
    }

    /// [`Self::stream_at`] a snapshot taken now: one for the whole query,
    /// taken as it starts to run. The timestamp's round trip to the
    /// oracle overlaps the query's physical planning, which does not need
    /// it (only the scans read it, as they start).
    ///
    /// A query planned over a kept catalog ([`SqlSession::plan_kept`])
    /// runs only if the timestamp's catalog version is the one it was
    /// planned at; else it is planned again over a fresh catalog and runs
    /// at a fresh timestamp, provided its answer's columns stay those
    /// announced (`catalog_cache.rs`).
    pub async fn stream_fresh(&self, mut q: PlannedQuery) -> Result<QueryStream> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let check = q.check.take();
        let planned_at = check.as_ref().map(|c| c.version);
        let announced = q.schema();
        let txns = self.txns.clone();
        let asked = std::time::Instant::now();
        let stamp = tokio::spawn(crate::statement_deadline::carried(async move {
            txns.stamp().await
        }));
        let _abort = AbortOnDrop(stamp.abort_handle());
        // Let the request go out before physical planning holds this
        // thread: a task spawned here waits in this worker's next-task
        // slot, which no other worker takes, until this one yields.
        tokio::task::yield_now().await;
        let stale = AtomicBool::new(false);
        // A broken build on purpose, for the chaos checker's test: reads
        // this many ms in the past (then perhaps at a transaction's
        // start_ts, so not repeatable).
        let past_ms = quarry_proto::failpoint::number("stale_read");
        let out = self
            .stream_when(
                q,
                async {
                    let stamp = stamp
                        .await
                        .map_err(|e| Error::Internal(format!("taking a timestamp: {e}")))??;
                    match planned_at {
                        Some(v) if v != stamp.catalog_version => {
                            stale.store(true, Ordering::Relaxed);
                            return Err(Error::Conflict("the catalog changed".into()));
                        }
                        Some(v) => self.cluster.confirm_catalog(v, asked),
                        None => {}
                    }
                    match past_ms {
                        Some(ms) => Ok(stamp.ts.saturating_sub((ms.max(0) as u64) << 18)),
                        None => Ok(stamp.ts),
                    }
                },
                past_ms.is_none(),
            )
            .await;
        let Some(check) = check.filter(|_| stale.load(Ordering::Relaxed)) else {
            return out;
        };
        drop(out);
        self.cluster.forget_catalog();
        // Planned again over a fresh catalog, and checked the same way:
        // its snapshot's version must be the one of the catalog it was
        // planned over (a DDL landing between the two fails the query
        // rather than run a plan older than its snapshot).
        let catalog = self.cluster.catalog().await?;
        let again = self
            .plan_in(check.query, catalog.tables, &catalog.views)
            .await?;
        let changed = || {
            Error::Conflict(
                "the definition of a table or view this query reads changed while it was \
                 being planned (DDL on another compute process): nothing was read; run it again"
                    .into(),
            )
        };
        if again.schema() != announced {
            return Err(changed());
        }
        let txns = self.txns.clone();
        let version = catalog.catalog_version;
        self.stream_when(
            again,
            async move {
                let stamp = txns.stamp().await?;
                match stamp.catalog_version == version {
                    true => Ok(stamp.ts),
                    false => Err(changed()),
                }
            },
            true,
        )
        .await
    }

    async fn stream_when(
        &self,
        q: PlannedQuery,
        read_ts: impl std::future::Future<Output = Result<u64>>,
        repeatable: bool,
    ) -> Result<QueryStream> {
        let schema = q.schema();
        let PlannedQuery {
            plan,
            sql,
            cached,
            params,
            ..
        } = q;
        let started = std::time::Instant::now();
        let reused = matches!(cached, Cached::Physical(_));
        let (task, physical) = match cached {
            // A fresh copy of the kept physical plan: no physical
            // planning, which was most of a short query's planning.
            Cached::Physical(physical) | Cached::Planned(physical) => {
                let mut config = self.base.config().clone();
                if let Some(values) = params {
                    config.set_extension(Arc::new(late_filters::QueryParams(values)));
                }
                let physical = match reused {
                    true => {
                        crate::metrics::physical_plan_reused();
                        fresh_run(physical).map_err(from_df)?
                    }
                    false => physical,
                };
                (self.task_over(config)?, physical)
            }
            Cached::No(ctx) => {
                // EXPLAIN of a distributed query shows its stages.
                if let Some(batch) = crate::df::mpp::explain(&ctx.state(), &plan).await? {
                    let batch = conform(batch, &schema)?;
                    return Ok(QueryStream {
                        schema,
                        batches: futures::stream::iter([Ok(batch)]).boxed(),
                    });
                }
                let df = ctx.execute_logical_plan(plan).await.map_err(from_df)?;
                let task = Arc::new(df.task_ctx());
                (task, df.create_physical_plan().await.map_err(from_df)?)
            }
            Cached::Optimized(ctx, kept) => physical_of(ctx.state(), &kept.optimized).await?,
            Cached::Spread(mpp, mode, kept) => {
                let state = mpp.state(mode).ok_or_else(|| {
                    crate::Error::Internal("a spread query's plan in mode off".into())
                })?;
                // A fresh copy of the kept one-process plan, cut into
                // stages as it is now (`preplanned.rs`).
                // (A copy that cannot be made: planned from the kept
                // optimized plan, as before.)
                let copy = kept
                    .physical
                    .as_ref()
                    .filter(|_| !spread_physical_off())
                    .and_then(|physical| fresh_run(physical.clone()).ok());
                let logical = match copy {
                    Some(copy) => {
                        crate::metrics::physical_plan_reused();
                        crate::df::preplanned::wrap(copy, &kept.optimized)
                    }
                    None => kept.optimized.clone(),
                };
                let physical = physical_plan_in(state, &logical).await?;
                (self.task_over(state.config().clone())?, physical)
            }
            Cached::Keep(ctx, catalog) => {
                let state = ctx.state();
                let spread = crate::df::mpp::is_distributed(state.config().options());
                let optimized = state.optimize(&plan).map_err(from_df)?;
                // A spread plan is kept as its one-process plan, before
                // it is cut into stages, which each run does anew
                // (`preplanned.rs`); either is kept as it is before any
                // run touches it.
                let (physical, planned) = match spread {
                    true => {
                        let one = crate::df::shared_subplan::one_process_plan(&optimized, &state)
                            .await
                            .map_err(from_df)?;
                        match plan_cache::reusable(&one) {
                            true => {
                                let copy = fresh_run(one.clone()).map_err(from_df)?;
                                let wrapped = crate::df::preplanned::wrap(copy, &optimized);
                                (Some(one), physical_of(state, &wrapped).await?)
                            }
                            false => {
                                let wrapped = crate::df::preplanned::wrap(one, &optimized);
                                (None, physical_of(state, &wrapped).await?)
                            }
                        }
                    }
                    false => {
                        let planned = physical_of(state, &optimized).await?;
                        let kept = match plan_cache::reusable(&planned.1) {
                            true => Some(fresh_run(planned.1.clone()).map_err(from_df)?),
                            false => None,
                        };
                        (kept, planned)
                    }
                };
                let plans = Plans {
                    logical: plan,
                    optimized,
                    physical,
                    param_types: Vec::new(),
                };
                self.plans
                    .put(&plan_cache::key(&sql, spread), &catalog, plans);
                planned
            }
        };
        let read_ts = read_ts.await?;
        let hold = self.txns.hold_read(read_ts);
        let snapshot = Snapshot {
            read_ts,
            repeatable,
        };
        let task = self.at_snapshot(task, snapshot, &physical)?;
        let routes = task
            .session_config()
            .get_extension::<crate::df::mpp::routes::TaskRoutes>();
        let stream =
            datafusion::physical_plan::execute_stream(physical.clone(), task).map_err(from_df)?;
        let stream = match routes {
            // EXPLAIN ANALYZE of a distributed query names each task's
            // worker.
            Some(routes) if physical.name() == "DistributedAnalyzeExec" => {
                crate::df::mpp::routes::naming_workers(stream, physical.clone(), routes)
            }
            _ => stream,
        };
        let registration = crate::activity::register(&sql, physical.clone());
        let running = Running {
            stream,
            _hold: hold,
            physical,
            sql,
            started,
            registration,
        };
        let announced = schema.clone();
        let batches = futures::stream::unfold(Some(running), move |running| {
            let announced = announced.clone();
            async move {
                let mut running = running?;
                // A cancel from the console ends the query at once,
                // whatever it waits on (`activity.rs`).
                let next = tokio::select! {
                    biased;
                    _ = running.registration.cancelled() => {
                        return Some((Err(running.registration.error()), None));
                    }
                    next = running.stream.next() => next,
                };
                match next {
                    Some(Ok(batch)) => Some((conform(batch, &announced), Some(running))),
                    Some(Err(e)) => Some((Err(from_df(e)), None)),
                    None => {
                        running.finish();
                        None
                    }
                }
            }
        });
        Ok(QueryStream {
            schema,
            batches: batches.boxed(),
        })
    }
}

/// `schema` with its view types as the plain ones (Utf8View as Utf8,
/// BinaryView as Binary). DataFusion plans `CAST(x AS VARCHAR)` and some
/// string functions as views, which the Flight SQL JDBC driver cannot
/// read ("Unsupported ArrowType Utf8View"); clients get plain strings,
/// as they do from a table's columns ([`conform`] casts).
pub(super) fn plain_types(schema: arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::DataType;
    let plain = |dt: &DataType| match dt {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    };
    if !schema
        .fields()
        .iter()
        .any(|f| plain(f.data_type()).is_some())
    {
        return schema;
    }
    let fields: Vec<arrow::datatypes::FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match plain(f.data_type()) {
            Some(dt) => Arc::new(f.as_ref().clone().with_data_type(dt)),
            None => f.clone(),
        })
        .collect();
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `batch` with the schema announced for its query ([`PlannedQuery::schema`],
/// the logical plan's, which GetFlightInfo sends before the plan runs).
/// The physical plan may know more than the logical one did: a folded
/// constant (`SELECT 36 + 25 * NULLIF(20, 9)`) is never NULL, and ADBC and
/// JDBC refuse a stream whose schema differs from the announced one in
/// anything, nullability included. So every batch is relabelled with the
/// announced schema (a type that differs is cast); a NULL in a column
/// announced NOT NULL is an internal error rather than a silent mismatch.
pub fn conform(batch: RecordBatch, announced: &arrow::datatypes::SchemaRef) -> Result<RecordBatch> {
    if Arc::ptr_eq(&batch.schema(), announced) || batch.schema().as_ref() == announced.as_ref() {
        return Ok(batch);
    }
    if batch.num_columns() != announced.fields().len() {
        return Err(Error::Internal(format!(
            "a query announced {} columns and made {}",
            announced.fields().len(),
            batch.num_columns()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(announced.fields())
        .map(|(c, f)| match c.data_type() == f.data_type() {
            true => Ok(c.clone()),
            false => arrow::compute::cast(c, f.data_type()),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        announced.clone(),
        columns,
        &options,
    )?)
}

/// A query as it runs ([`SqlSession::stream_at`]).
struct Running {
    stream: datafusion::execution::SendableRecordBatchStream,
    /// Its snapshot, held until it ends.
    _hold: crate::gc_hold::ReadHold,
    physical: Arc<dyn ExecutionPlan>,
    sql: String,
    started: std::time::Instant,
    /// Its place in the console's list of running queries.
    registration: crate::activity::Registration,
}

impl Running {
    /// At its end: the slow-query log, with the plan and what each
    /// operator measured (EXPLAIN ANALYZE's).
    fn finish(&self) {
        let elapsed = self.started.elapsed();
        if crate::metrics::is_slow(elapsed) {
            let detail =
                datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(
                    self.physical.as_ref(),
                )
                .indent(true)
                .to_string();
            crate::metrics::log_slow(&self.sql, elapsed, &detail);
        }
    }
}

/// Sets a query's moment in its session config: the snapshot every
/// region scan reads at, and the statement's deadline, if any.
pub(super) fn with_moment(config: &mut SessionConfig, snapshot: Snapshot) {
    config.set_extension(Arc::new(snapshot));
    if let Some(at) = crate::statement_deadline::current_deadline() {
        config.set_extension(Arc::new(Deadline(at)));
    }
}

/// What `SessionState::create_physical_plan` does after optimizing: the
/// physical plan of an optimized `plan`, and the task context to run it
/// in.
pub(super) async fn physical_of(
    state: datafusion::execution::SessionState,
    plan: &LogicalPlan,
) -> Result<(
    Arc<datafusion::execution::TaskContext>,
    Arc<dyn ExecutionPlan>,
)> {
    let physical = physical_plan_in(&state, plan).await?;
    Ok((
        Arc::new(datafusion::execution::TaskContext::from(&state)),
        physical,
    ))
}

/// The physical plan of an optimized `plan`, by `state`'s query planner
/// (a distributed state's cuts it into stages).
pub(super) async fn physical_plan_in(
    state: &datafusion::execution::SessionState,
    plan: &LogicalPlan,
) -> Result<Arc<dyn ExecutionPlan>> {
    state
        .query_planner()
        .create_physical_plan(plan, state)
        .await
        .map_err(from_df)
}

/// The coprocessor DAGs of the region scans in `plan`, in plan order.
pub fn region_dags(plan: &Arc<dyn ExecutionPlan>) -> Vec<DagRequest> {
    let mut out = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<RegionScanExec>() {
            out.push(scan.dag().clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// Whether the failpoint `spread_physical_kept_off` (a switch for
/// timing, not a fault) has a spread statement with a kept plan planned
/// physically at each run, as before `preplanned.rs`.
fn spread_physical_off() -> bool {
    quarry_proto::failpoint::fires("spread_physical_kept_off")
}
