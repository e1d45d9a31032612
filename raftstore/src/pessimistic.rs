//! Pessimistic locks made cheap: a lock that returns the row it locked,
//! and a lock answered before raft replicates it (TiDB 4.0's pessimistic
//! transaction optimizations, TiKV's `return_values` and pipelined
//! pessimistic lock).
//!
//! An open transaction's `SELECT … FOR UPDATE` locks its rows
//! (`Op::Lock`, pessimistic: `txn.rs`) and wants them back. Done plainly,
//! that is three round trips: find the rows, lock them (a raft command,
//! answered once applied on the leader), read them again. Two changes cut
//! it to one round trip that does not wait for replication:
//!
//! * **The lock returns the rows** (`PrewriteRequest.return_values`):
//!   the leader reads each key's row as the transaction sees it at its
//!   start_ts, its own earlier writes included, and sends the rows with
//!   the answer. Compute locks the keys a point selection names
//!   (`compute/src/engine/dml.rs`) and answers the query from the rows it got.
//!   The read raises max_ts to start_ts first (`concurrency.rs`), as
//!   every snapshot read does, so no one-phase commit lands at or below it
//!   afterwards; once the lock is in place, nothing else can commit the
//!   key, so the rows stay what the transaction saw.
//! * **Pipelined** (`raftstore.pipelined-pessimistic-lock`): for a
//!   lock-only request on a row table, the leader (under its lease)
//!   registers the keys as in-flight pessimistic locks in the concurrency
//!   manager (a second transaction's pipelined lock of a key in flight
//!   goes the slow way and finds the first lock applied), checks the applied state —
//!   no other transaction's lock, no version committed at or after
//!   start_ts — reads the rows, hands the command to raft, and answers at
//!   once. The registration lasts until the command applies.
//!
//! WHAT A PIPELINED LOCK MAY LOSE. The command can still fail after the
//! answer: the leader steps down before it commits, or a write ahead of it
//! in the log takes the key first. The transaction then holds no lock on
//! a key it believes locked; another writer may commit the key meanwhile.
//! Nothing wrong becomes visible: at COMMIT the transaction prewrites every
//! key again, and a prewrite refuses a key committed after start_ts (a
//! write conflict, snapshot isolation's first committer wins), so such a
//! transaction aborts instead of losing an update. A request holding the
//! transaction's primary key is never pipelined: a lost primary lock would
//! go unnoticed by the heartbeats that keep it alive, and the
//! transaction's other locks could expire under it. Only lock-only requests
//! are pipelined: a lock that holds a written row must be in place before
//! the statement returns, because the transaction's next statement reads
//! its writes from the locks (`codec::mvcc`, `Seen::Own`).
//!
//! Anything unusual in the check (a lock of another transaction, a newer
//! version, an unexpected record of this transaction) takes the slow way,
//! whose apply gives the exact answer (`LOCKED`, `WRITE_CONFLICT`, …).

use quarry_coprocessor::codec::key::{classify_key, row_keys_end, KeyKind};
use quarry_coprocessor::codec::mvcc::{decode_lock, split_version_value, Seen, Visibility};
use quarry_proto::kv::{KvPair, LockInfo, Op, PrewriteRequest};

use crate::engine::{Cf, Engine};
use crate::txn::{parse_versions, VersionRecord};
use crate::Result;

/// One row key as the applied state holds it.
struct RowState {
    lock: Option<LockInfo>,
    versions: Vec<VersionRecord>,
    /// The row the reader at `read_ts` sees, if any.
    row: Option<Vec<u8>>,
}

/// Reads `key`'s lock, versions and its row as seen at `read_ts` (by the
/// transaction that started then: its own lock's write counts).
fn row_state<E: Engine>(engine: &E, key: &[u8], read_ts: u64) -> Result<RowState> {
    let mut pairs = Vec::new();
    engine.scan(Cf::Default, key, &row_keys_end(key), &mut |k, v| {
        pairs.push((k.to_vec(), v.to_vec()));
        true
    })?;
    let mut state = RowState {
        lock: None,
        versions: Vec::new(),
        row: None,
    };
    let mut vis = Visibility::default();
    let mut decided = false;
    for (k, v) in &pairs {
        if let KeyKind::Lock(_) = classify_key(k) {
            state.lock = Some(decode_lock(v)?);
        }
        if decided {
            continue;
        }
        match vis.judge(k, v, read_ts)? {
            Seen::Row => {
                let row = match classify_key(k) {
                    KeyKind::Version { .. } => split_version_value(v)?.1.to_vec(),
                    _ => v.clone(),
                };
                state.row = Some(row);
                decided = true;
            }
            Seen::Own(row) => {
                state.row = Some(row);
                decided = true;
            }
            _ => {}
        }
    }
    // A delete (own or committed) decides the row as absent; Visibility
    // passes over older versions then, so `row` stays None.
    state.versions = parse_versions(pairs)?;
    Ok(state)
}

/// The rows of `keys` as the transaction `start_ts` sees them (keys
/// without one left out): the answer to `return_values` once its lock is
/// in place.
pub fn rows_at<E: Engine>(engine: &E, keys: &[Vec<u8>], start_ts: u64) -> Result<Vec<KvPair>> {
    let mut out = Vec::new();
    for key in keys {
        if let Some(value) = row_state(engine, key, start_ts)?.row {
            out.push(KvPair {
                key: key.clone(),
                value,
            });
        }
    }
    Ok(out)
}

