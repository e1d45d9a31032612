//! The RocksDB engine.
//!
//! One DB per store with the column families of [`Cf`]. Data uses LZ4 and
//! a shared LRU block cache; writes go through the WAL and are fsynced when
//! asked. Coprocessor scans run over a snapshot with the iterate-upper-bound
//! set to the range's end, so RocksDB stops at the region's edge instead of
//! reading the next region's blocks.

use std::cell::RefCell;
use std::path::Path;
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use quarry_coprocessor::storage::{KeyRange, Storage};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, DBRawIterator,
    IngestExternalFileOptions, Options, ReadOptions, SstFileWriter, WriteOptions, DB,
};

use super::{Cf, Engine, WriteBatch, WriteOp};
use crate::{Error, Result};

/// RocksDB settings a store may tune.
#[derive(Debug, Clone)]
pub struct RocksConfig {
    pub block_cache_bytes: usize,
    pub write_buffer_bytes: usize,
    pub background_jobs: i32,
}

impl Default for RocksConfig {
    fn default() -> Self {
        RocksConfig {
            block_cache_bytes: 512 << 20,
            write_buffer_bytes: 64 << 20,
            background_jobs: 2,
        }
    }
}

pub struct RocksEngine {
    db: Arc<DB>,
    /// Ranges to compact away after a range delete, one at a time on a
    /// thread of their own ([`Engine::reclaim_range`]).
    reclaim: Mutex<Option<mpsc::Sender<KeySpan>>>,
    reclaimer: Mutex<Option<std::thread::JoinHandle<()>>>,
    block_cache: Cache,
}

impl Drop for RocksEngine {
    /// Stops the reclaim thread and waits for it, so the DB is closed
    /// (and its lock released) when the engine is gone.
    fn drop(&mut self) {
        self.reclaim.lock().take();
        if let Some(t) = self.reclaimer.lock().take() {
            let _ = t.join();
        }
    }
}

/// A key range as its start and end.
type KeySpan = (Vec<u8>, Vec<u8>);

/// Compacts the ranges that arrive, until the engine is dropped. Ranges
/// queued together are merged where they touch first: a dropped table's
/// thousands of regions are one span, compacted (and its memtable
/// flushed) once rather than once per region.
fn reclaim_ranges(db: Arc<DB>, ranges: mpsc::Receiver<KeySpan>) {
    while let Ok(first) = ranges.recv() {
        // A moment for the rest of a burst to arrive.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut batch = vec![first];
        batch.extend(ranges.try_iter());
        for (start, end) in merge_touching(batch) {
            if let Some(cf) = db.cf_handle(Cf::Default.name()) {
                db.compact_range_cf(cf, Some(&start), Some(&end));
            }
        }
    }
}

/// `spans` sorted, with spans that overlap or touch merged into one.
fn merge_touching(mut spans: Vec<KeySpan>) -> Vec<KeySpan> {
    spans.sort();
    let mut out: Vec<KeySpan> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match out.last_mut() {
            Some(last) if start <= last.1 => {
                if end > last.1 {
                    last.1 = end;
                }
            }
            _ => out.push((start, end)),
        }
    }
    out
}

/// The column families' table format (block size, compression), shared by
/// the SST files a bulk loader writes ([`write_sst`]).
fn table_options(cache: Option<&Cache>) -> Options {
    let mut table = BlockBasedOptions::default();
    if let Some(cache) = cache {
        table.set_block_cache(cache);
    }
    table.set_block_size(32 << 10);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts
}

/// Writes `pairs` (keys strictly increasing) as an SST file at `path` in
/// the data column family's format, for [`Engine::ingest`] on a store.
/// Returns the file's length.
pub fn write_sst<'a>(
    path: &Path,
    pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<u64> {
    let opts = table_options(None);
    let mut w = SstFileWriter::create(&opts);
    w.open(path)?;
    for (k, v) in pairs {
        w.put(k, v)?;
    }
    w.finish()?;
    let len = std::fs::metadata(path)
        .map_err(|e| Error::Engine(format!("cannot stat {}: {e}", path.display())))?
        .len();
    Ok(len)
}

