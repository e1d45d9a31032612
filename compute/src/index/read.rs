//! Reading index entries at a snapshot.
//!
//! An index read is a key-range read of entries, small by the planner's
//! choice, so it reads the range's raw MVCC records (every lock and
//! version, through the stores' `Scan`, region by region through the
//! shared retry layer) and decides here what the snapshot sees, per entry:
//! the newest data version at or before `read_ts`, or the reader's own
//! lock; a lock of a transaction that may commit below `read_ts` is
//! resolved (`Txns::resolve`) and the range read again. The stores' reads
//! are leader reads (`Node::read_check`), as the coprocessor's are; no
//! one-phase commit writes a table with an index (`SchemaCheck`), so a
//! plain read cannot race one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use quarry_coprocessor::codec::key::{classify_key, IndexPart, KeyKind};
use quarry_coprocessor::codec::mvcc::{blocks, decode_lock, split_version_value};
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::kv::{key_error, KvPair, LockInfo, Op, ScanRequest};

use crate::region_cache::Located;
use crate::retry::{Attempt, RegionWork, Retry, RetryConfig, RetryStats};
use crate::txn::Txns;
use crate::{Error, Result};

/// Times a read resolves locks and reads again before it gives up.
const MAX_ROUNDS: usize = 64;

/// One visible entry: its own key and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// The raw records of one key range, region by region.
struct ScanWork {
    range: KeyRange,
    txns: Arc<Txns>,
    out: Arc<Mutex<Vec<KvPair>>>,
}

impl RegionWork for ScanWork {
    fn span(&self) -> Option<KeyRange> {
        Some(self.range.clone())
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        Ok(regions
            .into_iter()
            .filter_map(|r| {
                let part = self.range.intersect(&KeyRange::of_region(&r.region))?;
                Some((
                    r,
                    ScanWork {
                        range: part,
                        txns: self.txns.clone(),
                        out: self.out.clone(),
                    },
                ))
            })
            .collect())
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let mut client = self.txns.cluster().kv(&region.addr)?;
            let req = ScanRequest {
                context: Some(region.context()),
                start_key: self.range.start.clone(),
                end_key: self.range.end.clone(),
                limit: 0,
                key_only: false,
            };
            let resp = match tokio::time::timeout(timeout, client.scan(req)).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(st)) => return Ok(Attempt::Unreachable(st)),
                Err(_) => {
                    return Ok(Attempt::Unreachable(tonic::Status::deadline_exceeded(
                        "index read timed out",
                    )))
                }
            };
            if let Some(re) = resp.region_error {
                return Ok(Attempt::Region(Box::new(re)));
            }
            if let Some(e) = resp.error {
                return match key_error::Code::try_from(e.code) {
                    Ok(key_error::Code::Unavailable) => {
                        Ok(Attempt::Busy(format!("reading an index: {}", e.message)))
                    }
                    _ => Err(crate::txn::key_error(e)),
                };
            }
            self.out.lock().extend(resp.pairs);
            Ok(Attempt::Done)
        })
    }
}

/// Every raw record (entries, their locks and versions) in `range`, in
/// key order.
pub async fn raw_records(
    txns: &Arc<Txns>,
    range: KeyRange,
    deadline: Instant,
) -> Result<Vec<KvPair>> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let work = ScanWork {
        range,
        txns: txns.clone(),
        out: out.clone(),
    };
    let cfg = RetryConfig {
        concurrency: 8,
        backoff_base: Duration::from_millis(2),
        backoff_max: Duration::from_millis(200),
        give_up: None,
        what: "index read",
    };
    let stats = RetryStats::default();
    Retry {
        cache: txns.cache(),
        cfg: &cfg,
        stats: &stats,
    }
    .run(work, deadline)
    .await?;
    let mut pairs = std::mem::take(&mut *out.lock());
    pairs.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(pairs)
}

/// What one entry's records say at a snapshot.
#[derive(Debug)]
enum Verdict {
    Visible(Vec<u8>),
    Absent,
    Wait(Box<LockInfo>),
}

/// The entries `pairs` (one range's raw records, in key order) hold at
/// `read_ts`, and the locks to settle first (if any, the entries are not
/// final).
fn judge(pairs: &[KvPair], read_ts: u64) -> Result<(Vec<Entry>, Vec<LockInfo>)> {
    let mut entries = Vec::new();
    let mut locks = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        let KeyKind::Index { base_len, .. } = classify_key(&pairs[i].key) else {
            return Err(Error::Internal(
                "an index range holds a key that is not an index entry's".into(),
            ));
        };
        let base = &pairs[i].key[..base_len];
        let mut verdict: Option<Verdict> = None;
        while i < pairs.len() && pairs[i].key.starts_with(base) {
            let p = &pairs[i];
            i += 1;
            if verdict.is_some() {
                continue;
            }
            let KeyKind::Index { part, .. } = classify_key(&p.key) else {
                continue;
            };
            verdict = match part {
                IndexPart::Bare => Some(Verdict::Visible(p.value.clone())),
                IndexPart::Lock => {
                    let lock = decode_lock(&p.value)?;
                    if lock.start_ts == read_ts {
                        match lock.op() {
                            Op::Put | Op::Insert => Some(Verdict::Visible(lock.value.clone())),
                            Op::Delete => Some(Verdict::Absent),
                            Op::Lock => None,
                        }
                    } else if blocks(&lock, read_ts) {
                        Some(Verdict::Wait(Box::new(lock)))
                    } else {
                        None
                    }
                }
                IndexPart::Version { commit_ts, kind } => {
                    if commit_ts > read_ts || !kind.is_data() {
                        None
                    } else if kind == quarry_coprocessor::codec::mvcc::WriteKind::Put {
                        Some(Verdict::Visible(split_version_value(&p.value)?.1.to_vec()))
                    } else {
                        Some(Verdict::Absent)
                    }
                }
            };
        }
        match verdict {
            Some(Verdict::Visible(value)) => entries.push(Entry {
                key: base.to_vec(),
                value,
            }),
            Some(Verdict::Wait(l)) => locks.push(*l),
            _ => {}
        }
    }
    Ok((entries, locks))
}

