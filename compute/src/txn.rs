//! Transactions' client side: timestamps, two-phase commit, lock
//! resolution (Percolator, as TiDB's `store/tikv` drives TiKV).
//!
//! WRITING. A statement's writes are one transaction:
//!
//! 1. `start_ts` from the timestamp oracle (the meta region's TSO).
//! 2. **Prewrite** every key, grouped by region, the regions at once; the
//!    first key (in key order) is the *primary*. Each region locks its keys
//!    or refuses the whole request (`raftstore/src/txn.rs`). A lock of
//!    another transaction in the way is resolved (below) and the prewrite
//!    sent again; a write conflict or an existing row fails the statement
//!    after rolling back what was locked.
//! 3. `commit_ts` from the oracle, then **commit the primary**: from this
//!    point on the transaction is committed, whatever happens next.
//! 4. **Commit the secondaries**, in the background once the statement
//!    has its answer. A failure here loses nothing: a reader that meets a
//!    leftover lock finds the primary committed and commits the lock
//!    itself.
//!
//! ONE PHASE. When every key lies in one region, the prewrite asks the
//! region to commit at once (`try_one_pc`): its leader picks commit_ts
//! itself, above every read it served, and proposes one raft command
//! (`raftstore/src/concurrency.rs`). Steps 3 and 4 and a trip to the
//! oracle are saved. The region may decline (a new leader not yet synced
//! with the oracle) and lock as usual; the statement then goes on in two
//! phases. On a column table only INSERTs take one phase. A one-phase
//! attempt whose answer was lost and that is retried in two phases (the
//! region split meanwhile) is refused if it applies late, so the commit
//! stays all or nothing.
//!
//! READING. Every query reads at one `read_ts` (`df/region_scan.rs` takes
//! it from the statement). A region that meets a lock of a transaction
//! started at or before `read_ts` answers with the lock; [`Txns::resolve`]
//! asks the primary's region what became of the transaction
//! (`CheckTxnStatus`, which rolls back a lock past its TTL: a client that
//! died mid-commit blocks others for at most [`LOCK_TTL`]), then commits or
//! rolls back the lock, or, while the transaction still runs, waits a
//! little; the scan then asks again.
//!
//! DEADLINES. Every step's region requests carry the statement's deadline
//! (`statement_deadline::write_deadline`). A prewrite that runs out of time
//! is rolled back and nothing of it commits, except a one-phase prewrite,
//! which is a commit: one sent and not answered may still apply, so its
//! error says the outcome is unknown (TiDB's "result undetermined"), as
//! does an autocommit statement's primary commit that ran out of time or
//! lost its store (COMMIT of an open transaction says so in its own
//! words). The primary's commit may run `COMMIT_GRACE` (5 s) past the
//! deadline, since every row is locked by then; the secondaries' commit,
//! after the answer, gets 30 s of its own.
//!
//! Retries of every step are idempotent: a prewrite that finds its own
//! lock passes, a commit that finds its own version passes, so a step
//! whose outcome was unknown (store restarted, leader changed) is simply
//! sent again through the shared region-retry layer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::kv::{
    key_error::Code, CheckTxnStatusRequest, CommitRequest, KeyError, KvPair, LockInfo, Mutation,
    Op, PrewriteRequest, ResolveLockRequest, TxnHeartBeatRequest, TxnResponse,
};
use quarry_proto::meta::{RegionError, TableDef};

use crate::cluster::Cluster;
use crate::gc_hold::{ReadHold, ReadHolds};
use crate::region_cache::{Located, RegionCache};
use crate::retry::{Attempt, RegionWork, Retry, RetryConfig, RetryStats};
use crate::tso::Tso;
use crate::{Error, Result};

/// Whether `table` keeps packs (the column layout).
pub fn is_packed(table: &TableDef) -> bool {
    table.layout == quarry_proto::meta::Layout::Column as i32
}

pub use crate::statement_deadline::WRITE_DEADLINE;

/// How long a lock outlives its transaction's start unless committed: a
/// reader may roll back a lock older than this (TiKV's default is 3 s).
pub const LOCK_TTL: Duration = Duration::from_secs(3);
/// How long an open transaction's primary lock outlives each heartbeat
/// (TiDB gives its pessimistic transactions' managed locks 20 s). Its
/// heartbeats come every second (`session.rs`), but on a loaded machine a
/// few in a row can be late; with [`LOCK_TTL`] from each one, a writer
/// could roll back a transaction whose client is alive. A client that
/// dies blocks writers of its rows this long at most.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(10);
/// Regions a transaction's step talks to at once.
const TXN_CONCURRENCY: usize = 8;
/// The longest a reader waits for a running transaction before asking
/// again.
const LOCK_WAIT_MAX: Duration = Duration::from_millis(50);

