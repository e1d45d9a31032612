//! `quarry load tpch`: bulk-load the eight TPC-H tables (region, nation,
//! supplier, customer, part, partsupp, orders, lineitem; or a chosen few)
//! straight into the stores.
//!
//! Like TiDB Lightning's physical mode (and MyTopling's bulk load), the
//! loader encodes rows itself and writes key-value batches to the regions,
//! bypassing compute. Tables load one after another, each the same way:
//!
//! 1. Create the table through the Meta service, pre-split into regions at
//!    evenly spaced handles (see [`Table`]: the table's key, or for
//!    lineitem orderkey × 8 + linenumber). Regions are sized by the table's
//!    estimated bytes (one per [`REGION_BYTES`]); lineitem and orders, the
//!    tables most queries scan, get at least four per store.
//! 2. Worker threads generate parts of the table with the `tpchgen` crate
//!    (dbgen's data, part by part) and buffer them per region: in the
//!    column layout (the default) as packs of up to `PACK_ROWS` rows built
//!    right here, so the stores never re-encode them; in the row layout as
//!    one row-v2 value per row.
//! 3. Full buffers go to the region by one of two write paths
//!    ([`WritePath`]): a big table's (16 MB, or a part's share of a region)
//!    are sorted into an SST file that every replica's store receives and
//!    ingests through one raft command (TiDB Lightning's local backend;
//!    `quarry_compute::sst_ingest`); a small table's (4 MB) go to the
//!    region's leader as one `BatchPut` that raft replicates. Either way a
//!    bounded number are in flight, following leader changes and retrying
//!    through failures; an SST ingest that cannot finish (a replica's store
//!    is down) falls back to `BatchPut` for the rest of the load.
//! 4. Finally the implicit-handle allocator is moved past the loaded
//!    handles, so later INSERTs never collide.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use quarry_compute::cluster::Cluster;
use quarry_compute::kv_writer::KvWriter;
use quarry_compute::region_cache::RegionCache;
use quarry_compute::sql::{parse, Statement};
use quarry_compute::sst_ingest::{SstBuilder, SstIngester};
use quarry_coprocessor::codec::key::pack_key;
use quarry_coprocessor::codec::pack::{PackBuilder, PACK_ROWS};
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{CreateTableRequest, Layout};
use tokio::sync::{mpsc, Semaphore};

use crate::tpch::Table;

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub sf: f64,
    /// The tables to load, in this order (default: all eight).
    pub tables: Vec<Table>,
    /// Regions to pre-split lineitem and orders into (0 = one per
    /// [`REGION_BYTES`], at least four per store); the other tables are
    /// always sized by their bytes.
    pub regions: usize,
    pub threads: usize,
    /// Bytes per BatchPut.
    pub batch_bytes: usize,
    /// Drop existing tables first.
    pub replace: bool,
    pub progress: bool,
    /// Column (packs, the default) or row (one KV per row).
    pub layout: Layout,
    /// SST ingest or raft writes.
    pub write_path: WritePath,
}

/// How a loader writes a new table's pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WritePath {
    /// SST ingest for tables of at least [`SST_MIN_BYTES`], raft writes
    /// for smaller ones.
    #[default]
    Auto,
    /// SST files ingested by every replica (TiDB Lightning's local
    /// backend).
    Sst,
    /// `BatchPut`s replicated through the raft log.
    Raft,
}

/// Tables estimated at this size or more load by SST ingest under
/// [`WritePath::Auto`].
pub const SST_MIN_BYTES: u64 = 32 << 20;

/// Bytes per SST file a loader builds (at most).
pub const SST_BATCH_BYTES: usize = 16 << 20;

/// How long an SST ingest may try before the batch is written through raft.
const SST_TIMEOUT: Duration = Duration::from_secs(30);

impl WritePath {
    /// Whether a new table of about `bytes` loads by SST ingest.
    pub fn use_sst(self, bytes: u64) -> bool {
        match self {
            WritePath::Auto => bytes >= SST_MIN_BYTES,
            WritePath::Sst => true,
            WritePath::Raft => false,
        }
    }

    pub fn name(use_sst: bool) -> &'static str {
        if use_sst {
            "SST ingest"
        } else {
            "raft writes"
        }
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            sf: 0.1,
            tables: Table::ALL.to_vec(),
            regions: 0,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            batch_bytes: 4 << 20,
            replace: false,
            progress: true,
            layout: Layout::Column,
            write_path: WritePath::Auto,
        }
    }
}

