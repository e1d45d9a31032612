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
//! its own writes, its key filters) and encoding. Reads that overlap give
//! the same answer: MVCC versions at or below `read_ts` do not change
//! once a read has been there (a commit picks a timestamp above every
//! read the store has seen, `concurrency.rs`), and each request passes
//! its own checks (leadership, epoch, ranges, the snapshot still
//! readable) before it may join. A read without a snapshot (`read_ts` 0,
//! the latest data) is never shared: a read that started before a write
//! ended must not answer one that arrived after it.
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
//! KEPT ANSWERS. A read that ends is also kept for [`KEEP_FOR`], and the
//! same request arriving in that time gets its answer without reading.
//! The copies of one query's work do not always overlap: the stages of a
//! distributed query start some milliseconds apart, a broadcast join's
//! reduction copy (`broadcast.rs`) reads its build side's tables again
//! after the build's own read ended, and Q15's view, aggregated twice
//! under `force`, reads a quarter of lineitem twice in two stages.
//!
//! Only a request compute marks `repeatable` keeps its answer or is
//! answered from one: its snapshot is a timestamp that is no
//! transaction's start_ts (an autocommit query's own; the oracle hands
//! out each timestamp once), so the read meets no lock as its own rows,
//! and the versions at or below it are fixed once read (above). A
//! transaction's statements read at its start_ts and see its own locks as
//! rows (read-your-writes), so the same request after its next write must
//! read again; they are joined in flight only, as before. Only whole
//! answers are kept: no region error, error or lock. The answers kept in
//! a store hold at most [`KEPT_BYTES_MAX`] bytes (the oldest go first,
//! and the stale go at each lookup), each at most [`KEPT_ANSWER_MAX`]
//! with its request: a large answer, a big scan's, is seldom asked for
//! twice, and holding it keeps the store from reusing its memory
//! (`docs/performance.md`). As with a joined read, EXPLAIN ANALYZE shows
//! the kept answer's summary, the work of the read that made it. A read
//! served from one counts as a joined one
//! (`quarry_coprocessor_reads_shared_total`). The failpoint
//! `kept_reads_off` stops keeping new answers (those kept before it
//! still answer for their 2 s).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use parking_lot::Mutex;
use prost::Message;
use quarry_proto::coprocessor::{CopRequest, CopResponse};
use quarry_proto::failpoint::fires;

use super::read_dag::{DagName, ReadDag};

/// How long an answer is kept after its read ends (module docs).
pub(super) const KEEP_FOR: Duration = Duration::from_secs(2);
/// The most bytes of answers kept in one store.
pub(super) const KEPT_BYTES_MAX: usize = 16 << 20;
/// The largest answer kept, its request's bytes included: the copies
/// that come again are dimension tables and aggregated regions, hundreds
/// of KB each (module docs).
pub(super) const KEPT_ANSWER_MAX: usize = 1 << 20;

/// A read in flight, as its callers await it.
pub(super) type SharedRead = Shared<BoxFuture<'static, Arc<CopResponse>>>;

/// What names a read (module docs): its request's bytes without its
/// timeout, and their hash, taken once. The DAG's part is held once for
/// all the regions of a batch ([`DagName`], `read_dag.rs`), the rest is
/// the region's own few fields.
///
/// A request carries its key filters, so a join's probe scan asks with
/// tens of KB (Q5's orders and lineitem scans under `force`). Hashed as
/// bytes by SipHash at every map step, such keys cost a store 6% of its
/// samples in Q5, and encoding each region's request to name it 8.6%
/// more (`docs/performance.md`); the maps hash the one `u64` instead and
/// compare bytes only when it matches, and a batch's regions share their
/// DAG's bytes, encoded and hashed once.
#[derive(Clone)]
pub(super) struct ReadKey {
    hash: u64,
    /// The request's own fields: region, epoch, ranges, encoding.
    own: Vec<u8>,
    dag: Arc<DagName>,
}

/// The hash of `bytes` under `seed` (a read's names are hashed so, once).
pub(super) fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    foldhash::fast::FixedState::with_seed(seed).hash_one(bytes)
}

impl ReadKey {
    fn new(own: Vec<u8>, dag: Arc<DagName>) -> Self {
        ReadKey {
            hash: hash_bytes(dag.hash, &own),
            own,
            dag,
        }
    }

    /// The bytes it names the read by (a kept answer counts them): the
    /// DAG's counted with every read that names it, though they are held
    /// once.
    fn len(&self) -> usize {
        self.own.len() + self.dag.bytes.len()
    }
}

