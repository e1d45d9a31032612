//! MPP: one query over every compute process, on `datafusion-distributed`.
//!
//! ```text
//!  client ─▶ coordinator (the compute process the query reached)
//!              │ DataFusion plans as for one process; then the
//!              │ distributed planner cuts the plan into stages at hash
//!              │ repartitions, broadcast join build sides and the final
//!              │ gather, and scales each region scan into tasks
//!              ▼
//!            DistributedExec ── stage plans (codec.rs) ──▶ workers
//!              ▲                                   (every compute process,
//!              │ Arrow batches, streamed            on its one gRPC port)
//!              └──────── NetworkShuffle / Coalesce / Broadcast ◀─┘
//!                                  each task: RegionScanExec over its
//!                                  share of the table's regions
//! ```
//!
//! This is TiFlash's MPP and Ballista's shape on an existing engine:
//! `datafusion-distributed` (datafusion-contrib) has no scheduler of its
//! own; a query planner cuts the physical plan at network boundaries,
//! each worker is a tonic service, and batches stream between workers in
//! memory. `docs/design-notes.md` says why it and not Ballista.
//!
//! What Quarry adds:
//! * **Membership** (`workers.rs`): every compute process heartbeats its
//!   address to the meta leader (`ComputeHeartbeat`, PD's store heartbeat
//!   for compute), and reads the live list back once a second; the
//!   planner's worker resolver answers from that list. One that stops
//!   heartbeating drops out within [`workers::HEARTBEAT_TTL`].
//! * **Region tasks** (`tasks.rs`): a region scan that runs as N tasks is
//!   given N disjoint sets of key ranges, the table's regions grouped by
//!   their leader store (TiFlash's split), so each worker asks other
//!   stores; a task scans only its ranges, and a region that split or
//!   moved since is found by the usual retries: key ranges, not region
//!   ids, make the tasks disjoint and complete.
//! * **One snapshot** ([`MppOptions`]): the coordinator's `read_ts` and
//!   deadline travel to every task as a config extension (gRPC
//!   metadata); a distributed scan without one fails rather than read at
//!   a timestamp of its own.
//! * **The switch** ([`MppMode`]): `mpp = 'off' | 'auto' | 'force'`, a
//!   compute config key and a session setting. `off` plans exactly as
//!   one process does. `force` distributes every region scan over the
//!   live compute processes, a task per region at most. `auto`
//!   distributes a statement only when a live compute process runs on
//!   another host (processes on one host share its cores:
//!   `Workers::adds_cores`) and it names a table whose
//!   statistics put it above [`AUTO_MIN_ROWS`] rows; within it, a scan
//!   that aggregates in the stores or reads a few rows by key stays one
//!   task: Q6-sized work stays in one process.
//!
//! * **Broadcast joins** (`broadcast.rs`): a partitioned hash join whose
//!   build side is estimated at most [`broadcast::BROADCAST_MAX_ROWS`]
//!   rows (or more rows of a narrow build side, under
//!   [`broadcast::BROADCAST_MAX_BYTES`]) becomes a broadcast join, so the
//!   join stays in its probe scan's stage instead of shuffling both sides
//!   over the network.
//! * **Co-located joins** (`colocate.rs`): a hash join whose two sides
//!   are scans of tables clustered on the join key (orders and lineitem
//!   on the order key) runs in their scans' stage: each scan is split
//!   into tasks by ranges of the key's values rather than by regions,
//!   the same ranges on both sides, and the join's repartitions stay
//!   inside each task, so nothing is shuffled or broadcast.
//! * **Dimension tables where they are joined** (`replicate.rs`,
//!   `across_shuffles.rs`): a small one-task broadcast stage runs inside
//!   each task of the stage that joins it, and a small selective
//!   dimension's keys go below the shuffles under its join as a
//!   right-semi join, so the key filters below reach the scans they
//!   narrow in one process.
//! * **Join filters within a stage**: the coordinator plans without the
//!   join filters handed to region scans (a join and the scan it probes
//!   may end up in different stages); each worker adds them to the stage
//!   it runs, where a join and its probe scan are in one process, and the
//!   coordinator to its own stage once the plan is cut (`head_stage.rs`).
//! * **Join keys across stages** (`cross_stage.rs`): a broadcast join's
//!   build keys, whole in each of its tasks, go through a board in each
//!   process to the region scans of the stages below its probe side's
//!   shuffles (and to those below any join whose build key they bound:
//!   Q21's anti join), which wait for them as for a join in their stage.
//! * **Probe sides started early** (`early_probes.rs`): a hash join
//!   whose probe side arrives over an exchange, and on which nothing
//!   waits for its keys, starts that side with its build side, so two
//!   chains of stages overlap (Q15's two copies of its view, whose equal
//!   requests the stores then answer once).
//! * **Secure clusters** (`channels.rs`, `auth.rs`): worker calls go over
//!   mutual TLS with the process's cluster certificate, and a worker
//!   admits only callers that present one signed by the cluster's CA (a
//!   client's login does not open the worker service).
//!
//! * **Task counts** (`tasks.rs`): a region scan asks for a task per
//!   region, and a join whose build side is broadcast runs in at most as
//!   many tasks as the region scans on its probe side ask for (where that
//!   side reads no shuffle or union), so no task scans nothing and takes a
//!   copy of the build side all the same. A part of a stage estimated
//!   under [`tasks::SMALL_STAGE_ROWS`] rows (`estimate.rs`: a consumer of
//!   small shuffles, a broadcast join whose output is small) runs as one
//!   task, and the library folds chains of one-task stages into one.
//!
//! Caveats of this first cut (each is a line in `docs/design-notes.md`):
//! shared scans are off in a distributed plan; a spread statement reuses
//! the plan cache's optimized plan and, where it can be copied, its
//! one-process physical plan, but is cut into stages at each run
//! (`plan_cache.rs`, "Spread queries"); a query in an explicit
//! transaction is spread
//! (its tasks read at the transaction's start_ts, where the stores show
//! its own writes) but not run again when a worker is lost.

