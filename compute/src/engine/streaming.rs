//! A streamed query's answer: its plan runs a few batches ahead of the
//! client, cut off at the deadline, counted in the metrics when done.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use futures::{FutureExt, StreamExt};

use crate::session::{OpenTxn, Sessions};
use crate::{Error, Result};

/// How many batches a streamed query's plan runs ahead of its client
/// ([`Streaming::run`]): a few MB of a scan's rows.
pub(super) const READ_AHEAD: usize = 32;

/// A streamed query's state between batches ([`QueryEngine::stream_in`]).
pub(super) struct Streaming {
    pub(super) batches: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    /// When compute cuts it off.
    pub(super) guard: Instant,
    pub(super) deadline_error: Error,
    pub(super) txn: Option<Arc<OpenTxn>>,
    pub(super) sessions: Arc<Sessions>,
    pub(super) started: Instant,
    pub(super) counted: bool,
}

impl Streaming {
    /// Runs the plan ahead of the client by up to [`READ_AHEAD`] batches,
    /// in a task of its own, so the stores' pages are read as they come
    /// rather than each when the client asks for the next batch (paced
    /// by the client, the scans stall on HTTP/2 flow control and cost the
    /// stores more CPU). The deadline bounds the plan and the client's
    /// reading alike: a client that stops reading past it (hyper then
    /// stops polling the answer) does not keep the plan, its snapshot's
    /// GC hold or its region calls. The task ends when the plan does,
    /// when the client goes away, or at the deadline; an error ends it
    /// in `failed`, which the client's stream yields after the batches
    /// already sent. (Known gap, `docs/performance.md`: a client that
    /// cancels its stream with an `RST_STREAM` ends this task at once, but
    /// the stores' batch calls the dropped plan leaves were seen scanning
    /// on for seconds, and a Rust (tonic) client that drops its stream was
    /// not seen to end it at all; the deadline bounds both.)
    pub(super) async fn run(
        mut self,
        tx: tokio::sync::mpsc::Sender<RecordBatch>,
        failed: Arc<std::sync::OnceLock<Error>>,
    ) {
        let guard = tokio::time::Instant::from(self.guard);
        let deadline_error = self.deadline_error.clone();
        let batches = &mut self.batches;
        let run = async {
            loop {
                let next = tokio::select! {
                    _ = tx.closed() => break None,
                    next = tokio::time::timeout_at(guard, batches.next()) => next,
                };
                let batch = match next {
                    Ok(Some(Ok(batch))) => batch,
                    Ok(Some(Err(e))) => break Some(e),
                    Ok(None) => break None,
                    Err(_) => break Some(deadline_error.clone()),
                };
                match tokio::time::timeout_at(guard, tx.send(batch)).await {
                    Ok(Ok(())) => {}
                    // The client went away.
                    Ok(Err(_)) => break None,
                    Err(_) => break Some(deadline_error.clone()),
                }
            }
        };
        // A panic in the plan (DataFusion re-raises its workers' in the
        // task polling it) fails the query like any error.
        let error = std::panic::AssertUnwindSafe(run)
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Some(Error::Internal("the query's plan panicked".into())));
        // The plan, its region calls and its snapshot go first.
        self.batches = futures::stream::empty().boxed();
        let Some(e) = error else {
            self.count(None);
            return;
        };
        let e = match &self.txn {
            Some(txn) => self.sessions.fail(txn, e).await,
            None => e,
        };
        self.count(Some(&e));
        let _ = failed.set(e);
    }

    /// Counts the query (once) in the statement metrics, with its error
    /// if it failed.
    pub(super) fn count(&mut self, error: Option<&Error>) {
        if !self.counted {
            self.counted = true;
            let r: Result<()> = error.map_or(Ok(()), |e| Err(e.clone()));
            crate::metrics::observe("query", self.started.elapsed(), &r);
        }
    }
}

impl Drop for Streaming {
    /// A query whose task ended otherwise (the runtime shutting down)
    /// still counts.
    fn drop(&mut self) {
        self.count(None);
    }
}