impl RocksEngine {
    pub fn open(path: &Path, cfg: &RocksConfig) -> Result<Self> {
        let cache = Cache::new_lru_cache(cfg.block_cache_bytes);
        let mut cf_opts = table_options(Some(&cache));
        cf_opts.set_write_buffer_size(cfg.write_buffer_bytes);
        // No implicit readahead on iterators. RocksDB calls readahead(2)
        // before it looks a block up in the cache, so a scan whose blocks
        // are all cached still walks the page cache for every block: a
        // column pack is one block of a megabyte or two, and those walks
        // were about 6% of a store's CPU in TPC-H Q6 at SF 1. A cold scan
        // keeps the kernel's own readahead for its sequential reads.
        let cf_opts = cf_opts
            .get_options_from_string("block_based_table_factory={max_auto_readahead_size=0}")
            .map_err(|e| Error::Engine(format!("RocksDB table options: {e}")))?;
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(cfg.background_jobs);
        let cfs = Cf::ALL
            .iter()
            .map(|cf| ColumnFamilyDescriptor::new(cf.name(), cf_opts.clone()));
        let db = Arc::new(DB::open_cf_descriptors(&db_opts, path, cfs).map_err(|e| {
            Error::Engine(format!("cannot open RocksDB at {}: {e}", path.display()))
        })?);
        let (tx, rx) = mpsc::channel();
        let for_thread = db.clone();
        let reclaimer = std::thread::Builder::new()
            .name("rocksdb-reclaim".into())
            .spawn(move || reclaim_ranges(for_thread, rx))
            .map_err(|e| Error::Internal(format!("starting the reclaim thread: {e}")))?;
        Ok(RocksEngine {
            db,
            reclaim: Mutex::new(Some(tx)),
            reclaimer: Mutex::new(Some(reclaimer)),
            block_cache: cache,
        })
    }

    /// Bytes the block cache holds now.
    pub fn block_cache_usage(&self) -> usize {
        self.block_cache.get_usage()
    }

    fn cf(&self, cf: Cf) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(cf.name())
            .expect("column families are created at open")
    }
}