mod across_shuffles;
pub mod broadcast;
mod channels;
pub mod codec;
pub mod colocate;
pub mod cross_stage;
mod early_probes;
pub mod estimate;
mod folded;
pub mod functions;
mod head_stage;
pub mod repeatable;
pub mod replicate;
pub mod routes;
pub mod runtimes;
pub mod tasks;
#[cfg(test)]
mod test_plans;
pub mod workers;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use datafusion::common::extensions_options;
use datafusion::config::ConfigExtension;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion_distributed::{DistributedConfig, DistributedExt, SessionStateBuilderExt};

use crate::df::region_scan::ScanContext;
use crate::Result;

/// A scan whose table has at least this many rows (by its statistics) is
/// distributed under `mpp = 'auto'`.
pub const AUTO_MIN_ROWS: u64 = 1_000_000;

pub use crate::config::MppMode;

extensions_options! {
    /// What every task of a distributed query needs from its coordinator,
    /// sent with each stage as gRPC metadata (`datafusion-distributed`'s
    /// option extensions).
    pub struct MppOptions {
        /// `auto` or `force` (a distributed plan is never made under `off`).
        pub mode: String, default = "auto".to_string()
        /// The query's snapshot: every task's region scans read at it.
        pub read_ts: u64, default = 0
        /// Whether `read_ts` is no transaction's start_ts (`df::Snapshot`).
        pub repeatable: bool, default = false
        /// The statement's deadline, milliseconds since the Unix epoch.
        pub deadline_unix_ms: u64, default = 0
        /// The session's time zone (`datafusion.execution.time_zone`):
        /// DataFusion's own options do not travel to workers.
        pub time_zone: String, default = "+00:00".to_string()
        /// Which query a task belongs to: the tasks of one query in a
        /// process share its memory pool (`runtimes.rs`).
        pub query_id: String, default = String::new()
        /// Whether the two lists below are the functions the query's
        /// plan calls: a task's session then registers only those
        /// (`functions.rs`), else every function.
        pub functions_listed: bool, default = false
        /// The scalar functions the plan calls, comma-separated.
        pub scalar_functions: String, default = String::new()
        /// The aggregate functions the plan calls, comma-separated.
        pub aggregate_functions: String, default = String::new()
    }
}

impl ConfigExtension for MppOptions {
    const PREFIX: &'static str = "quarry_mpp";
}

impl MppOptions {
    /// The deadline as an instant of this process (None: not set).
    pub fn deadline(&self) -> Option<Instant> {
        if self.deadline_unix_ms == 0 {
            return None;
        }
        let now = unix_ms();
        Some(Instant::now() + Duration::from_millis(self.deadline_unix_ms.saturating_sub(now)))
    }

    /// `at` as milliseconds since the Unix epoch.
    pub fn deadline_of(at: Instant) -> u64 {
        unix_ms() + at.saturating_duration_since(Instant::now()).as_millis() as u64
    }