/// The client side of transactions, shared by a compute process.
pub struct Txns {
    cluster: Arc<Cluster>,
    cache: Arc<RegionCache>,
    retry: RetryConfig,
    tso: Arc<Tso>,
    holds: Arc<ReadHolds>,
}

/// A step of a transaction on the regions holding `keys`.
#[derive(Clone)]
enum Step {
    Prewrite {
        primary: Vec<u8>,
        start_ts: u64,
        /// The table keeps packs (`PrewriteRequest.packed`).
        packed: bool,
        /// Commit in one phase if every mutation lands in one region; the
        /// region's answer goes here.
        one_pc: Option<Arc<parking_lot::Mutex<u64>>>,
        /// The highest commit_ts a one-phase commit may take (0: any;
        /// `PrewriteRequest.max_one_pc_commit_ts`).
        max_one_pc: u64,
        /// The locks' TTL, from start_ts ([`lock_ttl_ms`]).
        ttl_ms: u64,
        /// An open transaction's statement (`PrewriteRequest.pessimistic`).
        pessimistic: bool,
        /// Ask for the rows locked (`PrewriteRequest.return_values`); the
        /// regions' answers go here.
        rows: Option<Arc<parking_lot::Mutex<Vec<KvPair>>>>,
    },
    HeartBeat {
        start_ts: u64,
        ttl_ms: u64,
    },
    Commit {
        start_ts: u64,
        commit_ts: u64,
    },
    Resolve {
        start_ts: u64,
        commit_ts: u64,
    },
}

impl Txns {
    pub fn new(cluster: Arc<Cluster>, cache: Arc<RegionCache>) -> Self {
        Txns {
            tso: Tso::new(cluster.clone()),
            holds: ReadHolds::new(cluster.clone()),
            cluster,
            cache,
            retry: RetryConfig {
                concurrency: TXN_CONCURRENCY,
                backoff_base: Duration::from_millis(2),
                backoff_max: Duration::from_millis(500),
                // Until the deadline: a commit waits out a store's restart.
                give_up: None,
                what: "transaction",
            },
        }
    }

    pub(crate) fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    pub(crate) fn cache(&self) -> &Arc<RegionCache> {
        &self.cache
    }

    /// A fresh timestamp from the oracle: above every one handed out
    /// before, so a read at it sees every transaction committed so far.
    pub async fn timestamp(&self) -> Result<u64> {
        self.tso.get().await
    }

    /// [`Txns::timestamp`] with the catalog's version as of it.
    pub async fn stamp(&self) -> Result<crate::tso::Stamp> {
        self.tso.stamp().await
    }

    /// Keeps the versions a read at `read_ts` needs until the hold is
    /// dropped (`gc_hold.rs`).
    pub fn hold_read(&self, read_ts: u64) -> ReadHold {
        self.holds.hold(read_ts)
    }

    /// Writes `mutations` (distinct row keys) as one transaction; returns
    /// its commit_ts. Nothing is visible until the primary commits, and
    /// then everything is. `packed`: the rows belong to a column-layout
    /// table (its prewrite marks the packs whose rows an update or delete
    /// hides).
    pub async fn write(
        self: &Arc<Self>,
        mutations: Vec<Mutation>,
        packed: bool,
        deadline: Instant,
    ) -> Result<u64> {
        let start_ts = self.timestamp().await?;
        self.write_at(start_ts, mutations, packed, deadline).await
    }

    /// [`Txns::write`] for a transaction that read at `start_ts`: a row
    /// another transaction committed after it fails the write with
    /// [`Error::Conflict`].
    pub async fn write_at(
        self: &Arc<Self>,
        start_ts: u64,
        mutations: Vec<Mutation>,
        packed: bool,
        deadline: Instant,
    ) -> Result<u64> {
        self.write_checked(start_ts, mutations, packed, deadline, None)
            .await
    }

