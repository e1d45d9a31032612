//! Queries started by their GetFlightInfo, handed to their DoGet.
//!
//! A Flight SQL client runs a query in two calls: GetFlightInfo (compute
//! plans it and answers the schema and a ticket), then DoGet of the
//! ticket (compute runs it and streams the answer). Between the two, the
//! answer crosses to the client, the client's driver reads it and sends
//! the DoGet: on this project's 2-core machine about a millisecond in
//! which compute and the stores had nothing to do. And the DoGet's query
//! began with its own round trip, the read timestamp from the meta
//! region, before any store had a request.
//!
//! So an autocommit query starts as soon as GetFlightInfo has planned it:
//! it takes its timestamp and sends its region requests while the answer
//! goes out and the DoGet comes back, and the DoGet picks up the running
//! query ([`Started`], kept here under the ticket's cancel key). Apache
//! Doris's and StarRocks's Flight SQL servers go further and run the
//! whole query in GetFlightInfo; here the query still streams from its
//! DoGet, so the answer is never held whole for a client that reads it
//! slowly, and only its first batches (up to `stream-results-after-mb`,
//! as any DoGet gathers them) wait.
//!
//! What a client sees does not change:
//! * The snapshot is taken after GetFlightInfo arrived, so the query sees
//!   every write committed before the client asked for it, as before.
//!   (A client that commits a write between a query's GetFlightInfo and
//!   its DoGet does not see it in that query's answer; the query was
//!   asked for first.)
//! * Errors of planning still come from GetFlightInfo, errors of running
//!   from DoGet, with the same codes and messages.
//! * CancelFlightInfo finds the query running (`cancel.rs`) and stops it
//!   and its region tasks, before or after its DoGet.
//! * A ticket redeemed again, by another user, after [`EARLY_TTL`], or
//!   at another compute process, runs the query as every DoGet did
//!   before: planned again from the ticket's SQL. Planned again at this
//!   process, it must answer with the columns its FlightInfo announced
//!   or fail with a conflict, as a plan kept for its DoGet is checked.
//! * A client that goes away after GetFlightInfo leaves its query running
//!   for at most [`EARLY_TTL`] (half a second): no handler hears that its
//!   connection ended, so the query is dropped, with its region tasks,
//!   when no DoGet has taken it by then.
//!
//! Not started early: statements in a transaction (their order on the
//! connection is their order of effect, and a query in a transaction may
//! lock rows), statements whose answer rides in the ticket (DDL, DML,
//! EXPLAIN), and anything past [`MAX_STARTED`] queries waiting for their
//! DoGet at once (a client that asks GetFlightInfo only for schemas). The
//! failpoint `flight_early_start_off` turns the early start off, to
//! compare: through ADBC, Q1 and Q6 at SF 1 took about 3% less time with
//! it on (`docs/performance.md`, "queries started by their
//! GetFlightInfo").

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use tokio::task::{JoinError, JoinHandle};

use super::cancel::Running;
use super::kept::KeptForSql;
use crate::engine::QueryStream;
use crate::Result;

/// How long a started query waits for its DoGet. A client's driver sends
/// the DoGet as soon as it has read the FlightInfo (milliseconds); this
/// bounds the work of one that went away in between (its connection's
/// end reaches no handler), and a DoGet later than this runs the query
/// again.
pub(super) const EARLY_TTL: Duration = Duration::from_millis(500);
/// At most this many started queries wait for their DoGet.
pub(super) const MAX_STARTED: usize = 64;
/// How long a started query's announced schema is kept for a late DoGet
/// (as long as a plan waits for its DoGet, `PLAN_TTL`).
const ANNOUNCED_TTL: Duration = Duration::from_secs(60);
/// At most this many announced schemas are kept (the oldest go first).
const MAX_ANNOUNCED: usize = 256;

