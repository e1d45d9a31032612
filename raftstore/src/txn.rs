//! A transaction's steps on one region: Percolator, as TiKV runs it.
//!
//! Compute drives a transaction (`compute/src/txn.rs`); each region it
//! touches sees these steps as raft commands, checked when they apply
//! against the locks and versions stored (`coprocessor::codec::mvcc` has
//! the keys). Apply is deterministic, so every replica reaches the same
//! verdict; a refusal is a [`KeyError`] the client acts on.
//!
//! * **Prewrite** (start_ts, primary, mutations): for each key, a lock of
//!   another transaction refuses it (`LOCKED`, with the lock, so the client
//!   can resolve it); a data version committed after start_ts refuses it
//!   (`WRITE_CONFLICT`: snapshot isolation's first committer wins; one
//!   committed at start_ts is in the transaction's snapshot); an
//!   INSERT whose row exists refuses it (`ALREADY_EXISTS`). Otherwise the
//!   key gets a lock holding the value. A retried prewrite finds its own
//!   lock (or its own commit) and passes. The whole command is refused or
//!   applied: no lock is written if any key fails.
//! * **Pessimistic prewrite** (an open transaction's statement, `pessimistic`):
//!   the same checks, and a lock readers pass over (they see the row as it
//!   was: the transaction has no commit_ts yet and will take one only after
//!   its COMMIT prewrites the key again, ordinarily). A transaction's
//!   prewrite of a key it holds rewrites its lock with the new write.
//! * **One-phase commit**: a prewrite carrying `one_pc_commit_ts` (its
//!   client sent every mutation of the transaction to this one region, and
//!   the leader picked the timestamp, `concurrency.rs`) is checked as a
//!   prewrite and written as versions at that timestamp, without locks. A
//!   key locked by its own transaction refuses it: the client gave up on
//!   it and went on in two phases. On a column table it may only insert: a
//!   version hiding a pack row needs the lock that guards compaction.
//! * **Commit** (start_ts, commit_ts): each key's lock becomes a version at
//!   commit_ts. A key whose lock is gone is fine if the transaction's own
//!   version is there (a retry), `TXN_ABORTED` if its rollback record is,
//!   `TXN_NOT_FOUND` otherwise.
//! * **Rollback** (start_ts), of a primary by `CheckTxnStatus`: the lock
//!   goes, and a rollback record stays at start_ts so a prewrite that
//!   arrives late cannot lock again; a key already committed answers
//!   `COMMITTED`.
//! * **ResolveLock** (start_ts, commit_ts or 0): what a reader does to the
//!   secondary locks of a transaction whose primary it has settled, and a
//!   writer to its own locks after a failed prewrite: commit or remove the
//!   locks of start_ts (no rollback record: the primary decides), and pass
//!   over keys without one.
//!
//! `CheckTxnStatus` is not a command: the node reads the primary's lock
//! and proposes a Rollback when the lock outlived its TTL (`node.rs`).
//!
//! A commit over a bare row (a bulk-loaded row, older than every
//! snapshot) first rewrites it as a version at timestamp 0, so a handle
//! never has both a bare row and data versions (`mvcc.rs` relies on it).

use quarry_coprocessor::codec::key::{
    classify_key, decode_record_key, hex, pack_mark_key, IndexPart, KeyKind, RECORD_KEY_LEN,
};
use quarry_coprocessor::codec::mvcc::{
    decode_lock, encode_lock, lock_key, split_version_value, version_key, version_value, WriteKind,
};
use quarry_proto::kv::{key_error::Code, KeyError, LockInfo, Mutation, Op, PrewriteRequest};
use quarry_proto::meta::{Region, RegionEpoch};
use quarry_proto::raft::{txn_write::Step, TxnWrite};

use crate::apply::ApplyCtx;
use crate::engine::Engine;
use crate::peer::propose::Outcome;
use crate::{keys, region, Error, Result};

/// One stored version of a row: (commit_ts, kind, start_ts of its writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRecord {
    pub commit_ts: u64,
    pub kind: WriteKind,
    pub start_ts: u64,
}

/// A key error with a message naming the key.
pub fn key_error(code: Code, key: &[u8], message: String) -> Error {
    Error::Key(Box::new(KeyError {
        code: code as i32,
        message,
        key: key.to_vec(),
        ..Default::default()
    }))
}

/// How a message names a row key: its handle; an index entry's key:
/// as one (compute names the index).
pub fn describe(key: &[u8]) -> String {
    match classify_key(key) {
        KeyKind::Row(h) => format!("handle {h}"),
        KeyKind::Index { .. } => format!("index entry {}", hex(key)),
        _ => format!("key {}", hex(key)),
    }
}

