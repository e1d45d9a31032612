//! Explicit transactions: `BEGIN` … `COMMIT` / `ROLLBACK`.
//!
//! A transaction reads every statement at its `start_ts` (snapshot
//! isolation: each read sees the same snapshot, plus its own writes) and
//! locks as it goes, as TiDB's pessimistic mode does: each INSERT, UPDATE
//! or DELETE locks its rows at once with *pessimistic* locks that hold the
//! rows as written. Other readers pass over them (they see the rows as
//! they were); other writers wait for them, so a second writer of a row
//! learns of the conflict at its statement, not at COMMIT (here as a write
//! conflict it must retry, where TiDB would wait and go on). A later
//! statement of the transaction reads its own locks as its rows
//! (`coprocessor::codec::mvcc`, read-your-writes); a later write of the
//! same row rewrites the lock (`raftstore/src/txn.rs`).
//!
//! `COMMIT` is Percolator's: it prewrites everything again, ordinarily
//! (the locks now stop readers whose snapshot may include the commit),
//! takes a commit_ts, commits the primary, then the rest in the
//! background. Compute keeps the last write of each key for this.
//! `ROLLBACK` removes the locks. The first key
//! the transaction locked is its primary: while the transaction is open,
//! a heartbeat every [`HEARTBEAT_EVERY`] keeps the primary's lock alive
//! for [`HEARTBEAT_TTL`](crate::txn::HEARTBEAT_TTL) more, so readers and
//! writers wait for the transaction instead of rolling it back; a
//! transaction idle for [`IDLE_TIMEOUT`] is rolled back and forgotten
//! (its client went away). A statement that fails inside a transaction
//! aborts it, as in PostgreSQL: its locks go, and every later statement
//! fails until the client ends it.
//!
//! Transactions live in one compute process, found by id: the Flight SQL
//! `transaction_id` (`BeginTransaction`), which the client library and the
//! shell hold for their session, or the connection's `quarry_txn` cookie
//! for clients that send `BEGIN` as SQL (`flight/cookie.rs`). A client must send a transaction's
//! statements to the compute process that began it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quarry_proto::kv::{KvPair, Mutation, Op};

use crate::gc_hold::ReadHold;
use crate::txn::Txns;
use crate::{Error, Result};

/// What a statement's error adds when it rolls its transaction back.
pub const ROLLED_BACK: &str = "the transaction is rolled back; end it with ROLLBACK";

/// How often an open transaction's primary lock is renewed.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// An open transaction unused this long is rolled back.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The open transactions of a compute process.
pub struct Sessions {
    txns: Arc<Txns>,
    open: Mutex<HashMap<u64, Arc<OpenTxn>>>,
}

/// An open transaction.
pub struct OpenTxn {
    /// Its snapshot, and its id.
    pub start_ts: u64,
    state: tokio::sync::Mutex<State>,
    last_used: Mutex<Instant>,
    /// The first key locked, once the transaction has written: its
    /// primary. Kept outside `state` so the heartbeat reads it without
    /// waiting for a statement (which may wait on another's lock).
    primary: Mutex<Option<Vec<u8>>>,
    /// Why the heartbeat found the transaction gone (a writer rolled it
    /// back): the next statement or COMMIT fails with it.
    lost: Mutex<Option<String>>,
    /// Keeps the versions its snapshot needs while it may read (released
    /// when it is aborted or lost).
    hold: Mutex<Option<ReadHold>>,
    /// The logged-in user who began it (`caller::caller`): only they may
    /// use or end it. None without logins.
    owner: Option<String>,
}

#[derive(Default)]
struct State {
    /// Every key locked.
    keys: BTreeSet<Vec<u8>>,
    /// What the transaction writes, the last write of each key (and
    /// whether its table keeps packs): prewritten again at COMMIT.
    writes: BTreeMap<Vec<u8>, (Mutation, bool)>,
    /// The tables written, as their writes were planned: checked at
    /// COMMIT (`crate::schema_check::SchemaCheck`).
    tables: crate::schema_check::SchemaCheck,
    /// Why the transaction was aborted, if it was.
    aborted: Option<String>,
    ended: bool,
}

