//! `quarry load parquet|csv`: a user's own files into a table.
//!
//! The files are read with the Arrow readers (`parquet`'s
//! `ParquetRecordBatchReader`, `arrow-csv`'s `Reader`) one batch of
//! [`LoadFileOptions::batch_rows`] rows at a time, so memory stays bounded
//! by a few batches and the writer's buffers, whatever the file's size.
//! Each batch is *conformed* to the table: columns matched by name (exact,
//! then ignoring case), converted to the column's type with Arrow's cast
//! kernel where that loses nothing ([`convertible`]), checked against NOT
//! NULL and VARCHAR(n). Then one of two writers takes it:
//!
//! * **A new table** (the name does not exist): created from the first
//!   file's schema ([`sql_type`]: integers → BIGINT, floats → DOUBLE,
//!   decimals → DECIMAL(p,s), dates → DATE, strings → VARCHAR, booleans →
//!   BIGINT 0 or 1, as tables have no BOOLEAN columns; no primary key),
//!   pre-split by the files' estimated size, and
//!   written like `quarry load tpch`: packs (or row values) built here and
//!   sent straight to the regions, as SST files every replica ingests
//!   when the files hold 32 MB or more, else as `BatchPut`s to the
//!   regions' leaders (`load.rs`'s `write_batches` and [`WritePath`]). Rows get implicit handles reserved
//!   from the meta region, so INSERTs during the load cannot collide.
//! * **An existing table**: every batch is one transaction of `Insert`
//!   mutations (`quarry_compute::txn::Txns::write_checked`), as an INSERT
//!   would be: with its rows' index entries (`quarry_compute::index::Maintainer`,
//!   a UNIQUE index's duplicate fails it by the index's name), checked at
//!   commit against the table's indexes as the load found them (an index
//!   built or dropped meanwhile fails the batch: load the rest again); a
//!   duplicate primary key fails it by name, concurrent readers see whole
//!   batches or nothing, and the rows committed before a failure are
//!   reported.
//!
//! At the end a checksum ([`Checksum`]: the row count and, per column, the
//! count of non-NULL values and an exact sum — of the integers, the
//! decimals' unscaled values, the dates' day numbers, the strings' byte
//! lengths, the booleans' trues; DOUBLE sums compare within 1e-9 relative) of what
//! was read from the files is compared with the same sums computed by the
//! cluster over the table (pushed down like any aggregate): for an existing
//! table, the difference between the sums after and before the load. A
//! mismatch is an error naming the column. The checksum finds lost,
//! duplicated and altered values; it is not a hash, so two values swapped
//! between rows would pass (TiDB Lightning's `ADMIN CHECKSUM` uses
//! crc64-xor of the key-value pairs, which would catch that but checks the
//! encoding, not the source).

use std::fs::File;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type, Schema, SchemaRef};
use indicatif::{ProgressBar, ProgressStyle};
use quarry_compute::cluster::Cluster;
use quarry_compute::config::ComputeConfig;
use quarry_compute::engine::QueryEngine;
use quarry_compute::region_cache::RegionCache;
use quarry_compute::sql::{parse, Statement};
use quarry_compute::txn::Txns;
use quarry_coprocessor::codec::key::{pack_key, record_key};
use quarry_coprocessor::codec::pack::PackBuilder;
use quarry_coprocessor::codec::row::{array_datum, Datum, RowEncoder};
use quarry_coprocessor::types::arrow_type;
use quarry_proto::kv::{Mutation, Op};
use quarry_proto::meta::{Layout, TableDef};
use tokio::sync::mpsc;

use crate::load::{
    cluster, create_presplit, write_batches, Sink, WritePath, REGION_BYTES, SST_BATCH_BYTES,
};

mod checksum;
mod conform;

pub(crate) use checksum::table_checksum;
pub use checksum::{Checksum, ColumnSum};
use conform::Conform;
pub use conform::{convertible, sql_type};

/// Quotes an identifier for SQL (names from files keep their case).
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The file formats `quarry load` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    Csv,
}