    /// [`Txns::write_at`] for a statement that planned its writes with
    /// `check`'s definitions of the tables it writes: it commits only if
    /// they are still the tables' definitions once its commit_ts is
    /// taken, or in one phase no later than `check` allows
    /// (`crate::schema_check::SchemaCheck`).
    pub async fn write_checked(
        self: &Arc<Self>,
        start_ts: u64,
        mut mutations: Vec<Mutation>,
        packed: bool,
        deadline: Instant,
        check: Option<&crate::schema_check::SchemaCheck>,
    ) -> Result<u64> {
        if mutations.is_empty() {
            return Err(Error::Internal(
                "a transaction with nothing to write".into(),
            ));
        }
        mutations.sort_by(|a, b| a.key.cmp(&b.key));
        let primary = mutations[0].key.clone();
        let keys: Vec<Vec<u8>> = mutations.iter().map(|m| m.key.clone()).collect();
        // One phase when the table has no packs, or the statement only
        // inserts (`raftstore/src/txn.rs` says why).
        // Not on a table with indexes, whose definition is checked at commit.
        let max_one_pc = check.map_or(Some(0), |c| c.max_one_pc_commit_ts(start_ts));
        let one_pc = ((!packed || mutations.iter().all(|m| m.op == Op::Insert as i32))
            && max_one_pc.is_some())
        .then(|| Arc::new(parking_lot::Mutex::new(0)));
        let prewrite = Step::Prewrite {
            primary: primary.clone(),
            start_ts,
            packed,
            one_pc: one_pc.clone(),
            max_one_pc: max_one_pc.unwrap_or_default(),
            ttl_ms: lock_ttl_ms(start_ts),
            pessimistic: false,
            rows: None,
        };
        if let Err((e, maybe_applied)) = self.run_tracked(prewrite, mutations, deadline).await {
            // Nothing committed: take back what was locked (a lock left
            // behind would be rolled back by a reader after its TTL). A
            // one-phase prewrite is its commit: one sent and not answered
            // may still apply, and then commits.
            self.rollback(start_ts, keys).await;
            return Err(if maybe_applied { undetermined(e) } else { e });
        }
        if let Some(commit_ts) = one_pc.map(|c| *c.lock()).filter(|ts| *ts != 0) {
            return Ok(commit_ts);
        }
        self.commit_checked(start_ts, keys, deadline, check)
            .await
            .map_err(undetermined)
    }

    /// Locks `mutations` for the transaction `start_ts` whose primary key
    /// is `primary`, over keys it may have locked before (their locks then
    /// hold the new writes): an open transaction's statement
    /// (`pessimistic`: readers pass over the locks), or its COMMIT's
    /// prewrite of everything it wrote.
    pub async fn prewrite(
        self: &Arc<Self>,
        start_ts: u64,
        primary: &[u8],
        mutations: Vec<Mutation>,
        packed: bool,
        pessimistic: bool,
        deadline: Instant,
    ) -> Result<()> {
        self.prewrite_step(
            start_ts,
            primary,
            mutations,
            packed,
            pessimistic,
            None,
            deadline,
        )
        .await
    }

    /// Locks the row keys `mutations` name (lock-only mutations of a row
    /// table) for the open transaction `start_ts` and returns their rows
    /// as it sees them, one request per region
    /// (`raftstore/src/pessimistic.rs`); a key without a row is left out.
    pub async fn lock_returning_rows(
        self: &Arc<Self>,
        start_ts: u64,
        primary: &[u8],
        mutations: Vec<Mutation>,
        deadline: Instant,
    ) -> Result<Vec<KvPair>> {
        let rows = Arc::new(parking_lot::Mutex::new(Vec::new()));
        self.prewrite_step(
            start_ts,
            primary,
            mutations,
            false,
            true,
            Some(rows.clone()),
            deadline,
        )
        .await?;
        let rows = std::mem::take(&mut *rows.lock());
        Ok(rows)
    }

    #[allow(clippy::too_many_arguments)]
    async fn prewrite_step(
        self: &Arc<Self>,
        start_ts: u64,
        primary: &[u8],
        mut mutations: Vec<Mutation>,
        packed: bool,
        pessimistic: bool,
        rows: Option<Arc<parking_lot::Mutex<Vec<KvPair>>>>,
        deadline: Instant,
    ) -> Result<()> {
        mutations.sort_by(|a, b| a.key.cmp(&b.key));
        let step = Step::Prewrite {
            primary: primary.to_vec(),
            start_ts,
            packed,
            one_pc: None,
            max_one_pc: 0,
            ttl_ms: lock_ttl_ms(start_ts),
            pessimistic,
            rows,
        };
        self.run(step, mutations, deadline).await
    }

