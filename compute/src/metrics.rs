//! The compute process's Prometheus metrics (default registry, served at
//! the status port's `/metrics` by the `quarry` binary) and its slow-query
//! log.
//!
//! Statements are counted where they run, in [`crate::engine::QueryEngine`]:
//! queries (planned by DataFusion, run over the regions) in `run_in` or,
//! streamed, `stream_in` (a streamed query's time runs to its last batch
//! handed to the read-ahead buffer, so a slow reader of a large answer
//! adds to it), every other statement (DDL, INSERT, UPDATE, DELETE, BEGIN …) in
//! `prepare_sql_in`. An error is counted by its category
//! ([`crate::Error::kind`]), the categories a client acts on.
//!
//! The slow-query log: a query that takes at least the threshold
//! (`slow-query-ms`, 300 ms by default) is logged at WARN with its SQL and
//! its physical plan annotated with what each operator measured — the
//! region scans' per-region task statistics (regions, keys and packs
//! scanned and skipped, wait and process time), as EXPLAIN ANALYZE shows
//! them, when its run ends (`df::SqlSession::stream_at`). Other statements are logged with their
//! SQL and time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge,
    HistogramVec, IntCounter, IntCounterVec, IntGauge,
};

macro_rules! metric {
    ($name:ident: $ty:ty = $reg:ident!($($arg:tt)*)) => {
        pub static $name: LazyLock<$ty> =
            LazyLock::new(|| $reg!($($arg)*).expect("a metric registers once"));
    };
}

metric!(STATEMENTS: IntCounterVec = register_int_counter_vec!(
    "quarry_compute_statements_total",
    "Statements run, by kind: query (SELECT, WITH, EXPLAIN) or statement (DDL, INSERT, UPDATE, DELETE, transaction control)",
    &["kind"]
));
metric!(STATEMENT_ERRORS: IntCounterVec = register_int_counter_vec!(
    "quarry_compute_statement_errors_total",
    "Statements that failed, by error kind: invalid_input, overflow, unavailable, deadline, resource_exhausted, conflict, internal",
    &["kind"]
));
metric!(STATEMENT_DURATION: HistogramVec = register_histogram_vec!(
    "quarry_compute_statement_duration_seconds",
    "Time to run a statement, by kind",
    &["kind"],
    prometheus::exponential_buckets(0.0005, 2.0, 16).unwrap_or_default()
));
metric!(SLOW_STATEMENTS: IntCounter = register_int_counter!(
    "quarry_compute_slow_statements_total",
    "Statements at or over the slow-query threshold (each logged at WARN)"
));

metric!(PLAN_CACHE: IntCounterVec = register_int_counter_vec!(
    "quarry_compute_plan_cache_total",
    "Queries planned, by what the plan cache gave: hit (its optimized plan was kept), miss (planned and kept), uncacheable (EXPLAIN, now() and other non-immutable functions, information_schema)",
    &["result"]
));

/// Counts a query's plan-cache lookup by what it found (`hit`, `miss`,
/// `uncacheable`: `df/plan_cache.rs`'s `Lookup::label`).
pub fn plan_cache(result: &'static str) {
    PLAN_CACHE.with_label_values(&[result]).inc();
}

metric!(PHYSICAL_PLANS_REUSED: IntCounter = register_int_counter!(
    "quarry_compute_physical_plans_reused_total",
    "Plan-cache hits run from a fresh copy of their kept physical plan instead of planning it again (joins and their join filters included; a distributed query's copy is still cut into stages at each run)"
));

metric!(MEMORY_RELEASES: IntCounter = register_int_counter!(
    "quarry_compute_memory_releases_total",
    "Queries whose end asked the process's threads to hand their free memory back to the kernel (their memory pool held 64 MiB or more at its peak: df/memory_release.rs)"
));

metric!(MPP_RETRIES: IntCounter = register_int_counter!(
    "quarry_compute_mpp_retries_total",
    "Queries over several compute processes run again after a worker became unreachable (mpp/)"
));

metric!(MPP_TASK_STREAMS: IntGauge = register_int_gauge!(
    "quarry_compute_mpp_task_streams_running",
    "Partitions of distributed queries' stage tasks this process runs as a worker (its own queries' included), each from its start until its stream ends or is dropped"
));