/// Whether `p` may be answered before replication: an open transaction's
/// lock-only request on a row table, without its primary key (the
/// primary's lock is what heartbeats keep alive and what readers ask
/// about: it must be in place when the transaction is told it is).
pub fn pipelinable(p: &PrewriteRequest) -> bool {
    p.pessimistic
        && !p.packed
        && !p.try_one_pc
        && !p.mutations.is_empty()
        && p.mutations
            .iter()
            .all(|m| m.op() == Op::Lock && m.key != p.primary)
}

/// The leader's check of a pipelined lock against its applied state:
/// the rows (when asked for) if every key is free for `p`'s transaction,
/// None if any is not (the slow way then answers exactly why).
pub fn check_free<E: Engine>(engine: &E, p: &PrewriteRequest) -> Result<Option<Vec<KvPair>>> {
    let mut out = Vec::new();
    for m in &p.mutations {
        let state = row_state(engine, &m.key, p.start_ts)?;
        if state
            .lock
            .as_ref()
            .is_some_and(|l| l.start_ts != p.start_ts)
        {
            return Ok(None);
        }
        let unusual = state
            .versions
            .iter()
            .any(|v| v.start_ts == p.start_ts || v.commit_ts > p.start_ts);
        if unusual {
            return Ok(None);
        }
        if let (true, Some(value)) = (p.return_values, state.row) {
            out.push(KvPair {
                key: m.key.clone(),
                value,
            });
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory::MemEngine;
    use crate::engine::WriteBatch;
    use quarry_coprocessor::codec::key::record_key;
    use quarry_coprocessor::codec::mvcc::{
        encode_lock, lock_key, version_key, version_value, WriteKind,
    };
    use quarry_proto::kv::Mutation;

    fn put(engine: &MemEngine, pairs: Vec<(Vec<u8>, Vec<u8>)>) {
        let mut wb = WriteBatch::default();
        for (k, v) in pairs {
            wb.put(Cf::Default, k, v);
        }
        engine.write(&wb, false).unwrap();
    }

    fn lock_request(keys: &[Vec<u8>], start_ts: u64) -> PrewriteRequest {
        PrewriteRequest {
            mutations: keys
                .iter()
                .map(|k| Mutation {
                    op: Op::Lock as i32,
                    key: k.clone(),
                    value: vec![],
                })
                .collect(),
            start_ts,
            pessimistic: true,
            return_values: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_lock_returns_the_rows_its_snapshot_sees_and_its_own_writes() {
        let engine = MemEngine::default();
        let (bare, versioned, own, absent) = (
            record_key(1, 1),
            record_key(1, 2),
            record_key(1, 3),
            record_key(1, 4),
        );
        put(
            &engine,
            vec![
                (bare.clone(), b"bare".to_vec()),
                (
                    version_key(&versioned, 50, WriteKind::Put),
                    version_value(40, b"at 50"),
                ),
                (
                    version_key(&versioned, 20, WriteKind::Put),
                    version_value(10, b"at 20"),
                ),
                (
                    lock_key(&own),
                    encode_lock(&LockInfo {
                        start_ts: 100,
                        op: Op::Put as i32,
                        key: own.clone(),
                        value: b"mine".to_vec(),
                        pessimistic: true,
                        ..Default::default()
                    }),
                ),
            ],
        );
        let keys = [bare.clone(), versioned.clone(), own.clone(), absent];
        let rows = check_free(&engine, &lock_request(&keys, 100))
            .unwrap()
            .unwrap();
        let got: Vec<(&[u8], &[u8])> = rows
            .iter()
            .map(|p| (p.key.as_slice(), p.value.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![
                (bare.as_slice(), b"bare".as_slice()),
                (versioned.as_slice(), b"at 50".as_slice()),
                (own.as_slice(), b"mine".as_slice()),
            ]
        );
        // An older snapshot sees the older version.
        assert_eq!(
            rows_at(&engine, std::slice::from_ref(&versioned), 30).unwrap()[0].value,
            b"at 20"
        );
    }

    #[test]
    fn only_lock_only_requests_without_the_primary_are_pipelined() {
        let (a, b) = (record_key(1, 1), record_key(1, 2));
        let mut p = lock_request(std::slice::from_ref(&b), 100);
        p.primary = a.clone();
        assert!(pipelinable(&p));
        p.primary = b.clone();
        assert!(!pipelinable(&p), "the primary's lock must be in place");
        p.primary = a;
        p.mutations[0].op = Op::Put as i32;
        assert!(!pipelinable(&p), "a lock holding a write must be in place");
    }

    #[test]
    fn another_lock_or_a_newer_version_is_not_free() {
        let engine = MemEngine::default();
        let (locked, newer) = (record_key(1, 1), record_key(1, 2));
        put(
            &engine,
            vec![
                (
                    lock_key(&locked),
                    encode_lock(&LockInfo {
                        start_ts: 90,
                        op: Op::Lock as i32,
                        key: locked.clone(),
                        pessimistic: true,
                        ..Default::default()
                    }),
                ),
                (
                    version_key(&newer, 120, WriteKind::Put),
                    version_value(110, b"v"),
                ),
            ],
        );
        assert!(check_free(&engine, &lock_request(&[locked], 100))
            .unwrap()
            .is_none());
        assert!(check_free(&engine, &lock_request(&[newer], 100))
            .unwrap()
            .is_none());
    }
}
