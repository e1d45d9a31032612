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

use crate::Result;

pub use crate::key_range::{KeyRange, KeyRangeRef};

/// An ordered key-value source the executors scan.
pub trait Storage {
    /// Positions a new scan over `range`. With `key_only` the values returned
    /// by [`Storage::scan_next`] may be empty (a `COUNT(*)` never reads them),
    /// except a lock's ([`is_lock_key`]): a reader needs its start_ts.
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()>;

    /// The next pair of the current scan in key order, or `None` when the
    /// range is exhausted. The slices are valid until the next call.
    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>>;

    /// The pair the last [`Storage::scan_next`] returned (None before the
    /// first call or after the end). Lets a caller that must decide in a
    /// loop whether to keep a pair borrow it again once the loop is done.
    fn current(&self) -> Option<(&[u8], &[u8])>;

    /// Calls `f` with each pair of `range` (bounded to the storage's own
    /// bounds) in key order until it returns false, through a second
    /// cursor over the same snapshot: the current scan does not move. A
    /// column-layout scan uses it to find the versions (and locks) over
    /// the rows of a pack it is about to return.
    fn peek(&self, range: &KeyRange, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
}

impl<T: Storage + ?Sized> Storage for Box<T> {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()> {
        (**self).begin_scan(range, key_only)
    }

    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        (**self).scan_next()
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        (**self).current()
    }

    fn peek(&self, range: &KeyRange, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        (**self).peek(range, f)
    }
}

/// Whether `key` is a row's lock (whose value a key-only scan still
/// returns).
#[inline]
pub fn is_lock_key(key: &[u8]) -> bool {
    key.len() == crate::codec::mvcc::LOCK_KEY_LEN
        && key[crate::codec::key::RECORD_KEY_LEN] == crate::codec::mvcc::LOCK_MARKER
}

/// Makes scans over one snapshot, one per call, for threads that scan
/// parts of a region side by side.
pub type StorageSource<'a> = dyn Fn() -> Box<dyn Storage + Send + 'a> + Sync + 'a;

impl<T: Storage + ?Sized> Storage for &mut T {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()> {
        (**self).begin_scan(range, key_only)
    }

    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        (**self).scan_next()
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        (**self).current()
    }

    fn peek(&self, range: &KeyRange, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        (**self).peek(range, f)
    }
}

/// A [`Storage`] over an in-memory sorted vector, for tests and benches.
/// Scans return slices into it: nothing is copied.
#[derive(Default, Clone)]
pub struct MemStorage {
    /// Sorted by key, keys unique.
    data: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
    end: usize,
    key_only: bool,
    /// Index of the pair `scan_next` returned last.
    cur: Option<usize>,
}

impl MemStorage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces a pair (appending in key order is O(1)).
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        match self.data.last() {
            Some((last, _)) if *last < key => self.data.push((key, value)),
            None => self.data.push((key, value)),
            _ => match self.data.binary_search_by(|(k, _)| k.as_slice().cmp(&key)) {
                Ok(i) => self.data[i].1 = value,
                Err(i) => self.data.insert(i, (key, value)),
            },
        }
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
        let mut s = MemStorage::new();
        for (k, v) in iter {
            s.put(k, v);
        }
        s
    }
}

impl Storage for MemStorage {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> Result<()> {
        self.pos = self
            .data
            .partition_point(|(k, _)| k.as_slice() < range.start.as_slice());
        self.end = self
            .data
            .partition_point(|(k, _)| range.as_ref().before_end(k));
        self.key_only = key_only;
        self.cur = None;
        Ok(())
    }

    fn scan_next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.pos >= self.end {
            self.cur = None;
            return Ok(None);
        }
        self.cur = Some(self.pos);
        self.pos += 1;
        Ok(Storage::current(&*self))
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        let (k, v) = &self.data[self.cur?];
        let v = if self.key_only && !is_lock_key(k) {
            &[]
        } else {
            v.as_slice()
        };
        Some((k.as_slice(), v))
    }

    fn peek(&self, range: &KeyRange, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let from = self
            .data
            .partition_point(|(k, _)| k.as_slice() < range.start.as_slice());
        for (k, v) in &self.data[from..] {
            if !range.as_ref().before_end(k) || !f(k, v) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_storage_keeps_keys_sorted_and_unique() {
        let mut s = MemStorage::new();
        for k in [5u8, 1, 9, 5, 3] {
            s.put(vec![k], vec![k * 2]);
        }
        assert_eq!(s.len(), 4);
        s.begin_scan(&KeyRange::new(vec![2], vec![9]), false)
            .unwrap();
        let mut got = Vec::new();
        while let Some((k, v)) = s.scan_next().unwrap() {
            got.push((k[0], v[0]));
        }
        assert_eq!(got, vec![(3, 6), (5, 10)]);
        s.begin_scan(&KeyRange::new(vec![], vec![]), true).unwrap();
        assert_eq!(s.scan_next().unwrap(), Some((&[1u8][..], &[][..])));
    }
}