/// Per-region buffers of KV pairs, sent to the writer when full.
pub(crate) struct Sink {
    buffers: Vec<(Vec<KvPair>, usize)>,
    tx: mpsc::Sender<(usize, Vec<KvPair>)>,
    batch_bytes: usize,
    bytes: Arc<AtomicU64>,
    pub(crate) failed: Option<anyhow::Error>,
}

impl Sink {
    pub(crate) fn new(
        regions: usize,
        tx: mpsc::Sender<(usize, Vec<KvPair>)>,
        batch_bytes: usize,
        bytes: Arc<AtomicU64>,
    ) -> Self {
        Sink {
            buffers: vec![(Vec::new(), 0); regions],
            tx,
            batch_bytes,
            bytes,
            failed: None,
        }
    }

    /// Buffers a pair for region `region` (an index into the table's
    /// regions), sending the region's buffer when it is full. Runs on a
    /// blocking thread.
    pub(crate) fn push(&mut self, region: usize, key: Vec<u8>, value: Vec<u8>) {
        if self.failed.is_some() {
            return;
        }
        let buf = &mut self.buffers[region];
        let n = key.len() + value.len();
        buf.1 += n;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        buf.0.push(KvPair { key, value });
        if buf.1 >= self.batch_bytes {
            let full = std::mem::take(&mut buf.0);
            buf.1 = 0;
            if self.tx.blocking_send((region, full)).is_err() {
                self.failed = Some(anyhow!("the writer stopped"));
            }
        }
    }

    /// Sends every buffer that holds something, and keeps going.
    pub(crate) fn send_all(&mut self) {
        for (r, buf) in self.buffers.iter_mut().enumerate() {
            if self.failed.is_some() || buf.0.is_empty() {
                continue;
            }
            let full = std::mem::take(&mut buf.0);
            buf.1 = 0;
            if self.tx.blocking_send((r, full)).is_err() {
                self.failed = Some(anyhow!("the writer stopped"));
            }
        }
    }

    /// Sends what is left in every buffer.
    pub(crate) fn flush(self) -> Result<()> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        for (r, (pairs, _)) in self.buffers.into_iter().enumerate() {
            if !pairs.is_empty() && self.tx.blocking_send((r, pairs)).is_err() {
                return Err(anyhow!("the writer stopped"));
            }
        }
        Ok(())
    }
}

/// Builds SST files with RocksDB's writer, through a temporary file.
fn sst_builder() -> SstBuilder {
    Arc::new(|pairs: &[KvPair]| {
        let built = tempfile::Builder::new()
            .prefix("quarry-load-")
            .suffix(".sst")
            .tempfile()
            .map_err(|e| e.to_string())
            .and_then(|file| {
                quarry_raftstore::engine::rocks::write_sst(
                    file.path(),
                    pairs.iter().map(|p| (&p.key[..], &p.value[..])),
                )
                .map_err(|e| e.to_string())?;
                std::fs::read(file.path()).map_err(|e| e.to_string())
            });
        built.map_err(|e| quarry_compute::Error::Internal(format!("building an SST: {e}")))
    })
}

