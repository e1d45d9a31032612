//! MVCC: versions, locks, and what a snapshot sees.
//!
//! Every row a transaction writes is kept as a *version*, named by the
//! commit timestamp of the transaction that wrote it (TiKV's write column
//! family, Percolator's `write` column). A running transaction's pending
//! write is a *lock* on the row key, holding the value it will write. A
//! read at `read_ts` sees, per row, the newest version committed at or
//! before `read_ts`; a lock of a transaction that started at or before
//! `read_ts` might commit below it, so the reader must learn that
//! transaction's fate first (compute resolves the lock and asks again).
//!
//! KEYS, all inside the table's key range next to the row key
//! `t{table}_r{handle}` (19 bytes) they belong to, so regions, splits,
//! raft snapshots and `DROP TABLE` move them as they move rows:
//!
//! ```text
//! t{t}_r{h}                       19  a row older than every snapshot
//!                                     (bulk loads; what GC folds to)
//! t{t}_r{h}L                      20  the lock of a running transaction
//!                                     (value: LockInfo, protobuf)
//! t{t}_r{first}M                  20  the pack's mark: versions may hide
//!                                     some of its rows
//! t{t}_r{first}P                  20  a pack of the column layout (older
//!                                     than every snapshot as well)
//! t{t}_r{h}{!commit_ts:u64}{kind} 28  a version: kind P put, D delete,
//!                                     R rollback, L lock-only commit;
//!                                     value: start_ts (u64 BE) + the row
//! ```
//!
//! The commit timestamp is stored bitwise-inverted, so a row's versions
//! sort newest first and a forward scan meets the one it needs before the
//! older ones. Timestamps stay below 2^63 (physical milliseconds << 18),
//! so an inverted one starts with a byte ≥ 0x80 and every version sorts
//! after its row's lock and pack keys: per handle the order is bare row,
//! lock, pack mark, pack, versions.
//!
//! A pack row is older than every snapshot, but an UPDATE or DELETE of it
//! writes a version that hides it from later snapshots, and that version
//! sorts *after* the pack. So the prewrite of a put or delete of a packed
//! handle also writes the pack's mark, which a scan meets *before* the
//! pack: only a marked pack makes the scan look ahead for the versions
//! that hide its rows (`executor::scan`); an unmarked one, the common
//! case, costs nothing extra. Compaction keeps a pack marked while
//! versions or locks over its rows remain, and drops the mark once they
//! are folded in (`raftstore::compaction`). The kind sits in the key, not the value, so a
//! `COUNT(*)` over a row table still reads keys only.
//!
//! A handle has either a bare row or versions, never both: a commit over
//! a bare row rewrites it first as a version at timestamp 0 (raftstore's
//! `txn`). Rollback records (kind R, at the rolled-back transaction's
//! start_ts) and lock-only commits (kind L) are not data: a reader passes
//! over them to the next older version; they exist so a late prewrite or
//! commit of that transaction finds what happened to it.

use prost::Message as _;
use quarry_proto::kv::{LockInfo, Op};

use super::key::{decode_i64, RECORD_KEY_LEN};
use crate::{invalid_input, Error, Result};

/// The marker byte after a row key that makes it the row's lock key.
pub const LOCK_MARKER: u8 = b'L';
/// Length of a lock key.
pub const LOCK_KEY_LEN: usize = RECORD_KEY_LEN + 1;
/// Length of a version key: row key, inverted commit_ts, kind.
pub const VERSION_KEY_LEN: usize = RECORD_KEY_LEN + 8 + 1;
/// Bytes before the row in a version's value (its start_ts).
pub const VERSION_HEADER_LEN: usize = 8;

/// What a version records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Put,
    Delete,
    /// The transaction with this start_ts was rolled back (not data).
    Rollback,
    /// The transaction only locked the row (not data).
    Lock,
}

impl WriteKind {
    pub fn byte(self) -> u8 {
        match self {
            WriteKind::Put => b'P',
            WriteKind::Delete => b'D',
            WriteKind::Rollback => b'R',
            WriteKind::Lock => b'L',
        }
    }

    pub fn from_byte(b: u8) -> Option<WriteKind> {
        Some(match b {
            b'P' => WriteKind::Put,
            b'D' => WriteKind::Delete,
            b'R' => WriteKind::Rollback,
            b'L' => WriteKind::Lock,
            _ => return None,
        })
    }

    /// True for the kinds that decide what a reader sees (a put or a
    /// delete); false for records a reader passes over.
    pub fn is_data(self) -> bool {
        matches!(self, WriteKind::Put | WriteKind::Delete)
    }

    /// The version a committed lock of `op` leaves.
    pub fn of_op(op: Op) -> WriteKind {
        match op {
            Op::Put | Op::Insert => WriteKind::Put,
            Op::Delete => WriteKind::Delete,
            Op::Lock => WriteKind::Lock,
        }
    }
}

