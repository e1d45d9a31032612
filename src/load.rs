//! `quarry load tpch`: bulk-load TPC-H lineitem straight into the stores.
//!
//! Like TiDB Lightning's physical mode (and MyTopling's bulk load), the
//! loader encodes rows itself and writes key-value batches to the regions,
//! bypassing compute:
//!
//! 1. Create `lineitem` through the Meta service, pre-split into regions at
//!    evenly spaced handles (handle = orderkey × 8 + linenumber).
//! 2. Worker threads generate parts of the table with the `tpchgen` crate
//!    (dbgen's data, part by part) and buffer them per region: in the
//!    column layout (the default) as packs of 4096 rows built right here,
//!    so the stores never re-encode them; in the row layout as one row-v2
//!    value per row.
//! 3. Full buffers (a few MB) go to the region's leader as one `BatchPut`
//!    (raft replicates it), a bounded number in flight, following leader
//!    changes and retrying through failures.
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
use quarry_coprocessor::codec::key::pack_key;
use quarry_coprocessor::codec::pack::{PackBuilder, PACK_ROWS};
use quarry_proto::kv::KvPair;
use quarry_proto::meta::{CreateTableRequest, Layout};
use tokio::sync::{mpsc, Semaphore};

use crate::tpch;

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub sf: f64,
    /// Regions to pre-split into (0 = one per ~64 MiB, at least two per store).
    pub regions: usize,
    pub threads: usize,
    /// Bytes per BatchPut.
    pub batch_bytes: usize,
    /// Drop an existing lineitem first.
    pub replace: bool,
    pub progress: bool,
    /// Column (packs, the default) or row (one KV per row).
    pub layout: Layout,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            sf: 0.1,
            regions: 0,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            batch_bytes: 4 << 20,
            replace: false,
            progress: true,
            layout: Layout::Column,
        }
    }
}

/// Per-region buffers of KV pairs, sent to the writer when full.
struct Sink {
    buffers: Vec<(Vec<KvPair>, usize)>,
    tx: mpsc::Sender<(usize, Vec<KvPair>)>,
    batch_bytes: usize,
    bytes: Arc<AtomicU64>,
    failed: Option<anyhow::Error>,
}

impl Sink {
    fn push(&mut self, region: usize, key: Vec<u8>, value: Vec<u8>) {
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
}

#[derive(Debug, Clone)]
pub struct LoadReport {
    pub rows: u64,
    pub bytes: u64,
    pub regions: usize,
    pub seconds: f64,
}

/// Bytes a lineitem row takes as a row-layout KV, roughly (for sizing
/// regions).
const ROW_BYTES: u64 = 140;
/// Bytes a lineitem row takes in a pack, roughly.
const PACKED_ROW_BYTES: u64 = 60;
/// Pre-split regions below the split size, so a fresh load does not split.
const REGION_BYTES: u64 = 48 << 20;
/// How long one batch may take to be written, through retries.
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);

fn cluster(stores: &[String]) -> Arc<Cluster> {
    Arc::new(Cluster::new(stores.to_vec(), Duration::from_secs(10)))
}

/// Is lineitem there already? Returns its table id.
pub async fn existing_lineitem(stores: &[String]) -> Result<Option<i64>> {
    Ok(cluster(stores).get_table("lineitem").await?.map(|t| t.id))
}

