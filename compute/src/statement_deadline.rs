//! The deadline a statement runs under: its session's statement timeout
//! (`session_settings.rs`), or compute's `query-timeout-ms`.
//! [`with_deadline`] puts the deadline in the statement's task; the query planner copies it into the query's
//! session config, and every region request carries what is left of it,
//! so the stores stop their scans at the same moment. A write statement
//! (INSERT, UPDATE, DELETE, and the locks of SELECT … FOR UPDATE) runs
//! under the same deadline: its read, its prewrite and its commit's region
//! requests carry it ([`write_deadline`]). COMMIT of an open transaction
//! is not bounded by it (it has [`WRITE_DEADLINE`]): once its prewrite
//! has begun, stopping half-way only leaves locks for readers to resolve.
//!
//! A leaf, like the caller (`caller.rs`): the planner and the
//! transactions read the deadline without importing the session layer
//! that sets it.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a write runs that no statement's timeout bounds: COMMIT of an
/// open transaction, and the commit of its secondaries after a statement
/// has its answer.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `f` (a statement) with `deadline` in its task.
pub async fn with_deadline<F: Future>(deadline: Instant, f: F) -> F::Output {
    DEADLINE.scope(deadline, f).await
}

/// `f` under the deadline of the statement being run in this task, if
/// any: for a task the statement spawns (a task-local value does not
/// cross `tokio::spawn`).
pub fn carried<F: Future>(f: F) -> impl Future<Output = F::Output> {
    let deadline = current_deadline();
    async move {
        match deadline {
            Some(at) => with_deadline(at, f).await,
            None => f.await,
        }
    }
}

/// The deadline of the statement being run in this task, if any.
pub fn current_deadline() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// The deadline a write's region requests carry: its statement's, or
/// [`WRITE_DEADLINE`] from now.
pub fn write_deadline() -> Instant {
    current_deadline().unwrap_or_else(|| Instant::now() + WRITE_DEADLINE)
}