/// The row key a version or lock key belongs to (its first 19 bytes).
pub fn row_key_of(key: &[u8]) -> &[u8] {
    &key[..key.len().min(RECORD_KEY_LEN)]
}

/// The lock key of a row key.
pub fn lock_key(row_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(LOCK_KEY_LEN);
    k.extend_from_slice(row_key);
    k.push(LOCK_MARKER);
    k
}

/// The key of `row_key`'s version committed at `commit_ts`.
pub fn version_key(row_key: &[u8], commit_ts: u64, kind: WriteKind) -> Vec<u8> {
    let mut k = Vec::with_capacity(VERSION_KEY_LEN);
    k.extend_from_slice(row_key);
    k.extend_from_slice(&(!commit_ts).to_be_bytes());
    k.push(kind.byte());
    k
}

/// The value of a version: the writer's start_ts, then the row.
pub fn version_value(start_ts: u64, row: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(VERSION_HEADER_LEN + row.len());
    v.extend_from_slice(&start_ts.to_be_bytes());
    v.extend_from_slice(row);
    v
}

/// Splits a version's value into (start_ts, row).
pub fn split_version_value(v: &[u8]) -> Result<(u64, &[u8])> {
    if v.len() < VERSION_HEADER_LEN {
        return Err(invalid_input!("a version value of {} bytes", v.len()));
    }
    let (ts, row) = v.split_at(VERSION_HEADER_LEN);
    Ok((u64::from_be_bytes(ts.try_into().expect("8 bytes")), row))
}

/// (handle, commit_ts, kind) of a version key (length already checked).
pub(crate) fn parse_version_key(key: &[u8]) -> Option<(i64, u64, WriteKind)> {
    let h = decode_i64(&key[11..19]).ok()?;
    let inv: [u8; 8] = key[RECORD_KEY_LEN..RECORD_KEY_LEN + 8].try_into().ok()?;
    let kind = WriteKind::from_byte(key[VERSION_KEY_LEN - 1])?;
    Some((h, !u64::from_be_bytes(inv), kind))
}

pub fn encode_lock(lock: &LockInfo) -> Vec<u8> {
    lock.encode_to_vec()
}

pub fn decode_lock(v: &[u8]) -> Result<LockInfo> {
    LockInfo::decode(v).map_err(|e| Error::Internal(format!("a stored lock does not decode: {e}")))
}

/// The physical milliseconds of a timestamp (physical << 18 | logical).
pub fn physical_ms(ts: u64) -> u64 {
    ts >> 18
}

/// Whether `lock` has outlived its TTL at `current_ts`.
pub fn lock_expired(lock: &LockInfo, current_ts: u64) -> bool {
    physical_ms(lock.start_ts).saturating_add(lock.ttl_ms) < physical_ms(current_ts)
}

/// What a scan decides about each key it meets at `read_ts`, one key at a
/// time in key order: the MVCC read of `KvScanner` and of the raftstore's
/// point reads.
#[derive(Debug, Default)]
pub struct Visibility {
    /// The handle whose visible version was found (its older ones are
    /// passed over).
    decided: Option<i64>,
}

/// The verdict on one key.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// The row this key holds is the one the snapshot sees.
    Row,
    /// A pack (older than every snapshot).
    Pack,
    /// The mark of the pack starting at this handle (versions may hide
    /// some of its rows): not data.
    PackMark(i64),
    /// Nothing for the snapshot: pass over the key.
    Skip,
    /// A lock the reader must resolve first.
    Locked(Box<LockInfo>),
    /// The reader's own transaction wrote this row (its lock, at the
    /// reader's start_ts, holds the row): what it reads.
    Own(Vec<u8>),
}

/// Whether a reader at `read_ts` must wait for `lock`'s transaction: it
/// started before the read and is committing data. A lock at `read_ts`
/// itself is the reader's own (timestamps are unique), and a pessimistic
/// one belongs to a transaction that has not begun to commit (it will be
/// prewritten again, and take its commit_ts, after this read): neither is
/// waited for.
pub fn blocks(lock: &LockInfo, read_ts: u64) -> bool {
    lock.start_ts < read_ts && lock.op() != Op::Lock && !lock.pessimistic
}