impl Engine for RocksEngine {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(cf), key)?)
    }

    fn write(&self, batch: &WriteBatch, sync: bool) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        for op in &batch.ops {
            match op {
                WriteOp::Put(cf, k, v) => wb.put_cf(self.cf(*cf), k, v),
                WriteOp::Delete(cf, k) => wb.delete_cf(self.cf(*cf), k),
                WriteOp::DeleteRange(cf, s, e) => wb.delete_range_cf(self.cf(*cf), s, e),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        Ok(self.db.write_opt(wb, &opts)?)
    }

    fn scan(
        &self,
        cf: Cf,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut opts = ReadOptions::default();
        if !end.is_empty() {
            opts.set_iterate_upper_bound(end.to_vec());
        }
        let mut it = self.db.raw_iterator_cf_opt(self.cf(cf), opts);
        it.seek(start);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !f(k, v) {
                return Ok(());
            }
            it.next();
        }
        Ok(it.status()?)
    }

    fn scan_back(
        &self,
        cf: Cf,
        key: &[u8],
        lower: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_lower_bound(lower.to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(cf), opts);
        it.seek_for_prev(key);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !f(k, v) {
                return Ok(());
            }
            it.prev();
        }
        Ok(it.status()?)
    }

    fn ingest(&self, cf: Cf, path: &Path) -> Result<()> {
        // RocksDB moves (consumes) the file it ingests: give it a link of
        // its own and keep ours until the ingest is durable.
        let link = path.with_extension("ingesting");
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(path, &link).map_err(|e| {
            Error::Engine(format!("cannot link {} for ingest: {e}", path.display()))
        })?;
        let mut opts = IngestExternalFileOptions::default();
        opts.set_move_files(true);
        let r = self
            .db
            .ingest_external_file_cf_opts(self.cf(cf), &opts, vec![&link]);
        let _ = std::fs::remove_file(&link);
        Ok(r?)
    }

    fn sync_wal(&self) -> Result<()> {
        Ok(self.db.flush_wal(true)?)
    }

    fn reclaim_range(&self, start: &[u8], end: &[u8]) {
        if let Some(tx) = &*self.reclaim.lock() {
            let _ = tx.send((start.to_vec(), end.to_vec()));
        }
    }

    fn background_work(&self) -> bool {
        const BUSY: [&str; 4] = [
            "rocksdb.compaction-pending",
            "rocksdb.num-running-compactions",
            "rocksdb.num-running-flushes",
            "rocksdb.mem-table-flush-pending",
        ];
        Cf::ALL.iter().any(|&cf| {
            BUSY.iter().any(|p| {
                self.db
                    .property_int_value_cf(self.cf(cf), *p)
                    .ok()
                    .flatten()
                    .is_some_and(|v| v > 0)
            })
        })
    }

    fn background_stats(&self) -> Vec<(&'static str, u64)> {
        const STATS: [&str; 5] = [
            "rocksdb.num-running-compactions",
            "rocksdb.num-running-flushes",
            "rocksdb.compaction-pending",
            "rocksdb.mem-table-flush-pending",
            "rocksdb.estimate-pending-compaction-bytes",
        ];
        STATS
            .iter()
            .map(|&p| {
                let sum = Cf::ALL
                    .iter()
                    .filter_map(|&cf| self.db.property_int_value_cf(self.cf(cf), p).ok().flatten())
                    .sum();
                (p.trim_start_matches("rocksdb."), sum)
            })
            .collect()
    }

    fn with_snapshot<R>(&self, bounds: &KeyRange, f: impl FnOnce(&mut dyn Storage) -> R) -> R {
        let snapshot = self.db.snapshot();
        let mut storage = RocksStorage {
            snapshot: &snapshot,
            cf: self.cf(Cf::Default),
            bounds: bounds.clone(),
            fill_cache: true,
            iter: None,
            first: false,
            key_only: false,
            peek: RefCell::new(None),
        };
        f(&mut storage)
    }

    fn with_snapshot_source<R>(
        &self,
        bounds: &KeyRange,
        fill_cache: bool,
        f: impl FnOnce(&quarry_coprocessor::storage::StorageSource<'_>) -> R,
    ) -> R {
        let snapshot = self.db.snapshot();
        let cf = self.cf(Cf::Default);
        let make = || -> Box<dyn Storage + Send + '_> {
            Box::new(RocksStorage {
                snapshot: &snapshot,
                cf,
                bounds: bounds.clone(),
                fill_cache,
                iter: None,
                first: false,
                key_only: false,
                peek: RefCell::new(None),
            })
        };
        f(&make)
    }

    fn approximate_size(&self, start: &[u8], end: &[u8]) -> u64 {
        // An empty end is the end of the key space (the last region's), as
        // everywhere else; RocksDB would read it as the smallest key and
        // answer 0, so the last region never split by size.
        const PAST_EVERY_KEY: [u8; 16] = [0xff; 16];
        let end = match end.is_empty() {
            true => &PAST_EVERY_KEY[..],
            false => end,
        };
        let range = rocksdb::Range::new(start, end);
        self.db
            .get_approximate_sizes_cf(self.cf(Cf::Default), &[range])
            .first()
            .copied()
            .unwrap_or(0)
    }
}

/// Coprocessor storage over a RocksDB snapshot.
struct RocksStorage<'a> {
    snapshot: &'a rocksdb::Snapshot<'a>,
    cf: &'a rocksdb::ColumnFamily,
    bounds: KeyRange,
    /// Whether the blocks read enter the block cache.
    fill_cache: bool,
    iter: Option<DBRawIterator<'a>>,
    /// The iterator sits on a pair `scan_next` has not returned yet.
    first: bool,
    key_only: bool,
    /// The second cursor of `peek_keys`, made once per scan and re-seeked
    /// (a column scan peeks once per pack: making an iterator each time
    /// costs more than the seek).
    peek: RefCell<Option<DBRawIterator<'a>>>,
}