    /// Commits the prewritten transaction `start_ts`: `keys` are all of its
    /// keys, the primary first. Returns commit_ts once the primary is
    /// committed; the rest commit in the background.
    pub async fn commit(
        self: &Arc<Self>,
        start_ts: u64,
        keys: Vec<Vec<u8>>,
        deadline: Instant,
    ) -> Result<u64> {
        self.commit_checked(start_ts, keys, deadline, None).await
    }

    /// [`Txns::commit`], once `check` finds the tables' definitions as
    /// the transaction planned its writes with them (checked after
    /// commit_ts is taken: an index build that starts later reads this
    /// transaction's rows, `crate::index`); otherwise everything is rolled
    /// back and the error says to run it again.
    pub async fn commit_checked(
        self: &Arc<Self>,
        start_ts: u64,
        mut keys: Vec<Vec<u8>>,
        deadline: Instant,
        check: Option<&crate::schema_check::SchemaCheck>,
    ) -> Result<u64> {
        if keys.is_empty() {
            return Err(Error::Internal("a commit of no keys".into()));
        }
        let commit_ts = self.timestamp().await?;
        if let Some(check) = check {
            if let Err(e) = check.verify(&self.cluster).await {
                self.rollback(start_ts, keys).await;
                return Err(e);
            }
        }
        let secondaries = keys.split_off(1);
        let commit = Step::Commit {
            start_ts,
            commit_ts,
        };
        // Every row is locked: committing now is cheaper than leaving
        // locks behind, so the primary's commit may run a little past a
        // statement deadline that the prewrite used up.
        let primary_deadline = deadline.max(Instant::now() + COMMIT_GRACE);
        self.run(commit.clone(), as_mutations(keys), primary_deadline)
            .await?;
        if !secondaries.is_empty() {
            // Committed already; a secondary left locked is a reader's to
            // commit, so this runs after the answer (as TiDB does) and its
            // failing fails nothing.
            // Its own deadline: the statement's may be spent.
            let txns = self.clone();
            let deadline = Instant::now() + WRITE_DEADLINE;
            tokio::spawn(async move {
                if let Err(e) = txns.run(commit, as_mutations(secondaries), deadline).await {
                    tracing::debug!("committing secondaries of {start_ts}: {e}");
                }
            });
        }
        Ok(commit_ts)
    }

    /// Takes back the locks of `start_ts` on `keys` (nothing of it
    /// committed). A lock this misses is rolled back by a reader after its
    /// TTL.
    pub async fn rollback(self: &Arc<Self>, start_ts: u64, keys: Vec<Vec<u8>>) {
        let undo = Step::Resolve {
            start_ts,
            commit_ts: 0,
        };
        let until = Instant::now() + Duration::from_secs(5);
        if let Err(r) = self.run(undo, as_mutations(keys), until).await {
            tracing::debug!("rolling back transaction {start_ts}: {r}");
        }
    }

    /// Keeps the transaction `start_ts` alive: its primary's lock lives
    /// [`LOCK_TTL`] from now. Fails if the lock is gone (a reader rolled
    /// the transaction back).
    pub async fn heart_beat(
        self: &Arc<Self>,
        start_ts: u64,
        primary: &[u8],
        deadline: Instant,
    ) -> Result<()> {
        let step = Step::HeartBeat {
            start_ts,
            ttl_ms: ttl_from_now_ms(start_ts, HEARTBEAT_TTL),
        };
        self.run(step, as_mutations(vec![primary.to_vec()]), deadline)
            .await
    }