/// Whether `key` is a row's key (not an index entry's): only rows live in
/// packs.
fn is_row_key(key: &[u8]) -> bool {
    matches!(classify_key(key), KeyKind::Row(_))
}

fn locked(lock: LockInfo) -> Error {
    let message = format!(
        "{} is locked by the transaction that started at {}",
        describe(&lock.key),
        lock.start_ts
    );
    Error::Key(Box::new(KeyError {
        code: Code::Locked as i32,
        message,
        key: lock.key.clone(),
        locked: Some(lock),
        ..Default::default()
    }))
}

/// The versions of `row_key` as `ctx`'s batch leaves them, newest first.
pub(crate) fn versions_in<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    row_key: &[u8],
) -> Result<Vec<VersionRecord>> {
    parse_versions(ctx.scan(row_key, &keys::prefix_end(row_key))?)
}

/// The versions among `pairs` (the keys of one row, in key order).
pub fn parse_versions(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<VersionRecord>> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        let (commit_ts, kind) = match classify_key(&k) {
            KeyKind::Version {
                commit_ts, kind, ..
            }
            | KeyKind::Index {
                part: IndexPart::Version { commit_ts, kind },
                ..
            } => (commit_ts, kind),
            _ => continue,
        };
        let (start_ts, _) = split_version_value(&v)?;
        out.push(VersionRecord {
            commit_ts,
            kind,
            start_ts,
        });
    }
    Ok(out)
}

/// Checks a command's epoch and that its keys are this region's row keys
/// or index entries' keys.
fn check_keys<'k>(
    region: &Region,
    epoch: Option<&RegionEpoch>,
    keys: impl IntoIterator<Item = &'k Vec<u8>>,
) -> Result<()> {
    let cur = region::epoch(region);
    if epoch.is_none_or(|e| e.version != cur.version) {
        return Err(Error::region(region::epoch_not_match(epoch, region)));
    }
    for k in keys {
        let entry = matches!(
            classify_key(k),
            KeyKind::Index {
                base_len,
                part: IndexPart::Bare,
            } if base_len == k.len()
        );
        if !entry && (k.len() != RECORD_KEY_LEN || !is_row_key(k)) {
            return Err(Error::InvalidInput(format!(
                "a transaction wrote {}, which is not a row key or an index entry's",
                hex(k)
            )));
        }
        if !region::contains(region, k) {
            return Err(Error::region(region::key_not_in_region(k, region)));
        }
    }
    Ok(())
}

pub(crate) fn exec_txn<E: Engine>(
    region: &Region,
    epoch: Option<&RegionEpoch>,
    t: TxnWrite,
    ctx: &mut ApplyCtx<'_, E>,
) -> Result<Outcome> {
    ctx.region_id = region.id;
    let step = t
        .step
        .ok_or_else(|| Error::BadCommand("a transaction command without a step".into()))?;
    match step {
        Step::Prewrite(p) => {
            check_keys(region, epoch, p.mutations.iter().map(|m| &m.key))?;
            prewrite(ctx, p)?;
        }
        Step::Commit(c) => {
            check_keys(region, epoch, &c.keys)?;
            if c.commit_ts <= c.start_ts {
                return Err(Error::InvalidInput(format!(
                    "commit_ts {} is not after start_ts {}",
                    c.commit_ts, c.start_ts
                )));
            }
            let mut plan = Vec::new();
            for k in &c.keys {
                plan.extend(commit_key(ctx, k, c.start_ts, c.commit_ts, false)?);
            }
            write_all(ctx, plan);
        }
        Step::Rollback(r) => {
            check_keys(region, epoch, &r.keys)?;
            let mut plan = Vec::new();
            for k in &r.keys {
                plan.extend(rollback_key(ctx, k, r.start_ts, true)?);
            }
            write_all(ctx, plan);
        }
        Step::HeartBeat(h) => {
            check_keys(region, epoch, [&h.primary])?;
            if let Some(mut lock) = lock_of(ctx, &h.primary)? {
                if lock.start_ts == h.start_ts && lock.ttl_ms < h.ttl_ms {
                    lock.ttl_ms = h.ttl_ms;
                    write_all(ctx, vec![(lock_key(&h.primary), Some(encode_lock(&lock)))]);
                }
            } else {
                return Err(key_error(
                    Code::TxnNotFound,
                    &h.primary,
                    format!(
                        "the transaction that started at {} holds no lock on {} any more \
                         (it was rolled back or committed)",
                        h.start_ts,
                        describe(&h.primary)
                    ),
                ));
            }
        }
        Step::Resolve(r) => {
            check_keys(region, epoch, &r.keys)?;
            let mut plan = Vec::new();
            for k in &r.keys {
                // Only the locks of start_ts: a key resolved already (or
                // locked again by another transaction) is left as it is.
                let Some(lock) = lock_of(ctx, k)? else {
                    continue;
                };
                if lock.start_ts != r.start_ts {
                    continue;
                }
                plan.extend(if r.commit_ts > 0 {
                    commit_key(ctx, k, r.start_ts, r.commit_ts, true)?
                } else {
                    rollback_key(ctx, k, r.start_ts, false)?
                });
            }
            write_all(ctx, plan);
        }
    }
    Ok(Outcome::Done)
}