/// A transaction's id as Flight SQL carries it.
pub fn id_bytes(start_ts: u64) -> Vec<u8> {
    start_ts.to_be_bytes().to_vec()
}

impl Sessions {
    pub fn new(txns: Arc<Txns>) -> Arc<Self> {
        Arc::new(Sessions {
            txns,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Begins a transaction: its snapshot is now.
    pub async fn begin(self: &Arc<Self>) -> Result<Arc<OpenTxn>> {
        let start_ts = self.txns.timestamp().await?;
        let txn = Arc::new(OpenTxn {
            start_ts,
            state: Default::default(),
            last_used: Mutex::new(Instant::now()),
            primary: Mutex::new(None),
            lost: Mutex::new(None),
            hold: Mutex::new(Some(self.txns.hold_read(start_ts))),
            owner: crate::caller::caller().map(|c| c.user),
        });
        self.open.lock().insert(start_ts, txn.clone());
        tokio::spawn(keep_alive(Arc::downgrade(self), Arc::downgrade(&txn)));
        Ok(txn)
    }

    /// The open transaction with Flight SQL id `id`, if the request's
    /// caller began it (another user's is as good as absent: ids are
    /// timestamps, easy to guess).
    pub fn get(&self, id: &[u8]) -> Result<Arc<OpenTxn>> {
        let ts = <[u8; 8]>::try_from(id)
            .map(u64::from_be_bytes)
            .map_err(|_| Error::InvalidInput("malformed transaction id".into()))?;
        let caller = crate::caller::caller().map(|c| c.user);
        let found = self.open.lock().get(&ts).cloned();
        let txn = found
            .filter(|t| t.owner.is_none() || t.owner == caller)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "no open transaction {ts} on this compute process: it ended, was rolled \
                 back after {} s idle, or began on another compute process",
                    IDLE_TIMEOUT.as_secs()
                ))
            })?;
        *txn.last_used.lock() = Instant::now();
        Ok(txn)
    }

    /// Writes `mutations` (rows of `table` and their index entries) in
    /// `txn` (locks them; see the module docs).
    pub async fn write(
        &self,
        txn: &OpenTxn,
        table: &quarry_proto::meta::TableDef,
        mutations: Vec<Mutation>,
    ) -> Result<usize> {
        let n = mutations.len();
        txn.state.lock().await.tables.add(table);
        self.write_returning(txn, mutations, crate::txn::is_packed(table), false)
            .await
            .map(|_| n)
    }

    /// Locks the rows of a row table that `keys` name in `txn` (`SELECT …
    /// FOR UPDATE`) and returns them as it sees them, in one request per
    /// region; a key without a row is left out.
    pub async fn lock_rows(&self, txn: &OpenTxn, keys: Vec<Vec<u8>>) -> Result<Vec<KvPair>> {
        let mutations = keys
            .into_iter()
            .map(|key| Mutation {
                op: Op::Lock as i32,
                key,
                value: vec![],
            })
            .collect();
        self.write_returning(txn, mutations, false, true).await
    }

    /// [`Sessions::write`], and the rows locked when `want_rows`.
    async fn write_returning(
        &self,
        txn: &OpenTxn,
        mutations: Vec<Mutation>,
        packed: bool,
        want_rows: bool,
    ) -> Result<Vec<KvPair>> {
        if mutations.is_empty() {
            return Ok(vec![]);
        }
        let mut st = txn.state.lock().await;
        txn.usable(&st)?;
        // A row this transaction inserted or kept is taken (the store
        // cannot tell this from a retry of the same INSERT).
        if let Some(m) = mutations.iter().find(|m| {
            m.op == Op::Insert as i32
                && st
                    .writes
                    .get(&m.key)
                    .is_some_and(|(w, _)| w.op != Op::Delete as i32 && w.op != Op::Lock as i32)
        }) {
            let e = Error::InvalidInput(format!(
                "duplicate key: this transaction already wrote a row with key {}",
                quarry_coprocessor::codec::key::hex(&m.key)
            ));
            return Err(self.abort(txn, &mut st, e).await);
        }
        let primary = txn
            .primary
            .lock()
            .get_or_insert_with(|| {
                mutations
                    .iter()
                    .map(|m| m.key.clone())
                    .min()
                    .unwrap_or_default()
            })
            .clone();
        let keys: Vec<Vec<u8>> = mutations.iter().map(|m| m.key.clone()).collect();
        let deadline = crate::statement_deadline::write_deadline();
        // Noted before the prewrite: a failed one may have locked some.
        st.keys.extend(keys);
        let r = if want_rows {
            self.txns
                .lock_returning_rows(txn.start_ts, &primary, mutations.clone(), deadline)
                .await
        } else {
            self.txns
                .prewrite(
                    txn.start_ts,
                    &primary,
                    mutations.clone(),
                    packed,
                    true,
                    deadline,
                )
                .await
                .map(|()| vec![])
        };
        match r {
            Ok(rows) => {
                for m in mutations {
                    // A lock-only mutation (FOR UPDATE) never replaces a
                    // write: the lock still holds the write.
                    let keep = m.op == Op::Lock as i32 && st.writes.contains_key(&m.key);
                    if !keep {
                        st.writes.insert(m.key.clone(), (m, packed));
                    }
                }
                Ok(rows)
            }
            Err(e) => Err(self.abort(txn, &mut st, e).await),
        }
    }

    /// Fails `txn` for `e`: its locks go; `e` comes back saying so.
    pub async fn fail(&self, txn: &OpenTxn, e: Error) -> Error {
        let mut st = txn.state.lock().await;
        if st.ended || st.aborted.is_some() {
            return e;
        }
        self.abort(txn, &mut st, e).await
    }

    async fn abort(&self, txn: &OpenTxn, st: &mut State, e: Error) -> Error {
        st.aborted = Some(e.to_string());
        // It reads nothing more: GC may go on (`gc_hold.rs`).
        txn.hold.lock().take();
        let keys: Vec<Vec<u8>> = std::mem::take(&mut st.keys).into_iter().collect();
        if !keys.is_empty() {
            self.txns.rollback(txn.start_ts, keys).await;
        }
        e.with_context(ROLLED_BACK)
    }

    /// Checks that `txn` may run a statement.
    pub async fn check(&self, txn: &OpenTxn) -> Result<()> {
        let st = txn.state.lock().await;
        txn.usable(&st)
    }

    /// Commits `txn`; returns its commit_ts (its start_ts if it wrote
    /// nothing). An aborted transaction is rolled back and says why.
    pub async fn commit(&self, txn: &OpenTxn) -> Result<u64> {
        let mut st = txn.state.lock().await;
        self.open.lock().remove(&txn.start_ts);
        if st.ended {
            return Err(ended(txn.start_ts));
        }
        // (The hold stays until the transaction is dropped: COMMIT's
        // prewrite must still see every version after start_ts unfolded.)
        st.ended = true;
        if let Some(why) = st.aborted.clone().or_else(|| txn.lost.lock().clone()) {
            return Err(Error::InvalidInput(format!(
                "transaction {} was rolled back, nothing was committed: {why}",
                txn.start_ts
            )));
        }
        let Some(primary) = txn.primary.lock().clone() else {
            return Ok(txn.start_ts);
        };
        let mut keys: Vec<Vec<u8>> = std::mem::take(&mut st.keys)
            .into_iter()
            .filter(|k| *k != primary)
            .collect();
        keys.insert(0, primary);
        let deadline = Instant::now() + crate::txn::WRITE_DEADLINE;
        let writes = std::mem::take(&mut st.writes);
        let check = std::mem::take(&mut st.tables);
        if let Err(e) = self
            .prewrite_all(txn.start_ts, &keys[0], writes, deadline)
            .await
        {
            // Nothing is committed: take back what is locked.
            self.txns.rollback(txn.start_ts, keys).await;
            return Err(e.with_context("COMMIT failed; the transaction is rolled back"));
        }
        // From here the primary's commit decides. Its answer may be lost
        // after it applied, so a failure rolls nothing back: readers settle
        // the locks from the primary.
        self.txns
            .commit_checked(txn.start_ts, keys, deadline, Some(&check))
            .await
            .map_err(|e| match e {
                // The indexes' check, before anything committed.
                Error::Conflict(_) => {
                    e.with_context("COMMIT failed; the transaction is rolled back")
                }
                e => e.with_context(
                    "COMMIT did not complete; if the primary's commit applied the \
                     transaction is committed, otherwise it will be rolled back",
                ),
            })
    }

    /// COMMIT's first phase: everything the transaction wrote, prewritten
    /// again ordinarily (readers now wait for it).
    async fn prewrite_all(
        &self,
        start_ts: u64,
        primary: &[u8],
        writes: BTreeMap<Vec<u8>, (Mutation, bool)>,
        deadline: Instant,
    ) -> Result<()> {
        let (packed, rows): (Vec<_>, Vec<_>) = writes.into_values().partition(|(_, p)| *p);
        for (group, is_packed) in [(packed, true), (rows, false)] {
            if group.is_empty() {
                continue;
            }
            let mutations = group.into_iter().map(|(m, _)| m).collect();
            self.txns
                .prewrite(start_ts, primary, mutations, is_packed, false, deadline)
                .await?;
        }
        Ok(())
    }

    /// Rolls `txn` back.
    pub async fn rollback(&self, txn: &OpenTxn) -> Result<()> {
        let mut st = txn.state.lock().await;
        self.open.lock().remove(&txn.start_ts);
        if st.ended {
            return Err(ended(txn.start_ts));
        }
        st.ended = true;
        txn.hold.lock().take();
        let keys: Vec<Vec<u8>> = std::mem::take(&mut st.keys).into_iter().collect();
        if !keys.is_empty() {
            self.txns.rollback(txn.start_ts, keys).await;
        }
        Ok(())
    }
}