impl Storage for RocksStorage<'_> {
    fn begin_scan(&mut self, range: &KeyRange, key_only: bool) -> quarry_coprocessor::Result<()> {
        self.first = true;
        self.key_only = key_only;
        let Some(KeyRange { start, end }) = range.intersect(&self.bounds) else {
            // Nothing of the range is in bounds: an empty scan.
            self.iter = None;
            return Ok(());
        };
        let mut opts = ReadOptions::default();
        opts.fill_cache(self.fill_cache);
        if !end.is_empty() {
            opts.set_iterate_upper_bound(end);
        }
        if quarry_proto::failpoint::fires("region_seek_error") {
            return Err(quarry_coprocessor::Error::Internal(format!(
                "RocksDB seek: {}",
                quarry_proto::failpoint::injected("region_seek_error")
            )));
        }
        let mut it = self.snapshot.raw_iterator_cf_opt(self.cf, opts);
        it.seek(&start);
        self.iter = Some(it);
        Ok(())
    }

    fn scan_next(&mut self) -> quarry_coprocessor::Result<Option<(&[u8], &[u8])>> {
        let Some(it) = self.iter.as_mut() else {
            return Ok(None);
        };
        if self.first {
            self.first = false;
        } else {
            it.next();
        }
        if !it.valid() {
            it.status()
                .map_err(|e| quarry_coprocessor::Error::Internal(format!("RocksDB scan: {e}")))?;
            return Ok(None);
        }
        Ok(Storage::current(&*self))
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        let it = self.iter.as_ref()?;
        if self.first {
            return None;
        }
        // One validity check for both slices (`key()` and `value()` check
        // it again each, through the C API): this runs for every pair of a
        // scan, several times.
        let (key, value) = it.item()?;
        if self.key_only && !quarry_coprocessor::storage::is_lock_key(key) {
            return Some((key, &[][..]));
        }
        Some((key, value))
    }

    fn peek(
        &self,
        range: &KeyRange,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> quarry_coprocessor::Result<()> {
        let Some(KeyRange { start, end }) = range.intersect(&self.bounds) else {
            return Ok(());
        };
        let mut peek = self.peek.borrow_mut();
        let it = peek.get_or_insert_with(|| {
            let mut opts = ReadOptions::default();
            opts.fill_cache(self.fill_cache);
            if !self.bounds.end.is_empty() {
                opts.set_iterate_upper_bound(self.bounds.end.clone());
            }
            self.snapshot.raw_iterator_cf_opt(self.cf, opts)
        });
        it.seek(&start);
        while it.valid() {
            match (it.key(), it.value()) {
                (Some(k), Some(v)) if (end.is_empty() || k < end.as_slice()) && f(k, v) => {
                    it.next()
                }
                _ => return Ok(()),
            }
        }
        it.status()
            .map_err(|e| quarry_coprocessor::Error::Internal(format!("RocksDB scan: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::{merge_touching, write_sst, RocksConfig, RocksEngine};
    use crate::engine::{Cf, Engine};

    #[test]
    fn iterators_do_no_implicit_readahead_and_keep_the_block_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = RocksConfig {
            block_cache_bytes: 8 << 20,
            ..RocksConfig::default()
        };
        let engine = RocksEngine::open(dir.path(), &cfg).unwrap();
        let options = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("OPTIONS-")
            })
            .expect("RocksDB writes its options at open");
        let text = std::fs::read_to_string(options).unwrap();
        let tables: Vec<&str> = text
            .split("[TableOptions/BlockBasedTable")
            .skip(1)
            .collect();
        assert!(!tables.is_empty(), "{text}");
        for t in tables {
            assert!(t.contains("max_auto_readahead_size=0"), "{t}");
            assert!(t.contains("block_size=32768"), "{t}");
        }
        // And the cache the store sized still serves its reads.
        let sst = dir.path().join("rows.sst");
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0u32..2000)
            .map(|i| (i.to_be_bytes().to_vec(), vec![7u8; 100]))
            .collect();
        write_sst(&sst, rows.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
        engine.ingest(Cf::Default, &sst).unwrap();
        let before = engine.block_cache_usage();
        let mut seen = 0;
        engine
            .scan(Cf::Default, b"", b"", &mut |_, _| {
                seen += 1;
                true
            })
            .unwrap();
        assert_eq!(seen, 2000);
        assert!(engine.block_cache_usage() > before + 100 * 1000);
    }

    #[test]
    fn touching_and_overlapping_spans_merge_and_gaps_stay() {
        let s = |a: &[u8], b: &[u8]| (a.to_vec(), b.to_vec());
        let merged = merge_touching(vec![
            s(b"c", b"d"),
            s(b"a", b"b"),
            s(b"b", b"c"),
            s(b"x", b"z"),
            s(b"y", b"yy"),
        ]);
        assert_eq!(merged, vec![s(b"a", b"d"), s(b"x", b"z")]);
    }
}
