//! One-phase commit's guard: the newest read timestamp a store has served,
//! and the keys of one-phase commits on their way through raft.
//!
//! A transaction that writes one region can skip two-phase commit: the
//! leader proposes its mutations once, checked as a prewrite and written as
//! versions at a `commit_ts` the *store* picks (TiKV's 1PC, with its
//! concurrency manager). Two-phase commit takes commit_ts from the oracle
//! after the locks are in place, so any read at or after commit_ts meets
//! either a lock or the version. One phase has no lock in RocksDB while
//! the command replicates, so this module stands in for it:
//!
//! * Every MVCC read raises [`ConcurrencyManager::max_ts`] to its read_ts
//!   *before* it takes its snapshot, then waits while a one-phase commit
//!   of its ranges could commit at or below read_ts.
//! * A one-phase commit registers its keys in memory ([`MemoryLocks`]) and
//!   only then picks `commit_ts = max(max_ts, start_ts) + 1`, under the
//!   same mutex. A read that came first raised max_ts, so the commit lands
//!   above it and the read need not see it; a read that comes later finds
//!   the keys and waits for the apply, after which its snapshot has them.
//!   The keys stay registered until the proposal is settled: applied (the
//!   callback runs after the engine write), or, when the leader stepped
//!   down, until this peer has applied past the proposal's index (the
//!   entry may still commit; a read waiting here must not take a snapshot
//!   without it). A new leader applies the entry before it serves reads.
//!
//! commit_ts is not from the oracle, but it is at most one above a
//! timestamp the oracle handed out (max_ts only ever holds oracle
//! timestamps: reads' and the sync after a leader change), so every
//! timestamp taken after the commit returned is at or above it: a later
//! read sees the write. It may EQUAL the next one the oracle hands out; a
//! version at a transaction's start_ts is in its snapshot, so a prewrite
//! at that start_ts is no write conflict (`txn.rs`, TiKV's rule).
//!
//! PIPELINED PESSIMISTIC LOCKS (`pessimistic.rs`) are answered before
//! raft replicates them; until they apply, their keys are registered here
//! too ([`PessimisticLocks`]), so that a second transaction's pipelined
//! lock of the same key does not also pass on the leader's applied state
//! (it goes the slow way, behind the first in the log). Other writes do
//! not look here: one already in the log may take the key first, and the
//! pipelined lock is lost (`pessimistic.rs` says why that is safe).
//! Readers do not wait for them: readers pass over pessimistic locks.
//!
//! LEADER CHANGES: max_ts lives in one store's memory, and a new leader
//! never saw the reads its predecessor served. Before its first one-phase
//! commit in a term, a leader raises max_ts to a fresh oracle timestamp,
//! taken after it became leader and so above every read the old leader
//! served under its lease (`Peer::one_pc_term`; `Node::prewrite`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use quarry_coprocessor::storage::KeyRange;
use tokio::sync::Notify;

#[derive(Default)]
struct State {
    max_ts: u64,
    /// (key, start_ts, guard) → commit_ts of the one-phase commits in
    /// flight. A retry of a transaction stuck in raft registers again
    /// (another guard, another commit_ts); both stay until each is settled.
    locks: BTreeMap<(Vec<u8>, u64, u64), u64>,
    next_guard: u64,
    /// key → (start_ts, how many) of pipelined pessimistic locks in flight.
    pessimistic: HashMap<Vec<u8>, (u64, usize)>,
}

/// A store's newest served read and its one-phase commits in flight.
#[derive(Default)]
pub struct ConcurrencyManager {
    state: Mutex<State>,
    released: Notify,
    /// The highest GC safe point a compaction applied on this store folded
    /// versions to (`KvWrite.folded_to`): no read at or below it may be
    /// answered here, whoever planned the compaction.
    folded: std::sync::atomic::AtomicU64,
}

/// The keys of one one-phase commit, registered until this is dropped.
pub struct MemoryLocks {
    cm: Arc<ConcurrencyManager>,
    keys: Vec<Vec<u8>>,
    start_ts: u64,
    guard: u64,
}

impl Drop for MemoryLocks {
    fn drop(&mut self) {
        {
            let mut s = self.cm.state.lock();
            for k in std::mem::take(&mut self.keys) {
                s.locks.remove(&(k, self.start_ts, self.guard));
            }
        }
        self.cm.released.notify_waiters();
    }
}

/// The keys of one pipelined pessimistic lock, registered until dropped
/// (once its raft command applied, or failed).
pub struct PessimisticLocks {
    cm: Arc<ConcurrencyManager>,
    keys: Vec<Vec<u8>>,
}

impl Drop for PessimisticLocks {
    fn drop(&mut self) {
        let mut s = self.cm.state.lock();
        for k in std::mem::take(&mut self.keys) {
            if let Some((_, n)) = s.pessimistic.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    s.pessimistic.remove(&k);
                }
            }
        }
    }
}

impl ConcurrencyManager {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Notes that a compaction folding versions at or below `ts` applies
    /// (called before its write becomes visible).
    pub fn note_folded(&self, ts: u64) {
        self.folded
            .fetch_max(ts, std::sync::atomic::Ordering::SeqCst);
    }