/// A write planned by a step: put (Some) or delete (None).
type Planned = (Vec<u8>, Option<Vec<u8>>);

fn write_all<E: Engine>(ctx: &mut ApplyCtx<'_, E>, plan: Vec<Planned>) {
    for (k, v) in plan {
        if let (Some(_), KeyKind::Version { kind, .. }) = (&v, classify_key(&k)) {
            // (Index entries' versions are not rows: they are not counted.)
            // Fresh rows: the column layout's compaction counts them.
            if kind.is_data() {
                *ctx.delta_rows.entry(ctx.region_id).or_default() += 1;
            }
        }
        match v {
            Some(v) => ctx.put(k, v),
            None => ctx.delete(k),
        }
    }
}

fn lock_of<E: Engine>(ctx: &ApplyCtx<'_, E>, row_key: &[u8]) -> Result<Option<LockInfo>> {
    ctx.lookup(&lock_key(row_key))?
        .map(|v| decode_lock(&v).map_err(Error::from))
        .transpose()
}

/// A prewrite, or with `one_pc_commit_ts` a one-phase commit: the same
/// checks, then versions at that timestamp instead of locks.
fn prewrite<E: Engine>(ctx: &mut ApplyCtx<'_, E>, mut p: PrewriteRequest) -> Result<()> {
    let one_pc = p.one_pc_commit_ts;
    if one_pc != 0 && one_pc <= p.start_ts {
        return Err(Error::InvalidInput(format!(
            "commit_ts {one_pc} is not after start_ts {}",
            p.start_ts
        )));
    }
    let mut plan = Vec::new();
    for Mutation { op, key, value } in std::mem::take(&mut p.mutations) {
        let op = Op::try_from(op)
            .map_err(|_| Error::InvalidInput(format!("unknown mutation op {op}")))?;
        if one_pc != 0 && p.packed && matches!(op, Op::Put | Op::Delete) && is_row_key(&key) {
            // Its version would hide a pack row, and only a lock keeps a
            // compaction planned meanwhile from folding the row unmarked.
            return Err(Error::InvalidInput(
                "a one-phase commit on a column table may only insert".into(),
            ));
        }
        match lock_of(ctx, &key)? {
            Some(lock) if lock.start_ts == p.start_ts && one_pc != 0 => {
                // A one-phase commit whose outcome its client did not learn
                // in time, overtaken by the same transaction's two-phase
                // retry: half of it committed here would not be atomic.
                return Err(key_error(
                    Code::TxnAborted,
                    &key,
                    format!(
                        "the transaction that started at {} is committing in two phases; \
                         its one-phase attempt is void",
                        p.start_ts
                    ),
                ));
            }
            Some(lock) if lock.start_ts == p.start_ts => {
                // The transaction wrote this key before (an earlier
                // statement, or this prewrite's retry): its lock now says
                // what it writes.
                plan.extend(relock(ctx, &p, &lock, op, &key, value)?);
                continue;
            }
            Some(lock) => return Err(locked(lock)),
            None => {}
        }
        let versions = versions_in(ctx, &key)?;
        if let Some(own) = versions.iter().find(|v| v.start_ts == p.start_ts) {
            if own.kind == WriteKind::Rollback {
                return Err(key_error(
                    Code::TxnAborted,
                    &key,
                    format!(
                        "the transaction that started at {} was rolled back",
                        p.start_ts
                    ),
                ));
            }
            continue; // a retry after the commit: done already
        }
        // A version committed AT start_ts is in this transaction's snapshot
        // (reads see commit_ts <= read_ts), so it is no conflict: only a
        // newer one is (TiKV's rule). A one-phase commit_ts may equal the
        // next timestamp the oracle hands out (`concurrency.rs`).
        if let Some(newer) = versions
            .iter()
            .find(|v| v.commit_ts > p.start_ts && v.kind != WriteKind::Rollback)
        {
            return Err(Error::Key(Box::new(KeyError {
                code: Code::WriteConflict as i32,
                message: format!(
                    "write conflict on {}: another transaction committed it at {} \
                     after this one started at {}; retry the transaction",
                    describe(&key),
                    newer.commit_ts,
                    p.start_ts
                ),
                key: key.clone(),
                conflict_ts: newer.commit_ts,
                ..Default::default()
            })));
        }
        if op == Op::Insert && row_exists(ctx, &key, &versions, p.packed)? {
            return Err(duplicate(&key));
        }
        if one_pc != 0 {
            plan.extend(version_writes(ctx, &key, op, &value, p.start_ts, one_pc)?);
            continue;
        }
        if op != Op::Lock {
            // A locked row is never bare: the reader's own lock must come
            // before every version of its row (`mvcc.rs`).
            plan.extend(unbare(ctx, &key)?);
        }
        let lock = LockInfo {
            primary: p.primary.clone(),
            start_ts: p.start_ts,
            ttl_ms: p.ttl_ms,
            op: op as i32,
            key: key.clone(),
            value,
            pessimistic: p.pessimistic,
        };
        plan.extend(pack_mark(ctx, &p, op, &key)?);
        plan.push((lock_key(&key), Some(encode_lock(&lock))));
    }
    write_all(ctx, plan);
    Ok(())
}