fn ended(start_ts: u64) -> Error {
    Error::InvalidInput(format!("transaction {start_ts} has already ended"))
}

impl OpenTxn {
    fn usable(&self, st: &State) -> Result<()> {
        if st.ended {
            return Err(Error::InvalidInput("the transaction has ended".into()));
        }
        if let Some(why) = &st.aborted {
            return Err(Error::InvalidInput(format!(
                "the transaction was rolled back after an error ({why}); \
                 end it with ROLLBACK"
            )));
        }
        match self.lost.lock().as_ref() {
            Some(why) => Err(Error::Conflict(format!(
                "the transaction was rolled back by another ({why}); end it with ROLLBACK"
            ))),
            None => Ok(()),
        }
    }
}

/// Renews the primary lock of an open transaction every
/// [`HEARTBEAT_EVERY`], and rolls back one idle for [`IDLE_TIMEOUT`].
async fn keep_alive(sessions: Weak<Sessions>, txn: Weak<OpenTxn>) {
    loop {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        let (Some(sessions), Some(txn)) = (sessions.upgrade(), txn.upgrade()) else {
            return;
        };
        if txn.last_used.lock().elapsed() > IDLE_TIMEOUT {
            tracing::info!(start_ts = txn.start_ts, "rolling back an idle transaction");
            let _ = sessions.rollback(&txn).await;
            return;
        }
        if let Ok(st) = txn.state.try_lock() {
            if st.ended {
                return;
            }
            if st.aborted.is_some() {
                // Nothing to keep alive; still rolled back (dropped) once
                // idle, should its client never end it.
                continue;
            }
        }
        if txn.lost.lock().is_some() {
            continue;
        }
        let primary = txn.primary.lock().clone();
        if let Some(primary) = primary {
            let deadline = Instant::now() + HEARTBEAT_EVERY;
            match sessions
                .txns
                .heart_beat(txn.start_ts, &primary, deadline)
                .await
            {
                Ok(()) => {}
                // Its primary lock is gone: another writer rolled it back.
                Err(Error::Conflict(why)) => {
                    *txn.lost.lock() = Some(why);
                    txn.hold.lock().take();
                }
                Err(e) => tracing::debug!(start_ts = txn.start_ts, "heartbeat: {e}"),
            }
        }
    }
}
