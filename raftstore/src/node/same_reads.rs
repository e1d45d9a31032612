//! Identical reads at one snapshot, run once: a coprocessor request that
//! arrives while the same request is being read joins that read and gets
//! a copy of its answer.
//!
//! A distributed query (`mpp = 'force'`, or `auto` across hosts) runs a
//! small dimension table's scan inside every task of the stage that joins
//! it (compute's `df/mpp/replicate.rs`): three tasks, three identical
//! requests to the store that leads the table's region, at the query's
//! one `read_ts`. TPC-H Q19's part scan filters 200 K rows on strings to
//! keep 485 and costs its store about 14 ms; three times over, a third of
//! the query's storage CPU went to answers it already had. The tasks
//! start within a few milliseconds of each other, so their requests
//! overlap, and the store reads once for all of them.
//!
//! WHEN TWO READS ARE THE SAME. Their requests are equal byte for byte
//! but for the time each caller still gives it (`timeout_ms`): the same
//! region and epoch, ranges, DAG (with its snapshot, its transaction for
//! its own writes, its key filters) and encoding. Such a read at a
//! snapshot gives the same answer whenever it runs: MVCC versions at or
//! below `read_ts` do not change once a read has been there (a commit
//! picks a timestamp above every read the store has seen,
//! `concurrency.rs`), and each request passes its own checks (leadership,
//! epoch, ranges, the snapshot still readable) before it may join. A read
//! without a snapshot (`read_ts` 0, the latest data) is never shared: a
//! read that started before a write ended must not answer one that
//! arrived after it.
//!
//! WHO STOPS IT. The read runs for its callers together: it stops (its
//! cancel flag, `CancelOnDrop`) only when the last of them has gone, and
//! under the first one's deadline. That is the same query's, or for a
//! transaction whose statements ask for the same rows at its start_ts at
//! once, another statement's: a caller that joined may then fail at that
//! deadline, a little before its own, and run again. Its answer is
//! shared as it is, summary included: EXPLAIN ANALYZE shows each task the
//! scan's work, as if it had read.
//!
//! Only reads in flight are joined; an answer is not kept after its read
//! ends, so nothing here holds memory beyond the reads themselves.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{BoxFuture, Shared, WeakShared};
use parking_lot::Mutex;
use prost::Message;
use quarry_proto::coprocessor::{CopRequest, CopResponse};

/// A read in flight, as its callers await it.
pub(super) type SharedRead = Shared<BoxFuture<'static, Arc<CopResponse>>>;

/// The reads in flight, by request, held weakly: a read whose callers
/// all went is not joined.
type Running = Arc<Mutex<HashMap<Vec<u8>, WeakShared<BoxFuture<'static, Arc<CopResponse>>>>>>;

/// The reads in flight that a caller may join, by request.
#[derive(Default)]
pub(super) struct SameReads {
    running: Running,
}

/// What names a read (module docs): the request's bytes without its
/// timeout; None for a read without a snapshot.
pub(super) fn key(req: &mut CopRequest) -> Option<Vec<u8>> {
    if req.dag.as_ref().is_none_or(|d| d.read_ts == 0) {
        return None;
    }
    let timeout = std::mem::take(&mut req.timeout_ms);
    let key = req.encode_to_vec();
    req.timeout_ms = timeout;
    Some(key)
}

/// The leader of a shared read: takes its entry out when the read ends
/// (or its caller goes), so later requests read again.
pub(super) struct Leading {
    running: Running,
    key: Vec<u8>,
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.running.lock().remove(&self.key);
    }
}

impl SameReads {
    /// The read in flight under `key`, or a new one that `start` begins
    /// (and this caller leads: keep the guard while awaiting it).
    pub(super) fn join_or_start(
        &self,
        key: Vec<u8>,
        start: impl FnOnce() -> SharedRead,
    ) -> (SharedRead, Option<Leading>) {
        let mut running = self.running.lock();
        if let Some(read) = running.get(&key).and_then(WeakShared::upgrade) {
            return (read, None);
        }
        let read = start();
        let weak = read.downgrade().expect("a read not yet polled to its end");
        running.insert(key.clone(), weak);
        let leading = Leading {
            running: self.running.clone(),
            key,
        };
        (read, Some(leading))
    }

    /// Reads in flight (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.running.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use quarry_proto::coprocessor::DagRequest;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn request(read_ts: u64, timeout_ms: u64) -> CopRequest {
        CopRequest {
            dag: Some(DagRequest {
                read_ts,
                ..Default::default()
            }),
            timeout_ms,
            ..Default::default()
        }
    }

    #[test]
    fn reads_differing_only_in_their_timeout_are_the_same_and_no_snapshot_is_never() {
        let mut a = request(7, 100);
        let mut b = request(7, 250);
        let ka = key(&mut a).unwrap();
        assert_eq!(Some(ka.clone()), key(&mut b));
        assert_eq!((a.timeout_ms, b.timeout_ms), (100, 250), "put back");
        assert_ne!(Some(ka), key(&mut request(8, 100)), "another snapshot");
        assert_eq!(key(&mut request(0, 100)), None, "the latest data");
        assert_eq!(key(&mut CopRequest::default()), None);
    }

    #[tokio::test]
    async fn a_read_in_flight_is_joined_and_one_that_ended_is_not() {
        let reads = SameReads::default();
        let started = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<CopResponse>();
        let start = || {
            started.fetch_add(1, Ordering::SeqCst);
            async move { Arc::new(rx.await.unwrap()) }.boxed().shared()
        };
        let (first, leading) = reads.join_or_start(b"k".to_vec(), start);
        assert!(leading.is_some());
        let (second, joined) = reads.join_or_start(b"k".to_vec(), || unreachable!());
        assert!(joined.is_none());
        let answer = CopResponse {
            data: vec![1, 2, 3].into(),
            ..Default::default()
        };
        tx.send(answer.clone()).unwrap();
        assert_eq!(*first.await, answer);
        assert_eq!(*second.await, answer);
        drop(leading);
        assert_eq!(reads.len(), 0);
        assert_eq!(started.load(Ordering::SeqCst), 1);
        // Ended: the next one reads again.
        let (_, leading) = reads.join_or_start(b"k".to_vec(), || {
            async { Arc::new(CopResponse::default()) }.boxed().shared()
        });
        assert!(leading.is_some());
    }

    /// A read all of whose callers went away is dropped (and with it its
    /// cancel flag): a new caller starts a new one.
    #[tokio::test]
    async fn a_read_no_one_awaits_is_not_joined() {
        let reads = SameReads::default();
        let (_tx, rx) = tokio::sync::oneshot::channel::<CopResponse>();
        let (read, leading) = reads.join_or_start(b"k".to_vec(), || {
            async move { Arc::new(rx.await.unwrap_or_default()) }
                .boxed()
                .shared()
        });
        std::mem::forget(leading); // (its entry stays, as if it were slow to go)
        drop(read);
        let (_, leading) = reads.join_or_start(b"k".to_vec(), || {
            async { Arc::new(CopResponse::default()) }.boxed().shared()
        });
        assert!(leading.is_some(), "a dead read is not joined");
    }
}
