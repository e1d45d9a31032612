//! An in-memory [`Engine`] for tests: ordered maps under a lock; a snapshot
//! is a copy of the data map.
//!
//! Tests can make reads of a column family fail
//! ([`MemEngine::fail_reads`]), as a disk read error would, to check what
//! the store does when a read it cannot do without fails, and count the
//! synced writes and range deletions it was given
//! ([`MemEngine::counts`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use parking_lot::RwLock;
use quarry_coprocessor::storage::{KeyRange, MemStorage, Storage};

use super::{Cf, Engine, WriteBatch, WriteOp};
use crate::{Error, Result};

/// One column family's ordered data.
type CfMap = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
pub struct MemEngine {
    cfs: RwLock<HashMap<Cf, CfMap>>,
    /// Column families whose reads fail (fault injection for tests).
    failing: RwLock<HashSet<Cf>>,
    /// Synced writes and range deletions so far ([`MemEngine::counts`]).
    counts: parking_lot::Mutex<WriteCounts>,
}

/// What a [`MemEngine`] was asked to write, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    pub synced_writes: u64,
    pub range_deletes: u64,
}

impl MemEngine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `get`, `scan` and `scan_back` on `cf` fail with an engine
    /// error while `fail` holds, as a failed disk read would. Writes and
    /// snapshots are unaffected.
    pub fn fail_reads(&self, cf: Cf, fail: bool) {
        let mut failing = self.failing.write();
        if fail {
            failing.insert(cf);
        } else {
            failing.remove(&cf);
        }
    }

    /// The synced writes and range deletions written so far.
    pub fn counts(&self) -> WriteCounts {
        *self.counts.lock()
    }

    fn check_read(&self, cf: Cf) -> Result<()> {
        if self.failing.read().contains(&cf) {
            return Err(Error::Engine(format!(
                "injected read failure in column family {}",
                cf.name()
            )));
        }
        Ok(())
    }

    /// A copy of the data column family within `bounds`.
    fn snapshot(&self, bounds: &KeyRange) -> MemStorage {
        let cfs = self.cfs.read();
        cfs.get(&Cf::Default)
            .map(|m| {
                m.range(range_bounds(&bounds.start, &bounds.end))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn range_bounds(start: &[u8], end: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let hi = if end.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(end.to_vec())
    };
    (Bound::Included(start.to_vec()), hi)
}

impl Engine for MemEngine {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_read(cf)?;
        Ok(self.cfs.read().get(&cf).and_then(|m| m.get(key).cloned()))
    }

    fn write(&self, batch: &WriteBatch, sync: bool) -> Result<()> {
        let mut cfs = self.cfs.write();
        {
            let mut counts = self.counts.lock();
            counts.synced_writes += u64::from(sync);
            counts.range_deletes += batch
                .ops
                .iter()
                .filter(|op| matches!(op, WriteOp::DeleteRange(..)))
                .count() as u64;
        }
        for op in &batch.ops {
            match op {
                WriteOp::Put(cf, k, v) => {
                    cfs.entry(*cf).or_default().insert(k.clone(), v.clone());
                }
                WriteOp::Delete(cf, k) => {
                    cfs.entry(*cf).or_default().remove(k);
                }
                WriteOp::DeleteRange(cf, s, e) => {
                    let m = cfs.entry(*cf).or_default();
                    let doomed: Vec<Vec<u8>> = m
                        .range(range_bounds(s, e))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        m.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }

    fn scan(
        &self,
        cf: Cf,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check_read(cf)?;
        let cfs = self.cfs.read();
        if let Some(m) = cfs.get(&cf) {
            for (k, v) in m.range(range_bounds(start, end)) {
                if !f(k, v) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn scan_back(
        &self,
        cf: Cf,
        key: &[u8],
        lower: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check_read(cf)?;
        if key < lower {
            return Ok(());
        }
        let cfs = self.cfs.read();
        if let Some(m) = cfs.get(&cf) {
            for (k, v) in m
                .range::<[u8], _>((Bound::Included(lower), Bound::Included(key)))
                .rev()
            {
                if !f(k, v) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn with_snapshot<R>(&self, bounds: &KeyRange, f: impl FnOnce(&mut dyn Storage) -> R) -> R {
        let mut snapshot = self.snapshot(bounds);
        f(&mut snapshot)
    }

    fn with_snapshot_source<R>(
        &self,
        bounds: &KeyRange,
        _fill_cache: bool,
        f: impl FnOnce(&quarry_coprocessor::storage::StorageSource<'_>) -> R,
    ) -> R {
        let snapshot = self.snapshot(bounds);
        let make = || -> Box<dyn Storage + Send + '_> { Box::new(snapshot.clone()) };
        f(&make)
    }

    fn approximate_size(&self, start: &[u8], end: &[u8]) -> u64 {
        let cfs = self.cfs.read();
        cfs.get(&Cf::Default)
            .map(|m| {
                m.range(range_bounds(start, end))
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum()
            })
            .unwrap_or(0)
    }
}