    /// Settles `lock`, met by a reader or a writer: commits or rolls it
    /// back once its transaction is known to have committed or failed, or
    /// waits a little while the transaction still runs. The caller asks
    /// again either way.
    pub async fn resolve(self: &Arc<Self>, lock: &LockInfo, deadline: Instant) -> Result<()> {
        let current_ts = self.timestamp().await?;
        // A primary with no lock and no record yet may be on its way;
        // only once this lock expired may it be rolled back regardless.
        let expired = quarry_coprocessor::codec::mvcc::lock_expired(lock, current_ts);
        let status = self
            .check_status(&lock.primary, lock.start_ts, current_ts, expired, deadline)
            .await?;
        match status {
            Status::Locked(ttl_ms) => {
                // Wait for it to finish, a little at a time.
                let left = Duration::from_millis(
                    (lock.start_ts >> 18)
                        .saturating_add(ttl_ms)
                        .saturating_sub(current_ts >> 18),
                );
                let wait = left.clamp(Duration::from_millis(2), LOCK_WAIT_MAX);
                if Instant::now() + wait >= deadline {
                    return Err(Error::Deadline(format!(
                        "waited until the deadline for the transaction that started at {} \
                         (it holds a lock on a row this statement needs)",
                        lock.start_ts
                    )));
                }
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Status::Committed(commit_ts) => {
                let step = Step::Resolve {
                    start_ts: lock.start_ts,
                    commit_ts,
                };
                self.run(step, as_mutations(vec![lock.key.clone()]), deadline)
                    .await
            }
            Status::RolledBack => {
                let step = Step::Resolve {
                    start_ts: lock.start_ts,
                    commit_ts: 0,
                };
                self.run(step, as_mutations(vec![lock.key.clone()]), deadline)
                    .await
            }
        }
    }

    async fn check_status(
        &self,
        primary: &[u8],
        start_ts: u64,
        current_ts: u64,
        rollback_if_not_exist: bool,
        deadline: Instant,
    ) -> Result<Status> {
        let out = Arc::new(parking_lot::Mutex::new(None));
        let work = StatusWork {
            primary: primary.to_vec(),
            start_ts,
            current_ts,
            rollback_if_not_exist,
            cluster: self.cluster.clone(),
            out: out.clone(),
        };
        let stats = RetryStats::default();
        self.layer(&stats).run(work, deadline).await?;
        let status = out.lock().take();
        status.ok_or_else(|| Error::Internal("no transaction status came back".into()))
    }

    fn layer<'a>(&'a self, stats: &'a RetryStats) -> Retry<'a> {
        Retry {
            cache: &self.cache,
            cfg: &self.retry,
            stats,
        }
    }

    /// Runs `step` on the regions holding the mutations' keys.
    async fn run(
        self: &Arc<Self>,
        step: Step,
        mutations: Vec<Mutation>,
        deadline: Instant,
    ) -> Result<()> {
        self.run_tracked(step, mutations, deadline)
            .await
            .map_err(|(e, _)| e)
    }

    /// [`Txns::run`], and on failure whether a one-phase prewrite (a
    /// commit) was sent without an answer: it may still apply.
    async fn run_tracked(
        self: &Arc<Self>,
        step: Step,
        mutations: Vec<Mutation>,
        deadline: Instant,
    ) -> std::result::Result<(), (Error, bool)> {
        let maybe_applied = Arc::new(AtomicBool::new(false));
        let work = StepWork {
            step,
            mutations,
            txns: self.clone(),
            deadline,
            maybe_applied: maybe_applied.clone(),
        };
        let stats = RetryStats::default();
        self.layer(&stats)
            .run(work, deadline)
            .await
            .map_err(|e| (e, maybe_applied.load(Ordering::Relaxed)))
    }
}

/// A lock's TTL for the transaction `start_ts`, written now: it counts
/// from start_ts (`LockInfo.ttl_ms`), so a transaction that started long
/// ago (a slow UPDATE's scan, an open BEGIN) still gets [`LOCK_TTL`] from
/// now.
pub fn lock_ttl_ms(start_ts: u64) -> u64 {
    ttl_from_now_ms(start_ts, LOCK_TTL)
}

/// A TTL counted from start_ts that ends `ttl` from now.
fn ttl_from_now_ms(start_ts: u64, ttl: Duration) -> u64 {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    now_ms.saturating_sub(start_ts >> 18) + ttl.as_millis() as u64
}

/// How long the primary's commit may run past the statement's deadline.
const COMMIT_GRACE: Duration = Duration::from_secs(5);

/// `e` from a request that commits (a one-phase prewrite sent without an
/// answer, the primary's commit): when it ran out of time or lost its
/// store the request may still apply, so the user must not take the error
/// for a rollback (TiDB's "result undetermined").
fn undetermined(e: Error) -> Error {
    match e {
        Error::Deadline(_) | Error::Unavailable(_) => {
            e.with_context("the statement may or may not have committed: read its rows to know")
        }
        e => e,
    }
}

fn as_mutations(keys: Vec<Vec<u8>>) -> Vec<Mutation> {
    keys.into_iter()
        .map(|key| Mutation {
            key,
            ..Default::default()
        })
        .collect()
}

/// What became of a transaction.
#[derive(Debug, Clone, Copy)]
enum Status {
    Locked(u64),
    Committed(u64),
    RolledBack,
}

/// A key error from a store, as compute's error: who is to blame and
/// whether a retry can help.
pub fn key_error(e: KeyError) -> Error {
    match Code::try_from(e.code).unwrap_or(Code::Internal) {
        Code::InvalidInput | Code::AlreadyExists => Error::InvalidInput(e.message),
        Code::WriteConflict => Error::Conflict(e.message),
        Code::Unavailable | Code::Locked => Error::Unavailable(e.message),
        Code::TxnAborted | Code::TxnNotFound | Code::Committed => Error::Conflict(e.message),
        Code::Internal => Error::Internal(e.message),
    }
}

/// The answer of a region to a step: go on, resolve a lock, or stop.
fn judge(region_error: Option<RegionError>, error: Option<KeyError>) -> Result<Answer> {
    if let Some(re) = region_error {
        return Ok(Answer::Attempt(Attempt::Region(Box::new(re))));
    }
    match error {
        None => Ok(Answer::Attempt(Attempt::Done)),
        Some(e) if e.code == Code::Locked as i32 && e.locked.is_some() => {
            Ok(Answer::Locked(e.locked.expect("checked")))
        }
        Some(e) if e.code == Code::Unavailable as i32 => {
            Ok(Answer::Attempt(Attempt::Busy(e.message)))
        }
        Some(e) => Err(key_error(e)),
    }
}

enum Answer {
    Attempt(Attempt),
    Locked(LockInfo),
}

struct StepWork {
    step: Step,
    /// Sorted by key; only the keys matter except for a prewrite.
    mutations: Vec<Mutation>,
    txns: Arc<Txns>,
    deadline: Instant,
    /// Set when a one-phase prewrite was sent and not answered.
    maybe_applied: Arc<AtomicBool>,
}

impl RegionWork for StepWork {
    fn span(&self) -> Option<KeyRange> {
        let start = self.mutations.first()?.key.clone();
        let mut end = self.mutations.last()?.key.clone();
        end.push(0);
        Some(KeyRange::new(start, end))
    }

