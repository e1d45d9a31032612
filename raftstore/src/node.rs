//! The node: what the services of a storage process talk to.
//!
//! A node owns the store loop thread (through its channel, the router),
//! the engine for reads, the coprocessor read pool, and the store address
//! resolver. Every call into the store loop waits for its answer with a
//! timeout, so a region without a quorum produces a clear error instead of
//! a hang.

use quarry_proto::failpoint::{fires_on, injected};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quarry_coprocessor::codec::key::row_keys_end;
use quarry_coprocessor::codec::mvcc::WriteKind;
use quarry_coprocessor::storage::{KeyRange, KeyRangeRef};
use quarry_proto::coprocessor::{other_error, CopResponse, OtherError};
use quarry_proto::kv::{key_error, Context, KvPair, PrewriteRequest, RollbackRequest};
use quarry_proto::meta::{
    Peer as PeerMeta, Region, RegionError, StatusResponse, Store as StoreInfo,
};
use quarry_proto::raft::{txn_write::Step, Conflict, KvWrite, SplitRequest, TxnWrite};
use tokio::sync::oneshot;

use crate::concurrency::ConcurrencyManager;
use crate::engine::{Cf, Engine};
use crate::grpc_transport::StoreResolver;
use crate::import::SstImporter;
use crate::local_read::LocalReader;
use crate::peer::propose::TxnDone;
use crate::read_pool::ReadPool;
use crate::store::StoreMsg;
use crate::{keys, pessimistic, region, Error, Result};

mod coprocessor;
mod ingest;
mod read_dag;
pub(crate) use read_dag::ReadDag;
mod same_reads;

pub use coprocessor::POINTS_PER_JOB;

/// What became of a transaction, by its primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStatus {
    /// Still running: its lock lives this long from its start.
    Locked {
        ttl_ms: u64,
    },
    Committed {
        commit_ts: u64,
    },
    RolledBack,
}

/// How long a write may wait to be committed and applied.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of region per part when an aggregation is cut into parts scanned
/// on several threads.
pub const SUBRANGE_BYTES: u64 = 4 << 20;
/// How long a read may wait for leadership to be confirmed.
pub const READ_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Node<E: Engine> {
    pub store_id: u64,
    engine: Arc<E>,
    router: Mutex<Sender<StoreMsg>>,
    read_pool: ReadPool,
    /// Reads in flight that an identical request may join.
    same_reads: same_reads::SameReads,
    pending_reads: Arc<AtomicUsize>,
    max_pending_reads: usize,
    pub resolver: Arc<StoreResolver>,
    local: Arc<LocalReader>,
    /// raftstore.gc-life-time, in ms.
    gc_life_ms: std::sync::atomic::AtomicU64,
    /// What holds the GC safe point back (see [`Node::gc_safe_point`]).
    gc: Mutex<GcState>,
    /// raftstore.pipelined-pessimistic-lock (`pessimistic.rs`).
    pipelined_locks: std::sync::atomic::AtomicBool,
    /// Served reads and one-phase commits (`concurrency.rs`).
    concurrency: Arc<ConcurrencyManager>,
    timestamps: std::sync::OnceLock<Timestamps>,
    /// Uploaded SST files (bulk load, `import.rs`).
    importer: std::sync::OnceLock<Arc<SstImporter>>,
}

/// What the store loop shares with the reads that skip it.
pub struct Shared {
    /// Published leases (`local_read.rs`).
    pub local: Arc<LocalReader>,
    /// Served reads and one-phase commits (`concurrency.rs`).
    pub concurrency: Arc<ConcurrencyManager>,
}

/// A source of fresh oracle timestamps.
pub type Timestamps =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<u64>> + Send + Sync>;

/// The GC safe point and what holds it back.
#[derive(Default)]
struct GcState {
    /// The safe point handed out last: it never goes back.
    safe_point: u64,
    /// The oldest read a compute process holds (0: none), as the meta
    /// leader last told, and when.
    hold: u64,
    hold_heard: Option<Instant>,
}

/// A GC hold heard longer ago than a quarter of the GC lifetime, within
/// these bounds, is stale: the safe point waits for fresh news. (Holds
/// registered meanwhile are unknown here; a quarter of the lifetime keeps
/// the safe point well behind them.)
const GC_HOLD_STALE_MIN: Duration = Duration::from_millis(2500);
const GC_HOLD_STALE_MAX: Duration = Duration::from_secs(10);

struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sets its flag when dropped: a coprocessor call's future carries one,
/// so its task learns that the caller went away.
#[derive(Default)]
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl<E: Engine> Node<E> {
    pub fn new(
        store_id: u64,
        engine: Arc<E>,
        router: Sender<StoreMsg>,
        read_pool_threads: usize,
        max_pending_reads: usize,
        resolver: Arc<StoreResolver>,
        shared: Shared,
    ) -> Result<Self> {
        let read_pool = ReadPool::new(read_pool_threads, "cop")?;
        Ok(Node {
            store_id,
            engine,
            router: Mutex::new(router),
            read_pool,
            same_reads: Default::default(),
            pending_reads: Arc::new(AtomicUsize::new(0)),
            max_pending_reads,
            resolver,
            local: shared.local,
            gc_life_ms: std::sync::atomic::AtomicU64::new(600_000),
            gc: Mutex::new(GcState::default()),
            pipelined_locks: std::sync::atomic::AtomicBool::new(true),
            concurrency: shared.concurrency,
            timestamps: std::sync::OnceLock::new(),
            importer: std::sync::OnceLock::new(),
        })
    }

    /// Threads of the read pool, where coprocessor requests run.
    pub fn read_pool_threads(&self) -> usize {
        self.read_pool.threads()
    }

    pub fn engine(&self) -> &Arc<E> {
        &self.engine
    }

    pub fn router(&self) -> Sender<StoreMsg> {
        self.router.lock().clone()
    }

    /// Sends a message built around a reply channel and waits for the
    /// reply, at most `timeout`.
    async fn ask<T>(
        &self,
        what: impl Fn() -> String,
        timeout: Duration,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> StoreMsg,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.router
            .lock()
            .send(make(tx))
            .map_err(|_| Error::Unavailable(format!("store {} is shutting down", self.store_id)))?;
        let asked = Instant::now();
        let answer = tokio::time::timeout(timeout, rx).await;
        if asked.elapsed() > Duration::from_millis(500) {
            tracing::warn!(
                store = self.store_id,
                ms = asked.elapsed().as_millis() as u64,
                "slow: {}",
                what()
            );
        }
        match answer {
            Ok(Ok(r)) => r.map_err(|e| self.fill_leader_store(e)),
            Ok(Err(_)) => Err(Error::Unavailable(format!(
                "{}: the request was dropped",
                what()
            ))),
            Err(_) => Err(Error::region(RegionError {
                message: format!(
                    "{}: no answer within {:?} (does the region have a quorum?)",
                    what(),
                    timeout
                ),
                server_is_busy: Some(quarry_proto::meta::ServerIsBusy {
                    reason: "timeout".into(),
                    backoff_ms: 100,
                }),
                ..Default::default()
            })),
        }
    }

    /// Adds the leader's store address to a NotLeader hint.
    fn fill_leader_store(&self, e: Error) -> Error {
        match e {
            Error::Region(mut r) => {
                if let Some(nl) = r.not_leader.as_mut() {
                    if let Some(l) = nl.leader {
                        if let Some(addr) = self.resolver.get(l.store_id) {
                            nl.leader_store = Some(StoreInfo {
                                id: l.store_id,
                                addr,
                            });
                        }
                    }
                }
                Error::Region(r)
            }
            other => other,
        }
    }

    // ------------------------------------------------------------ MVCC GC

    /// Sets how long versions are kept (raftstore.gc-life-time-secs).
    pub fn set_gc_life(&self, life: Duration) {
        self.gc_life_ms
            .store(life.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// The timestamp of the wall time `ago` before now (physical << 18).
    fn ts_ago(ago_ms: u64) -> u64 {
        let now_ms = quarry_proto::failpoint::wall_clock_ms();
        now_ms.saturating_sub(ago_ms) << 18
    }

    /// Notes the oldest read a compute process holds (0: none), as the
    /// meta leader's answer to a heartbeat says.
    pub fn set_gc_hold(&self, hold: u64) {
        let mut gc = self.gc.lock();
        gc.hold = hold;
        gc.hold_heard = Some(Instant::now());
    }

    /// The oldest held read (0: none), if heard of recently.
    fn fresh_hold(&self, gc: &GcState) -> Option<u64> {
        let life = Duration::from_millis(self.gc_life_ms.load(Ordering::Relaxed));
        let stale = (life / 4).clamp(GC_HOLD_STALE_MIN, GC_HOLD_STALE_MAX);
        gc.hold_heard
            .filter(|at| at.elapsed() < stale)
            .map(|_| gc.hold)
    }

    /// The GC safe point now: a compaction may fold versions at or below
    /// it into packs, where they lose their timestamps. It is the wall
    /// time one GC lifetime ago, held at or below the oldest read a
    /// running query or open transaction holds (`Meta.HoldGc`, relayed by
    /// the meta leader in heartbeat answers), so a long transaction keeps
    /// the versions it reads. Until this store has heard the holds (a
    /// start, a meta leader change, a lost meta leader), it stays where
    /// it was (after a quarter of the lifetime without news at most). It
    /// never goes back.
    pub fn gc_safe_point(&self) -> u64 {
        let mut gc = self.gc.lock();
        // Never below what a compaction applied here folded to (planned
        // by this store or by another leader of its regions).
        gc.safe_point = gc.safe_point.max(self.concurrency.folded());
        if let Some(hold) = self.fresh_hold(&gc) {
            let mut point = Self::ts_ago(self.gc_life_ms.load(Ordering::Relaxed));
            if hold != 0 {
                point = point.min(hold.saturating_sub(1));
            }
            gc.safe_point = gc.safe_point.max(point);
        }
        gc.safe_point
    }

    /// The oldest snapshot a read may start at (reads check again, after
    /// taking their snapshot, against what compactions folded to). A
    /// read that a compute
    /// process holds (at or above the oldest hold) may start anywhere
    /// above the safe point; any other must be younger than half a
    /// lifetime, so that it has that long to finish (and to be held)
    /// before a compaction may fold the versions it sees.
    pub fn oldest_readable_ts(&self) -> u64 {
        let safe_point = self.gc_safe_point();
        let young = Self::ts_ago(self.gc_life_ms.load(Ordering::Relaxed) / 2);
        let gc = self.gc.lock();
        let held = match gc.hold {
            0 => young,
            hold => hold.min(young),
        };
        held.max(safe_point + 1)
    }

    /// The oldest read a compute process holds, as last heard (0: none).
    pub fn gc_hold(&self) -> u64 {
        self.gc.lock().hold
    }

    /// The answer to a read whose snapshot GC may have folded.
    fn too_old(&self, read_ts: u64) -> CopResponse {
        CopResponse {
            other_error: Some(OtherError {
                code: other_error::Code::InvalidInput as i32,
                message: format!(
                    "snapshot too old: the read at timestamp {read_ts} started more than \
                     half of raftstore.gc-life-time-secs ago ({} s), no hold on it has \
                     reached this store, and its versions may be gone; run it again",
                    self.gc_life_ms.load(Ordering::Relaxed) / 1000
                ),
            }),
            ..Default::default()
        }
    }

    // ------------------------------------------------------------ raft calls

    pub async fn write(
        &self,
        region_id: u64,
        epoch: Option<quarry_proto::meta::RegionEpoch>,
        write: KvWrite,
    ) -> Result<()> {
        self.ask(
            || format!("writing to region {region_id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::Write {
                region_id,
                epoch,
                write,
                cb,
            },
        )
        .await
    }

    /// Proposes a transaction's step to region `region_id`; answers once
    /// it applied (or was refused, with a key error).
    pub async fn txn(&self, ctx: Option<&Context>, txn: TxnWrite) -> Result<TxnDone> {
        let ctx = *Self::context(ctx)?;
        let region_id = ctx.region_id;
        let one_pc = matches!(&txn.step, Some(Step::Prewrite(p)) if p.try_one_pc);
        let done = self
            .ask(
                || format!("a transaction step on region {region_id}"),
                WRITE_TIMEOUT,
                |cb| StoreMsg::Txn {
                    region_id,
                    epoch: ctx.region_epoch,
                    txn,
                    cb,
                },
            )
            .await?;
        if let (true, Some(term)) = (one_pc, done.unsynced_term) {
            self.sync_max_ts(region_id, term);
        }
        Ok(done)
    }

    /// Sets raftstore.pipelined-pessimistic-lock.
    pub fn set_pipelined_locks(&self, on: bool) {
        self.pipelined_locks.store(on, Ordering::Relaxed);
    }

    /// A prewrite, with the rows it locked when `return_values` asks for
    /// them, answered before replication when it may be pipelined (see
    /// `pessimistic.rs`).
    pub async fn prewrite(
        &self,
        ctx: Option<&Context>,
        p: PrewriteRequest,
    ) -> Result<(TxnDone, Vec<KvPair>)> {
        let c = *Self::context(ctx)?;
        let want_rows = p.return_values && !p.packed;
        let keys: Vec<Vec<u8>> = p.mutations.iter().map(|m| m.key.clone()).collect();
        if want_rows {
            // A snapshot read at start_ts: no one-phase commit lands at or
            // below it from now on, and one in flight applies first.
            let ranges: Vec<KeyRange> = keys
                .iter()
                .map(|k| KeyRange::new(k.clone(), row_keys_end(k)))
                .collect();
            let until = Instant::now() + READ_CHECK_TIMEOUT;
            if !self.concurrency.read_at(p.start_ts, &ranges, until).await {
                return Err(Error::region(region::server_is_busy(format!(
                    "a one-phase commit on region {} has not applied within {:?}",
                    c.region_id, READ_CHECK_TIMEOUT
                ))));
            }
        }
        if self.pipelined_locks.load(Ordering::Relaxed) && pessimistic::pipelinable(&p) {
            if let Some(rows) = self.pipelined_lock(&c, &p, &keys).await? {
                return Ok((TxnDone::default(), rows));
            }
        }
        let start_ts = p.start_ts;
        let done = self
            .txn(
                Some(&c),
                TxnWrite {
                    step: Some(Step::Prewrite(p)),
                },
            )
            .await?;
        let rows = if want_rows {
            pessimistic::rows_at(self.engine.as_ref(), &keys, start_ts)?
        } else {
            vec![]
        };
        Ok((done, rows))
    }

    /// Locks `p`'s keys the pipelined way if its leader finds them free:
    /// the rows at once, the raft command on its way (None: go the slow
    /// way).
    async fn pipelined_lock(
        &self,
        c: &Context,
        p: &PrewriteRequest,
        keys: &[Vec<u8>],
    ) -> Result<Option<Vec<KvPair>>> {
        let r = self.read_check(c.region_id, c.region_epoch).await?;
        let same_epoch = c
            .region_epoch
            .is_some_and(|e| e.version == region::epoch(&r).version);
        if !same_epoch || !keys.iter().all(|k| region::contains(&r, k)) {
            return Ok(None);
        }
        let Some(held) = self.concurrency.lock_pessimistic(keys.to_vec(), p.start_ts) else {
            return Ok(None);
        };
        let Some(rows) = pessimistic::check_free(self.engine.as_ref(), p)? else {
            return Ok(None);
        };
        let (tx, rx) = oneshot::channel();
        let sent = self.router.lock().send(StoreMsg::Txn {
            region_id: c.region_id,
            epoch: c.region_epoch,
            txn: TxnWrite {
                step: Some(Step::Prewrite(p.clone())),
            },
            cb: tx,
        });
        if sent.is_err() {
            return Ok(None);
        }
        let (region_id, start_ts) = (c.region_id, p.start_ts);
        tokio::spawn(async move {
            // In flight until it applies (or fails): then the lock is in
            // RocksDB, or lost (see `pessimistic.rs`).
            match tokio::time::timeout(WRITE_TIMEOUT, rx).await {
                Ok(Ok(Ok(_))) => {}
                other => tracing::debug!(
                    region_id,
                    start_ts,
                    "a pipelined pessimistic lock did not apply: {:?}",
                    other.map(|r| r.map(|r| r.err()))
                ),
            }
            drop(held);
        });
        Ok(Some(rows))
    }

    /// Raises max_ts to a fresh oracle timestamp for the leader of
    /// `region_id` in `term`, in the background: its next transactions may
    /// commit in one phase (`concurrency.rs`).
    fn sync_max_ts(&self, region_id: u64, term: u64) {
        let Some(timestamps) = self.timestamps.get().cloned() else {
            return;
        };
        let cm = self.concurrency.clone();
        let router = self.router();
        tokio::spawn(async move {
            match timestamps().await {
                Ok(ts) => {
                    cm.raise_max_ts(ts);
                    let _ = router.send(StoreMsg::SyncedMaxTs { region_id, term });
                }
                Err(e) => tracing::debug!(region_id, "no timestamp to sync max_ts: {e}"),
            }
        });
    }

    /// Where this store takes oracle timestamps (the meta service, which
    /// forwards to the meta leader); without one it never commits in one
    /// phase.
    pub fn set_timestamps(&self, source: Timestamps) {
        let _ = self.timestamps.set(source);
    }

    /// What became of the transaction `start_ts` whose primary key is
    /// `primary`: locked while its lock lives, or committed, or rolled
    /// back. A lock past its TTL at `current_ts` is rolled back here, and
    /// so is a primary with neither lock nor record when
    /// `rollback_if_not_exist` (the asker's lock expired too); without it
    /// such a primary counts as locked (its prewrite may be on the way).
    pub async fn check_txn_status(
        &self,
        ctx: Option<&Context>,
        primary: &[u8],
        start_ts: u64,
        current_ts: u64,
        rollback_if_not_exist: bool,
    ) -> Result<TxnStatus> {
        use quarry_coprocessor::codec::mvcc::{decode_lock, lock_expired, lock_key};
        let c = *Self::context(ctx)?;
        let region = self.read_check(c.region_id, c.region_epoch).await?;
        if !region::contains(&region, primary) {
            return Err(Error::region(region::key_not_in_region(primary, &region)));
        }
        let mut locked = false;
        if let Some(v) = self.engine.get(Cf::Default, &lock_key(primary))? {
            let lock = decode_lock(&v)?;
            if lock.start_ts == start_ts {
                if !lock_expired(&lock, current_ts) {
                    return Ok(TxnStatus::Locked {
                        ttl_ms: lock.ttl_ms.max(1),
                    });
                }
                locked = true;
            }
        }
        let mut pairs = Vec::new();
        self.engine.scan(
            Cf::Default,
            primary,
            &keys::prefix_end(primary),
            &mut |k, v| {
                pairs.push((k.to_vec(), v.to_vec()));
                true
            },
        )?;
        let versions = crate::txn::parse_versions(pairs)?;
        if let Some(v) = versions.iter().find(|v| v.start_ts == start_ts) {
            return Ok(if v.kind == WriteKind::Rollback {
                TxnStatus::RolledBack
            } else {
                TxnStatus::Committed {
                    commit_ts: v.commit_ts,
                }
            });
        }
        if !locked && !rollback_if_not_exist {
            // Its prewrite may still be on the way: wait for it.
            return Ok(TxnStatus::Locked { ttl_ms: 1 });
        }
        // Expired, or never landed: roll it back (apply decides again, so
        // a commit that raced this shows up as COMMITTED).
        let rollback = TxnWrite {
            step: Some(Step::Rollback(RollbackRequest {
                context: None,
                keys: vec![primary.to_vec()],
                start_ts,
            })),
        };
        match self.txn(Some(&c), rollback).await {
            Ok(_) => Ok(TxnStatus::RolledBack),
            Err(Error::Key(k)) if k.code == key_error::Code::Committed as i32 => {
                Ok(TxnStatus::Committed {
                    commit_ts: k.commit_ts,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until region `region_id` may be read here with every
    /// acknowledged write visible; returns the region.
    pub async fn read_check(
        &self,
        region_id: u64,
        epoch: Option<quarry_proto::meta::RegionEpoch>,
    ) -> Result<Region> {
        // Under a published lease, no trip through the store loop.
        if let Some(r) = self.local.read(region_id, epoch.as_ref(), Instant::now()) {
            return Ok(r);
        }
        self.ask(
            || format!("reading region {region_id}"),
            READ_CHECK_TIMEOUT,
            |cb| StoreMsg::Read {
                region_id,
                epoch,
                cb,
            },
        )
        .await
    }

    pub async fn create_region(&self, region: Region) -> Result<()> {
        let id = region.id;
        self.ask(
            || format!("creating region {id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::CreatePeer { region, cb },
        )
        .await
    }

    pub async fn destroy_region(&self, region_id: u64) -> Result<()> {
        self.ask(
            || format!("destroying region {region_id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::DestroyPeer { region_id, cb },
        )
        .await
    }

    pub async fn change_peer(
        &self,
        region_id: u64,
        peer: PeerMeta,
        remove: bool,
    ) -> Result<Region> {
        self.ask(
            || format!("changing the peers of region {region_id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::ChangePeer {
                region_id,
                peer,
                remove,
                cb,
            },
        )
        .await
    }

    pub async fn split(
        &self,
        region_id: u64,
        epoch: Option<quarry_proto::meta::RegionEpoch>,
        split: SplitRequest,
    ) -> Result<(Region, Region)> {
        if fires_on("split_propose", self.store_id) {
            return Err(Error::Unavailable(injected("split_propose")));
        }
        self.ask(
            || format!("splitting region {region_id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::Split {
                region_id,
                epoch,
                split,
                cb,
            },
        )
        .await
    }

    pub fn transfer_leader(&self, region_id: u64, to_peer_id: u64) {
        let _ = self.router.lock().send(StoreMsg::TransferLeader {
            region_id,
            to_peer_id,
        });
    }

    pub async fn status(&self) -> Result<StatusResponse> {
        let (tx, rx) = oneshot::channel();
        self.router
            .lock()
            .send(StoreMsg::Status { cb: tx })
            .map_err(|_| Error::Unavailable("store is shutting down".into()))?;
        let mut status = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .map_err(|_| Error::Unavailable("the store loop did not answer".into()))?
            .map_err(|_| Error::Unavailable("the store loop stopped".into()))?;
        status.background_work = self.engine.background_work();
        crate::metrics::refresh(&status, &self.engine.background_stats());
        status.gc_safe_point = self.gc_safe_point();
        status.oldest_readable_ts = self.oldest_readable_ts();
        status.gc_life_time_secs = self.gc_life_ms.load(Ordering::Relaxed) / 1000;
        status.gc_hold = self.gc_hold();
        Ok(status)
    }

    // ------------------------------------------------------------ kv

    fn context(ctx: Option<&Context>) -> Result<&Context> {
        ctx.ok_or_else(|| Error::InvalidInput("request without a region context".into()))
    }

    pub async fn batch_put(
        &self,
        ctx: Option<&Context>,
        pairs: Vec<KvPair>,
        if_absent: bool,
        same_value_ok: bool,
    ) -> Result<()> {
        let ctx = Self::context(ctx)?;
        let conflict = match (if_absent, same_value_ok) {
            (false, _) => Conflict::Overwrite,
            (true, false) => Conflict::FailIfExists,
            (true, true) => Conflict::FailIfDifferent,
        };
        self.write(
            ctx.region_id,
            ctx.region_epoch,
            KvWrite {
                puts: pairs,
                conflict: conflict as i32,
                ..Default::default()
            },
        )
        .await
    }

    pub async fn delete_range(
        &self,
        ctx: Option<&Context>,
        start: &[u8],
        end: &[u8],
    ) -> Result<()> {
        let ctx = Self::context(ctx)?;
        self.write(
            ctx.region_id,
            ctx.region_epoch,
            KvWrite {
                delete_ranges: vec![KvPair {
                    key: start.to_vec(),
                    value: end.to_vec(),
                }],
                ..Default::default()
            },
        )
        .await
    }

    pub async fn batch_get(&self, ctx: Option<&Context>, keys: &[Vec<u8>]) -> Result<Vec<KvPair>> {
        let ctx = Self::context(ctx)?;
        let r = self.read_check(ctx.region_id, ctx.region_epoch).await?;
        let mut out = Vec::new();
        for k in keys {
            if !region::contains(&r, k) {
                return Err(Error::region(region::key_not_in_region(k, &r)));
            }
            if let Some(v) = self.engine.get(Cf::Default, k)? {
                out.push(KvPair {
                    key: k.clone(),
                    value: v,
                });
            }
        }
        Ok(out)
    }

    pub async fn scan(
        &self,
        ctx: Option<&Context>,
        start: &[u8],
        end: &[u8],
        limit: usize,
        key_only: bool,
    ) -> Result<Vec<KvPair>> {
        let ctx = Self::context(ctx)?;
        let r = self.read_check(ctx.region_id, ctx.region_epoch).await?;
        let mut out = Vec::new();
        let Some(range) = KeyRangeRef::new(start, end).intersect(KeyRangeRef::of_region(&r)) else {
            return Ok(out);
        };
        self.engine
            .scan(Cf::Default, &range.start, &range.end, &mut |k, v| {
                out.push(KvPair {
                    key: k.to_vec(),
                    value: if key_only { vec![] } else { v.to_vec() },
                });
                limit == 0 || out.len() < limit
            })?;
        Ok(out)
    }
}