/// A query's task, aborted when dropped: a started query that no DoGet
/// takes, or whose DoGet goes away, stops.
pub(super) struct Task(JoinHandle<Result<QueryStream>>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Future for Task {
    type Output = std::result::Result<Result<QueryStream>, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// A query started by GetFlightInfo.
pub(super) struct Started {
    at: Instant,
    /// Who asked for it (None without logins): only they may take it.
    owner: Option<String>,
    /// Its SQL: only a ticket of the same SQL takes it (a ticket is the
    /// client's to send, and may carry another one's cancel key).
    sql: String,
    /// Its place in the cancel keys: running since GetFlightInfo.
    pub(super) running: Running,
    /// The query, up to its first batches (`QueryEngine::stream_in`).
    pub(super) task: Task,
}

impl Started {
    pub(super) fn new(
        owner: Option<String>,
        sql: &str,
        running: Running,
        task: JoinHandle<Result<QueryStream>>,
    ) -> Self {
        Started {
            at: Instant::now(),
            owner,
            sql: sql.to_string(),
            running,
            task: Task(task),
        }
    }
}

/// The started queries waiting for their DoGet, by cancel key.
pub(super) struct StartedQueries {
    inner: Arc<Mutex<HashMap<u64, Started>>>,
    /// The schema each one's FlightInfo announced, by cancel key: a DoGet
    /// too late to take its query plans the SQL again, and must answer
    /// with these columns or fail, as a kept plan checked at its snapshot
    /// does (`kept.rs`: only a ticket of the same SQL finds it, once).
    announced: KeptForSql<SchemaRef>,
}

impl Default for StartedQueries {
    fn default() -> Self {
        StartedQueries {
            inner: Arc::default(),
            announced: KeptForSql::new(ANNOUNCED_TTL, MAX_ANNOUNCED),
        }
    }
}

impl StartedQueries {
    /// Whether one more may start; those past [`EARLY_TTL`] are dropped
    /// first.
    pub(super) fn has_room(&self) -> bool {
        let mut m = self.inner.lock();
        m.retain(|_, s| s.at.elapsed() < EARLY_TTL);
        m.len() < MAX_STARTED
    }

    /// Keeps `started` for its DoGet, and drops it (and so stops it)
    /// if none has taken it after [`EARLY_TTL`].
    pub(super) fn put(&self, key: u64, started: Started, schema: SchemaRef) {
        self.announced.put(key, &started.sql, schema);
        self.inner.lock().insert(key, started);
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            tokio::time::sleep(EARLY_TTL).await;
            if let Some(inner) = inner.upgrade() {
                let expired = inner.lock().remove(&key);
                if expired.is_some() {
                    tracing::debug!(key, "a query started by GetFlightInfo had no DoGet in time");
                }
            }
        });
    }

    /// The query of `sql` started under `key`, if `owner` asked for it
    /// less than [`EARLY_TTL`] ago; one too old is dropped.
    pub(super) fn take(&self, key: u64, owner: Option<&str>, sql: &str) -> Option<Started> {
        let mut m = self.inner.lock();
        let s = m.get(&key)?;
        if s.owner.as_deref() != owner || s.sql != sql {
            return None;
        }
        let s = m.remove(&key)?;
        if s.at.elapsed() >= EARLY_TTL {
            return None;
        }
        self.announced.remove(key);
        Some(s)
    }

    /// The schema the FlightInfo of the query of `sql` started under
    /// `key` announced, for a DoGet that did not take the query (too
    /// late, or another user's); None past [`ANNOUNCED_TTL`].
    pub(super) fn announced(&self, key: u64, sql: &str) -> Option<SchemaRef> {
        self.announced.take(key, sql, ANNOUNCED_TTL)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::super::cancel::Cancels;
    use super::*;

    /// Sets its flag when dropped: whether a task's future was dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A started query that never ends, and the flag its drop sets.
    fn pending(cancels: &Cancels, key: u64, owner: Option<&str>) -> (Started, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let task = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<Result<QueryStream>>().await
        });
        let running = cancels.start(key).unwrap();
        (
            Started::new(owner.map(str::to_string), SQL, running, task),
            dropped,
        )
    }

    const SQL: &str = "SELECT 1 AS n";

    fn schema() -> SchemaRef {
        use arrow::datatypes::{DataType, Field, Schema};
        Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]))
    }

    async fn until(flag: &AtomicBool) -> bool {
        for _ in 0..200 {
            if flag.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    #[tokio::test]
    async fn only_its_owner_and_its_sql_take_a_started_query_and_only_in_time() {
        let cancels = Cancels::default();
        let started = StartedQueries::default();
        let (s, _) = pending(&cancels, 7, Some("alice"));
        started.put(7, s, schema());
        assert!(started.take(7, Some("bob"), SQL).is_none());
        assert!(started.take(7, None, SQL).is_none());
        assert!(started.take(8, Some("alice"), SQL).is_none());
        assert!(started.take(7, Some("alice"), "SELECT 2").is_none());
        assert!(started.take(7, Some("alice"), SQL).is_some());
        assert!(started.take(7, Some("alice"), SQL).is_none(), "taken once");

        // Taken: its schema is not kept for a late DoGet.
        assert!(started.announced(7, SQL).is_none());

        // Too old: dropped, not taken; a DoGet that plans it again
        // finds what its FlightInfo announced.
        let (mut s, dropped) = pending(&cancels, 9, None);
        s.at = Instant::now() - EARLY_TTL;
        started.put(9, s, schema());
        assert!(started.take(9, None, SQL).is_none());
        assert!(until(&dropped).await, "the old query's task still runs");
        assert!(started.announced(9, "SELECT 2").is_none(), "another SQL");
        assert_eq!(started.announced(9, SQL), Some(schema()));
        assert!(started.announced(9, SQL).is_none(), "checked once");
    }

    #[tokio::test]
    async fn a_query_no_doget_takes_is_stopped_after_its_ttl() {
        let cancels = Cancels::default();
        let started = StartedQueries::default();
        let (s, dropped) = pending(&cancels, 1, None);
        started.put(1, s, schema());
        tokio::time::sleep(EARLY_TTL / 2).await;
        assert!(!dropped.load(Ordering::SeqCst));
        assert_eq!(started.len(), 1);
        tokio::time::sleep(EARLY_TTL).await;
        assert!(until(&dropped).await, "its task still runs");
        assert_eq!(started.len(), 0);
        // Its key is finished: a cancel says it is too late.
        assert_eq!(
            cancels.cancel(1).unwrap(),
            arrow_flight::CancelStatus::NotCancellable
        );
    }

    #[tokio::test]
    async fn past_the_limit_no_more_start() {
        let cancels = Cancels::default();
        let started = StartedQueries::default();
        for key in 1..=MAX_STARTED as u64 {
            assert!(started.has_room());
            started.put(key, pending(&cancels, key, None).0, schema());
        }
        assert!(!started.has_room());
        assert!(started.take(1, None, SQL).is_some());
        assert!(started.has_room());
    }
}