#[derive(Debug, Clone)]
pub struct LoadFileOptions {
    pub format: FileFormat,
    pub table: String,
    pub files: Vec<PathBuf>,
    /// The layout of a table this load creates.
    pub layout: Layout,
    /// Rows per read batch (and per transaction into an existing table).
    pub batch_rows: usize,
    /// CSV: the field delimiter, and whether the first line names the
    /// columns (without it, columns are `column_1` … and must match the
    /// table's order).
    pub delimiter: u8,
    pub header: bool,
    /// Show a progress bar on a terminal, progress lines otherwise.
    pub progress: bool,
    /// How a table this load creates is written.
    pub write_path: WritePath,
}

impl Default for LoadFileOptions {
    fn default() -> Self {
        LoadFileOptions {
            format: FileFormat::Parquet,
            table: String::new(),
            files: vec![],
            layout: Layout::Column,
            batch_rows: 8192,
            delimiter: b',',
            header: true,
            progress: true,
            write_path: WritePath::Auto,
        }
    }
}

/// What a file load did.
#[derive(Debug, Clone)]
pub struct LoadFileReport {
    pub table: String,
    pub created: bool,
    pub rows: u64,
    /// Bytes of the files read.
    pub file_bytes: u64,
    pub seconds: f64,
    /// Written by SST ingest (a new table of 32 MB or more, or asked for).
    pub sst: bool,
    /// The source's checksum, equal to the table's (else the load fails).
    pub checksum: Checksum,
}

impl LoadFileReport {
    pub fn summary(&self) -> String {
        format!(
            "loaded {} rows ({:.0} MB of files) into {} table {} in {:.1} s by {}: {:.0} rows/s\nchecksum {} ({} rows) matches the source\n",
            self.rows,
            self.file_bytes as f64 / 1e6,
            if self.created { "new" } else { "existing" },
            self.table,
            self.seconds,
            if self.sst { "SST ingest" } else if self.created { "raft writes" } else { "transactions" },
            self.rows as f64 / self.seconds.max(1e-9),
            self.checksum.digest(),
            self.checksum.rows,
        )
    }
}

// ---------------------------------------------------------------- reading

/// Counts the bytes a reader hands out (CSV progress and size estimates).
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, arrow::error::ArrowError>>>;

/// A file's schema and, for Parquet, its row count.
fn file_schema(path: &Path, opts: &LoadFileOptions) -> Result<(SchemaRef, Option<u64>)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    match opts.format {
        FileFormat::Parquet => {
            let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .with_context(|| format!("{} is not a readable Parquet file", path.display()))?;
            let rows = b.metadata().file_metadata().num_rows().max(0) as u64;
            Ok((b.schema().clone(), Some(rows)))
        }
        FileFormat::Csv => {
            let (schema, _) = csv_format(opts)
                .infer_schema(file, Some(1000))
                .with_context(|| format!("reading the CSV header of {}", path.display()))?;
            Ok((Arc::new(schema), None))
        }
    }
}

fn csv_format(opts: &LoadFileOptions) -> arrow::csv::reader::Format {
    arrow::csv::reader::Format::default()
        .with_header(opts.header)
        .with_delimiter(opts.delimiter)
}

/// Opens `path` for reading batches of `schema` (CSV: parsed as these
/// types, so decimals are exact).
fn open_batches(
    path: &Path,
    schema: &SchemaRef,
    opts: &LoadFileOptions,
    read: Arc<AtomicU64>,
) -> Result<Batches> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(match opts.format {
        FileFormat::Parquet => {
            // Progress by bytes is the file's size once opened; rows count
            // the rest.
            read.fetch_add(len, Ordering::Relaxed);
            Box::new(
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?
                    .with_batch_size(opts.batch_rows)
                    .build()?,
            )
        }
        FileFormat::Csv => Box::new(
            arrow::csv::ReaderBuilder::new(schema.clone())
                .with_header(opts.header)
                .with_delimiter(opts.delimiter)
                .with_batch_size(opts.batch_rows)
                .build(Counted { inner: file, read })?,
        ),
    })
}