/// The entries in `range` that a snapshot at `read_ts` sees, in key order.
pub async fn entries_at(
    txns: &Arc<Txns>,
    range: KeyRange,
    read_ts: u64,
    deadline: Instant,
) -> Result<Vec<Entry>> {
    for _ in 0..MAX_ROUNDS {
        let pairs = raw_records(txns, range.clone(), deadline).await?;
        let (entries, locks) = judge(&pairs, read_ts)?;
        if locks.is_empty() {
            return Ok(entries);
        }
        for l in &locks {
            txns.resolve(l, deadline).await?;
        }
    }
    Err(Error::Deadline(format!(
        "an index read met locks {MAX_ROUNDS} times in a row"
    )))
}

/// The row key ranges of the rows `access`'s entries name at the scan's
/// snapshot (taken now if `dag` names none); None when the index is too
/// new for that snapshot (the scan reads the table).
pub async fn row_ranges(
    access: &super::access::Access,
    dag: &mut quarry_proto::coprocessor::DagRequest,
    txns: &Arc<Txns>,
    deadline: Instant,
) -> Result<Option<Vec<KeyRange>>> {
    use quarry_coprocessor::codec::key::{record_key, row_keys_end};
    if dag.read_ts == 0 {
        dag.read_ts = txns.timestamp().await?;
    }
    if dag.read_ts < access.index.public_ts {
        return Ok(None);
    }
    let read_ts = dag.read_ts;
    let found = futures::future::try_join_all(
        access
            .ranges
            .iter()
            .map(|r| entries_at(txns, r.clone(), read_ts, deadline)),
    )
    .await?;
    let table_id = dag
        .scan
        .as_ref()
        .map(|s| s.table_id)
        .ok_or_else(|| Error::Internal("an index lookup without a table scan".into()))?;
    let mut handles = Vec::new();
    for e in found.into_iter().flatten() {
        handles.push(quarry_coprocessor::codec::index::entry_handle(
            &e.key, &e.value,
        )?);
    }
    handles.sort_unstable();
    handles.dedup();
    Ok(Some(
        handles
            .into_iter()
            .map(|h| {
                let k = record_key(table_id, h);
                let end = row_keys_end(&k);
                KeyRange::new(k, end)
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_coprocessor::codec::index::entry;
    use quarry_coprocessor::codec::mvcc::{
        encode_lock, lock_key, version_key, version_value, WriteKind,
    };
    use quarry_coprocessor::codec::row::Datum;

    fn pair(key: Vec<u8>, value: Vec<u8>) -> KvPair {
        KvPair { key, value }
    }

    #[test]
    fn a_snapshot_sees_each_entrys_newest_version_before_it_and_waits_for_older_locks() {
        let (a, _) = entry(5, 1, false, &[Datum::Int(1)], 10);
        let (b, _) = entry(5, 1, false, &[Datum::Int(2)], 11);
        let (c, _) = entry(5, 1, false, &[Datum::Int(3)], 12);
        let mut pairs = vec![
            // a: put at 10, deleted at 20.
            pair(
                version_key(&a, 20, WriteKind::Delete),
                version_value(15, &[]),
            ),
            pair(version_key(&a, 10, WriteKind::Put), version_value(5, &[])),
            // b: locked by a transaction that started at 12, put at 8.
            pair(
                lock_key(&b),
                encode_lock(&LockInfo {
                    start_ts: 12,
                    op: Op::Put as i32,
                    key: b.clone(),
                    ..Default::default()
                }),
            ),
            pair(version_key(&b, 8, WriteKind::Put), version_value(4, &[])),
            // c: a rollback record only.
            pair(
                version_key(&c, 9, WriteKind::Rollback),
                version_value(9, &[]),
            ),
        ];
        pairs.sort_by(|x, y| x.key.cmp(&y.key));
        let keys = |read_ts| {
            let (e, l) = judge(&pairs, read_ts).unwrap();
            (e.into_iter().map(|e| e.key).collect::<Vec<_>>(), l.len())
        };
        assert_eq!(keys(9), (vec![b.clone()], 0));
        assert_eq!(keys(11), (vec![a.clone(), b.clone()], 0));
        // At 15 the lock of 12 may commit below: wait for it.
        assert_eq!(keys(15), (vec![a.clone()], 1));
        assert_eq!(keys(25), (vec![], 1));
    }
}