    pub fn mode(&self) -> MppMode {
        MppMode::parse(&self.mode).unwrap_or(MppMode::Auto)
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub use channels::Channels;

/// `base` (a session state with Quarry's functions and rules) able to
/// plan distributed queries over `workers`: the distributed planner, the
/// codec, the region scans' task handlers, [`MppOptions`] propagated to
/// the tasks, and join filters to region scans off (their producer and
/// consumer may end up in different processes).
pub fn distributed_state(
    base: &SessionState,
    scan: &ScanContext,
    workers: Arc<workers::Workers>,
    worker: &datafusion_distributed::Worker,
    channels: &Channels,
    mode: MppMode,
) -> SessionState {
    let mut config = base.config().clone();
    let opts = config.options_mut();
    opts.optimizer.enable_join_dynamic_filter_pushdown = false;
    let config = config.with_distributed_option_extension(MppOptions {
        mode: mode.as_str().into(),
        ..Default::default()
    });
    let mut builder = SessionStateBuilder::new_from_existing(base.clone())
        .with_config(config)
        .with_physical_optimizer_rules(broadcast::after_join_selection(base.physical_optimizers()))
        // Tasks routed to this process run in it, not through its port.
        .with_distributed_local_worker_context(worker.to_local_worker_context(workers.own_url()))
        .with_distributed_worker_resolver(workers::Resolver(workers.clone()))
        .with_distributed_channel_resolver(channels.clone())
        .with_distributed_route_tasks_handler(routes::handler(workers.clone()))
        .with_distributed_planner()
        .with_distributed_user_codec(codec::QuarryCodec::new(scan.clone()))
        .with_distributed_desired_task_count_handler(tasks::DesiredTasks::new(scan.clone()))
        .with_distributed_scale_up_leaf_node_handler(tasks::scale_up_region_scan);
    // Batches between processes on one host are not compressed: LZ4
    // (the library's default) only spends CPU there, the cores the
    // query runs on.
    if !workers.adds_cores() {
        if let Some(d) = builder
            .config()
            .as_mut()
            .and_then(|c| DistributedConfig::from_config_options_mut(c.options_mut()).ok())
        {
            d.compression = "none".into();
        }
    }
    if let Some(inner) = builder.query_planner().take() {
        builder = builder.with_query_planner(Arc::new(replicate::ReplicatingPlanner {
            inner,
            workers: workers.clone(),
            join_key_list_max: scan.join_key_list_max,
        }));
    }
    builder.build()
}

/// The worker service: each task's session has `base`'s functions, the
/// codec over this process's region scans, the [`MppOptions`] its
/// coordinator sent, and, where queries have a memory limit, its query's
/// runtime in this process (`runtimes`): the memory pool that every task
/// of the query here shares, and on the coordinator the query itself. A
/// query past it fails with the limit named (its sorts and aggregations
/// spill first), as a query in one process does. Each of a task's
/// partitions counts in `quarry_compute_mpp_task_streams_running` while
/// it streams (`folded.rs`).
pub fn worker(
    base: &SessionState,
    scan: &ScanContext,
    channels: &Channels,
    runtimes: Arc<runtimes::QueryRuntimes>,
) -> datafusion_distributed::Worker {
    let functions = Arc::new(functions::Functions::of(base));
    let scan = scan.clone();
    let channels = channels.clone();
    datafusion_distributed::Worker::from_session_builder(
        move |mut ctx: datafusion_distributed::WorkerQueryContext| {
            let functions = functions.clone();
            let scan = scan.clone();
            let channels = channels.clone();
            let runtimes = runtimes.clone();
            async move {
                crate::metrics::mpp_task();
                // A bare builder with the task's config and runtime, not
                // the library's `with_default_features` one: a task only
                // decodes and runs a physical plan, and registering the
                // default functions and then `base`'s (which include
                // them) for every task was a tenth of a worker's CPU in
                // Q2 (`docs/performance.md`).
                let mut builder = SessionStateBuilder::new();
                if let Some(config) = ctx.builder.config().take() {
                    builder = builder.with_config(config);
                }
                let mut builder = builder
                    .with_distributed_channel_resolver(channels)
                    .with_distributed_user_codec(codec::QuarryCodec::new(scan.clone()))
                    .with_distributed_worker_plan_rewrite_handler(stage_as_one_process_plans_it)
                    .with_distributed_option_extension_from_headers::<MppOptions>(&ctx.headers)?;
                // Only the functions the query's plan calls, where its
                // coordinator listed them (`functions.rs`).
                let listed = builder
                    .config()
                    .as_ref()
                    .and_then(|c| c.options().extensions.get::<MppOptions>())
                    .and_then(|o| functions.listed(o));
                let mut builder = match listed {
                    Some((scalar, aggregate)) => builder
                        .with_scalar_functions(scalar)
                        .with_aggregate_functions(aggregate),
                    None => builder
                        .with_scalar_functions(functions.scalar.clone())
                        .with_aggregate_functions(functions.aggregate.clone())
                        .with_window_functions(functions.window.clone()),
                }
                .with_higher_order_functions(functions.higher_order.clone());
                let mut query_id = String::new();
                if let Some(config) = builder.config().as_mut() {
                    let (zone, id) = config
                        .options()
                        .extensions
                        .get::<MppOptions>()
                        .map(|o| (Some(o.time_zone.clone()), o.query_id.clone()))
                        .unwrap_or_default();
                    query_id = id;
                    let opts = config.options_mut();
                    opts.execution.time_zone = zone;
                    crate::df::join_filter_options(opts, scan.join_key_list_max);
                }
                let runtime = match runtimes.of(&query_id)? {
                    Some(limited) => Some(limited),
                    None => ctx.builder.runtime_env().take(),
                };
                if let Some(runtime) = runtime {
                    builder = builder.with_runtime_env(runtime);
                }
                Ok(builder.build())
            }
        },
    )
}

/// A stage as its worker runs it, finished as one process's plan is:
/// its hash joins hand their build keys to the region scans they probe
/// within the stage (DataFusion's dynamic filters, then Quarry's key
/// filters, `df/join_keys.rs`; the coordinator leaves both out, not
/// knowing which stage a join and its scan end up in), and its integer
/// arithmetic checked (`df/checked_arithmetic.rs`: `datafusion-proto`
/// does not carry a `BinaryExpr`'s fail-on-overflow flag).
fn stage_as_one_process_plans_it(
    ev: datafusion_distributed::WorkerPlanRewriteEvent,
) -> datafusion::common::Result<datafusion_distributed::WorkerPlanRewriteEventResponse> {
    use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
    use datafusion::physical_optimizer::PhysicalOptimizerRule;
    let opts = ev.session_config.options();
    let plan = FilterPushdown::new_post_optimization().optimize(ev.plan, opts)?;
    let plan = crate::df::join_keys::add_build_keys(plan)?;
    let plan = crate::df::checked_arithmetic::CheckedArithmetic.optimize(plan, opts)?;
    // Added nodes folded into their inputs: EXPLAIN ANALYZE matches
    // this stage's metrics to the coordinator's plan node by node.
    let plan = folded::as_planned(plan)?;
    Ok(datafusion_distributed::WorkerPlanRewriteEventResponse::new(
        plan,
    ))
}

/// Whether `config` plans a distributed query (its join filters and
/// shared scans stay off).
pub fn is_distributed(config: &datafusion::config::ConfigOptions) -> bool {
    config.extensions.get::<MppOptions>().is_some()
}

/// `EXPLAIN` of a distributed query: DataFusion's explain plans its
/// statement with its own physical planner, past the distributed one, so
/// it would show the plan of one process. This answers the same two
/// columns (`plan_type`, `plan`) with the logical plan and the
/// distributed physical plan, its stages and tasks (None: not a plain
/// EXPLAIN, or not in a distributed session).
pub async fn explain(
    state: &SessionState,
    plan: &datafusion::logical_expr::LogicalPlan,
) -> Result<Option<arrow::array::RecordBatch>> {
    use arrow::array::{RecordBatch, StringArray};
    use datafusion::logical_expr::LogicalPlan;
    let LogicalPlan::Explain(explain) = plan else {
        return Ok(None);
    };
    if !is_distributed(state.config().options()) || explain.verbose {
        return Ok(None);
    }
    let optimized = state.optimize(&explain.plan).map_err(crate::df::from_df)?;
    let physical = crate::df::running::physical_plan_in(state, &optimized).await?;
    let text = datafusion_distributed::display_plan_ascii(physical.as_ref(), false);
    let schema = Arc::new(plan.schema().as_arrow().clone());
    let types = StringArray::from(vec!["logical_plan", "physical_plan"]);
    let plans = StringArray::from(vec![optimized.display_indent().to_string(), text]);
    RecordBatch::try_new(schema, vec![Arc::new(types), Arc::new(plans)])
        .map(Some)
        .map_err(|e| crate::Error::Internal(format!("EXPLAIN's answer: {e}")))
}