    fn outcome_unknown(&mut self) {
        if let Step::Prewrite {
            one_pc: Some(_), ..
        } = &self.step
        {
            self.maybe_applied.store(true, Ordering::Relaxed);
        }
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        let mut pieces = Vec::new();
        let mut rest = self.mutations.into_iter().peekable();
        for region in regions {
            let bounds = KeyRange::of_region(&region.region);
            let mut mine = Vec::new();
            while let Some(m) = rest.next_if(|m| bounds.contains(&m.key)) {
                mine.push(m);
            }
            if !mine.is_empty() {
                pieces.push((
                    region,
                    StepWork {
                        step: self.step.clone(),
                        mutations: mine,
                        txns: self.txns.clone(),
                        deadline: self.deadline,
                        maybe_applied: self.maybe_applied.clone(),
                    },
                ));
            }
        }
        if pieces.len() > 1 {
            // Over several regions: two phases.
            for (_, piece) in &mut pieces {
                if let Step::Prewrite { one_pc, .. } = &mut piece.step {
                    *one_pc = None;
                }
            }
        }
        match rest.next() {
            None => Ok(pieces),
            Some(m) => Err(Error::Internal(format!(
                "no region holds key {}",
                quarry_coprocessor::codec::key::hex(&m.key)
            ))),
        }
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let mut client = self.txns.cluster.kv(&region.addr)?;
            let context = Some(region.context());
            let keys = || self.mutations.iter().map(|m| m.key.clone()).collect();
            let call = async {
                let r: std::result::Result<tonic::Response<TxnResponse>, tonic::Status> =
                    match &self.step {
                        Step::Prewrite {
                            primary,
                            start_ts,
                            packed,
                            one_pc,
                            max_one_pc,
                            ttl_ms,
                            pessimistic,
                            rows,
                        } => {
                            client
                                .prewrite(PrewriteRequest {
                                    context,
                                    mutations: self.mutations.clone(),
                                    primary: primary.clone(),
                                    start_ts: *start_ts,
                                    ttl_ms: *ttl_ms,
                                    packed: *packed,
                                    try_one_pc: one_pc.is_some(),
                                    one_pc_commit_ts: 0,
                                    max_one_pc_commit_ts: *max_one_pc,
                                    pessimistic: *pessimistic,
                                    return_values: rows.is_some(),
                                })
                                .await
                        }
                        Step::Commit {
                            start_ts,
                            commit_ts,
                        } => {
                            client
                                .commit(CommitRequest {
                                    context,
                                    keys: keys(),
                                    start_ts: *start_ts,
                                    commit_ts: *commit_ts,
                                })
                                .await
                        }
                        Step::HeartBeat { start_ts, ttl_ms } => {
                            client
                                .txn_heart_beat(TxnHeartBeatRequest {
                                    context,
                                    primary: self.mutations[0].key.clone(),
                                    start_ts: *start_ts,
                                    ttl_ms: *ttl_ms,
                                })
                                .await
                        }
                        Step::Resolve {
                            start_ts,
                            commit_ts,
                        } => {
                            client
                                .resolve_lock(ResolveLockRequest {
                                    context,
                                    keys: keys(),
                                    start_ts: *start_ts,
                                    commit_ts: *commit_ts,
                                })
                                .await
                        }
                    };
                r
            };
            let mut resp =
                match tokio::time::timeout(timeout + Duration::from_millis(100), call).await {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(st)) => return Ok(Attempt::Unreachable(st)),
                    Err(_) => {
                        return Ok(Attempt::Unreachable(tonic::Status::deadline_exceeded(
                            "no answer in time",
                        )))
                    }
                };
            if let Step::Prewrite { one_pc, rows, .. } = &self.step {
                if let (Some(committed), true) = (one_pc, resp.one_pc_commit_ts != 0) {
                    *committed.lock() = resp.one_pc_commit_ts;
                }
                if let Some(rows) = rows {
                    rows.lock().extend(std::mem::take(&mut resp.values));
                }
            }
            match judge(resp.region_error, resp.error)? {
                Answer::Attempt(a) => Ok(a),
                Answer::Locked(lock) => {
                    self.txns.resolve(&lock, self.deadline).await?;
                    // Settled (or waited for): send the same step again.
                    Ok(Attempt::More)
                }
            }
        })
    }
}

