//! The queries running in this compute process, for the web console: what
//! each is (its text, who sent it, how long it has run, its physical plan
//! with the metrics its operators have gathered so far) and a way to
//! cancel it.
//!
//! A query registers as it starts to run (`df/running.rs`, the one place
//! every query and BACKUP's table reads pass through) and leaves the list
//! when its stream ends or is dropped. A cancel wakes the query's stream
//! while its consumer waits on it, whatever the plan is waiting on (a
//! region's answer, a join's build side): the stream fails with an error
//! naming the cancel, and dropping the plan stops its operators and their
//! region requests. (A stream whose client is not reading notices at its
//! next read.) The list is a process-wide registry, like the metrics: a
//! query pays a lock to enter and leave it; looking at it copies the
//! entries under the lock and renders their plans after.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;

/// One running query as the console shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunningQuery {
    pub id: u64,
    pub sql: String,
    /// The logged-in user (empty without logins).
    pub user: String,
    pub started_unix_ms: u64,
    pub elapsed_ms: u64,
    /// The physical plan with each operator's metrics so far.
    pub plan: String,
    pub cancelled: bool,
}

struct Entry {
    sql: String,
    user: String,
    started: Instant,
    started_unix_ms: u64,
    plan: Arc<dyn ExecutionPlan>,
    cancel: Arc<Cancel>,
}

/// A query's cancel signal (the console's cancel here, a client's
/// `CancelFlightInfo` in `flight/cancel.rs`).
#[derive(Default)]
pub struct Cancel {
    set: AtomicBool,
    /// Wakes the query's stream (a permit is kept if it is not waiting).
    notify: Notify,
}

impl Cancel {
    /// Sets the signal and wakes its waiter.
    pub fn cancel(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// Resolves once the signal is set (at once if it is).
    pub async fn wait(&self) {
        while !self.is_set() {
            self.notify.notified().await;
        }
    }
}

#[derive(Default)]
struct Registry {
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, Entry>>,
}

static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

/// A query's place in the list; leaving it when dropped.
pub struct Registration {
    pub id: u64,
    cancel: Arc<Cancel>,
}

impl Registration {
    /// Resolves when the query is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.wait().await
    }

    /// What the cancelled query fails with.
    pub fn error(&self) -> crate::Error {
        crate::Error::Cancelled(format!(
            "query {} was cancelled by an operator (the compute process's console)",
            self.id
        ))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        REGISTRY.running.lock().remove(&self.id);
    }
}

/// Adds a query that is starting to run.
pub fn register(sql: &str, plan: Arc<dyn ExecutionPlan>) -> Registration {
    let id = REGISTRY.next.fetch_add(1, Ordering::Relaxed) + 1;
    let cancel = Arc::new(Cancel::default());
    let user = crate::caller::caller().map(|c| c.user).unwrap_or_default();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    REGISTRY.running.lock().insert(
        id,
        Entry {
            sql: sql.to_string(),
            user,
            started: Instant::now(),
            started_unix_ms,
            plan,
            cancel: cancel.clone(),
        },
    );
    Registration { id, cancel }
}

/// The queries running now, oldest first.
pub fn running() -> Vec<RunningQuery> {
    // Copied under the lock, rendered after it: queries starting and
    // ending never wait for a plan's rendering.
    let taken: Vec<(RunningQuery, Arc<dyn ExecutionPlan>)> = REGISTRY
        .running
        .lock()
        .iter()
        .map(|(id, e)| {
            let q = RunningQuery {
                id: *id,
                sql: e.sql.clone(),
                user: e.user.clone(),
                started_unix_ms: e.started_unix_ms,
                elapsed_ms: e.started.elapsed().as_millis() as u64,
                plan: String::new(),
                cancelled: e.cancel.is_set(),
            };
            (q, e.plan.clone())
        })
        .collect();
    taken
        .into_iter()
        .map(|(mut q, plan)| {
            q.plan = DisplayableExecutionPlan::with_metrics(plan.as_ref())
                .indent(true)
                .to_string();
            q
        })
        .collect()
}

/// Cancels query `id`; false if it is not running.
pub fn cancel(id: u64) -> bool {
    let running = REGISTRY.running.lock();
    let Some(e) = running.get(&id) else {
        return false;
    };
    e.cancel.cancel();
    tracing::warn!(query = id, sql = %e.sql, "query cancelled from the console");
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::empty::EmptyExec;

    #[tokio::test]
    async fn a_cancel_wakes_the_query_and_it_leaves_the_list_when_dropped() {
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(EmptyExec::new(Arc::new(arrow::datatypes::Schema::empty())));
        let r = register("SELECT 1", plan);
        let mine = |l: Vec<RunningQuery>| l.into_iter().find(|q| q.id == r.id);
        let shown = mine(running()).expect("listed");
        assert_eq!(shown.sql, "SELECT 1");
        assert!(shown.plan.contains("EmptyExec"), "{}", shown.plan);
        assert!(!shown.cancelled);
        let waiting = tokio::time::timeout(std::time::Duration::from_secs(5), r.cancelled());
        let canceller = async {
            tokio::task::yield_now().await;
            assert!(cancel(r.id));
        };
        let (woke, ()) = tokio::join!(waiting, canceller);
        assert!(woke.is_ok(), "the cancel woke the query");
        assert!(mine(running()).expect("still listed").cancelled);
        assert!(r.error().to_string().contains("cancelled by an operator"));
        let id = r.id;
        drop(r);
        assert!(!running().iter().any(|q| q.id == id));
        assert!(!cancel(id), "no longer running");
    }
}