/// Writes the region batches that arrive on `rx`, a few at once, by SST
/// ingest (`sst`) or raft writes; the writers follow leader changes and
/// retry through failures. An SST ingest that fails for another reason
/// than bad input is written through raft instead, and so is everything
/// after it. Returns the first error (and stops taking batches, so senders
/// see it), and whether SST ingest wrote every batch.
pub(crate) async fn write_batches(
    meta: &Arc<Cluster>,
    mut rx: mpsc::Receiver<(usize, Vec<KvPair>)>,
    sst: bool,
) -> (Option<anyhow::Error>, bool) {
    let cache = Arc::new(RegionCache::new(meta.clone()));
    let writer = Arc::new(KvWriter::new(meta.clone(), cache.clone()));
    let ingester = sst.then(|| Arc::new(SstIngester::new(meta.clone(), cache, sst_builder())));
    let sst_ok = Arc::new(std::sync::atomic::AtomicBool::new(sst));
    let inflight = Arc::new(Semaphore::new(4));
    let mut puts = tokio::task::JoinSet::new();
    let mut write_error = None;
    while let Some((_region, pairs)) = rx.recv().await {
        let permit = match inflight.clone().acquire_owned().await {
            Ok(p) => p,
            Err(e) => return (Some(e.into()), false),
        };
        let (writer, ingester, sst_ok) = (writer.clone(), ingester.clone(), sst_ok.clone());
        puts.spawn(async move {
            let _permit = permit;
            if let Some(ingester) = ingester.filter(|_| sst_ok.load(Ordering::Relaxed)) {
                match ingester.ingest(pairs.clone(), SST_TIMEOUT).await {
                    Ok(()) => return Ok(()),
                    Err(e @ quarry_compute::Error::InvalidInput(_)) => return Err(e.into()),
                    Err(e) => {
                        if sst_ok.swap(false, Ordering::Relaxed) {
                            tracing::warn!(
                                "SST ingest failed ({e}); writing through raft from now on"
                            );
                        }
                    }
                }
            }
            writer
                .put(pairs, false, WRITE_TIMEOUT)
                .await
                .map_err(anyhow::Error::from)
        });
        while let Some(done) = puts.try_join_next() {
            if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
                write_error = Some(e);
                break;
            }
        }
        if write_error.is_some() {
            break;
        }
    }
    drop(rx);
    while let Some(done) = puts.join_next().await {
        if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
            write_error.get_or_insert(e);
        }
    }
    (write_error, sst_ok.load(Ordering::Relaxed))
}

/// What one table's load did.
#[derive(Debug, Clone)]
pub struct TableReport {
    pub table: Table,
    pub rows: u64,
    pub bytes: u64,
    pub regions: usize,
    pub seconds: f64,
    /// Loaded by SST ingest (else by raft writes).
    pub sst: bool,
}

/// What a load did: totals over its tables, and each table.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub rows: u64,
    pub bytes: u64,
    pub regions: usize,
    pub seconds: f64,
    pub tables: Vec<TableReport>,
}

/// Pre-split regions below the split size, so a fresh load does not split.
pub const REGION_BYTES: u64 = 48 << 20;
/// How long one batch may take to be written, through retries.
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) fn cluster(stores: &[String]) -> Arc<Cluster> {
    Arc::new(Cluster::new(stores.to_vec(), Duration::from_secs(10)))
}

/// Creates `table` split at `splits` (handles); returns it as meta made
/// it (with its id) and its regions.
pub(crate) async fn create_presplit(
    meta: &Cluster,
    table: quarry_proto::meta::TableDef,
    splits: &[i64],
    request_id: Vec<u8>,
) -> Result<(
    quarry_proto::meta::TableDef,
    Vec<quarry_proto::meta::RegionRoute>,
)> {
    let created = meta
        .create_table(CreateTableRequest {
            table: Some(table),
            split_handles: splits.to_vec(),
            if_not_exists: false,
            request_id,
        })
        .await?;
    let table = created
        .table
        .ok_or_else(|| anyhow!("meta returned no table"))?;
    Ok((table, created.regions))
}

/// Which of `tables` are there already.
pub async fn existing_tables(stores: &[String], tables: &[Table]) -> Result<Vec<Table>> {
    present(&cluster(stores), tables).await
}

async fn present(meta: &Cluster, tables: &[Table]) -> Result<Vec<Table>> {
    let mut out = Vec::new();
    for &t in tables {
        if meta.get_table(t.name()).await?.is_some() {
            out.push(t);
        }
    }
    Ok(out)
}

/// "a, b and c".
fn names(tables: &[Table]) -> String {
    let n: Vec<&str> = tables.iter().map(|t| t.name()).collect();
    match n.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => n.join(""),
    }
}

/// About how many bytes of pairs `t` loads into.
fn approx_bytes(t: Table, opts: &LoadOptions) -> u64 {
    t.approx_rows(opts.sf)
        * match opts.layout {
            Layout::Row => t.row_bytes(),
            Layout::Column => t.packed_row_bytes(),
        }
}

/// Regions to pre-split `t` into: one per [`REGION_BYTES`] of its
/// estimated size; lineitem and orders at least four per store (or
/// `opts.regions` when given), so every store's read threads have work and
/// leaders spread evenly.
fn regions_for(t: Table, opts: &LoadOptions, stores: usize) -> usize {
    let bytes = approx_bytes(t, opts);
    let by_size = (bytes / REGION_BYTES) as usize + 1;
    match (t.spread(), opts.regions) {
        (false, _) => by_size,
        (true, 0) => by_size.max(4 * stores.max(1)),
        (true, n) => n,
    }
}

