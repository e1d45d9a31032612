//! Statement deadlines: a query or write bounded by its session's
//! statement timeout, and the error that names the bound it ran into.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::sql;
use crate::statement_deadline;
use crate::{Error, Result};

use super::*;

impl QueryEngine {
    /// Runs `f` (a query) under its session's statement timeout
    /// (`statement_deadline.rs`). Region requests carry the deadline and
    /// fail first, naming the store; this bound also covers what runs in
    /// compute. The read of an UPDATE or DELETE runs under its statement's
    /// deadline (and may be cut off: it has locked nothing yet).
    pub(super) async fn within_deadline<T>(&self, f: impl Future<Output = Result<T>>) -> Result<T> {
        let (deadline, guard, nested) = self.deadline_now();
        self.within(deadline, guard, nested, f).await
    }

    /// The deadline of a query starting now (its statement's, when it
    /// runs for one: `nested`), and the later moment compute cuts it off
    /// at, so that region requests, which carry the deadline, fail first
    /// and name their store.
    pub(super) fn deadline_now(&self) -> (Instant, Instant, bool) {
        let (deadline, timeout, nested) = match statement_deadline::current_deadline() {
            Some(d) => (d, d.saturating_duration_since(Instant::now()), true),
            None => {
                let timeout = self.settings.statement_timeout();
                (Instant::now() + timeout, timeout, false)
            }
        };
        let guard = deadline + (timeout / 4).min(Duration::from_secs(2));
        (deadline, guard, nested)
    }

    /// Runs `f` with `deadline` as its statement's, cut off at `guard`
    /// ([`QueryEngine::deadline_now`]).
    pub(super) async fn within<T>(
        &self,
        deadline: Instant,
        guard: Instant,
        nested: bool,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let run = async {
            match nested {
                true => f.await,
                false => statement_deadline::with_deadline(deadline, f).await,
            }
        };
        match tokio::time::timeout_at(guard.into(), run).await {
            Ok(r) => r,
            Err(_) => Err(self.deadline_error()),
        }
    }

    /// What a query cut off at its deadline fails with.
    pub(super) fn deadline_error(&self) -> Error {
        Error::Deadline(format!(
            "query exceeded its deadline; {}",
            self.timeout_named()
        ))
    }

    /// What a deadline error adds: the timeout, and where it came from.
    pub(super) fn timeout_named(&self) -> String {
        format!(
            "the statement's timeout is {} (SET statement_timeout; the default is \
             compute.query-timeout-ms)",
            sql::settings::show(self.settings.statement_timeout())
        )
    }

    /// Runs a write statement (INSERT, UPDATE, DELETE) under its session's
    /// statement timeout: its reads and its transaction's region requests
    /// carry the deadline ([`statement_deadline::write_deadline`]). Unlike a
    /// query it is not cut off from outside at the deadline: a write
    /// stopped between its prewrite and its commit would leave locks
    /// behind, so it ends when a region request runs out of time and
    /// rolls back what it locked (or, when the commit itself ran out, says
    /// that its outcome is unknown: `txn.rs`).
    pub(super) async fn write_within_deadline<T>(
        &self,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.settings.statement_timeout();
        match statement_deadline::with_deadline(deadline, f).await {
            // A store, a leader or the meta service missing or slow until
            // the deadline reads as unavailable where it was seen, but the
            // timeout is what ended the write's tries: it fails as past its
            // deadline, its message still naming what did not answer.
            Err(Error::Unavailable(m)) if Instant::now() >= deadline => {
                Err(self.named_deadline(Error::Deadline(m)))
            }
            Err(e @ Error::Deadline(_)) => Err(self.named_deadline(e)),
            r => r,
        }
    }

    /// A deadline error with its timeout named, once.
    fn named_deadline(&self, e: Error) -> Error {
        match e.to_string().contains("SET statement_timeout") {
            true => e,
            false => e.with_context(&self.timeout_named()),
        }
    }
}