/// The schema to read CSV files with into `table`: the header's names,
/// each with its table column's type.
fn csv_schema_for(table: &TableDef, header: &Schema) -> Result<SchemaRef> {
    let fields = header
        .fields()
        .iter()
        .map(|f| {
            let t = match conform::column_named(table, f.name()).map(|i| &table.columns[i]) {
                Some(c) => arrow_type(&c.field_type.unwrap_or_default())?,
                // Conform names the unknown column.
                None => DataType::Utf8,
            };
            Ok(arrow::datatypes::Field::new(f.name(), t, true))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

// ---------------------------------------------------------------- loading

/// Loads `opts.files` into `opts.table` through the cluster's stores.
pub async fn load_files(stores: &[String], opts: &LoadFileOptions) -> Result<LoadFileReport> {
    let started = Instant::now();
    if opts.files.is_empty() {
        bail!("no files to load");
    }
    if opts.batch_rows == 0 {
        bail!("--batch-rows must be positive");
    }
    let meta = cluster(stores);
    let engine = QueryEngine::new(&ComputeConfig {
        stores: stores.to_vec(),
        // The checksum query is a full scan: not a slow query to report.
        slow_query_ms: 0,
        ..Default::default()
    })?
    // Its one statement is the checksum; it lives for this load.
    .without_analysis();
    // Every file's schema must be the first's.
    let mut schemas = Vec::new();
    let mut known_rows = Some(0u64);
    let mut file_bytes = 0u64;
    for f in &opts.files {
        let (schema, rows) = file_schema(f, opts)?;
        if let Some((first, first_path)) = schemas.first().map(|s: &(SchemaRef, &PathBuf)| s) {
            let names = |s: &Schema| -> Vec<String> {
                s.fields().iter().map(|f| f.name().clone()).collect()
            };
            if names(first) != names(&schema) {
                bail!(
                    "{} has columns {:?} but {} has {:?}; load them separately",
                    f.display(),
                    names(&schema),
                    first_path.display(),
                    names(first)
                );
            }
        }
        known_rows = known_rows.zip(rows).map(|(a, b)| a + b);
        file_bytes += std::fs::metadata(f)?.len();
        schemas.push((schema, f));
    }
    let file_schema = schemas[0].0.clone();

    let existing = meta.get_table(&opts.table).await?;
    let created = existing.is_none();
    let sst = created && opts.write_path.use_sst(file_bytes);
    let (table, splits) = match existing {
        Some(t) => (t, vec![]),
        None => {
            create_table(
                &meta,
                stores.len(),
                &file_schema,
                opts,
                known_rows,
                file_bytes,
            )
            .await?
        }
    };
    let before = if created {
        Checksum::new(table.columns.len())
    } else {
        table_checksum(&engine, &table).await?
    };
    let read_schema = match opts.format {
        FileFormat::Csv if !created => csv_schema_for(&table, &file_schema)?,
        _ => file_schema.clone(),
    };
    let conform = Arc::new(Conform::new(table.clone(), &read_schema)?);

    // Progress: rows against the known (Parquet) or estimated (CSV, from
    // the bytes read so far) total.
    let read_bytes = Arc::new(AtomicU64::new(0));
    let rows_done = Arc::new(AtomicU64::new(0));
    let progress = Progress::new(opts.progress, known_rows);

    let (kv_tx, kv_rx) = mpsc::channel(4);
    let (txn_tx, mut txn_rx) = mpsc::channel::<RowBatch>(2);
    let handle = tokio::runtime::Handle::current();
    let reader = {
        let (opts, conform, meta, read_bytes, rows_done, progress) = (
            opts.clone(),
            conform.clone(),
            meta.clone(),
            read_bytes.clone(),
            rows_done.clone(),
            progress.clone(),
        );
        tokio::task::spawn_blocking(move || -> Result<Checksum> {
            let mut sum = Checksum::new(conform.table.columns.len());
            let mut out = Output::new(&conform.table, created, sst, splits, kv_tx, txn_tx)?;
            let mut row = 0u64;
            for path in &opts.files {
                let batches = open_batches(path, &read_schema, &opts, read_bytes.clone())?;
                for batch in batches {
                    let batch = batch.with_context(|| format!("reading {}", path.display()))?;
                    let arrays = conform
                        .apply(&batch, row)
                        .with_context(|| format!("in {}", path.display()))?;
                    if batch.num_rows() == 0 {
                        continue;
                    }
                    sum.add(&arrays)?;
                    out.write(&handle, &meta, &conform, &arrays)?;
                    row += batch.num_rows() as u64;
                    rows_done.store(row, Ordering::Relaxed);
                    progress.update(row, read_bytes.load(Ordering::Relaxed), file_bytes);
                }
            }
            out.finish()?;
            Ok(sum)
        })
    };

    // Writers: BatchPuts for a new table, transactions for an existing one.
    let txns = Arc::new(Txns::new(
        meta.clone(),
        Arc::new(RegionCache::new(meta.clone())),
    ));
    let packed = quarry_compute::txn::is_packed(&table);
    let committed = Arc::new(AtomicU64::new(0));
    // The table's indexes as this load writes their entries.
    let check = quarry_compute::index::SchemaCheck::of(&table);
    let txn_writer = {
        let (txns, committed, table, meta) =
            (txns.clone(), committed.clone(), table.clone(), meta.clone());
        async move {
            let mut running = tokio::task::JoinSet::new();
            let mut error = None;
            while let Some(RowBatch { rows, mutations }) = txn_rx.recv().await {
                while running.len() >= 2 {
                    if let Some(r) = running.join_next().await {
                        if let Err(e) = r.map_err(anyhow::Error::from).and_then(|r| r) {
                            error.get_or_insert(e);
                        }
                    }
                }
                if error.is_some() {
                    break;
                }
                let (txns, committed, check) = (txns.clone(), committed.clone(), check.clone());
                let (table, meta) = (table.clone(), meta.clone());
                running.spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    // Checked once the snapshot is taken, as an INSERT's
                    // is: a batch that missed an index build's first step
                    // commits below its backfill (`quarry_compute::index`).
                    let start_ts = txns.timestamp().await?;
                    check.verify(&meta).await?;
                    txns.write_checked(start_ts, mutations, packed, deadline, Some(&check))
                        .await
                        .map_err(|e| quarry_compute::index::name_duplicate(e, &table))?;
                    committed.fetch_add(rows, Ordering::Relaxed);
                    anyhow::Ok(())
                });
            }
            drop(txn_rx);
            while let Some(r) = running.join_next().await {
                if let Err(e) = r.map_err(anyhow::Error::from).and_then(|r| r) {
                    error.get_or_insert(e);
                }
            }
            error
        }
    };
    let ((kv_error, all_sst), txn_error, read) =
        tokio::join!(write_batches(&meta, kv_rx, sst), txn_writer, reader);
    let sst = sst && all_sst;
    progress.finish();
    let source = match (kv_error.or(txn_error), read?) {
        (None, Ok(sum)) => sum,
        (Some(e), _) | (None, Err(e)) => {
            let kept = if created {
                format!(
                    "table {} was created by this load and keeps what was written; drop it and load again",
                    table.name
                )
            } else {
                format!(
                    "{} rows were committed to {} before the failure, in whole batches of {}",
                    committed.load(Ordering::Relaxed),
                    table.name,
                    opts.batch_rows
                )
            };
            return Err(e.context(format!("loading into {} failed; {kept}", table.name)));
        }
    };
    let loaded = table_checksum(&engine, &table).await?.minus(&before);
    if let Some(diff) = source.difference(&loaded, &table) {
        bail!(
            "the checksum of table {} does not match the source: {diff} (the source first){}",
            table.name,
            if created {
                ""
            } else {
                "; other writers during the load also change the table's sums"
            }
        );
    }
    Ok(LoadFileReport {
        table: table.name.clone(),
        created,
        rows: source.rows as u64,
        file_bytes,
        seconds: started.elapsed().as_secs_f64(),
        sst,
        checksum: source,
    })
}

/// Creates the table for a file of `schema`: columns named and typed after
/// it, pre-split at evenly spaced handles by the estimated size (one region
/// per [`REGION_BYTES`], at least four per store from a million rows).
/// Returns the table and its split handles.
async fn create_table(
    meta: &Arc<Cluster>,
    stores: usize,
    schema: &Schema,
    opts: &LoadFileOptions,
    known_rows: Option<u64>,
    file_bytes: u64,
) -> Result<(TableDef, Vec<i64>)> {
    let mut columns = Vec::new();
    for f in schema.fields() {
        let Some(t) = sql_type(f.data_type()) else {
            bail!(
                "column {} has type {}, which Quarry cannot store (it stores BIGINT, DOUBLE, DECIMAL, DATE and VARCHAR); create table {} with the types you want and load into it",
                f.name(),
                f.data_type(),
                opts.table
            );
        };
        let null = if f.is_nullable() { "" } else { " NOT NULL" };
        columns.push(format!("{} {t}{null}", quote(f.name())));
    }
    let layout = match opts.layout {
        Layout::Row => "row",
        _ => "column",
    };
    let ddl = format!(
        "CREATE TABLE {} ({}) WITH (layout = '{layout}')",
        quote(&opts.table),
        columns.join(", ")
    );
    let Statement::CreateTable(ct) = parse(&ddl).with_context(|| format!("planning {ddl}"))? else {
        bail!("{ddl} is not a CREATE TABLE");
    };
    // Rows: Parquet says; CSV, guessed at ~100 bytes a row (the regions
    // split later by size if the guess is low).
    let rows = known_rows.unwrap_or(file_bytes / 100).max(1);
    let by_size = (file_bytes / REGION_BYTES) as usize + 1;
    let regions = if rows >= 1 << 20 {
        by_size.max(4 * stores.max(1))
    } else {
        by_size
    };
    let splits: Vec<i64> = (1..regions as u64)
        .map(|i| 1 + (rows * i / regions as u64) as i64)
        .collect();
    let (table, _) = create_presplit(meta, ct.table_def(), &splits, vec![]).await?;
    Ok((table, splits))
}

/// One transaction's worth of rows for an existing table: their and their
/// index entries' mutations.
struct RowBatch {
    rows: u64,
    mutations: Vec<Mutation>,
}

/// Encodes conformed batches for one of the two writers.
struct Output {
    created: bool,
    /// Position of the primary key column, if the table has one.
    handle_pos: Option<usize>,
    column_ids: Vec<i64>,
    packs: Vec<PackBuilder>,
    splits: Vec<i64>,
    sink: Option<Sink>,
    txn_tx: Option<mpsc::Sender<RowBatch>>,
    /// The existing table's definition, for its index entries.
    table: TableDef,
    encoder: RowEncoder,
    packed: bool,
}

impl Output {
    fn new(
        table: &TableDef,
        created: bool,
        sst: bool,
        splits: Vec<i64>,
        kv_tx: mpsc::Sender<(usize, Vec<quarry_proto::kv::KvPair>)>,
        txn_tx: mpsc::Sender<RowBatch>,
    ) -> Result<Self> {
        let columns: Vec<(i64, DataType)> = table
            .columns
            .iter()
            .map(|c| Ok((c.id, arrow_type(&c.field_type.unwrap_or_default())?)))
            .collect::<Result<_>>()?;
        let packed = quarry_compute::txn::is_packed(table);
        let regions = splits.len() + 1;
        let packs = if created && packed {
            (0..regions)
                .map(|_| PackBuilder::new(&columns))
                .collect::<quarry_coprocessor::Result<Vec<_>>>()?
        } else {
            vec![]
        };
        Ok(Output {
            created,
            handle_pos: table.key_position(),
            column_ids: columns.iter().map(|(id, _)| *id).collect(),
            packs,
            splits,
            // Only one of the two writers gets work; the other's channel
            // closes at once.
            sink: created.then(|| {
                let batch_bytes = if sst { SST_BATCH_BYTES } else { 4 << 20 };
                Sink::new(regions, kv_tx, batch_bytes, Arc::default())
            }),
            txn_tx: (!created).then_some(txn_tx),
            table: table.clone(),
            encoder: RowEncoder::default(),
            packed,
        })
    }

    /// Handles for `n` rows: the primary key's values, or implicit ones
    /// reserved from the meta region.
    fn handles(
        &self,
        rt: &tokio::runtime::Handle,
        meta: &Cluster,
        arrays: &[ArrayRef],
        n: usize,
    ) -> Result<Vec<i64>> {
        Ok(match self.handle_pos {
            Some(p) => {
                let a = arrays[p].as_primitive::<Int64Type>();
                a.values().to_vec()
            }
            None => {
                let first = rt.block_on(meta.alloc_handles(self.table.id, n as u64, 0))?;
                (first..first + n as i64).collect()
            }
        })
    }

    fn write(
        &mut self,
        rt: &tokio::runtime::Handle,
        meta: &Cluster,
        conform: &Conform,
        arrays: &[ArrayRef],
    ) -> Result<()> {
        let n = arrays.first().map_or(0, |a| a.len());
        let handles = self.handles(rt, meta, arrays, n)?;
        if self.handle_pos.is_some() {
            if let Some(h) = quarry_compute::engine::insert::repeated_handle(&handles) {
                bail!("duplicate key: primary key {h} appears twice in one batch of the file");
            }
        }
        let types = &conform.types;
        let mut row: Vec<(i64, Datum)> = Vec::with_capacity(types.len());
        let mut mutations = Vec::new();
        let mut entries = quarry_compute::index::Maintainer::new(&self.table);
        for (r, &h) in handles.iter().enumerate() {
            row.clear();
            for ((id, a), t) in self.column_ids.iter().zip(arrays).zip(types) {
                row.push((*id, array_datum(a, t, r)?));
            }
            let region = self.splits.partition_point(|s| *s <= h);
            if self.created && self.packed {
                let b = &mut self.packs[region];
                b.push_pairs(h, &row)?;
                if b.is_full() {
                    let (first, v) = b.finish()?;
                    let key = pack_key(self.table.id, first);
                    self.sink_mut()?.push(region, key, v);
                }
                continue;
            }
            let mut value = Vec::new();
            self.encoder.encode(&row, &mut value)?;
            let key = record_key(self.table.id, h);
            if self.created {
                self.sink_mut()?.push(region, key, value);
            } else {
                mutations.push(Mutation {
                    op: Op::Insert as i32,
                    key,
                    value,
                });
                if !entries.is_empty() {
                    entries.change(h, None, Some(&row))?;
                }
            }
        }
        if let Some(e) = self.sink.as_mut().and_then(|s| s.failed.take()) {
            return Err(e);
        }
        if let Some(tx) = &self.txn_tx {
            let rows = mutations.len() as u64;
            mutations.extend(entries.into_mutations());
            if rows > 0 && tx.blocking_send(RowBatch { rows, mutations }).is_err() {
                bail!("the writer stopped");
            }
        }
        Ok(())
    }

    fn sink_mut(&mut self) -> Result<&mut Sink> {
        self.sink
            .as_mut()
            .ok_or_else(|| anyhow!("no key-value writer for an existing table"))
    }

    /// Sends the last packs and buffers.
    fn finish(mut self) -> Result<()> {
        let mut packs = std::mem::take(&mut self.packs);
        for (r, b) in packs.iter_mut().enumerate() {
            if !b.is_empty() {
                let (first, v) = b.finish()?;
                let key = pack_key(self.table.id, first);
                self.sink_mut()?.push(r, key, v);
            }
        }
        match self.sink {
            Some(sink) => sink.flush(),
            None => Ok(()),
        }
    }
}

/// A progress bar on a terminal, a line every few seconds otherwise.
#[derive(Clone)]
struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    known_rows: Option<u64>,
    last_line: Arc<parking_lot::Mutex<Instant>>,
    started: Instant,
}

