//! The storage engine behind a trait, with an in-memory twin.
//!
//! Only [`rocks`] imports `rocksdb`; everything else in the store is generic
//! over [`Engine`], so store logic is tested on [`memory::MemEngine`] and
//! runs on [`rocks::RocksEngine`]. The trait is deliberately small: point
//! reads, atomic write batches, ordered scans, and a point-in-time snapshot
//! handed to the coprocessor as its [`Storage`].

pub mod memory;
pub mod rocks;

use quarry_coprocessor::storage::Storage;

use crate::Result;

/// The column families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cf {
    /// Data: rows and the meta region's catalog.
    Default,
    /// Store-local state: store identity, region local states.
    Raft,
}

impl Cf {
    pub const ALL: [Cf; 2] = [Cf::Default, Cf::Raft];

    pub fn name(self) -> &'static str {
        match self {
            Cf::Default => "default",
            Cf::Raft => "raft",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    Put(Cf, Vec<u8>, Vec<u8>),
    Delete(Cf, Vec<u8>),
    /// Deletes `[start, end)`.
    DeleteRange(Cf, Vec<u8>, Vec<u8>),
}

/// Writes applied atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
    pub bytes: usize,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, cf: Cf, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += key.len() + value.len();
        self.ops.push(WriteOp::Put(cf, key, value));
    }

    pub fn delete(&mut self, cf: Cf, key: Vec<u8>) {
        self.bytes += key.len();
        self.ops.push(WriteOp::Delete(cf, key));
    }

    pub fn delete_range(&mut self, cf: Cf, start: Vec<u8>, end: Vec<u8>) {
        // RocksDB refuses a range whose end comes before its start.
        debug_assert!(start <= end, "delete_range with start after end");
        self.bytes += start.len() + end.len();
        self.ops.push(WriteOp::DeleteRange(cf, start, end));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

pub trait Engine: Send + Sync + 'static {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Applies `batch` atomically; with `sync` it is on disk when this
    /// returns.
    fn write(&self, batch: &WriteBatch, sync: bool) -> Result<()>;

    /// Calls `f` with each pair in `[start, end)` in key order until `f`
    /// returns false. An empty `end` means unbounded.
    fn scan(
        &self,
        cf: Cf,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;

    /// Calls `f` with each pair in `[lower, key]` in descending key order
    /// until `f` returns false.
    fn scan_back(
        &self,
        cf: Cf,
        key: &[u8],
        lower: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;

    /// The last pair with `lower <= key' <= key`, if any.
    fn seek_prev(&self, cf: Cf, key: &[u8], lower: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut out = None;
        self.scan_back(cf, key, lower, &mut |k, v| {
            out = Some((k.to_vec(), v.to_vec()));
            false
        })?;
        Ok(out)
    }

    /// Runs `f` over a consistent snapshot of the data column family,
    /// presented as coprocessor [`Storage`]. Scans through it never leave
    /// `bounds` (a region's range).
    fn with_snapshot<R>(
        &self,
        bounds: &quarry_coprocessor::storage::KeyRange,
        f: impl FnOnce(&mut dyn Storage) -> R,
    ) -> R;

    /// Runs `f` with a maker of scans over one consistent snapshot (each
    /// call a new [`Storage`], usable on another thread), for scanning
    /// parts of a region in parallel. Without `fill_cache` the blocks the
    /// scans read do not enter a block cache (a read that passes once).
    fn with_snapshot_source<R>(
        &self,
        bounds: &quarry_coprocessor::storage::KeyRange,
        fill_cache: bool,
        f: impl FnOnce(&quarry_coprocessor::storage::StorageSource<'_>) -> R,
    ) -> R;

    /// Approximate bytes of data in `[start, end)` (for split sizing and
    /// reports); 0 when unknown.
    fn approximate_size(&self, start: &[u8], end: &[u8]) -> u64;

    /// Whether flushes or compactions are running or pending. Engines
    /// without background work say no.
    fn background_work(&self) -> bool {
        false
    }

    /// Adds the pairs of the SST file at `path` (written by
    /// [`rocks::write_sst`]) to `cf` atomically, as newer than everything
    /// written before. The file itself is left in place (`import.rs`
    /// deletes it once the ingest is durable). Engines without SST files
    /// refuse.
    fn ingest(&self, cf: Cf, path: &std::path::Path) -> Result<()> {
        let _ = (cf, path);
        Err(crate::Error::Engine(
            "this storage engine cannot ingest SST files".into(),
        ))
    }

    /// Frees, in the background, the space of `[start, end)` in the data
    /// column family, whose pairs a written range delete removed. RocksDB
    /// keeps a range's files until a compaction passes over them, and
    /// nothing writes again into a dropped table's range: without this its
    /// files (ingested ones above all, which no compaction ever picks)
    /// would stay. Compaction keeps what open snapshots still see.
    fn reclaim_range(&self, start: &[u8], end: &[u8]) {
        let _ = (start, end);
    }

    /// Makes every write so far durable (the write-ahead log synced).
    fn sync_wal(&self) -> Result<()> {
        Ok(())
    }

    /// Background work by kind (RocksDB properties summed over column
    /// families), for the metrics.
    fn background_stats(&self) -> Vec<(&'static str, u64)> {
        vec![]
    }
}

#[cfg(test)]
mod tests;