impl PartialEq for ReadKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.own == other.own
            && (Arc::ptr_eq(&self.dag, &other.dag) || self.dag == other.dag)
    }
}

impl Eq for ReadKey {}

impl std::fmt::Debug for ReadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReadKey({} + {} bytes, hash {:#x})",
            self.own.len(),
            self.dag.bytes.len(),
            self.hash
        )
    }
}

impl Hash for ReadKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A map by [`ReadKey`]: hashes its one `u64`.
type ByRead<V> = HashMap<ReadKey, V, foldhash::fast::FixedState>;

/// The reads in flight, by request, held weakly: a read whose callers
/// all went is not joined.
type Running = Arc<Mutex<ByRead<WeakShared<BoxFuture<'static, Arc<CopResponse>>>>>>;

/// The reads in flight that a caller may join, and the answers kept, by
/// request.
#[derive(Default)]
pub(super) struct SameReads {
    running: Running,
    kept: Arc<Mutex<Kept>>,
}

/// Answers of ended reads (module docs), oldest first in `order`.
#[derive(Default)]
struct Kept {
    answers: ByRead<(Instant, Arc<CopResponse>)>,
    order: VecDeque<(Instant, ReadKey)>,
    bytes: usize,
}

impl Kept {
    /// The answer kept under `key`, if still fresh at `now`. The stale
    /// ones go first (so an idle store holds none for long); what is left
    /// is fresh, `order` being oldest first.
    fn get(&mut self, key: &ReadKey, now: Instant) -> Option<Arc<CopResponse>> {
        self.shed(now);
        self.answers.get(key).map(|(_, answer)| answer.clone())
    }

    fn put(&mut self, key: ReadKey, answer: Arc<CopResponse>, now: Instant) {
        self.bytes += kept_size(&key, &answer);
        if let Some((_, old)) = self.answers.insert(key.clone(), (now, answer)) {
            self.bytes -= kept_size(&key, &old);
        }
        self.order.push_back((now, key));
        self.shed(now);
    }

    /// The stale and, past the budget, the oldest go. (An answer kept
    /// again has two places in `order`; its older one takes nothing out,
    /// its entry being newer.)
    fn shed(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            let stale = now.duration_since(*at) >= KEEP_FOR;
            if !stale && self.bytes <= KEPT_BYTES_MAX {
                break;
            }
            let (at, key) = self.order.pop_front().expect("a front");
            if self
                .answers
                .get(&key)
                .is_some_and(|(kept_at, _)| *kept_at == at)
            {
                let (_, old) = self.answers.remove(&key).expect("an entry");
                self.bytes -= kept_size(&key, &old);
            }
        }
    }
}

/// What an answer kept under `key` counts against the budgets: its data
/// and its request.
fn kept_size(key: &ReadKey, answer: &CopResponse) -> usize {
    answer.data.len() + key.len()
}

/// The [`ReadKey`] of `req` under `dag` (the DAG `req` no longer
/// carries); None for a read without a snapshot.
pub(super) fn key(req: &mut CopRequest, dag: &ReadDag) -> Option<ReadKey> {
    let dag = dag.name()?.clone();
    let timeout = std::mem::take(&mut req.timeout_ms);
    let own = req.encode_to_vec();
    req.timeout_ms = timeout;
    Some(ReadKey::new(own, dag))
}

/// The leader of a shared read: takes its entry out when the read ends
/// (or its caller goes), so later requests read again.
pub(super) struct Leading {
    running: Running,
    kept: Arc<Mutex<Kept>>,
    key: ReadKey,
}

impl Leading {
    /// Keeps the read's `answer` for the same request arriving within
    /// [`KEEP_FOR`], when it is whole and not too large, and the read
    /// `may_keep` (it is [`ReadDag::repeatable`]).
    pub(super) fn keep(self, answer: &Arc<CopResponse>, may_keep: bool) {
        let whole = answer.region_error.is_none()
            && answer.other_error.is_none()
            && answer.locked.is_none();
        let size = kept_size(&self.key, answer);
        if may_keep && whole && size <= KEPT_ANSWER_MAX && !fires("kept_reads_off") {
            self.kept
                .lock()
                .put(self.key.clone(), answer.clone(), Instant::now());
        }
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.running.lock().remove(&self.key);
    }
}