/// Loads lineitem at `opts.sf` through the cluster's stores (any of them
/// answers; `stores` also sizes the pre-split).
pub async fn load_tpch(stores: &[String], opts: &LoadOptions) -> Result<LoadReport> {
    if opts.sf.is_nan() || opts.sf <= 0.0 {
        bail!("--sf must be positive");
    }
    let started = Instant::now();
    let meta = cluster(stores);
    if meta.get_table("lineitem").await?.is_some() {
        if !opts.replace {
            bail!("table lineitem already exists; load with --replace to drop and reload it");
        }
        meta.drop_table("lineitem", true).await?;
    }
    let Statement::CreateTable(mut ct) = parse(tpch::LINEITEM_DDL)? else {
        bail!("the lineitem DDL is not a CREATE TABLE");
    };
    ct.layout = opts.layout;
    let row_bytes = match opts.layout {
        Layout::Row => ROW_BYTES,
        Layout::Column => PACKED_ROW_BYTES,
    };
    let est = tpch::approx_rows(opts.sf) * row_bytes;
    // At least four regions per store, so every store's read threads
    // have work and leaders spread evenly.
    let regions = if opts.regions > 0 {
        opts.regions
    } else {
        ((est / REGION_BYTES) as usize + 1).max(4 * stores.len().max(1))
    };
    let splits = tpch::split_handles(opts.sf, regions);
    let created = meta
        .create_table(CreateTableRequest {
            table: Some(ct.table_def()),
            split_handles: splits.clone(),
            if_not_exists: false,
        })
        .await?;
    let table = created
        .table
        .ok_or_else(|| anyhow!("meta returned no table"))?;
    let routes = Arc::new(created.regions);
    if routes.len() != splits.len() + 1 {
        bail!(
            "expected {} regions, meta made {}",
            splits.len() + 1,
            routes.len()
        );
    }

    let bar = if opts.progress {
        let b = ProgressBar::new(tpch::approx_rows(opts.sf));
        b.set_style(
            ProgressStyle::with_template(
                "loading lineitem {bar:40} {human_pos}/{human_len} rows {per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };

    // Workers → (region index, pairs) → writer.
    let (tx, mut rx) = mpsc::channel::<(usize, Vec<KvPair>)>(opts.threads * 2 + 2);
    let parts = (opts.threads * 8).max(regions) as i32;
    let next_part = Arc::new(AtomicI32::new(1));
    let rows = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..opts.threads.max(1) {
        let (tx, next_part, rows, bytes, splits, bar) = (
            tx.clone(),
            next_part.clone(),
            rows.clone(),
            bytes.clone(),
            splits.clone(),
            bar.clone(),
        );
        let (sf, table_id, batch_bytes, nregions, layout) = (
            opts.sf,
            table.id,
            opts.batch_bytes,
            routes.len(),
            opts.layout,
        );
        workers.push(tokio::task::spawn_blocking(move || -> Result<()> {
            let mut sink = Sink {
                buffers: vec![(Vec::new(), 0); nregions],
                tx,
                batch_bytes,
                bytes,
                failed: None,
            };
            let mut packs = match layout {
                Layout::Column => (0..nregions)
                    .map(|_| PackBuilder::new(&tpch::lineitem_columns()))
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
                    Layout::Row => tpch::encode_part(sf, part, parts, table_id, |h, k, v| {
                        let r = splits.partition_point(|s| *s <= h);
                        sink.push(r, k.to_vec(), v.to_vec());
                        n += 1;
                    })?,
                    Layout::Column => {
                        tpch::generate_part(sf, part, parts, |h, cols| {
                            let r = splits.partition_point(|s| *s <= h);
                            let b = &mut packs[r];
                            b.push_pairs(h, cols)?;
                            if b.len() >= PACK_ROWS {
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
                rows.fetch_add(n, Ordering::Relaxed);
                bar.inc(n);
                if let Some(e) = sink.failed.take() {
                    return Err(e);
                }
            }
            for (r, (pairs, _)) in sink.buffers.into_iter().enumerate() {
                if !pairs.is_empty() && sink.tx.blocking_send((r, pairs)).is_err() {
                    return Err(anyhow!("the writer stopped"));
                }
            }
            Ok(())
        }));
    }
    drop(tx);

    // The writer: one region batch per call, a few in flight; the writer
    // follows leader changes and retries through failures.
    let writer = Arc::new(KvWriter::new(
        meta.clone(),
        Arc::new(RegionCache::new(meta.clone())),
    ));
    let inflight = Arc::new(Semaphore::new(4));
    let mut puts = tokio::task::JoinSet::new();
    let mut write_error = None;
    while let Some((_region, pairs)) = rx.recv().await {
        let permit = inflight.clone().acquire_owned().await?;
        let writer = writer.clone();
        puts.spawn(async move {
            let _permit = permit;
            writer
                .put(pairs, false, WRITE_TIMEOUT)
                .await
                .map_err(anyhow::Error::from)
        });
        while let Some(done) = puts.try_join_next() {
            if let Err(e) = done? {
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
        if let Err(e) = done? {
            write_error.get_or_insert(e);
        }
    }
    for w in workers {
        if let Err(e) = w.await? {
            write_error.get_or_insert(e);
        }
    }
    bar.finish_and_clear();
    if let Some(e) = write_error {
        return Err(e.context("loading lineitem failed; drop it and load again"));
    }
    meta.alloc_handles(table.id, 0, tpch::handle_end(opts.sf))
        .await?;
    Ok(LoadReport {
        rows: rows.load(Ordering::SeqCst),
        bytes: bytes.load(Ordering::SeqCst),
        regions: routes.len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}
