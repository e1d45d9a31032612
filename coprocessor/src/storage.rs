//! The scan trait: the only way executors read data.
//!
//! The coprocessor never sees RocksDB. The storage process implements
//! [`Storage`] over a RocksDB snapshot bounded to the region
//! (`raftstore/src/engine`), tests implement it over a `BTreeMap`
//! ([`MemStorage`]). Like TiKV's `tidb_query_common::storage`, a scan is
//! positioned with [`Storage::begin_scan`] and drained with
//! [`Storage::scan_next`]; the returned slices borrow the storage until the
//! next call, so a RocksDB iterator's key and value are decoded in place,
//! never copied.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::Result;

/// A half-open key range `[start, end)`; an empty `end` means unbounded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl KeyRange {
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: end.into(),
        }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }

    pub fn from_proto(r: &quarry_proto::coprocessor::KeyRange) -> Self {
        KeyRange::new(r.start.clone(), r.end.clone())
    }

    pub fn to_proto(&self) -> quarry_proto::coprocessor::KeyRange {
        quarry_proto::coprocessor::KeyRange {
            start: self.start.clone(),
            end: self.end.clone(),
        }
    }
}

/// An ordered key-value source the executors scan.
pub trait Storage {
    /// Positions a new scan over `range`. With `key_only` the values returned
    /// by [`Storage::scan_next`] may be empty (a `COUNT(*)` never reads them).
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()>;

    /// The next pair of the current scan in key order, or `None` when the
    /// range is exhausted. The slices are valid until the next call.
    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>>;
}

impl<T: Storage + ?Sized> Storage for &mut T {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()> {
        (**self).begin_scan(range, key_only)
    }

    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        (**self).scan_next()
    }
}

/// A [`Storage`] over an in-memory ordered map, for tests and benches.
#[derive(Default, Clone)]
pub struct MemStorage {
    data: BTreeMap<Vec<u8>, Vec<u8>>,
    scan: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
}

impl MemStorage {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.data.insert(key, value);
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

impl FromIterator<(Vec<u8>, Vec<u8>)> for MemStorage {
    fn from_iter<I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>>(iter: I) -> Self {
        MemStorage {
            data: iter.into_iter().collect(),
            ..Default::default()
        }
    }
}

impl Storage for MemStorage {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()> {
        let end = if range.end.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(range.end.clone())
        };
        self.scan = self
            .data
            .range((Bound::Included(range.start.clone()), end))
            .map(|(k, v)| (k.clone(), if key_only { Vec::new() } else { v.clone() }))
            .collect();
        self.pos = 0;
        Ok(())
    }

    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        let item = self.scan.get(self.pos);
        self.pos += 1;
        Ok(item.map(|(k, v)| (k.as_slice(), v.as_slice())))
    }
}