/// Loads `opts.tables` at `opts.sf` through the cluster's stores (any of
/// them answers; `stores` also sizes the pre-split), one table after
/// another.
pub async fn load_tpch(stores: &[String], opts: &LoadOptions) -> Result<LoadReport> {
    if opts.sf.is_nan() || opts.sf <= 0.0 {
        bail!("--sf must be positive");
    }
    let mut tables = opts.tables.clone();
    if tables.is_empty() {
        bail!("no tables to load");
    }
    // Once each, in the order given.
    let mut seen = std::collections::HashSet::new();
    tables.retain(|t| seen.insert(*t));
    let started = Instant::now();
    let meta = cluster(stores);
    let existing = present(&meta, &tables).await?;
    if !existing.is_empty() && !opts.replace {
        let (verb, them) = if existing.len() == 1 {
            ("exists", "it")
        } else {
            ("exist", "them")
        };
        bail!(
            "{} {} already {verb}; load with --replace to drop and reload {them}",
            if existing.len() == 1 {
                "table"
            } else {
                "tables"
            },
            names(&existing)
        );
    }
    // tpchgen builds its 300 MB text pool on first use, on one thread:
    // start it now, beside the table's creation.
    drop(tokio::task::spawn_blocking(|| {
        tpchgen::text::TextPool::get_or_init_default();
    }));
    let mut done = Vec::new();
    for t in tables {
        if existing.contains(&t) {
            meta.drop_table(t.name(), true).await?;
        }
        done.push(load_table(&meta, stores, t, opts).await?);
    }
    Ok(LoadReport {
        rows: done.iter().map(|r| r.rows).sum(),
        bytes: done.iter().map(|r| r.bytes).sum(),
        regions: done.iter().map(|r| r.regions).sum(),
        seconds: started.elapsed().as_secs_f64(),
        tables: done,
    })
}