impl Visibility {
    /// Judges `key` (with `value`, needed only for locks) at `read_ts`.
    pub fn judge(&mut self, key: &[u8], value: &[u8], read_ts: u64) -> Result<Seen> {
        use super::key::{classify_key, KeyKind};
        Ok(match classify_key(key) {
            KeyKind::Row(_) => Seen::Row,
            KeyKind::Pack(_) => Seen::Pack,
            KeyKind::PackMark(first) => Seen::PackMark(first),
            KeyKind::Version {
                handle,
                commit_ts,
                kind,
            } => {
                if self.decided == Some(handle) || commit_ts > read_ts || !kind.is_data() {
                    Seen::Skip
                } else {
                    self.decided = Some(handle);
                    if kind == WriteKind::Put {
                        Seen::Row
                    } else {
                        Seen::Skip
                    }
                }
            }
            KeyKind::Lock(handle) => {
                let lock = decode_lock(value)?;
                if lock.start_ts == read_ts {
                    // Read-your-writes: the transaction's own lock is the
                    // row as it wrote it; older versions are passed over.
                    match lock.op() {
                        Op::Put | Op::Insert => {
                            self.decided = Some(handle);
                            Seen::Own(lock.value)
                        }
                        Op::Delete => {
                            self.decided = Some(handle);
                            Seen::Skip
                        }
                        Op::Lock => Seen::Skip,
                    }
                } else if blocks(&lock, read_ts) {
                    // It might commit below read_ts.
                    Seen::Locked(Box::new(lock))
                } else {
                    Seen::Skip
                }
            }
            KeyKind::Other | KeyKind::Index { .. } => {
                return Err(invalid_input!(
                    "the scanned range holds a key that is not table data"
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::key::{classify_key, pack_key, record_key, KeyKind};
    use proptest::prelude::*;

    proptest! {
        /// Stored versions and locks that do not decode are errors, never
        /// panics; and so are keys of every kind.
        #[test]
        fn garbage_versions_locks_and_keys_are_errors_not_panics(bytes: Vec<u8>) {
            let _ = split_version_value(&bytes);
            let _ = decode_lock(&bytes);
            let _ = classify_key(&bytes);
            let _ = row_key_of(&bytes);
        }
    }

    #[test]
    fn per_handle_order_is_bare_row_lock_pack_then_versions_newest_first() {
        let row = record_key(3, 7);
        let keys = [
            row.clone(),
            lock_key(&row),
            pack_key(3, 7),
            version_key(&row, 900 << 18, WriteKind::Put),
            version_key(&row, 5 << 18, WriteKind::Delete),
            version_key(&row, 0, WriteKind::Put),
            record_key(3, 8),
        ];
        for w in keys.windows(2) {
            assert!(w[0] < w[1], "{:?} !< {:?}", w[0], w[1]);
        }
        assert_eq!(classify_key(&keys[1]), KeyKind::Lock(7));
        assert_eq!(
            classify_key(&keys[4]),
            KeyKind::Version {
                handle: 7,
                commit_ts: 5 << 18,
                kind: WriteKind::Delete
            }
        );
        assert_eq!(row_key_of(&keys[3]), row.as_slice());
    }

    #[test]
    fn a_snapshot_sees_the_newest_data_version_at_or_before_it() {
        let row = record_key(3, 7);
        let versions = [
            (30, WriteKind::Delete),
            (25, WriteKind::Rollback),
            (20, WriteKind::Put),
            (10, WriteKind::Put),
        ];
        let seen = |read_ts: u64| -> Vec<u64> {
            let mut vis = Visibility::default();
            versions
                .iter()
                .filter(|(ts, k)| {
                    vis.judge(&version_key(&row, *ts, *k), &[], read_ts)
                        .unwrap()
                        == Seen::Row
                })
                .map(|(ts, _)| *ts)
                .collect()
        };
        assert_eq!(seen(5), Vec::<u64>::new());
        assert_eq!(seen(10), vec![10]);
        assert_eq!(seen(27), vec![20]);
        assert_eq!(seen(30), Vec::<u64>::new());
    }

    #[test]
    fn locks_before_the_snapshot_stop_it_its_own_are_its_rows_and_later_ones_do_not() {
        let row = record_key(3, 7);
        let lock = LockInfo {
            primary: row.clone(),
            start_ts: 50,
            op: Op::Put as i32,
            value: b"new row".to_vec(),
            ..Default::default()
        };
        let v = encode_lock(&lock);
        let mut vis = Visibility::default();
        assert_eq!(vis.judge(&lock_key(&row), &v, 49).unwrap(), Seen::Skip);
        assert!(matches!(
            vis.judge(&lock_key(&row), &v, 51).unwrap(),
            Seen::Locked(l) if l.start_ts == 50
        ));
        // The transaction's own lock is its row; its older versions are
        // passed over.
        let mut own = Visibility::default();
        assert_eq!(
            own.judge(&lock_key(&row), &v, 50).unwrap(),
            Seen::Own(b"new row".to_vec())
        );
        let older = version_key(&row, 10, WriteKind::Put);
        assert_eq!(own.judge(&older, &[], 50).unwrap(), Seen::Skip);
        // An open transaction's pessimistic lock stops no reader.
        let open = encode_lock(&LockInfo {
            pessimistic: true,
            ..lock.clone()
        });
        assert_eq!(vis.judge(&lock_key(&row), &open, 60).unwrap(), Seen::Skip);
        let pessimistic = encode_lock(&LockInfo {
            op: Op::Lock as i32,
            ..lock
        });
        assert_eq!(
            vis.judge(&lock_key(&row), &pessimistic, 60).unwrap(),
            Seen::Skip
        );
    }
}