/// A transaction's prewrite of a key it holds the lock of: the same
/// mutation again (a retry) changes nothing; a lock-only mutation keeps
/// what is locked; otherwise the lock now holds the new write (a later
/// statement of the transaction), and an INSERT is checked against the
/// transaction's own view of the row. Statements of one transaction are
/// sent one after another, so a late retry of an earlier one never lands
/// after a later one.
fn relock<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    p: &PrewriteRequest,
    lock: &LockInfo,
    op: Op,
    key: &[u8],
    value: Vec<u8>,
) -> Result<Vec<Planned>> {
    // Prewritten again at COMMIT: a pessimistic lock becomes ordinary.
    let pessimistic = lock.pessimistic && p.pessimistic;
    let ttl_ms = lock.ttl_ms.max(p.ttl_ms);
    if op == Op::Lock || (lock.op() == op && lock.value == value) {
        // Nothing new to write; at most the lock turns ordinary.
        if pessimistic == lock.pessimistic {
            return Ok(vec![]);
        }
        let ordinary = LockInfo {
            pessimistic,
            ttl_ms,
            ..lock.clone()
        };
        return Ok(vec![(lock_key(key), Some(encode_lock(&ordinary)))]);
    }
    if op == Op::Insert {
        let exists = match lock.op() {
            Op::Put | Op::Insert => true,
            Op::Delete => false,
            Op::Lock => row_exists(ctx, key, &versions_in(ctx, key)?, p.packed)?,
        };
        if exists {
            return Err(duplicate(key));
        }
    }
    let mut plan = unbare(ctx, key)?;
    plan.extend(pack_mark(ctx, p, op, key)?);
    let relocked = LockInfo {
        op: op as i32,
        value,
        pessimistic,
        ttl_ms,
        ..lock.clone()
    };
    plan.push((lock_key(key), Some(encode_lock(&relocked))));
    Ok(plan)
}

/// The mark of the pack holding `key`'s row, when a put or delete of a
/// column table's row will hide it: scans then look for the versions
/// hiding its rows, and a compaction planned before this sees its guard
/// fail. The value changes per transaction.
fn pack_mark<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    p: &PrewriteRequest,
    op: Op,
    key: &[u8],
) -> Result<Option<Planned>> {
    if !p.packed || !matches!(op, Op::Put | Op::Delete) || !is_row_key(key) {
        return Ok(None);
    }
    let Some((first, _)) = ctx.pack_covering(key)? else {
        return Ok(None);
    };
    let (table, _) = decode_record_key(key)?;
    Ok(Some((
        pack_mark_key(table, first),
        Some(p.start_ts.to_be_bytes().to_vec()),
    )))
}

fn duplicate(key: &[u8]) -> Error {
    key_error(
        Code::AlreadyExists,
        key,
        format!("duplicate key: a row with {} already exists", describe(key)),
    )
}

/// A bare row (bulk-loaded, older than every snapshot) rewritten as a
/// version at timestamp 0: the same row to every reader.
fn unbare<E: Engine>(ctx: &ApplyCtx<'_, E>, key: &[u8]) -> Result<Vec<Planned>> {
    Ok(match ctx.lookup(key)? {
        Some(bare) => vec![
            (key.to_vec(), None),
            (
                version_key(key, 0, WriteKind::Put),
                Some(version_value(0, &bare)),
            ),
        ],
        None => vec![],
    })
}