/// Creates `t` (it does not exist) and loads it.
async fn load_table(
    meta: &Arc<Cluster>,
    stores: &[String],
    t: Table,
    opts: &LoadOptions,
) -> Result<TableReport> {
    let started = Instant::now();
    let Statement::CreateTable(mut ct) = parse(t.ddl())? else {
        bail!("the {t} DDL is not a CREATE TABLE");
    };
    ct.layout = opts.layout;
    let regions = regions_for(t, opts, stores.len());
    let sst = opts.write_path.use_sst(approx_bytes(t, opts));
    let batch_bytes = if sst {
        SST_BATCH_BYTES.max(opts.batch_bytes)
    } else {
        opts.batch_bytes
    };
    let splits = t.split_handles(opts.sf, regions);
    let (table, routes) = create_presplit(meta, ct.table_def(), &splits, vec![]).await?;
    let routes = Arc::new(routes);
    if routes.len() != splits.len() + 1 {
        bail!(
            "expected {} regions for {t}, meta made {}",
            splits.len() + 1,
            routes.len()
        );
    }

    let approx_rows = t.approx_rows(opts.sf);
    let bar = if opts.progress {
        let b = ProgressBar::new(approx_rows);
        b.set_style(
            ProgressStyle::with_template(
                "loading {prefix:8} {bar:40} {human_pos}/{human_len} rows {per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        b.set_prefix(t.name());
        b
    } else {
        ProgressBar::hidden()
    };

    // Workers → (region index, pairs) → writer. Parts of at least a pack's
    // rows, so small tables are not cut into tiny packs.
    let (tx, rx) = mpsc::channel::<(usize, Vec<KvPair>)>(opts.threads * 2 + 2);
    let parts = (opts.threads * 8)
        .max(regions)
        .min(approx_rows.div_ceil(PACK_ROWS as u64) as usize)
        .max(1) as i32;
    let next_part = Arc::new(AtomicI32::new(1));
    let rows = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..opts.threads.clamp(1, parts as usize) {
        let (tx, next_part, rows, bytes, splits, bar) = (
            tx.clone(),
            next_part.clone(),
            rows.clone(),
            bytes.clone(),
            splits.clone(),
            bar.clone(),
        );
        let (sf, table_id, nregions, layout) = (opts.sf, table.id, routes.len(), opts.layout);
        workers.push(tokio::task::spawn_blocking(move || -> Result<()> {
            let mut sink = Sink::new(nregions, tx, batch_bytes, bytes);
            let mut packs = match layout {
                Layout::Column => (0..nregions)
                    .map(|_| PackBuilder::new(&t.columns()))
                    .collect::<quarry_coprocessor::Result<Vec<_>>>()?,
                Layout::Row => vec![],
            };
            loop {
                let part = next_part.fetch_add(1, Ordering::SeqCst);
                if part > parts {
                    break;
                }
                let mut n = 0u64;
                match layout {
                    Layout::Row => t.encode_part(sf, part, parts, table_id, |h, k, v| {
                        let r = splits.partition_point(|s| *s <= h);
                        sink.push(r, k.to_vec(), v.to_vec());
                        n += 1;
                    })?,
                    Layout::Column => {
                        t.generate_part(sf, part, parts, |h, cols| {
                            let r = splits.partition_point(|s| *s <= h);
                            let b = &mut packs[r];
                            b.push_pairs(h, cols)?;
                            if b.is_full() {
                                let (first, v) = b.finish()?;
                                sink.push(r, pack_key(table_id, first), v);
                            }
                            n += 1;
                            Ok(())
                        })?;
                        // Packs end with their part: parts go to different
                        // workers, and packs must not overlap.
                        for (r, b) in packs.iter_mut().enumerate() {
                            if !b.is_empty() {
                                let (first, v) = b.finish()?;
                                sink.push(r, pack_key(table_id, first), v);
                            }
                        }
                    }
                }
                if sst {
                    // A file per part and region: files of different
                    // parts never overlap, so each lands in the bottom
                    // level.
                    sink.send_all();
                }
                rows.fetch_add(n, Ordering::Relaxed);
                bar.inc(n);
                if let Some(e) = sink.failed.take() {
                    return Err(e);
                }
            }
            sink.flush()
        }));
    }
    drop(tx);

    let (mut write_error, sst) = write_batches(meta, rx, sst).await;
    for w in workers {
        if let Err(e) = w.await? {
            write_error.get_or_insert(e);
        }
    }
    bar.finish_and_clear();
    if let Some(e) = write_error {
        return Err(e.context(format!("loading {t} failed; drop it and load again")));
    }
    meta.alloc_handles(table.id, 0, t.handle_end(opts.sf))
        .await?;
    Ok(TableReport {
        table: t,
        rows: rows.load(Ordering::SeqCst),
        bytes: bytes.load(Ordering::SeqCst),
        regions: routes.len(),
        seconds: started.elapsed().as_secs_f64(),
        sst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_follow_the_size_and_spread_the_big_tables() {
        let opts = |sf, layout, regions| LoadOptions {
            sf,
            layout,
            regions,
            ..Default::default()
        };
        let small = opts(0.01, Layout::Column, 0);
        // Small tables: one region; lineitem and orders: four per store.
        for t in Table::ALL {
            let want = if t.spread() { 12 } else { 1 };
            assert_eq!(regions_for(t, &small, 3), want, "{t}");
        }
        // Big ones by size: SF 100 lineitem packs ~36 GB, row-layout KVs
        // ~84 GB.
        let sf100 = opts(100.0, Layout::Column, 0);
        assert_eq!(regions_for(Table::Lineitem, &sf100, 3), 716);
        assert_eq!(regions_for(Table::Nation, &sf100, 3), 1);
        assert!(regions_for(Table::PartSupp, &sf100, 3) > 100);
        let rows = opts(100.0, Layout::Row, 0);
        assert_eq!(regions_for(Table::Lineitem, &rows, 3), 1670);
        // --regions sets the spread tables only.
        let given = opts(0.01, Layout::Column, 5);
        assert_eq!(regions_for(Table::Orders, &given, 3), 5);
        assert_eq!(regions_for(Table::Part, &given, 3), 1);
    }

    #[test]
    fn names_read_as_a_list() {
        assert_eq!(names(&[Table::Orders]), "orders");
        assert_eq!(
            names(&[Table::Orders, Table::Lineitem]),
            "orders and lineitem"
        );
        assert_eq!(
            names(&[Table::Region, Table::Orders, Table::Lineitem]),
            "region, orders and lineitem"
        );
    }
}