    /// The highest safe point a compaction applied here folded to.
    pub fn folded(&self) -> u64 {
        self.folded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The newest read timestamp served (or synced from the oracle).
    pub fn max_ts(&self) -> u64 {
        self.state.lock().max_ts
    }

    /// Raises max_ts to `ts` (a fresh oracle timestamp after a leader
    /// change).
    pub fn raise_max_ts(&self, ts: u64) {
        let mut s = self.state.lock();
        s.max_ts = s.max_ts.max(ts);
    }

    /// Registers a one-phase commit of `keys` started at `start_ts`;
    /// returns its guard and its commit_ts.
    pub fn lock_keys(self: &Arc<Self>, keys: Vec<Vec<u8>>, start_ts: u64) -> (MemoryLocks, u64) {
        let mut s = self.state.lock();
        let commit_ts = s.max_ts.max(start_ts) + 1;
        s.next_guard += 1;
        let id = s.next_guard;
        for k in &keys {
            s.locks.insert((k.clone(), start_ts, id), commit_ts);
        }
        drop(s);
        let guard = MemoryLocks {
            cm: self.clone(),
            keys,
            start_ts,
            guard: id,
        };
        (guard, commit_ts)
    }

    /// Registers a pipelined pessimistic lock of `keys` by the transaction
    /// `start_ts`; None if another transaction has a lock of one of them
    /// in flight (pessimistic or one-phase): that one goes the slow way.
    pub fn lock_pessimistic(
        self: &Arc<Self>,
        keys: Vec<Vec<u8>>,
        start_ts: u64,
    ) -> Option<PessimisticLocks> {
        let mut s = self.state.lock();
        let taken = |s: &State, k: &Vec<u8>| {
            s.pessimistic.get(k).is_some_and(|(ts, _)| *ts != start_ts)
                || s.locks
                    .range((k.clone(), 0, 0)..)
                    .take_while(|((key, _, _), _)| key == k)
                    .any(|((_, ts, _), _)| *ts != start_ts)
        };
        if keys.iter().any(|k| taken(&s, k)) {
            return None;
        }
        for k in &keys {
            s.pessimistic.entry(k.clone()).or_insert((start_ts, 0)).1 += 1;
        }
        Some(PessimisticLocks {
            cm: self.clone(),
            keys,
        })
    }

    /// Notes a read at `read_ts` over `ranges`, then waits until no
    /// one-phase commit in flight could commit at or below it. False if
    /// `until` came first (the caller answers "busy": the commit is stuck
    /// in raft, and a retry asks again).
    pub async fn read_at(&self, read_ts: u64, ranges: &[KeyRange], until: Instant) -> bool {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut s = self.state.lock();
                s.max_ts = s.max_ts.max(read_ts);
                if !s.blocks(read_ts, ranges) {
                    return true;
                }
            }
            let until = tokio::time::Instant::from_std(until);
            if tokio::time::timeout_at(until, released).await.is_err() {
                return false;
            }
        }
    }
}

impl State {
    fn blocks(&self, read_ts: u64, ranges: &[KeyRange]) -> bool {
        if self.locks.is_empty() {
            return false;
        }
        ranges.iter().any(|r| {
            let from = (r.start.clone(), 0, 0);
            self.locks
                .range(from..)
                .take_while(|((k, _, _), _)| r.end.is_empty() || *k < r.end)
                .any(|(_, commit_ts)| *commit_ts <= read_ts)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_pipelined_lock_excludes_other_transactions_until_dropped() {
        let cm = ConcurrencyManager::new();
        let a = cm.lock_pessimistic(vec![b"k".to_vec()], 10).unwrap();
        assert!(cm.lock_pessimistic(vec![b"k".to_vec()], 20).is_none());
        let again = cm.lock_pessimistic(vec![b"k".to_vec()], 10).unwrap();
        assert!(cm.lock_pessimistic(vec![b"j".to_vec()], 20).is_some());
        drop(a);
        assert!(cm.lock_pessimistic(vec![b"k".to_vec()], 20).is_none());
        drop(again);
        assert!(cm.lock_pessimistic(vec![b"k".to_vec()], 20).is_some());
        // A one-phase commit in flight on the key excludes it too.
        let (_one_pc, _) = cm.lock_keys(vec![b"m".to_vec()], 30);
        assert!(cm.lock_pessimistic(vec![b"m".to_vec()], 40).is_none());
    }

    fn range(a: &[u8], b: &[u8]) -> Vec<KeyRange> {
        vec![KeyRange::new(a.to_vec(), b.to_vec())]
    }

    #[tokio::test]
    async fn a_commit_lands_above_every_read_before_it() {
        let cm = ConcurrencyManager::new();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(cm.read_at(100, &range(b"a", b"z"), soon).await);
        let (_g, commit_ts) = cm.lock_keys(vec![b"k".to_vec()], 40);
        assert_eq!(commit_ts, 101, "above the read at 100");
        let (_g2, c2) = cm.lock_keys(vec![b"m".to_vec()], 300);
        assert_eq!(c2, 301, "above its own start");
    }

    #[tokio::test]
    async fn a_read_waits_for_a_commit_it_must_see_and_only_for_that() {
        let cm = ConcurrencyManager::new();
        let (guard, commit_ts) = cm.lock_keys(vec![b"k".to_vec()], 10);
        assert_eq!(commit_ts, 11);
        let soon = || Instant::now() + Duration::from_millis(30);
        // Below the commit, or elsewhere: no wait.
        assert!(cm.read_at(10, &range(b"a", b"z"), soon()).await);
        assert!(cm.read_at(50, &range(b"l", b"z"), soon()).await);
        assert!(cm.read_at(50, &range(b"a", b"k"), soon()).await);
        // At or above it, over the key: waits, and gives up at `until`.
        assert!(!cm.read_at(50, &range(b"a", b""), soon()).await);
        // Released while a read waits: the read goes on.
        let cm2 = cm.clone();
        let waiter = tokio::spawn(async move {
            cm2.read_at(
                11,
                &range(b"k", b"l"),
                Instant::now() + Duration::from_secs(5),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(guard);
        assert!(waiter.await.unwrap());
        assert_eq!(cm.max_ts(), 50);
    }
}