impl SameReads {
    /// The read in flight under `key`, else the answer kept under it when
    /// the request is [`ReadDag::repeatable`], or a new read that `start` begins
    /// (and this caller leads: keep the guard while awaiting it, and hand
    /// it the answer, [`Leading::keep`]).
    pub(super) fn join_or_start(
        &self,
        key: ReadKey,
        repeatable: bool,
        start: impl FnOnce() -> SharedRead,
    ) -> (SharedRead, Option<Leading>) {
        let mut running = self.running.lock();
        if let Some(read) = running.get(&key).and_then(WeakShared::upgrade) {
            return (read, None);
        }
        if repeatable {
            if let Some(answer) = self.kept.lock().get(&key, Instant::now()) {
                return (futures::future::ready(answer).boxed().shared(), None);
            }
        }
        let read = start();
        let weak = read.downgrade().expect("a read not yet polled to its end");
        running.insert(key.clone(), weak);
        let leading = Leading {
            running: self.running.clone(),
            kept: self.kept.clone(),
            key,
        };
        (read, Some(leading))
    }

    /// Answers kept (for tests).
    #[cfg(test)]
    fn kept_len(&self) -> usize {
        self.kept.lock().answers.len()
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

    fn k(bytes: &[u8]) -> ReadKey {
        let dag = Arc::new(DagName {
            hash: 0,
            bytes: Vec::new(),
        });
        ReadKey::new(bytes.to_vec(), dag)
    }

    #[test]
    fn keys_with_one_hash_are_still_told_apart_by_their_bytes() {
        let a = k(b"a");
        let mut forged = k(b"b");
        forged.hash = a.hash;
        assert_ne!(a, forged);
        let mut map: ByRead<u32> = ByRead::default();
        map.insert(a.clone(), 1);
        map.insert(forged.clone(), 2);
        assert_eq!((map[&a], map[&forged]), (1, 2));
        assert_eq!(k(b"a"), a, "the same bytes, the same key");
    }

    fn dag(read_ts: u64) -> Arc<ReadDag> {
        ReadDag::new(Some(DagRequest {
            read_ts,
            ..Default::default()
        }))
    }

    fn request(region_id: u64, timeout_ms: u64) -> CopRequest {
        CopRequest {
            context: Some(quarry_proto::kv::Context {
                region_id,
                ..Default::default()
            }),
            timeout_ms,
            ..Default::default()
        }
    }

    #[test]
    fn reads_differing_only_in_their_timeout_are_the_same_and_no_snapshot_is_never() {
        let (mut a, mut b) = (request(1, 100), request(1, 250));
        let ka = key(&mut a, &dag(7)).unwrap();
        assert_eq!(
            Some(ka.clone()),
            key(&mut b, &dag(7)),
            "two copies of one DAG"
        );
        assert_eq!((a.timeout_ms, b.timeout_ms), (100, 250), "put back");
        assert_ne!(
            Some(ka.clone()),
            key(&mut request(1, 100), &dag(8)),
            "another snapshot"
        );
        assert_eq!(key(&mut request(1, 100), &dag(0)), None, "the latest data");
        assert_eq!(key(&mut request(1, 100), &ReadDag::new(None)), None);
        // A batch's regions share their DAG, and are still two reads.
        let batch = dag(7);
        let (k1, k2) = (
            key(&mut request(1, 9), &batch),
            key(&mut request(2, 9), &batch),
        );
        assert_eq!(k1, Some(ka));
        assert_ne!(k1, k2, "another region");
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
        let (first, leading) = reads.join_or_start(k(b"k"), true, start);
        assert!(leading.is_some());
        let (second, joined) = reads.join_or_start(k(b"k"), true, || unreachable!());
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
        let (_, leading) = reads.join_or_start(k(b"k"), true, || {
            async { Arc::new(CopResponse::default()) }.boxed().shared()
        });
        assert!(leading.is_some());
    }

    fn ready(answer: CopResponse) -> SharedRead {
        async move { Arc::new(answer) }.boxed().shared()
    }

    fn data(bytes: &[u8]) -> CopResponse {
        CopResponse {
            data: bytes.to_vec().into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_repeatable_snapshots_may_be_kept() {
        let at = |read_ts, repeatable| {
            ReadDag::new(Some(DagRequest {
                read_ts,
                repeatable,
                ..Default::default()
            }))
        };
        assert!(!at(7, false).repeatable(), "a transaction's statement");
        let in_txn = key(&mut request(1, 100), &at(7, false)).unwrap();
        assert!(at(7, true).repeatable());
        let autocommit = key(&mut request(1, 100), &at(7, true)).unwrap();
        assert_ne!(autocommit, in_txn, "never the same read");
        assert!(!at(0, true).repeatable(), "the latest data");
    }

    /// A whole answer is kept for the same request after its read ended;
    /// an error, a lock or a read that may not be kept is not.
    #[tokio::test]
    async fn an_ended_read_is_kept_when_whole_and_repeatable() {
        let reads = SameReads::default();
        let (read, leading) = reads.join_or_start(k(b"k"), true, || ready(data(b"abc")));
        let answer = read.await;
        leading.unwrap().keep(&answer, true);
        let (again, leading) = reads.join_or_start(k(b"k"), true, || unreachable!());
        assert!(leading.is_none(), "served from the kept answer");
        assert_eq!(again.await.data.as_ref(), b"abc");

        let mut locked = data(b"");
        locked.locked = Some(Default::default());
        let mut failed = data(b"");
        failed.region_error = Some(Default::default());
        let mut error = data(b"");
        error.other_error = Some(Default::default());
        let too_large = data(&vec![0u8; KEPT_ANSWER_MAX]);
        for (key, answer, may_keep) in [
            (&b"locked"[..], locked, true),
            (b"failed", failed, true),
            (b"error", error, true),
            (b"too large with its request", too_large, true),
            (b"in a transaction", data(b"x"), false),
        ] {
            let (read, leading) = reads.join_or_start(k(key), may_keep, || ready(answer));
            leading.unwrap().keep(&read.await, may_keep);
            let (_, leading) = reads.join_or_start(k(key), may_keep, || ready(data(b"")));
            assert!(
                leading.is_some(),
                "{:?} read again",
                String::from_utf8_lossy(key)
            );
        }
        assert_eq!(reads.kept_len(), 1);
        // A request that may not take a kept answer reads again.
        let (_, leading) = reads.join_or_start(k(b"k"), false, || ready(data(b"")));
        assert!(
            leading.is_some(),
            "a transaction's read is never answered from one"
        );
    }

    /// Kept answers go when stale, and the oldest first past the budget.
    #[test]
    fn kept_answers_go_when_stale_or_past_the_budget() {
        let mut kept = Kept::default();
        let t0 = Instant::now();
        kept.put(k(b"a"), Arc::new(data(b"1")), t0);
        assert!(kept.get(&k(b"a"), t0 + KEEP_FOR / 2).is_some());
        assert!(kept.get(&k(b"a"), t0 + KEEP_FOR).is_none(), "stale");
        kept.put(k(b"b"), Arc::new(data(b"2")), t0 + KEEP_FOR);
        assert_eq!(kept.answers.len(), 1, "the stale one went");
        assert_eq!(kept.bytes, 2);

        let big = vec![0u8; KEPT_BYTES_MAX / 2];
        let t1 = t0 + KEEP_FOR;
        kept.put(k(b"c"), Arc::new(data(&big)), t1);
        kept.put(k(b"d"), Arc::new(data(&big)), t1);
        assert!(kept.get(&k(b"b"), t1).is_none() && kept.get(&k(b"c"), t1).is_none());
        assert!(kept.get(&k(b"d"), t1).is_some());
        assert!(kept.bytes <= KEPT_BYTES_MAX);
        // The same key kept again: counted once, and its newer entry stays
        // when the older place in the order comes up.
        kept.put(k(b"d"), Arc::new(data(b"3")), t1 + KEEP_FOR / 2);
        assert_eq!(kept.bytes, 2);
        kept.put(k(b"e"), Arc::new(data(b"4")), t1 + KEEP_FOR);
        assert_eq!(
            kept.get(&k(b"d"), t1 + KEEP_FOR).unwrap().data.as_ref(),
            b"3"
        );
    }

    /// A read all of whose callers went away is dropped (and with it its
    /// cancel flag): a new caller starts a new one.
    #[tokio::test]
    async fn a_read_no_one_awaits_is_not_joined() {
        let reads = SameReads::default();
        let (_tx, rx) = tokio::sync::oneshot::channel::<CopResponse>();
        let (read, leading) = reads.join_or_start(k(b"k"), true, || {
            async move { Arc::new(rx.await.unwrap_or_default()) }
                .boxed()
                .shared()
        });
        std::mem::forget(leading); // (its entry stays, as if it were slow to go)
        drop(read);
        let (_, leading) = reads.join_or_start(k(b"k"), true, || {
            async { Arc::new(CopResponse::default()) }.boxed().shared()
        });
        assert!(leading.is_some(), "a dead read is not joined");
    }
}