/// Something running, counted in a gauge until the guard drops.
#[derive(Debug)]
pub struct Running(&'static IntGauge);

impl Running {
    fn start(gauge: &'static IntGauge) -> Running {
        gauge.inc();
        Running(gauge)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Counts a task's partition as streaming in
/// `quarry_compute_mpp_task_streams_running` until the guard drops.
pub fn mpp_task_stream() -> Running {
    Running::start(&MPP_TASK_STREAMS)
}

metric!(TABLE_ANALYSES: IntGauge = register_int_gauge!(
    "quarry_compute_table_analyses_running",
    "Table statistics this process is taking in the background (a row count, and an analysis where the count moved; or a condition's share measured on a sample), each from the statement that started it until it ends (`df/stats.rs`)"
));

/// Counts a table's statistics as being taken in
/// `quarry_compute_table_analyses_running` until the guard drops.
pub fn table_analysis() -> Running {
    Running::start(&TABLE_ANALYSES)
}

metric!(MPP_TASKS: IntCounter = register_int_counter!(
    "quarry_compute_mpp_tasks_total",
    "Stage tasks of distributed queries this process set up as a worker (its own queries' included)"
));

/// Counts a stage task set up as a worker.
pub fn mpp_task() {
    MPP_TASKS.inc();
}

/// Counts a distributed query run again without an unreachable worker.
pub fn mpp_retry() {
    MPP_RETRIES.inc();
}

/// Counts a query run from its kept physical plan (`df/plan_cache.rs`).
pub fn physical_plan_reused() {
    PHYSICAL_PLANS_REUSED.inc();
}

metric!(REGION_ROWS: IntCounter = register_int_counter!(
    "quarry_compute_region_rows_total",
    "Rows the regions' scans sent to this process's queries (after the filters and partial aggregations they ran)"
));
metric!(LOGIN_FAILURES: IntCounter = register_int_counter!(
    "quarry_compute_login_failures_total",
    "Flight SQL logins refused (unknown user or wrong password)"
));

/// Counts a refused login.
pub fn login_failed() {
    LOGIN_FAILURES.inc();
}

/// The slow-query threshold in ms (0: off); the process's configuration.
static SLOW_QUERY_MS: AtomicU64 = AtomicU64::new(300);

pub fn set_slow_query_threshold(ms: u64) {
    SLOW_QUERY_MS.store(ms, Ordering::Relaxed);
}

/// Whether a statement that took `elapsed` belongs in the slow-query log.
pub fn is_slow(elapsed: Duration) -> bool {
    let ms = SLOW_QUERY_MS.load(Ordering::Relaxed);
    ms > 0 && elapsed >= Duration::from_millis(ms)
}

/// Counts a finished statement of `kind` ("query" or "statement").
pub fn observe<T>(kind: &str, elapsed: Duration, result: &crate::Result<T>) {
    STATEMENTS.with_label_values(&[kind]).inc();
    STATEMENT_DURATION
        .with_label_values(&[kind])
        .observe(elapsed.as_secs_f64());
    if let Err(e) = result {
        STATEMENT_ERRORS.with_label_values(&[e.kind()]).inc();
    }
}

/// Counts rows a region scan sent.
pub fn region_rows(n: usize) {
    REGION_ROWS.inc_by(n as u64);
}

/// A statement in the slow-query log, as the console shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SlowStatement {
    pub at_unix_ms: u64,
    pub elapsed_ms: u64,
    pub sql: String,
    /// A query's plan with what each operator measured (EXPLAIN
    /// ANALYZE's), else empty.
    pub detail: String,
}

/// How many slow statements the console's list keeps (the log keeps all).
const SLOW_KEPT: usize = 100;

static SLOW_LOG: LazyLock<parking_lot::Mutex<std::collections::VecDeque<SlowStatement>>> =
    LazyLock::new(Default::default);

/// The latest slow statements, newest first.
pub fn slow_statements() -> Vec<SlowStatement> {
    SLOW_LOG.lock().iter().rev().cloned().collect()
}

/// Logs a slow statement (with `detail`: its plan and statistics, if a
/// query) and counts it.
pub fn log_slow(sql: &str, elapsed: Duration, detail: &str) {
    SLOW_STATEMENTS.inc();
    {
        let mut log = SLOW_LOG.lock();
        if log.len() == SLOW_KEPT {
            log.pop_front();
        }
        log.push_back(SlowStatement {
            at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            elapsed_ms: elapsed.as_millis() as u64,
            sql: sql.to_string(),
            detail: detail.to_string(),
        });
    }
    tracing::warn!(
        target: "slow_query",
        elapsed_ms = elapsed.as_millis() as u64,
        "slow statement: {sql}\n{detail}"
    );
}