/// `CheckTxnStatus` on the primary's region.
struct StatusWork {
    primary: Vec<u8>,
    start_ts: u64,
    current_ts: u64,
    rollback_if_not_exist: bool,
    cluster: Arc<Cluster>,
    out: Arc<parking_lot::Mutex<Option<Status>>>,
}

impl RegionWork for StatusWork {
    fn span(&self) -> Option<KeyRange> {
        let mut end = self.primary.clone();
        end.push(0);
        Some(KeyRange::new(self.primary.clone(), end))
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        let region = regions
            .into_iter()
            .find(|r| KeyRange::of_region(&r.region).contains(&self.primary))
            .ok_or_else(|| Error::Internal("no region holds a primary key".into()))?;
        Ok(vec![(region, self)])
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let mut client = self.cluster.kv(&region.addr)?;
            let req = CheckTxnStatusRequest {
                context: Some(region.context()),
                primary: self.primary.clone(),
                start_ts: self.start_ts,
                current_ts: self.current_ts,
                rollback_if_not_exist: self.rollback_if_not_exist,
            };
            let resp = match tokio::time::timeout(
                timeout + Duration::from_millis(100),
                client.check_txn_status(req),
            )
            .await
            {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(st)) => return Ok(Attempt::Unreachable(st)),
                Err(_) => {
                    return Ok(Attempt::Unreachable(tonic::Status::deadline_exceeded(
                        "no answer in time",
                    )))
                }
            };
            match judge(resp.region_error, resp.error)? {
                Answer::Attempt(Attempt::Done) => {
                    *self.out.lock() = Some(if resp.lock_ttl_ms > 0 {
                        Status::Locked(resp.lock_ttl_ms)
                    } else if resp.commit_ts > 0 {
                        Status::Committed(resp.commit_ts)
                    } else {
                        Status::RolledBack
                    });
                    Ok(Attempt::Done)
                }
                Answer::Attempt(a) => Ok(a),
                Answer::Locked(_) => Err(Error::Internal(
                    "checking a transaction's status met a lock".into(),
                )),
            }
        })
    }
}