/// Whether the newest state of the row is a row: its newest data version
/// is a put, or it has none and a bare row or (`packed`: the table keeps
/// packs) a pack holds it. A row table has no packs: looking for one would
/// walk back over every row before the key.
fn row_exists<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    key: &[u8],
    versions: &[VersionRecord],
    packed: bool,
) -> Result<bool> {
    if let Some(v) = versions.iter().find(|v| v.kind.is_data()) {
        return Ok(v.kind == WriteKind::Put);
    }
    if packed && is_row_key(key) {
        ctx.has_row(key)
    } else {
        Ok(ctx.lookup(key)?.is_some())
    }
}

fn commit_key<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    key: &[u8],
    start_ts: u64,
    commit_ts: u64,
    resolving: bool,
) -> Result<Vec<Planned>> {
    match lock_of(ctx, key)? {
        Some(lock) if lock.start_ts == start_ts && lock.pessimistic => {
            if resolving {
                return Ok(vec![]);
            }
            Err(key_error(
                Code::TxnNotFound,
                key,
                format!(
                    "cannot commit {}: the transaction that started at {start_ts} \
                     did not prewrite it",
                    describe(key)
                ),
            ))
        }
        Some(lock) if lock.start_ts == start_ts => {
            let mut plan = version_writes(ctx, key, lock.op(), &lock.value, start_ts, commit_ts)?;
            plan.push((lock_key(key), None));
            Ok(plan)
        }
        _ if resolving => Ok(vec![]),
        _ => {
            let versions = versions_in(ctx, key)?;
            match versions.iter().find(|v| v.start_ts == start_ts) {
                Some(v) if v.kind != WriteKind::Rollback => Ok(vec![]),
                Some(_) => Err(key_error(
                    Code::TxnAborted,
                    key,
                    format!(
                        "cannot commit {}: the transaction that started at {start_ts} \
                         was rolled back",
                        describe(key)
                    ),
                )),
                None => Err(key_error(
                    Code::TxnNotFound,
                    key,
                    format!(
                        "cannot commit {}: no lock or record of the transaction \
                         that started at {start_ts}",
                        describe(key)
                    ),
                )),
            }
        }
    }
}

/// The writes that commit `op` on `key` at `commit_ts`: its version, and
/// first, for a data version over a bare row, that row rewritten as a
/// version at timestamp 0.
fn version_writes<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    key: &[u8],
    op: Op,
    value: &[u8],
    start_ts: u64,
    commit_ts: u64,
) -> Result<Vec<Planned>> {
    let kind = WriteKind::of_op(op);
    let mut plan = if kind.is_data() {
        unbare(ctx, key)?
    } else {
        Vec::new()
    };
    let row: &[u8] = if kind == WriteKind::Put { value } else { &[] };
    plan.push((
        version_key(key, commit_ts, kind),
        Some(version_value(start_ts, row)),
    ));
    Ok(plan)
}

/// Rolls back `key`'s lock of `start_ts`. Only a *protected* rollback
/// (the primary's, by `CheckTxnStatus`) leaves a rollback record: the
/// primary decides the transaction, so a prewrite of it arriving late must
/// not lock it again; a secondary's fate is read from the primary, so its
/// rollback leaves nothing behind.
fn rollback_key<E: Engine>(
    ctx: &ApplyCtx<'_, E>,
    key: &[u8],
    start_ts: u64,
    protect: bool,
) -> Result<Vec<Planned>> {
    let mut plan = Vec::new();
    if let Some(lock) = lock_of(ctx, key)? {
        if lock.start_ts == start_ts {
            plan.push((lock_key(key), None));
        }
    }
    if !protect {
        return Ok(plan);
    }
    let record = (
        version_key(key, start_ts, WriteKind::Rollback),
        Some(version_value(start_ts, &[])),
    );
    if !plan.is_empty() {
        plan.push(record);
        return Ok(plan);
    }
    let versions = versions_in(ctx, key)?;
    match versions.iter().find(|v| v.start_ts == start_ts) {
        Some(v) if v.kind == WriteKind::Rollback => Ok(vec![]),
        Some(v) => Err(Error::Key(Box::new(KeyError {
            code: Code::Committed as i32,
            message: format!(
                "cannot roll back {}: the transaction that started at {start_ts} \
                 committed at {}",
                describe(key),
                v.commit_ts
            ),
            key: key.to_vec(),
            commit_ts: v.commit_ts,
            ..Default::default()
        }))),
        // No lock and no record: the prewrite has not landed (or never
        // will); the record keeps a late one from locking.
        None => Ok(vec![record]),
    }
}