impl Progress {
    fn new(enabled: bool, known_rows: Option<u64>) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (enabled && terminal).then(|| {
            let b = ProgressBar::new(known_rows.unwrap_or(0));
            b.set_style(
                ProgressStyle::with_template(
                    "loading {bar:40} {human_pos}/{human_len} rows {per_sec} eta {eta}",
                )
                .expect("valid template"),
            );
            b
        });
        Progress {
            bar,
            lines: enabled && !terminal,
            known_rows,
            last_line: Arc::new(parking_lot::Mutex::new(Instant::now())),
            started: Instant::now(),
        }
    }

    /// `rows` done so far, having read `read` of `total` bytes.
    fn update(&self, rows: u64, read: u64, total: u64) {
        // Without a known row count, estimate it from the bytes read.
        let expected = self
            .known_rows
            .unwrap_or_else(|| (rows as f64 * total as f64 / read.max(1) as f64) as u64)
            .max(rows);
        if let Some(bar) = &self.bar {
            bar.set_length(expected);
            bar.set_position(rows);
        }
        if self.lines {
            let mut last = self.last_line.lock();
            if last.elapsed() >= Duration::from_secs(2) {
                *last = Instant::now();
                let secs = self.started.elapsed().as_secs_f64();
                let about = if self.known_rows.is_some() {
                    ""
                } else {
                    "about "
                };
                eprintln!(
                    "loaded {rows} of {about}{expected} rows in {secs:.0} s: {:.0} rows/s",
                    rows as f64 / secs.max(1e-9)
                );
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
